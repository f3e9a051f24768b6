// Byte-pair encoding (Sennrich et al. 2016), as in REFERENCE.md item 6: words split on
// whitespace, characters separated with an end-of-word marker </w> appended, then the most
// frequent adjacent pair merged `merges` times; tokens </u> (unknown) and </p> (padding).
// Whitespace round-trips: a single space between two words is implied by the </w> of the
// first word; every other whitespace run (newlines, tabs, several spaces, leading or
// trailing space) is a "word" of its own, without </w>, that merges learn like any other
// (so "\n\n" becomes one token). Characters are UTF-8 code points; invalid bytes are
// characters of their own; the six ASCII whitespace characters are always in the vocabulary.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "ablate/plugin.hpp"
#include "ablate/tokenizer.hpp"

namespace {

constexpr const char* kWhitespace = " \t\n\v\f\r";

bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Length of the UTF-8 character at s[i]: 1 for ASCII and for bytes that do not start a
// valid sequence (they are characters of their own, so any bytes round-trip).
size_t char_len(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = b(i);
  size_t len = b0 < 0x80             ? 1
               : (b0 & 0xE0) == 0xC0 ? 2
               : (b0 & 0xF0) == 0xE0 ? 3
               : (b0 & 0xF8) == 0xF0 ? 4
                                     : 0;
  if (len <= 1 || i + len > s.size()) return 1;
  uint32_t cp = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 1;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 1;
  return len;
}

// A symbol: text plus whether it ends a word (carries </w>). Keeping the marker as a flag,
// not as the characters "</w>", means text that contains "</w>" cannot forge a word end.
struct Symbol {
  std::string text;
  bool end = false;
  bool space = false;  // made of whitespace (a whitespace run or part of one)
  std::string shown() const { return text + (end ? "</w>" : ""); }
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

class Bpe final : public ablate::Tokenizer {
 public:
  Bpe(const ablate::Options& o, const ablate::BuildContext&)
      : n_merges_(o.get_in<int64_t>("merges", 4000, 0, int64_t{1} << 22,
                                    "merges learned by fit (REFERENCE: 4000 on tiny Shakespeare)")),
        min_frequency_(o.get_in<int64_t>(
            "min_frequency", 2, 1, int64_t{1} << 40,
            "stop early when the most frequent pair occurs fewer times than this")),
        unknown_(
            o.get<std::string>("unknown", "\xEF\xBF\xBD",
                               "text that </u> and out-of-range ids decode to (default U+FFFD)")) {}

  // Learns the merges from the unique words of `text` weighted by their frequency. Pair
  // counts are updated incrementally: a merge only revisits the words that contain its pair.
  void fit(const std::string& text) override {
    std::unordered_map<std::string, int64_t> freq;
    for_each_word(text, [&](const std::string& w, bool) { ++freq[w]; });
    std::vector<std::pair<std::string, int64_t>> uniq(freq.begin(), freq.end());
    std::sort(uniq.begin(), uniq.end());  // independent of hash order

    std::vector<Symbol> syms;
    for (const char* c = kWhitespace; *c; ++c) syms.push_back({std::string(1, *c), false, true});
    syms.push_back({"", true, false});  // the bare </w>
    for (const auto& [w, n] : uniq)
      for (size_t i = 0; i < w.size();) {
        const size_t len = char_len(w, i);
        syms.push_back({w.substr(i, len), false, is_space(static_cast<unsigned char>(w[i]))});
        i += len;
      }
    std::sort(syms.begin(), syms.end(),
              [](const Symbol& a, const Symbol& b) { return a.shown() < b.shown(); });
    syms.erase(std::unique(syms.begin(), syms.end(),
                           [](const Symbol& a, const Symbol& b) { return a.shown() == b.shown(); }),
               syms.end());
    set_vocab(std::move(syms), {},
              [](const std::string& what) { return ablate::Error("bpe tokenizer: " + what); });

    std::vector<std::vector<int32_t>> words(uniq.size());
    std::vector<int64_t> counts(uniq.size());
    for (size_t k = 0; k < uniq.size(); ++k) {
      words[k] = split_chars(uniq[k].first);
      counts[k] = uniq[k].second;
    }
    learn(words, counts);
  }

  std::vector<int32_t> encode(const std::string& text) const override {
    if (!ready_) throw ablate::Error("bpe tokenizer: encode() before fit() or load()");
    std::vector<int32_t> ids;
    std::unordered_map<std::string, std::vector<int32_t>> memo;  // words repeat a lot
    for_each_word(text, [&](const std::string& w, bool) {
      auto it = memo.find(w);
      if (it == memo.end()) it = memo.emplace(w, segment(split_chars(w))).first;
      ids.insert(ids.end(), it->second.begin(), it->second.end());
    });
    return ids;
  }

