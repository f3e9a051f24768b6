// Character-level tokenizer (the seeds' char GPT): the sorted set of UTF-8 code points of the
// fitted text, then one unknown symbol (id V-1) for characters outside it. Bytes that are not
// valid UTF-8 count as characters of their own, so decode(encode(text)) == text for any bytes.
#include <algorithm>
#include <array>
#include <cstdint>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "ablate/plugin.hpp"
#include "ablate/tokenizer.hpp"

namespace {

// Invalid bytes get keys past the last code point, so they sort after every real character.
constexpr uint32_t kRawByte = 0x110000;

// The key of the character starting at s[i] (a code point, or kRawByte + byte); advances i.
uint32_t next_char(const std::string& s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  int len = 0;
  uint32_t cp = 0, min = 0;
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  if ((b0 & 0xE0) == 0xC0) len = 2, cp = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0) len = 3, cp = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0) len = 4, cp = b0 & 0x07, min = 0x10000;
  bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
  for (int k = 1; ok && k < len; ++k) {
    const uint8_t b = byte(i + static_cast<size_t>(k));
    ok = (b & 0xC0) == 0x80;
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms and surrogates are not valid UTF-8: keep them as raw bytes so that
  // re-encoding reproduces the input exactly.
  ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
  if (!ok) {
    ++i;
    return kRawByte + b0;
  }
  i += static_cast<size_t>(len);
  return cp;
}

void append_char(std::string& out, uint32_t c) {
  if (c >= kRawByte) out += static_cast<char>(c - kRawByte);
  else if (c < 0x80) out += static_cast<char>(c);
  else if (c < 0x800)
    out += static_cast<char>(0xC0 | (c >> 6)), out += static_cast<char>(0x80 | (c & 0x3F));
  else if (c < 0x10000)
    out += static_cast<char>(0xE0 | (c >> 12)), out += static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
        out += static_cast<char>(0x80 | (c & 0x3F));
  else
    out += static_cast<char>(0xF0 | (c >> 18)), out += static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
        out += static_cast<char>(0x80 | (c & 0x3F));
}

std::string to_hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += d[c >> 4], h += d[c & 15];
  return h;
}

std::string from_hex(const std::string& h) {
  if (h.size() % 2) throw ablate::Error("char tokenizer state: odd-length hex string");
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw ablate::Error(std::string("char tokenizer state: bad hex digit '") + c + "'");
  };
  std::string s;
  for (size_t i = 0; i < h.size(); i += 2) s += static_cast<char>(nib(h[i]) * 16 + nib(h[i + 1]));
  return s;
}

class Char final : public ablate::Tokenizer {
 public:
  Char(const ablate::Options& o, const ablate::BuildContext&)
      : unknown_(o.get<std::string>(
            "unknown", "\xEF\xBF\xBD",
            "text that the unknown id decodes to (default U+FFFD, the replacement character)")),
        add_unknown_(o.get<bool>("add_unknown", true,
                                 "reserve the last id for characters not seen by fit; false: such "
                                 "characters are an error")) {}

  void fit(const std::string& text) override {
    std::vector<uint32_t> seen;
    std::array<bool, 128> ascii{};
    for (size_t i = 0; i < text.size();) {
      uint32_t c = next_char(text, i);
      if (c < 128) {
        if (!ascii[c]) ascii[c] = true, seen.push_back(c);
      } else seen.push_back(c);
    }
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    set_chars(std::move(seen));
  }

  std::vector<int32_t> encode(const std::string& text) const override {
    check_ready();
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      const size_t at = i;
      const uint32_t c = next_char(text, i);
      int32_t id = -1;
      if (c < 128) id = ascii_[c];
      else if (auto it = index_.find(c); it != index_.end()) id = it->second;
      if (id < 0) {
        if (!add_unknown_)
          throw ablate::Error("char tokenizer: character '" + text.substr(at, i - at) +
                              "' at byte " + std::to_string(at) +
                              " was not in the fitted text, and add_unknown is false");
        id = static_cast<int32_t>(chars_.size());
      }
      ids.push_back(id);
    }
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= 0 && static_cast<size_t>(id) < chars_.size())
        append_char(out, chars_[static_cast<size_t>(id)]);
      else out += unknown_;
    }
    return out;
  }

  int64_t vocab_size() const override {
    return static_cast<int64_t>(chars_.size()) + (add_unknown_ ? 1 : 0);
  }

  // Text form, exact for any characters: the code points in decimal, the unknown text in hex.
  std::string save() const override {
    std::ostringstream s;
    s << "ablate-char-tokenizer 1\n"
      << "add_unknown " << (add_unknown_ ? 1 : 0) << "\n"
      << "unknown_hex " << to_hex(unknown_) << "\n"
      << "chars " << chars_.size() << "\n";
    for (size_t i = 0; i < chars_.size(); ++i) s << (i ? " " : "") << chars_[i];
    s << "\n";
    return s.str();
  }

  void load(const std::string& state) override {
    std::istringstream s(state);
    std::string magic, key, hex;
    int version = 0, add = 0;
    size_t n = 0;
    auto bad = [](const std::string& what) {
      return ablate::Error("char tokenizer state: " + what);
    };
    if (!(s >> magic >> version) || magic != "ablate-char-tokenizer")
      throw bad("not a char tokenizer state");
    if (version != 1) throw bad("version " + std::to_string(version) + ", expected 1");
    if (!(s >> key >> add) || key != "add_unknown") throw bad("missing add_unknown");
    if (!(s >> key) || key != "unknown_hex") throw bad("missing unknown_hex");
    std::getline(s, hex);
    hex.erase(0, hex.find_first_not_of(' '));
    if (!(s >> key >> n) || key != "chars") throw bad("missing chars");
    std::vector<uint32_t> chars(n);
    for (size_t i = 0; i < n; ++i)
      if (!(s >> chars[i]) || chars[i] >= kRawByte + 256 || (i && chars[i] <= chars[i - 1]))
        throw bad("character " + std::to_string(i) + " is missing, out of range or out of order");
    unknown_ = from_hex(hex);
    add_unknown_ = add != 0;
    set_chars(std::move(chars));
  }

 private:
  void set_chars(std::vector<uint32_t> chars) {
    chars_ = std::move(chars);
    index_.clear();
    ascii_.fill(-1);
    for (size_t id = 0; id < chars_.size(); ++id) {
      if (chars_[id] < 128) ascii_[chars_[id]] = static_cast<int32_t>(id);
      else index_[chars_[id]] = static_cast<int32_t>(id);
    }
    ready_ = true;
  }
  void check_ready() const {
    if (!ready_) throw ablate::Error("char tokenizer: encode() before fit() or load()");
  }

  std::string unknown_;
  bool add_unknown_;
  bool ready_ = false;
  std::vector<uint32_t> chars_;                  // id -> character key, sorted
  std::unordered_map<uint32_t, int32_t> index_;  // non-ASCII character key -> id
  std::array<int32_t, 128> ascii_{};
};

}  // namespace
ABLATE_PLUGIN(ablate::Tokenizer, char, Char,
              "characters (UTF-8 code points) of the training text plus an unknown symbol")
