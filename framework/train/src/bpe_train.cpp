// Training a byte-level BPE vocabulary as GPT-2's (ablate/bpe_train.hpp).
#include "ablate/bpe_train.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <queue>
#include <unordered_map>
#include <array>

#include <nlohmann/json.hpp>

#include "ablate/byte_bpe.hpp"
#include "ablate/error.hpp"
#include "corpus.hpp"

namespace ablate {
namespace {

using Map = std::unordered_map<std::string, uint64_t>;

// Counts the words of text into m (the parts between special tokens, pre-tokenized).
void count_into(std::string_view text, const std::vector<std::string>& specials, Map& m) {
  const byte_bpe::Scanner& sc = byte_bpe::scanner();
  std::string key;
  auto plain = [&](size_t from, size_t to) {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + from;
    sc.split(s, to - from, [&](size_t b, size_t e) {
      key.assign(reinterpret_cast<const char*>(s) + b, e - b);
      ++m[key];
    });
  };
  size_t i = 0;
  const size_t n = text.size();
  std::vector<size_t> next(specials.size(), 0);  // each special's next occurrence at or after i
  for (size_t k = 0; k < specials.size(); ++k)
    next[k] = specials[k].empty() ? std::string_view::npos : text.find(specials[k]);
  while (i < n) {
    size_t at = std::string_view::npos, len = 0;
    for (size_t k = 0; k < specials.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < i) next[k] = text.find(specials[k], i);
      if (next[k] < at || (next[k] == at && specials[k].size() > len))
        at = next[k], len = specials[k].size();
    }
    if (at == std::string_view::npos) {
      plain(i, n);
      break;
    }
    plain(i, at);
    i = at + len;
  }
}

uint64_t count_pieces(const Map& m) {
  uint64_t n = 0;
  for (const auto& kv : m) n += kv.second;
  return n;
}

WordCounts sorted_words(Map&& m) {
  WordCounts w;
  w.reserve(m.size());
  for (auto& kv : m) w.emplace_back(kv.first, kv.second);
  m.clear();
  std::sort(w.begin(), w.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  return w;
}

// ---- the merges ------------------------------------------------------------------------------

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Open addressing: pair key -> index into the pair table.
class PairIndex {
 public:
  PairIndex() : keys_(1024, kEmpty), vals_(1024, -1) {}
  int32_t find(uint64_t key) const {
    const size_t mask = keys_.size() - 1;
    for (size_t i = slot(key) & mask;; i = (i + 1) & mask) {
      if (keys_[i] == key) return vals_[i];
      if (keys_[i] == kEmpty) return -1;
    }
  }
  // The index of key, inserting `fresh` when absent (then `inserted` is true).
  int32_t find_or_insert(uint64_t key, int32_t fresh, bool& inserted) {
    if (2 * (size_ + 1) > keys_.size()) grow();
    const size_t mask = keys_.size() - 1;
    for (size_t i = slot(key) & mask;; i = (i + 1) & mask) {
      if (keys_[i] == key) {
        inserted = false;
        return vals_[i];
      }
      if (keys_[i] == kEmpty) {
        keys_[i] = key, vals_[i] = fresh;
        ++size_;
        inserted = true;
        return fresh;
      }
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are below 2^31: no pair has this key
  static size_t slot(uint64_t key) {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 17);
  }
  void grow() {
    std::vector<uint64_t> k(keys_.size() * 2, kEmpty);
    std::vector<int32_t> v(vals_.size() * 2, -1);
    const size_t mask = k.size() - 1;
    for (size_t j = 0; j < keys_.size(); ++j) {
      if (keys_[j] == kEmpty) continue;
      size_t i = slot(keys_[j]) & mask;
      while (k[i] != kEmpty) i = (i + 1) & mask;
      k[i] = keys_[j], v[i] = vals_[j];
    }
    keys_.swap(k), vals_.swap(v);
  }
  std::vector<uint64_t> keys_;
  std::vector<int32_t> vals_;
  size_t size_ = 0;
};

struct Pair {
  int32_t a, b;
  uint64_t count = 0;
  std::vector<uint32_t> where;  // words the pair occurs (or occurred) in; duplicates allowed
};

struct Entry {
  uint64_t count;
  int32_t a, b;
};

class Learner {
 public:
  Learner(const WordCounts& words, const std::vector<std::string>& specials) : specials_(specials) {
    const auto& order = byte_bpe::byte_order();
    std::array<int32_t, 256> id_of{};
    for (int k = 0; k < 256; ++k) {
      tokens_.emplace_back(1, static_cast<char>(order[k]));
      id_of[order[k]] = k;
    }
    for (const auto& [w, n] : words) {
      if (w.size() < 2 || n == 0) continue;  // no pair to count
      if (count_.size() >= UINT32_MAX)
        throw Error("train-tokenizer: more than 4 billion distinct words");
      off_.push_back(syms_.size());
      len_.push_back(static_cast<uint32_t>(w.size()));
      count_.push_back(n);
      for (unsigned char c : w) syms_.push_back(id_of[c]);
    }
    for (uint32_t w = 0; w < count_.size(); ++w) {
      const int32_t* s = syms_.data() + off_[w];
      for (uint32_t i = 0; i + 1 < len_[w]; ++i) {
        Pair& p = pair(s[i], s[i + 1]);
        p.count += count_[w];
        p.where.push_back(w);
      }
    }
    std::vector<Entry> entries;
    entries.reserve(pairs_.size());
    for (const Pair& p : pairs_) entries.push_back({p.count, p.a, p.b});
    heap_ = Heap(Less{&tokens_}, std::move(entries));
  }

  ByteBpe run(size_t n_merges, uint64_t min_frequency,
              const std::function<void(size_t)>& progress) {
    ByteBpe out;
    std::vector<uint32_t> stamp(count_.size(), UINT32_MAX);  // the merge that last visited a word
    std::vector<int32_t> touched;                            // pairs whose count grew in this merge
    std::vector<uint32_t> touched_stamp;
    while (out.merges.size() < n_merges && !heap_.empty()) {
      const Entry top = heap_.top();
      heap_.pop();
      const int32_t pid = index_.find(pair_key(top.a, top.b));
      const uint64_t now = pairs_[static_cast<size_t>(pid)].count;
      if (now != top.count) {  // stale: the count fell since (a rise pushed an entry of its own)
        if (now > 0 && now < top.count) heap_.push({now, top.a, top.b});
        continue;
      }
      if (now < min_frequency || now == 0) break;
      const int32_t a = top.a, b = top.b, c = static_cast<int32_t>(tokens_.size());
      const std::string made = tokens_[static_cast<size_t>(a)] + tokens_[static_cast<size_t>(b)];
      tokens_.push_back(made);
      out.merges.emplace_back(a, b);
      const uint32_t m = static_cast<uint32_t>(out.merges.size() - 1);
      std::vector<uint32_t> words = std::move(pairs_[static_cast<size_t>(pid)].where);
      pairs_[static_cast<size_t>(pid)].where = {};
      touched.clear();
      for (uint32_t w : words) {
        if (stamp[w] == m) continue;
        stamp[w] = m;
        merge_word(w, a, b, c, touched, touched_stamp, m);
      }
      if (pairs_[static_cast<size_t>(pid)].count != 0)
        throw Error("train-tokenizer: internal error: the merged pair still occurs " +
                    std::to_string(pairs_[static_cast<size_t>(pid)].count) + " times");
      for (int32_t t : touched) {
        const Pair& p = pairs_[static_cast<size_t>(t)];
        if (p.count > 0) heap_.push({p.count, p.a, p.b});
      }
      if (progress && (out.merges.size() % 1000 == 0)) progress(out.merges.size());
    }
    out.tokens = std::move(tokens_);
    for (const std::string& s : specials_) out.tokens.push_back(s);
    out.specials = specials_;
    return out;
  }

 private:
  // The pair (a, b), created with count 0 when new.
  Pair& pair(int32_t a, int32_t b) {
    bool inserted = false;
    const int32_t pid =
        index_.find_or_insert(pair_key(a, b), static_cast<int32_t>(pairs_.size()), inserted);
    if (inserted) {
      if (pairs_.size() >= static_cast<size_t>(INT32_MAX))
        throw Error("train-tokenizer: too many distinct pairs");
      pairs_.push_back(Pair{a, b, 0, {}});
    }
    return pairs_[static_cast<size_t>(pid)];
  }

  // Replaces each (a, b) of word w, left to right, with c, and updates the counts of the pairs
  // around each replacement (the others are unchanged).
  void merge_word(uint32_t w, int32_t a, int32_t b, int32_t c, std::vector<int32_t>& touched,
                  std::vector<uint32_t>& touched_stamp, uint32_t m) {
    int32_t* s = syms_.data() + off_[w];
    const uint32_t L = len_[w];
    const uint64_t n = count_[w];
    at_.assign(L, 0);  // 1 where a replacement starts
    changed_.assign(L, 0);
    bool any = false;
    for (uint32_t i = 0; i + 1 < L;) {
      if (s[i] == a && s[i + 1] == b) {
        at_[i] = 1, any = true;
        if (i > 0) changed_[i - 1] = 1;
        changed_[i] = 1;
        if (i + 2 < L) changed_[i + 1] = 1;
        i += 2;
      } else {
        ++i;
      }
    }
    if (!any) return;
    for (uint32_t k = 0; k + 1 < L; ++k)
      if (changed_[k]) {
        Pair& p = pairs_[static_cast<size_t>(index_.find(pair_key(s[k], s[k + 1])))];
        p.count -= n;
      }
    uint32_t j = 0;
    is_new_.assign(L, 0);
    for (uint32_t i = 0; i < L;) {
      if (at_[i]) {
        s[j] = c, is_new_[j] = 1;
        i += 2;
      } else {
        s[j] = s[i];
        ++i;
      }
      ++j;
    }
    len_[w] = j;
    if (touched_stamp.size() < pairs_.size() + L)
      touched_stamp.resize(pairs_.size() + L + 1024, UINT32_MAX);
    for (uint32_t k = 0; k + 1 < j; ++k) {
      if (!is_new_[k] && !is_new_[k + 1]) continue;
      const size_t before = pairs_.size();
      Pair& p = pair(s[k], s[k + 1]);
      p.count += n;
      p.where.push_back(w);
      const int32_t pid = pairs_.size() > before ? static_cast<int32_t>(before)
                                                 : index_.find(pair_key(s[k], s[k + 1]));
      if (touched_stamp.size() <= static_cast<size_t>(pid))
        touched_stamp.resize(pairs_.size() + 1024, UINT32_MAX);
      if (touched_stamp[static_cast<size_t>(pid)] != m) {
        touched_stamp[static_cast<size_t>(pid)] = m;
        touched.push_back(pid);
      }
    }
  }

  // The priority queue's order: higher count first; on equal counts the pair whose first
  // token's bytes sort first, then whose second token's bytes sort first.
  struct Less {
    const std::vector<std::string>* tokens;
    bool operator()(const Entry& x, const Entry& y) const {
      if (x.count != y.count) return x.count < y.count;
      const auto& t = *tokens;
      const int ca = t[static_cast<size_t>(x.a)].compare(t[static_cast<size_t>(y.a)]);
      if (ca != 0) return ca > 0;
      return t[static_cast<size_t>(x.b)].compare(t[static_cast<size_t>(y.b)]) > 0;
    }
  };
  using Heap = std::priority_queue<Entry, std::vector<Entry>, Less>;

  std::vector<std::string> specials_;
  std::vector<std::string> tokens_;  // id -> bytes
  std::vector<int32_t> syms_;        // every word's tokens, back to back (a word shrinks in place)
  std::vector<uint64_t> off_;        // word -> start in syms_
  std::vector<uint32_t> len_;        // word -> tokens
  std::vector<uint64_t> count_;      // word -> occurrences in the corpus
  PairIndex index_;
  std::vector<Pair> pairs_;
  Heap heap_{Less{nullptr}};
  std::vector<uint8_t> at_, changed_, is_new_;  // scratch for merge_word
};

std::vector<std::string> corpus_files(const BpeCorpusOptions& opt) {
  std::vector<std::string> files;
  for (const std::string& in : opt.inputs) {
    const std::vector<std::string> f = expand_inputs(in, "");
    files.insert(files.end(), f.begin(), f.end());
  }
  if (files.empty()) throw Error("train-tokenizer: no input files");
  return files;
}

// The threads' counts in one map: the largest takes in the others.
Map merged_counts(tbb::enumerable_thread_specific<Map>& local) {
  std::vector<Map*> maps;
  for (Map& m : local) maps.push_back(&m);
  Map all;
  if (maps.empty()) return all;
  std::sort(maps.begin(), maps.end(),
            [](const Map* x, const Map* y) { return x->size() > y->size(); });
  all = std::move(*maps[0]);
  for (size_t k = 1; k < maps.size(); ++k) {
    for (auto& kv : *maps[k]) all[kv.first] += kv.second;
    maps[k]->clear();
  }
  return all;
}

}  // namespace

WordCounts count_words(std::string_view text, const std::vector<std::string>& specials) {
  Map m;
  count_into(text, specials, m);
  return sorted_words(std::move(m));
}

CorpusCount count_corpus_words(const BpeCorpusOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> files = corpus_files(opt);
  CorpusCount out;
  out.files = static_cast<int64_t>(files.size());
  tbb::enumerable_thread_specific<Map> local;
  std::atomic<uint64_t> bytes{0};
  const bool tty = ::isatty(2) != 0;
  auto last = std::chrono::steady_clock::now();
  auto report = [&](bool final_line) {
    if (opt.quiet) return;
    const auto now = std::chrono::steady_clock::now();
    if (!final_line && now - last < std::chrono::seconds(tty ? 1 : 10)) return;
    last = now;
    const double s = std::chrono::duration<double>(now - t0).count();
    const double mb = static_cast<double>(bytes.load()) / 1e6;
    std::fprintf(stderr, "%strain-tokenizer: counted %.1f MB in %.1f s (%.1f MB/s)%s",
                 tty ? "\r" : "", mb, s, s > 0 ? mb / s : 0.0, final_line || !tty ? "\n" : "");
    std::fflush(stderr);
  };
  constexpr size_t kChunk = size_t{1} << 20;
  size_t file = 0;
  std::unique_ptr<DocumentReader> reader;
  const size_t live = static_cast<size_t>(std::max(2, 2 * tbb::this_task_arena::max_concurrency()));
  tbb::parallel_pipeline(
      live,
      tbb::make_filter<void, std::shared_ptr<std::vector<std::string>>>(
          tbb::filter_mode::serial_in_order,
          [&](tbb::flow_control& fc) -> std::shared_ptr<std::vector<std::string>> {
            auto item = std::make_shared<std::vector<std::string>>();
            size_t size = 0;
            while (size < kChunk) {
              if (!reader) {
                if (file == files.size()) break;
                reader = std::make_unique<DocumentReader>(files[file], is_jsonl_name(files[file]),
                                                          opt.field, "", kChunk);
              }
              Piece p;
              if (!reader->next(p)) {
                reader.reset();
                ++file;
                continue;
              }
              size += p.text.size();
              item->push_back(std::move(p.text));
            }
            if (item->empty()) {
              fc.stop();
              return nullptr;
            }
            bytes += size;
            report(false);
            return item;
          }) &
          tbb::make_filter<std::shared_ptr<std::vector<std::string>>, void>(
              tbb::filter_mode::parallel, [&](std::shared_ptr<std::vector<std::string>> item) {
                Map& m = local.local();
                for (const std::string& t : *item) count_into(t, opt.specials, m);
              }));
  Map all = merged_counts(local);
  out.pieces = count_pieces(all);
  out.words = sorted_words(std::move(all));
  out.bytes = bytes.load();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report(true);
  return out;
}

ByteBpe learn_byte_bpe(const WordCounts& words, int64_t vocab_size,
                       const std::vector<std::string>& specials, uint64_t min_frequency,
                       const std::function<void(size_t)>& progress) {
  const int64_t fixed = 256 + static_cast<int64_t>(specials.size());
  if (vocab_size < fixed)
    throw Error("train-tokenizer: a vocabulary of " + std::to_string(vocab_size) +
                " is too small: the 256 bytes and " + std::to_string(specials.size()) +
                " special token(s) need " + std::to_string(fixed) + ": give at least " +
                std::to_string(fixed));
  if (vocab_size > (int64_t{1} << 30))
    throw Error("train-tokenizer: a vocabulary of " + std::to_string(vocab_size) + " is too large");
  for (const std::string& s : specials)
    if (s.empty()) throw Error("train-tokenizer: an empty special token");
  Learner l(words, specials);
  return l.run(static_cast<size_t>(vocab_size - fixed), std::max<uint64_t>(min_frequency, 1),
               progress);
}

std::string hf_tokenizer_json(const ByteBpe& bpe) {
  using Json = nlohmann::ordered_json;
  const int32_t first_special = bpe.first_special();
  auto quoted = [](const std::string& s) { return Json(s).dump(); };  // a JSON string, escaped
  // Written by hand around the vocabulary and merges: an ordered_json object finds each key
  // by a linear search, too slow for 50,000 tokens.
  std::string added = "[";
  for (size_t k = 0; k < bpe.specials.size(); ++k)
    added += std::string(k ? "," : "") +
             "\n    {\"id\": " + std::to_string(first_special + static_cast<int32_t>(k)) +
             ", \"content\": " + quoted(bpe.specials[k]) +
             ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": "
             "false, \"special\": true}";
  added += bpe.specials.empty() ? "]" : "\n  ]";
  std::string vocab = "{";
  for (int32_t id = 0; id < static_cast<int32_t>(bpe.tokens.size()); ++id) {
    const std::string& t = bpe.tokens[static_cast<size_t>(id)];
    vocab += std::string(id ? "," : "") + "\n      " +
             quoted(id >= first_special ? t : byte_bpe::to_chars(t)) + ": " + std::to_string(id);
  }
  vocab += "\n    }";
  std::string merges = "[";
  for (size_t k = 0; k < bpe.merges.size(); ++k) {
    const auto& [a, b] = bpe.merges[k];
    merges += std::string(k ? "," : "") + "\n      " +
              quoted(byte_bpe::to_chars(bpe.tokens[static_cast<size_t>(a)]) + " " +
                     byte_bpe::to_chars(bpe.tokens[static_cast<size_t>(b)]));
  }
  merges += bpe.merges.empty() ? "]" : "\n    ]";
  auto byte_level = [](bool prefix, bool trim) {
    return std::string("{\"type\": \"ByteLevel\", \"add_prefix_space\": ") +
           (prefix ? "true" : "false") + ", \"trim_offsets\": " + (trim ? "true" : "false") +
           ", \"use_regex\": true}";
  };
  return "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  "
         "\"added_tokens\": " +
         added + ",\n  \"normalizer\": null,\n  \"pre_tokenizer\": " + byte_level(false, true) +
         ",\n  \"post_processor\": " + byte_level(true, false) +
         ",\n  \"decoder\": " + byte_level(true, true) +
         ",\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": "
         "null,\n"
         "    \"continuing_subword_prefix\": \"\",\n    \"end_of_word_suffix\": \"\",\n    "
         "\"fuse_unk\": false,\n"
         "    \"byte_fallback\": false,\n    \"vocab\": " +
         vocab + ",\n    \"merges\": " + merges + "\n  }\n}\n";
}

}  // namespace ablate
