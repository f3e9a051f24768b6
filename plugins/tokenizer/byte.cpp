// Byte-level tokenizer: ids 0..255 are the bytes of the text (nothing is ever unknown), plus
// an optional padding id 256 and an optional end-of-text id after it (the document separator
// of token shards, docs/DATA.md). Ready-made: needs no fitting; decode maps other ids to the
// unknown text.
#include <sstream>
#include <string>
#include <vector>

#include "ablate/plugin.hpp"
#include "ablate/tokenizer.hpp"

namespace {

class Byte final : public ablate::Tokenizer {
 public:
  Byte(const ablate::Options& o, const ablate::BuildContext&)
      : pad_(o.get<bool>("pad", false, "add a padding id 256 (decodes to nothing)")),
        unknown_(
            o.get<std::string>("unknown", "\xEF\xBF\xBD",
                               "text that ids outside the vocabulary decode to (default U+FFFD)")),
        eot_(o.get<bool>(
            "eot", false,
            "add an end-of-text id after the bytes and the padding id (decodes to <|endoftext|>); "
            "it separates documents in token shards")) {}

  void fit(const std::string&) override {}

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= 0 && id < 256) out += static_cast<char>(id);
      else if (eot_ && id == eot_id()) out += "<|endoftext|>";
      else if (!(pad_ && id == 256)) out += unknown_;
    }
    return out;
  }

  int64_t vocab_size() const override { return 256 + (pad_ ? 1 : 0) + (eot_ ? 1 : 0); }
  int32_t pad_id() const override { return pad_ ? 256 : -1; }
  int32_t eot_id() const override { return eot_ ? (pad_ ? 257 : 256) : -1; }
  bool pretrained() const override { return true; }

  std::string save() const override {
    std::ostringstream s;
    s << "ablate-byte-tokenizer 1\npad " << (pad_ ? 1 : 0) << "\nunknown_hex ";
    static const char* d = "0123456789abcdef";
    for (unsigned char c : unknown_) s << d[c >> 4] << d[c & 15];
    s << "\n";
    if (eot_) s << "eot 1\n";
    return s.str();
  }

  void load(const std::string& state) override {
    std::istringstream s(state);
    std::string magic, key, hex;
    int version = 0, pad = 0;
    if (!(s >> magic >> version) || magic != "ablate-byte-tokenizer" || version != 1)
      throw ablate::Error("byte tokenizer state: not a version-1 byte tokenizer state");
    if (!(s >> key >> pad) || key != "pad" || !(s >> key) || key != "unknown_hex")
      throw ablate::Error("byte tokenizer state: malformed");
    std::getline(s, hex);
    hex.erase(0, hex.find_first_not_of(' '));
    int eot = 0;
    if (s >> key && (key != "eot" || !(s >> eot)))
      throw ablate::Error("byte tokenizer state: malformed");
    std::string unknown;
    for (size_t i = 0; i < hex.size(); i += 2) {
      const std::string h = hex.substr(i, 2);
      if (h.size() != 2 || h.find_first_not_of("0123456789abcdef") != std::string::npos)
        throw ablate::Error("byte tokenizer state: bad unknown_hex '" + hex + "'");
      unknown += static_cast<char>(std::stoi(h, nullptr, 16));
    }
    pad_ = pad != 0;
    unknown_ = unknown;
    eot_ = eot != 0;
  }

 private:
  bool pad_;
  std::string unknown_;
  bool eot_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Tokenizer, byte, Byte,
              "the 256 byte values (plus optional padding and end-of-text ids)")
