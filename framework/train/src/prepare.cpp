// `ablate data prepare` (see prepare.hpp): read documents in order -> encode in parallel ->
// write in order, as a TBB pipeline.
#include "ablate/prepare.hpp"

#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "ablate/data_source.hpp"
#include "ablate/error.hpp"
#include "ablate/shards.hpp"
#include "corpus.hpp"

namespace ablate {

namespace fs = std::filesystem;

namespace {

constexpr size_t kPieceBytes = size_t{1} << 20;  // longest piece of a document encoded at once
constexpr size_t kItemBytes = size_t{1} << 20;   // text in one pipeline item

using clock_type = std::chrono::steady_clock;

// A 64-bit hash of text, for telling repeated documents apart (not cryptographic).
uint64_t text_hash(const std::string& s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t w = 0;
  std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

uint64_t combine(uint64_t h, uint64_t piece) {
  return (h ^ piece) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
}

// Document k is validation when ceil((k+1) f) > ceil(k f): the first document, then one in
// every 1/f, spread over the whole corpus whatever its order.
bool is_val_document(int64_t k, double f) {
  return std::ceil(static_cast<double>(k + 1) * f) > std::ceil(static_cast<double>(k) * f);
}

std::string mb(double bytes) {
  char buf[32];
  if (bytes >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  else if (bytes >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  else std::snprintf(buf, sizeof buf, "%.1f KB", bytes / 1e3);
  return buf;
}

struct Source {
  std::string path;
  bool val = false;  // a --val file
  int64_t file_bytes = 0, documents[2] = {0, 0};
  std::string sha256;
};

// One pipeline item: pieces of documents, their sources, and (after the parallel stage) their ids.
struct Item {
  std::vector<Piece> pieces;
  std::vector<size_t> source;
  std::vector<std::vector<int32_t>> ids;
  std::vector<uint64_t> hash;
};

// Reads the sources' documents in order, piece by piece.
class CorpusReader {
 public:
  CorpusReader(std::vector<Source>& sources, const PrepareOptions& o,
               std::atomic<int64_t>& consumed)
      : sources_(sources), o_(o), consumed_(consumed) {}
  // The next piece and its source; false after the last source.
  bool next(Piece& p, size_t& source) {
    for (;;) {
      if (!reader_) {
        if (k_ == sources_.size()) return false;
        reader_ =
            std::make_unique<DocumentReader>(sources_[k_].path, is_jsonl_name(sources_[k_].path),
                                             o_.field, o_.separator, kPieceBytes);
      }
      const bool got = reader_->next(p);
      consumed_.store(before_ + static_cast<int64_t>(reader_->stream().consumed()),
                      std::memory_order_relaxed);
      if (got) {
        source = k_;
        return true;
      }
      sources_[k_].sha256 = reader_->stream().sha256();
      before_ += static_cast<int64_t>(reader_->stream().consumed());
      reader_.reset();
      ++k_;
    }
  }

 private:
  std::vector<Source>& sources_;
  const PrepareOptions& o_;
  std::atomic<int64_t>& consumed_;
  std::unique_ptr<DocumentReader> reader_;
  size_t k_ = 0;
  int64_t before_ = 0;
};

// The progress line on stderr: in place on a terminal (every half second), else a line every
// 10 s, as the training's progress line.
class PrepareProgress {
 public:
  PrepareProgress(bool quiet, int64_t total)
      : quiet_(quiet), tty_(isatty(STDERR_FILENO)), total_(total) {}
  void update(int64_t consumed, int64_t tokens, int64_t shards, bool last = false) {
    if (quiet_) return;
    const double t = std::chrono::duration<double>(clock_type::now() - t0_).count();
    if (!last && t - printed_ < (tty_ ? 0.5 : 10.0)) return;
    printed_ = t;
    const double rate = t > 0 ? static_cast<double>(consumed) / t : 0;
    const double eta = rate > 0 ? static_cast<double>(total_ - consumed) / rate : -1;
    char buf[256];
    std::snprintf(
        buf, sizeof buf,
        "prepare: %s of %s read (%.0f%%) | %.1f MB/s | %lld tokens, %lld shards | %s elapsed, ETA "
        "%s",
        mb(static_cast<double>(consumed)).c_str(), mb(static_cast<double>(total_)).c_str(),
        total_ > 0 ? 100.0 * static_cast<double>(consumed) / static_cast<double>(total_) : 100.0,
        rate / 1e6, static_cast<long long>(tokens), static_cast<long long>(shards), hms(t).c_str(),
        hms(last ? 0 : eta).c_str());
    if (tty_) std::fprintf(stderr, "\r%-120s%s", buf, last ? "\n" : "");
    else std::fprintf(stderr, "%s\n", buf);
    std::fflush(stderr);
  }
  double seconds() const { return std::chrono::duration<double>(clock_type::now() - t0_).count(); }

 private:
  bool quiet_, tty_;
  int64_t total_;
  clock_type::time_point t0_ = clock_type::now();
  double printed_ = 0;  // the first line after the first interval; the last always
};

// The writers of the two splits, each rolling over to a new shard at shard_tokens.
class SplitWriters {
 public:
  SplitWriters(const PrepareOptions& o, const std::string& name, ShardFormat format)
      : o_(o), name_(name), format_(format) {}
  void write(int split, const int32_t* ids, size_t n) {
    while (n > 0) {
      auto& w = open_[split];
      if (!w) {
        char num[16];
        std::snprintf(num, sizeof num, "%06d", next_[split]++);
        const std::string file = name_ + (split ? "_val_" : "_train_") + num + ".bin";
        w = std::make_unique<ShardWriter>((fs::path(o_.out_dir) / file).string(), format_);
      }
      const size_t take = std::min<size_t>(n, static_cast<size_t>(o_.shard_tokens - w->tokens()));
      w->append(ids, take);
      ids += take, n -= take;
      if (w->tokens() == o_.shard_tokens) close(split);
    }
  }
  void close(int split) {
    auto& w = open_[split];
    if (!w) return;
    w->close();
    written_.push_back({w->path(), split, w->tokens()});
    w.reset();
  }
  struct Written {
    std::string path;
    int split;
    int64_t tokens;
  };
  const std::vector<Written>& written() const { return written_; }
  int64_t shards() const {
    return static_cast<int64_t>(written_.size()) + (open_[0] ? 1 : 0) + (open_[1] ? 1 : 0);
  }
  // After an error: the finished shards go (an unfinished one removes its temporary itself).
  void remove_written() {
    for (const auto& w : written_) std::remove(w.path.c_str());
  }

 private:
  const PrepareOptions& o_;
  std::string name_;
  ShardFormat format_;
  std::unique_ptr<ShardWriter> open_[2];
  int next_[2] = {1, 0};  // llm.c: validation is shard 000000, training starts at 000001
  std::vector<Written> written_;
};

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out.flush()) throw Error(tmp + ": cannot write: " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(path + ": cannot rename " + tmp + " to it: " + std::strerror(errno));
}

// An option's value as JSON: true/false and numbers as such, the rest as text.
nlohmann::ordered_json option_value(const std::string& v) {
  if (v == "true") return true;
  if (v == "false") return false;
  char* end = nullptr;
  const long long i = std::strtoll(v.c_str(), &end, 10);
  if (!v.empty() && *end == '\0') return i;
  const double d = std::strtod(v.c_str(), &end);
  if (!v.empty() && *end == '\0' && std::isfinite(d)) return d;
  return v;
}

// The output directory, emptied of an earlier preparation with --overwrite; else refused if it
// holds one.
void prepare_out_dir(const PrepareOptions& o) {
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (!fs::is_directory(o.out_dir, ec))
    throw Error(o.out_dir + ": cannot create the output directory: " + ec.message());
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(o.out_dir)) {
    const std::string n = e.path().filename().string();
    auto ends = [&](const char* e) {
      return n.size() >= std::strlen(e) &&
             n.compare(n.size() - std::strlen(e), std::string::npos, e) == 0;
    };
    const bool shard = (ends(".bin") || ends(".bin.tmp")) &&
                       (n.find("train") != std::string::npos || n.find("val") != std::string::npos);
    if (n == "manifest.json" || n == "tokenizer.state" || shard) old.push_back(e.path());
  }
  if (old.empty()) return;
  if (!o.overwrite) {
    std::vector<std::string> names;
    for (const auto& p : old) names.push_back(p.filename().string());
    std::sort(names.begin(), names.end());
    if (names.size() > 6) names.resize(6), names.push_back("...");
    throw Error(o.out_dir + ": holds shards already (" + join(names) +
                "); training would mix them with the new ones. Give another --out, or --overwrite "
                "to replace them");
  }
  for (const auto& p : old) fs::remove(p, ec);
}

// The shard names' prefix (--name, else the output directory's name), after checking the
// options.
std::string checked_shard_prefix(const PrepareOptions& o) {
  if (o.inputs.empty())
    throw Error("ablate data prepare: no input; give text or JSONL files, a directory or a glob");
  if (o.out_dir.empty()) throw Error("ablate data prepare: no output directory; give --out DIR");
  if (o.shard_tokens < 1 || o.shard_tokens > kShardMaxTokens)
    throw Error("--shard-tokens " + std::to_string(o.shard_tokens) + " is out of range: 1 to " +
                std::to_string(kShardMaxTokens) + " (the header's count is an int32)");
  if (o.val_file.empty() && !(o.val_fraction > 0 && o.val_fraction <= 0.5))
    throw Error("--val-fraction " + std::to_string(o.val_fraction) +
                " is out of range: above 0, at most 0.5");
  const std::string name =
      o.name.empty() ? fs::path(o.out_dir).lexically_normal().filename().string() : o.name;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw Error("'" + name + "' cannot prefix shard names; give --name WORD");
  return name;
}

// The files to read: the --val file's first, then the inputs', each file once; with their sizes.
// An input that names a file already listed (again, or through a link, as a glob may) is read
// once, with a notice; one that is also the --val file is an error (its documents would be in
// both splits).
std::vector<Source> list_sources(const PrepareOptions& o) {
  std::vector<Source> sources;
  if (!o.val_file.empty())
    for (const auto& f : expand_inputs(o.val_file, o.out_dir)) {
      Source s;
      s.path = f;
      s.val = true;
      sources.push_back(s);
    }
  for (const auto& in : o.inputs)
    for (const auto& f : expand_inputs(in, o.out_dir)) {
      const auto same = std::find_if(sources.begin(), sources.end(),
                                     [&](const Source& s) { return fs::equivalent(s.path, f); });
      if (same == sources.end()) {
        Source s;
        s.path = f;
        sources.push_back(s);
        continue;
      }
      const std::string both =
          same->path == f ? f + ": given twice" : f + ": the same file as " + same->path;
      if (same->val)
        throw Error(both +
                    ", as the --val file and as an input; its documents would be in both "
                    "splits: leave it out of the inputs");
      std::fprintf(stderr, "prepare: %s; read once\n", both.c_str());
    }
  for (auto& s : sources) s.file_bytes = static_cast<int64_t>(fs::file_size(s.path));
  return sources;
}

// Fits a tokenizer that learns from text on the first fit_bytes of the training documents;
// returns how many bytes it saw.
int64_t fit_tokenizer(const PrepareOptions& o, const std::vector<Source>& sources, Tokenizer& tok,
                      const std::string& tokenizer_name) {
  std::fprintf(stderr,
               "prepare: tokenizer '%s' is fitted on text: fitting it on the first %s of the "
               "training documents (--fit-bytes)\n",
               tokenizer_name.c_str(), mb(static_cast<double>(o.fit_bytes)).c_str());
  std::vector<Source> copy = sources;
  std::atomic<int64_t> ignored{0};
  CorpusReader reader(copy, o, ignored);
  std::string text;
  Piece p;
  size_t src = 0;
  int64_t doc = -1;
  bool val = false;
  while (static_cast<int64_t>(text.size()) < o.fit_bytes && reader.next(p, src)) {
    if (p.starts_document)
      val = copy[src].val || (o.val_file.empty() && is_val_document(++doc, o.val_fraction));
    if (!val)
      text +=
          p.text.substr(0, static_cast<size_t>(o.fit_bytes - static_cast<int64_t>(text.size())));
  }
  if (text.empty())
    throw Error("ablate data prepare: no training text to fit tokenizer '" + tokenizer_name +
                "' on");
  tok.fit(text);
  return static_cast<int64_t>(text.size());
}

// The corpus encoded into the split writers as a TBB pipeline: read pieces in order -> encode
// in parallel -> write in order. Each document's split is decided and its text hash kept (by
// split, in `hashes`) as it is written.
class ShardEncoder {
 public:
  ShardEncoder(const PrepareOptions& o, Tokenizer& tok, const std::string& tokenizer_name,
               std::vector<Source>& sources, SplitWriters& out, PrepareSummary& sum)
      : o_(o),
        tok_(tok),
        tokenizer_name_(tokenizer_name),
        vocab_(tok.vocab_size()),
        eot_(tok.eot_id()),
        sources_(sources),
        out_(out),
        sum_(sum) {}

  void run(PrepareProgress& progress) {
    std::atomic<int64_t> consumed{0};
    CorpusReader reader(sources_, o_, consumed);
    const size_t live =
        static_cast<size_t>(std::max(2, 2 * tbb::this_task_arena::max_concurrency()));
    tbb::parallel_pipeline(
        live, tbb::make_filter<void, std::shared_ptr<Item>>(
                  tbb::filter_mode::serial_in_order,
                  [&](tbb::flow_control& fc) { return read_item(reader, fc); }) &
                  tbb::make_filter<std::shared_ptr<Item>, std::shared_ptr<Item>>(
                      tbb::filter_mode::parallel,
                      [&](std::shared_ptr<Item> item) {
                        encode_item(*item);
                        return item;
                      }) &
                  tbb::make_filter<std::shared_ptr<Item>, void>(
                      tbb::filter_mode::serial_in_order, [&](std::shared_ptr<Item> item) {
                        write_item(*item);
                        progress.update(consumed.load(std::memory_order_relaxed),
                                        sum_.tokens[0] + sum_.tokens[1], out_.shards());
                      }));
    finish_document();
  }

  std::vector<uint64_t> hashes[2];  // each document's hash, by split

 private:
  // Up to kItemBytes of pieces; null (and the pipeline stopped) after the last.
  static std::shared_ptr<Item> read_item(CorpusReader& reader, tbb::flow_control& fc) {
    auto item = std::make_shared<Item>();
    size_t bytes = 0;
    Piece p;
    size_t src = 0;
    while (bytes < kItemBytes && reader.next(p, src)) {
      bytes += p.text.size();
      item->pieces.push_back(std::move(p));
      item->source.push_back(src);
    }
    if (item->pieces.empty()) {
      fc.stop();
      return nullptr;
    }
    return item;
  }

  void encode_item(Item& item) const {
    item.ids.resize(item.pieces.size());
    item.hash.resize(item.pieces.size());
    for (size_t i = 0; i < item.pieces.size(); ++i) {
      try {
        item.ids[i] = tok_.encode(item.pieces[i].text);
      } catch (const Error& e) {
        throw Error(item.pieces[i].where + ": tokenizer '" + tokenizer_name_ + "': " + e.what());
      }
      item.hash[i] = text_hash(item.pieces[i].text);
    }
  }

  void write_item(const Item& item) {
    for (size_t i = 0; i < item.pieces.size(); ++i) {
      const Piece& p = item.pieces[i];
      if (p.starts_document) start_document(sources_[item.source[i]]);
      const auto& ids = item.ids[i];
      for (int32_t id : ids)
        if (id < 0 || id >= vocab_)
          throw Error(p.where + ": tokenizer '" + tokenizer_name_ + "' gave id " +
                      std::to_string(id) + ", outside its vocabulary of " + std::to_string(vocab_) +
                      " (a bug in the tokenizer)");
      out_.write(split_, ids.data(), ids.size());
      sum_.tokens[split_] += static_cast<int64_t>(ids.size());
      sum_.bytes[split_] += static_cast<int64_t>(p.text.size());
      doc_hash_ = combine(doc_hash_, item.hash[i]);
    }
  }

  // A new document of source s: its split, and the end-of-text id before it.
  void start_document(Source& s) {
    finish_document();
    split_ = s.val || (o_.val_file.empty() && is_val_document(++doc_, o_.val_fraction)) ? 1 : 0;
    ++s.documents[split_];
    ++sum_.documents[split_];
    in_doc_ = true;
    doc_hash_ = 0x5EEDull;
    if (eot_ >= 0) {
      out_.write(split_, &eot_, 1);
      ++sum_.tokens[split_];
    }
  }

  void finish_document() {
    if (in_doc_) hashes[split_].push_back(doc_hash_);
    in_doc_ = false;
  }

  const PrepareOptions& o_;
  Tokenizer& tok_;
  const std::string& tokenizer_name_;
  const int64_t vocab_;
  const int32_t eot_;
  std::vector<Source>& sources_;
  SplitWriters& out_;
  PrepareSummary& sum_;
  int64_t doc_ = -1;
  int split_ = 0;
  uint64_t doc_hash_ = 0;
  bool in_doc_ = false;
};

// Validation documents whose text is also a training document's (a warning when any).
int64_t count_val_in_train(std::vector<uint64_t> (&hashes)[2], int64_t val_documents) {
  std::sort(hashes[0].begin(), hashes[0].end());
  int64_t n = 0;
  for (uint64_t h : hashes[1]) n += std::binary_search(hashes[0].begin(), hashes[0].end(), h);
  if (n > 0)
    std::fprintf(stderr,
                 "prepare: warning: %lld of %lld validation documents also occur in the training "
                 "documents (the same text): "
                 "the validation loss then rewards memorising them. Deduplicate the corpus, or "
                 "give a separate --val FILE\n",
                 static_cast<long long>(n), static_cast<long long>(val_documents));
  return n;
}

// The manifest's "tokenizer" entry.
nlohmann::ordered_json tokenizer_json(
    const Tokenizer& tok, const std::string& tokenizer_name,
    const std::vector<std::pair<std::string, std::string>>& tokenizer_options,
    const std::string& state, int64_t fitted_on) {
  const int32_t eot = tok.eot_id();
  nlohmann::ordered_json t;
  t["name"] = tokenizer_name;
  t["options"] = nlohmann::ordered_json::object();
  for (const auto& [k, v] : tokenizer_options) t["options"][k] = option_value(v);
  t["vocab_size"] = tok.vocab_size();
  t["eot_id"] = eot >= 0 ? nlohmann::ordered_json(eot) : nlohmann::ordered_json();
  t["pretrained"] = tok.pretrained();
  t["fitted_on_bytes"] = fitted_on;
  t["state_file"] = "tokenizer.state";
  t["state_sha256"] = sha256_hex(state);
  return t;
}

// The manifest's "split" entry: how documents were assigned to the validation split.
nlohmann::ordered_json split_json(const PrepareOptions& o) {
  nlohmann::ordered_json split;
  if (o.val_file.empty()) {
    split["rule"] =
        "document k (0-based, over all inputs in order) is validation when ceil((k+1) f) > ceil(k "
        "f)";
    split["val_fraction"] = o.val_fraction;
  } else {
    split["rule"] = "the documents of the validation file";
    split["val_file"] = fs::absolute(o.val_file).lexically_normal().string();
  }
  split["separator"] = o.separator;
  split["jsonl_field"] = o.field;
  return split;
}

// manifest.json: the shard format, the tokenizer, the split rule, the counts, the shards and
// the sources.
nlohmann::ordered_json manifest_json(const PrepareOptions& o, ShardFormat format,
                                     nlohmann::ordered_json tokenizer, const PrepareSummary& sum,
                                     const SplitWriters& out, const std::vector<Source>& sources) {
  nlohmann::ordered_json m;
  m["format"] = shard_format_name(format);
  m["magic"] = format == ShardFormat::kUint16 ? kShardMagic16 : kShardMagic32;
  m["version"] = format == ShardFormat::kUint16 ? kShardVersion16 : kShardVersion32;
  m["token_bytes"] = shard_token_bytes(format);
  const bool eot = !tokenizer["eot_id"].is_null();
  m["tokenizer"] = std::move(tokenizer);
  m["documents_separated_by"] = eot ? "the end-of-text id before each document"
                                    : "nothing (the tokenizer has no end-of-text id)";
  m["split"] = split_json(o);
  const char* names[2] = {"train", "val"};
  for (int k = 0; k < 2; ++k) {
    m["documents"][names[k]] = sum.documents[k];
    m["tokens"][names[k]] = sum.tokens[k];
    m["bytes"][names[k]] = sum.bytes[k];
  }
  m["val_documents_in_train"] = sum.val_in_train;
  m["shard_tokens"] = o.shard_tokens;
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const auto& w : out.written())
    shards.push_back({{"file", fs::path(w.path).filename().string()},
                      {"split", names[w.split]},
                      {"tokens", w.tokens}});
  m["shards"] = shards;
  nlohmann::ordered_json src = nlohmann::ordered_json::array();
  for (const auto& s : sources)
    src.push_back({{"path", fs::absolute(s.path).lexically_normal().string()},
                   {"sha256", s.sha256},
                   {"bytes", s.file_bytes},
                   {"documents", {{"train", s.documents[0]}, {"val", s.documents[1]}}}});
  m["sources"] = src;
  return m;
}

}  // namespace

PrepareSummary prepare_shards(
    const PrepareOptions& o, Tokenizer& tok, const std::string& tokenizer_name,
    const std::vector<std::pair<std::string, std::string>>& tokenizer_options) {
  const std::string name = checked_shard_prefix(o);
  std::vector<Source> sources = list_sources(o);
  int64_t total = 0;
  for (const auto& s : sources) total += s.file_bytes;
  prepare_out_dir(o);
  const int64_t fitted_on = tok.pretrained() ? 0 : fit_tokenizer(o, sources, tok, tokenizer_name);
  const ShardFormat format = shard_format_for_vocab(tok.vocab_size());
  if (tok.eot_id() < 0)
    std::fprintf(stderr,
                 "prepare: tokenizer '%s' has no end-of-text id: documents follow one another with "
                 "nothing between them\n",
                 tokenizer_name.c_str());

  PrepareSummary sum;
  SplitWriters out(o, name, format);
  PrepareProgress progress(o.quiet, total);
  ShardEncoder encoder(o, tok, tokenizer_name, sources, out, sum);
  try {
    encoder.run(progress);
    if (sum.documents[1] == 0 || sum.documents[0] == 0)
      throw Error("ablate data prepare: " + std::to_string(sum.documents[0] + sum.documents[1]) +
                  " documents: " +
                  (sum.documents[0] == 0 ? "none left for training" : "none for validation") +
                  ". Cut text files into documents with --split SEPARATOR (e.g. --split '\\n\\n'), "
                  "give more documents, or "
                  "a separate validation file with --val FILE");
    out.close(0);
    out.close(1);
  } catch (...) {
    out.remove_written();
    throw;
  }
  progress.update(total, sum.tokens[0] + sum.tokens[1], out.shards(), true);
  sum.val_in_train = count_val_in_train(encoder.hashes, sum.documents[1]);

  const std::string state = tok.save();
  write_atomically((fs::path(o.out_dir) / "tokenizer.state").string(), state);
  nlohmann::ordered_json tokenizer =
      tokenizer_json(tok, tokenizer_name, tokenizer_options, state, fitted_on);
  sum.manifest = (fs::path(o.out_dir) / "manifest.json").string();
  write_atomically(
      sum.manifest,
      manifest_json(o, format, std::move(tokenizer), sum, out, sources).dump(2) + "\n");
  sum.shards = static_cast<int64_t>(out.written().size());
  sum.seconds = progress.seconds();
  return sum;
}

}  // namespace ablate