  // A word piece after a completed word is preceded by the space that the </w> implied.
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    bool space_pending = false;
    for (int32_t id : ids) {
      if (id == pad_id()) continue;
      if (id < 0 || id >= vocab_size() || id == unknown_id()) {
        if (space_pending) out += ' ';
        out += unknown_;
        space_pending = false;
        continue;
      }
      const Symbol& s = syms_[static_cast<size_t>(id)];
      if (s.space) {
        space_pending = false;
      } else if (!s.text.empty()) {
        if (space_pending) out += ' ';
        space_pending = false;
      }
      out += s.text;
      if (s.end) space_pending = true;
    }
    return out;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(syms_.size()) + 2; }
  int32_t pad_id() const override { return static_cast<int32_t>(syms_.size()) + 1; }
  int32_t unknown_id() const { return static_cast<int32_t>(syms_.size()); }

  // Text form: the base symbols (hex), then the merges as pairs of ids; merged symbols are
  // rebuilt from the merges, so the state is small and exact.
  std::string save() const override {
    std::ostringstream s;
    s << "ablate-bpe-tokenizer 1\n"
      << "unknown_hex " << ablate::bytes_hex_field(unknown_) << "\n"
      << "base " << n_base_ << "\n";
    for (size_t i = 0; i < n_base_; ++i)
      s << ablate::bytes_hex_field(syms_[i].text) << " " << (syms_[i].end ? 1 : 0) << "\n";
    s << "merges " << merges_.size() << "\n";
    for (const auto& [a, b] : merges_) s << a << " " << b << "\n";
    return s.str();
  }

  void load(const std::string& state) override {
    std::istringstream s(state);
    auto bad = [](const std::string& what) {
      return ablate::Error("bpe tokenizer state: " + what);
    };
    std::string magic, key, hex;
    int version = 0;
    size_t n = 0;
    if (!(s >> magic >> version) || magic != "ablate-bpe-tokenizer")
      throw bad("not a bpe tokenizer state");
    if (version != 1) throw bad("version " + std::to_string(version) + ", expected 1");
    std::string unknown;
    if (!(s >> key >> hex) || key != "unknown_hex" || !ablate::hex_field_bytes(hex, unknown))
      throw bad("missing or malformed unknown_hex");
    if (!(s >> key >> n) || key != "base" || n > (size_t{1} << 24))
      throw bad("missing base symbols");
    std::vector<Symbol> base(n);
    for (size_t i = 0; i < n; ++i) {
      int end = 0;
      if (!(s >> hex >> end) || !ablate::hex_field_bytes(hex, base[i].text))
        throw bad("base symbol " + std::to_string(i) + " is malformed");
      base[i].end = end != 0;
      base[i].space =
          !base[i].text.empty() && is_space(static_cast<unsigned char>(base[i].text[0]));
    }
    if (!(s >> key >> n) || key != "merges" || n > (size_t{1} << 24)) throw bad("missing merges");
    std::vector<std::pair<int32_t, int32_t>> merges(n);
    for (size_t i = 0; i < n; ++i)
      if (!(s >> merges[i].first >> merges[i].second))
        throw bad("merge " + std::to_string(i) + " is malformed");
    Bpe next(*this);  // all or nothing: a bad state leaves this tokenizer as it was
    next.unknown_ = unknown;
    next.set_vocab(std::move(base), merges, bad);
    *this = std::move(next);
  }

  // Symbols of the vocabulary as text with </w>, for tests and inspection.
  std::string token_text(int32_t id) const {
    if (id == unknown_id()) return "</u>";
    if (id == pad_id()) return "</p>";
    return syms_.at(static_cast<size_t>(id)).shown();
  }

 private:
  // Calls f(word, is_space) for every word of text: non-whitespace runs (end-of-word marker
  // implied) and whitespace runs other than a single space between two words.
  template <class F>
  static void for_each_word(const std::string& text, F&& f) {
    size_t i = 0;
    const size_t n = text.size();
    while (i < n) {
      const bool sp = is_space(static_cast<unsigned char>(text[i]));
      size_t j = i;
      while (j < n && is_space(static_cast<unsigned char>(text[j])) == sp) ++j;
      const bool implied = sp && j - i == 1 && text[i] == ' ' && i > 0 && j < n;
      if (!implied) f(text.substr(i, j - i), sp);
      i = j;
    }
  }

  // Character ids of a word, then </w> unless it is whitespace; unknown characters -> </u>.
  std::vector<int32_t> split_chars(const std::string& w) const {
    std::vector<int32_t> out;
    const bool sp = !w.empty() && is_space(static_cast<unsigned char>(w[0]));
    for (size_t i = 0; i < w.size();) {
      const size_t len = char_len(w, i);
      auto it = index_.find(key_of(w.substr(i, len), false));
      out.push_back(it == index_.end() ? unknown_id() : it->second);
      i += len;
    }
    if (!sp) out.push_back(end_id_);
    return out;
  }

  // Applies the merges to one word in rank order (lowest first; ties left to right), which
  // reproduces how fit() segmented the training words. O(n log n) with a heap over pairs.
  std::vector<int32_t> segment(std::vector<int32_t> w) const {
    const size_t n = w.size();
    if (n < 2 || rank_.empty()) return w;
    std::vector<int64_t> prev(n), next(n);
    for (size_t i = 0; i < n; ++i)
      prev[i] = static_cast<int64_t>(i) - 1, next[i] = static_cast<int64_t>(i) + 1;
    using Entry = std::pair<int32_t, int64_t>;  // (rank, left position)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    auto push = [&](int64_t i) {
      if (i < 0 || next[static_cast<size_t>(i)] >= static_cast<int64_t>(n)) return;
      auto it = rank_.find(pair_key(w[static_cast<size_t>(i)],
                                    w[static_cast<size_t>(next[static_cast<size_t>(i)])]));
      if (it != rank_.end()) heap.push({it->second, i});
    };
    for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int64_t>(i));
    std::vector<bool> dead(n, false);
    while (!heap.empty()) {
      const auto [r, i] = heap.top();
      heap.pop();
      const size_t ui = static_cast<size_t>(i);
      if (dead[ui] || next[ui] >= static_cast<int64_t>(n)) continue;
      const size_t j = static_cast<size_t>(next[ui]);
      auto it = rank_.find(pair_key(w[ui], w[j]));
      if (it == rank_.end() || it->second != r) continue;  // stale entry
      w[ui] = merges_result_[static_cast<size_t>(r)];
      dead[j] = true;
      next[ui] = next[j];
      if (next[j] < static_cast<int64_t>(n)) prev[static_cast<size_t>(next[j])] = i;
      push(prev[ui]);
      push(i);
    }
    std::vector<int32_t> out;
    for (int64_t i = 0; i < static_cast<int64_t>(n); i = next[static_cast<size_t>(i)])
      out.push_back(w[static_cast<size_t>(i)]);
    return out;
  }

  // The training loop: pair counts over unique words, a lazy max-heap ordered by (count,
  // then the pair's text, smallest first) for a deterministic tie-break, and for each pair
  // the words that contain it.
  void learn(std::vector<std::vector<int32_t>>& words, const std::vector<int64_t>& counts) {
    std::unordered_map<uint64_t, int64_t> pair_count;
    std::unordered_map<uint64_t, std::vector<int32_t>> where;
    for (size_t k = 0; k < words.size(); ++k)
      for (size_t i = 0; i + 1 < words[k].size(); ++i) {
        const uint64_t p = pair_key(words[k][i], words[k][i + 1]);
        pair_count[p] += counts[k];
        auto& v = where[p];
        if (v.empty() || v.back() != static_cast<int32_t>(k)) v.push_back(static_cast<int32_t>(k));
      }
    struct Entry {
      int64_t count;
      uint64_t pair;
    };
    auto worse = [&](const Entry& a, const Entry& b) {  // heap order: true if a ranks below b
      if (a.count != b.count) return a.count < b.count;
      const auto la = static_cast<int32_t>(a.pair >> 32),
                 ra = static_cast<int32_t>(a.pair & 0xFFFFFFFFu);
      const auto lb = static_cast<int32_t>(b.pair >> 32),
                 rb = static_cast<int32_t>(b.pair & 0xFFFFFFFFu);
      if (la != lb) return shown_[static_cast<size_t>(la)] > shown_[static_cast<size_t>(lb)];
      return shown_[static_cast<size_t>(ra)] > shown_[static_cast<size_t>(rb)];
    };
    std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
    for (const auto& [p, c] : pair_count) heap.push({c, p});
    std::vector<int64_t> seen(words.size(), -1);  // last merge that visited each word
    std::unordered_map<uint64_t, int64_t> delta;

    while (static_cast<int64_t>(merges_.size()) < n_merges_ && !heap.empty()) {
      const Entry top = heap.top();
      heap.pop();
      auto pc = pair_count.find(top.pair);
      if (pc == pair_count.end() || pc->second != top.count) continue;  // stale
      if (top.count < min_frequency_) break;
      const int32_t a = static_cast<int32_t>(top.pair >> 32),
                    b = static_cast<int32_t>(top.pair & 0xFFFFFFFFu);
      const int32_t ab = add_merge(a, b);
      const int64_t m = static_cast<int64_t>(merges_.size());
      delta.clear();
      std::vector<int32_t> affected = std::move(where[top.pair]);
      where.erase(top.pair);
      for (int32_t k : affected) {
        if (seen[static_cast<size_t>(k)] == m) continue;
        seen[static_cast<size_t>(k)] = m;
        std::vector<int32_t>& w = words[static_cast<size_t>(k)];
        const int64_t c = counts[static_cast<size_t>(k)];
        bool has = false;
        for (size_t i = 0; i + 1 < w.size() && !has; ++i) has = w[i] == a && w[i + 1] == b;
        if (!has) continue;  // a stale entry of `where`
        for (size_t i = 0; i + 1 < w.size(); ++i) delta[pair_key(w[i], w[i + 1])] -= c;
        std::vector<int32_t> merged;
        merged.reserve(w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) merged.push_back(ab), ++i;
          else merged.push_back(w[i]);
        }
        w.swap(merged);
        for (size_t i = 0; i + 1 < w.size(); ++i) {
          const uint64_t p = pair_key(w[i], w[i + 1]);
          delta[p] += c;
          if (w[i] == ab || w[i + 1] == ab) {
            auto& v = where[p];
            if (v.empty() || v.back() != k) v.push_back(k);
          }
        }
      }
      for (const auto& [p, d] : delta) {
        if (d == 0) continue;
        int64_t& c = pair_count[p];
        c += d;
        if (c <= 0) pair_count.erase(p);
        else heap.push({c, p});
      }
      pair_count.erase(top.pair);
    }
    rebuild_rank();
  }

  // Registers merge (a, b); its result is an existing symbol when another merge already
  // produced the same text (e.g. (ab, c) after (a, bc)).
  int32_t add_merge(int32_t a, int32_t b) {
    Symbol s{syms_[static_cast<size_t>(a)].text + syms_[static_cast<size_t>(b)].text,
             syms_[static_cast<size_t>(b)].end, syms_[static_cast<size_t>(a)].space};
    const std::string key = key_of(s.text, s.end);
    auto it = index_.find(key);
    int32_t id;
    if (it != index_.end()) {
      id = it->second;
    } else {
      id = static_cast<int32_t>(syms_.size());
      shown_.push_back(s.shown());
      syms_.push_back(std::move(s));
      index_.emplace(key, id);
    }
    merges_.emplace_back(a, b);
    merges_result_.push_back(id);
    return id;
  }

  static std::string key_of(const std::string& text, bool end) { return (end ? "1" : "0") + text; }

  void set_vocab(std::vector<Symbol> base, const std::vector<std::pair<int32_t, int32_t>>& merges,
                 const std::function<ablate::Error(const std::string&)>& bad) {
    syms_ = std::move(base);
    n_base_ = syms_.size();
    index_.clear();
    shown_.clear();
    merges_.clear();
    merges_result_.clear();
    end_id_ = -1;
    for (size_t i = 0; i < syms_.size(); ++i) {
      if (!index_.emplace(key_of(syms_[i].text, syms_[i].end), static_cast<int32_t>(i)).second)
        throw bad("base symbol " + std::to_string(i) + " is duplicated");
      shown_.push_back(syms_[i].shown());
      if (syms_[i].end && syms_[i].text.empty()) end_id_ = static_cast<int32_t>(i);
    }
    if (end_id_ < 0) throw bad("no end-of-word symbol");
    for (size_t m = 0; m < merges.size(); ++m) {
      const auto [a, b] = merges[m];
      const auto n = static_cast<int32_t>(syms_.size());
      if (a < 0 || b < 0 || a >= n || b >= n || syms_[static_cast<size_t>(a)].end)
        throw bad("merge " + std::to_string(m) +
                  " refers to an unknown symbol or merges past a word end");
      add_merge(a, b);
    }
    rebuild_rank();
    ready_ = true;
  }

  void rebuild_rank() {
    rank_.clear();
    for (size_t m = 0; m < merges_.size(); ++m)
      rank_.emplace(pair_key(merges_[m].first, merges_[m].second), static_cast<int32_t>(m));
  }

  int64_t n_merges_, min_frequency_;
  std::string unknown_;
  bool ready_ = false;
  std::vector<Symbol> syms_;        // id -> symbol: base symbols (sorted), then merged ones
  std::vector<std::string> shown_;  // id -> text with </w>, for the tie-break
  size_t n_base_ = 0;
  int32_t end_id_ = -1;                              // the bare </w>
  std::unordered_map<std::string, int32_t> index_;   // key_of(text, end) -> id
  std::vector<std::pair<int32_t, int32_t>> merges_;  // in learning order
  std::vector<int32_t> merges_result_;
  std::unordered_map<uint64_t, int32_t> rank_;  // pair -> merge index
};

}  // namespace
ABLATE_PLUGIN(ablate::Tokenizer, bpe, Bpe,
              "byte-pair encoding learned from the training text (</w>, </u>, </p>)")
