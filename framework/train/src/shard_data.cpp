// Token shards as training data (see shard_data.hpp and docs/DATA.md).
#include "shard_data.hpp"

#include <fnmatch.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ablate/data_source.hpp"
#include "ablate/error.hpp"

namespace ablate {

namespace fs = std::filesystem;

namespace {

// Keys of a text data section, which mean nothing for shards.
const char* const kTextKeys[] = {"path", "train_fraction", "windows",
                                 "fill", "score_after",    "line_weights"};

std::string read_file_bytes(const std::string& path, int64_t offset, int64_t n) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  std::string s(static_cast<size_t>(n), '\0');
  in.read(s.data(), n);
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

// The files that match a glob pattern, sorted ("" for no match).
std::vector<std::string> glob_files(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      std::error_code ec;
      if (fs::is_regular_file(g.gl_pathv[i], ec)) out.emplace_back(g.gl_pathv[i]);
    }
  }
  ::globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

// data.train / data.val: the files of the first place in the data search order where the
// pattern matches any.
std::vector<std::string> resolve_pattern(const Options& o, const std::string& key,
                                         const std::string& yaml_dir, std::string& resolved) {
  const std::string pattern = o.require<std::string>(
      key, "glob of token shard files, e.g. data/fineweb10B/fineweb_" + key +
               "_*.bin (relative: next to the experiment, then the data directories)");
  if (pattern.empty())
    o.fail(key, "empty pattern; give a glob of shard files, e.g. fineweb_" + key + "_*.bin");
  const std::vector<std::string> places = data_search_paths(pattern, yaml_dir);
  for (const std::string& p : places) {
    std::vector<std::string> files = glob_files(p);
    if (!files.empty()) {
      resolved = p;
      return files;
    }
  }
  std::string msg = "'" + pattern + "' matches no file. Searched:";
  for (const std::string& p : places) msg += "\n  " + p;
  o.fail(key, msg + "\nGive a pattern that matches the shard files (e.g. dir/name_" + key +
                  "_*.bin), or set ABLATE_DATA_PATH to the directory above it");
}

// data.shards: the first directory of that name in the data search order.
std::string resolve_shard_dir(const Options& o, const std::string& name,
                              const std::string& yaml_dir) {
  if (name.empty()) o.fail("shards", "empty; give the directory that holds the shards");
  const std::vector<std::string> places = data_search_paths(name, yaml_dir);
  for (const std::string& p : places) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) return p;
  }
  std::string msg = "directory '" + name + "' not found. Searched:";
  for (const std::string& p : places) msg += "\n  " + p;
  o.fail("shards", msg + "\nMake the shards with 'ablate data prepare ... --out " + name +
                       "', or set ABLATE_DATA_PATH to the directory above it");
}

std::vector<std::string> matching(const std::vector<std::string>& names, const char* pattern) {
  std::vector<std::string> out;
  for (const auto& n : names)
    if (::fnmatch(pattern, fs::path(n).filename().c_str(), 0) == 0) out.push_back(n);
  return out;
}

// What the manifest written by `ablate data prepare` says of the tokenizer.
struct ManifestTokenizer {
  bool present = false;
  std::string name, options, state_file, state_sha256;
  std::string yaml;  // the tokenizer as an experiment names it: {type: NAME, key: value, ...}
  int64_t eot_id = -1;
};

ManifestTokenizer read_manifest(const std::string& path) {
  ManifestTokenizer m;
  if (path.empty()) return m;
  nlohmann::json j;
  try {
    std::ifstream in(path);
    j = nlohmann::json::parse(in);
    const auto& t = j.at("tokenizer");
    m.name = t.at("name").get<std::string>();
    m.options = t.at("options").dump();
    m.yaml = "{type: " + m.name;
    for (const auto& kv : t.at("options").items())
      m.yaml += ", " + kv.key() + ": " +
                (kv.value().is_string() ? kv.value().get<std::string>() : kv.value().dump());
    m.yaml += "}";
    m.state_file = t.at("state_file").get<std::string>();
    m.state_sha256 = t.at("state_sha256").get<std::string>();
    if (t.contains("eot_id") && !t.at("eot_id").is_null()) m.eot_id = t.at("eot_id").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not a shard manifest of ablate data prepare: " + e.what() +
                ". Write it again with ablate data prepare, or remove it (the shards are then read "
                "without it, with a "
                "ready-made tokenizer)");
  }
  m.present = true;
  return m;
}

// The tokenizer of the run, checked against (or loaded from) what the shards were made with.
void setup_tokenizer(const ShardSpec& spec, const ManifestTokenizer& m, Tokenizer& tok, bool fit) {
  if (!m.present) {
    if (fit && !tok.pretrained())
      throw Error(
          spec.where +
          ": the experiment's tokenizer is fitted on text, and token shards hold no text (and no "
          "manifest.json of ablate data prepare beside them saves a tokenizer). Use a ready-made "
          "tokenizer (one whose ids do not depend on the text: byte, or one loaded from files such "
          "as GPT-2's), or make the shards with 'ablate data prepare --tokenizer NAME', which "
          "saves the tokenizer it used beside them");
    return;
  }
  const std::string made_with = "tokenizer '" + m.name + "' with options " + m.options;
  const std::string fix =
      "Set the experiment's tokenizer to the one the manifest names (tokenizer: " + m.yaml +
      "), or make the shards again with this one (ablate data prepare --tokenizer NAME)";
  if (fit && !tok.pretrained()) {
    const std::string state_path = (fs::path(spec.manifest).parent_path() / m.state_file).string();
    std::ifstream in(state_path, std::ios::binary);
    if (!in)
      throw Error(state_path + ": missing; " + spec.manifest + " names it as the saved state of " +
                  made_with +
                  ", which the shards were made with. Make the shards again (ablate data prepare)");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string state = ss.str();
    if (sha256_hex(state) != m.state_sha256)
      throw Error(state_path + ": its sha256 is " + sha256_hex(state) + ", but " + spec.manifest +
                  " records " + m.state_sha256 +
                  ": the file changed after the shards were made. Make the shards again (ablate "
                  "data prepare)");
    try {
      tok.load(state);
    } catch (const Error& e) {
      throw Error(spec.manifest + ": the shards were made with " + made_with +
                  ", whose saved state (" + state_path +
                  ") the experiment's tokenizer cannot load: " + e.what() + ". " + fix);
    }
    return;
  }
  const std::string have = sha256_hex(tok.save());
  if (have != m.state_sha256)
    throw Error(spec.manifest + ": the shards were made with " + made_with +
                " (saved state sha256 " + m.state_sha256.substr(0, 16) +
                "...), and the experiment's tokenizer is another (state sha256 " +
                have.substr(0, 16) + "...): its ids would stand for other text. " + fix);
}

std::shared_ptr<ShardSplit> map_split(const std::vector<std::string>& files, ShardLayout layout) {
  auto s = std::make_shared<ShardSplit>();
  for (const auto& f : files) {
    s->shards.push_back(Shard::open(f, layout));
    s->tokens += s->shards.back().size();
  }
  return s;
}

// The windows of context + 1 tokens shard k of s holds.
uint64_t windows_in(const ShardSplit& s, size_t k, int64_t T) {
  const int64_t n = s.shards[k].size();
  if (s.starts.empty()) return n > T ? static_cast<uint64_t>(n - T) : 0;
  const auto& st = s.starts[k];  // a start p needs p + T + 1 <= n
  return static_cast<uint64_t>(std::lower_bound(st.begin(), st.end(), n - T) - st.begin());
}

}  // namespace

bool names_shards(const Options& o) { return o.has("shards") || o.has("train") || o.has("val"); }

ShardSpec read_shard_spec(const Options& o, const std::string& yaml_dir) {
  for (const char* k : kTextKeys)
    if (o.has(k))
      o.fail(k, std::string(k) +
                    " applies to a text file (data.path); with token shards (data.shards, "
                    "data.train/val) " +
                    "windows are drawn from the token stream: remove " + k +
                    (std::string(k) == "path" ? ", or the shard keys" : ""));
  ShardSpec spec;
  const bool dir = o.has("shards");
  if (dir && (o.has("train") || o.has("val")))
    o.fail("shards",
           "give either shards: DIR (the training and validation shards found by name) or train: "
           "GLOB and "
           "val: GLOB, not both");
  if (dir) {
    const std::string name =
        o.require<std::string>("shards",
                               "directory of token shards; training files *train*.bin, validation "
                               "files *val*.bin (as llm.c and nanoGPT name them)");
    const std::string d = resolve_shard_dir(o, name, yaml_dir);
    std::vector<std::string> bins;
    for (const auto& e : fs::directory_iterator(d)) {
      std::error_code ec;
      if (e.is_regular_file(ec)) bins.push_back(e.path().string());
    }
    std::sort(bins.begin(), bins.end());
    spec.train_files = matching(bins, "*train*.bin");
    spec.val_files = matching(bins, "*val*.bin");
    std::vector<std::string> names;
    for (const auto& b : matching(bins, "*.bin")) names.push_back(fs::path(b).filename().string());
    const std::string found = names.empty() ? "no .bin file" : "its .bin files: " + join(names);
    if (spec.train_files.empty() || spec.val_files.empty())
      o.fail("shards",
             d + " holds no " +
                 (spec.train_files.empty() ? "training shards (*train*.bin)"
                                           : "validation shards (*val*.bin)") +
                 "; " + found +
                 ". Name them as llm.c does (NAME_train_000001.bin, NAME_val_000000.bin), or give "
                 "data.train: GLOB and data.val: GLOB");
    for (const auto& f : spec.train_files)
      if (std::find(spec.val_files.begin(), spec.val_files.end(), f) != spec.val_files.end())
        o.fail("shards", f + " matches both *train*.bin and *val*.bin, so its split is unclear; "
                             "rename it, or give data.train: "
                             "GLOB and data.val: GLOB");
    spec.where = d;
  } else {
    if (!o.has("train") || !o.has("val"))
      o.fail(o.has("train") ? "train" : "val",
             "token shards need both data.train: GLOB and data.val: GLOB (or shards: DIR)");
    std::string tp, vp;
    spec.train_files = resolve_pattern(o, "train", yaml_dir, tp);
    spec.val_files = resolve_pattern(o, "val", yaml_dir, vp);
    for (const auto& f : spec.train_files)
      if (std::find(spec.val_files.begin(), spec.val_files.end(), f) != spec.val_files.end())
        o.fail("val", f + " matches both data.train and data.val: a shard cannot be both; give "
                          "patterns that part them");
    spec.where = tp + " and " + vp;
  }
  spec.layout =
      o.get_choice(
          "format", "header", {"header", "raw"},
          "header: llm.c shards (magic 20240520 uint16 or 20240801 uint32, from the header); raw: "
          "headerless uint16 (nanoGPT's train.bin / val.bin)") == "raw"
          ? ShardLayout::kRaw
          : ShardLayout::kHeader;
  spec.align_documents =
      o.get_choice("align", "none", {"none", "documents"},
                   "where windows start: anywhere (none) or at an end-of-text id (documents; the "
                   "first target is a document's first token)") == "documents";
  o.check_unused();
  const fs::path m = fs::path(spec.train_files.front()).parent_path() / "manifest.json";
  std::error_code ec;
  if (fs::is_regular_file(m, ec)) spec.manifest = m.string();
  return spec;
}

std::string shard_files_key(const ShardSpec& spec) {
  std::string key = spec.manifest + "\n";
  for (const auto* files : {&spec.train_files, &spec.val_files})
    for (const auto& f : *files) {
      struct stat st {};
      ::stat(f.c_str(), &st);
      key += f + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
             std::to_string(st.st_mtim.tv_nsec) + "\n";
    }
  return key;
}

void load_shard_data(const Options& o, const ShardSpec& spec, Tokenizer& tok, int64_t context,
                     bool fit, TextData& d) {
  const ManifestTokenizer m = read_manifest(spec.manifest);
  setup_tokenizer(spec, m, tok, fit);
  d.path = spec.where;
  auto train = map_split(spec.train_files, spec.layout),
       val = map_split(spec.val_files, spec.layout);
  // The fingerprint of the shards (the run file's data_sha256): hashing every byte of a
  // large corpus would cost more than many runs.
  std::string fp;
  for (const auto* s : {train.get(), val.get()})
    for (const Shard& sh : s->shards) {
      const int64_t head = std::min<int64_t>(sh.file_bytes(), 65536);
      fp += fs::path(sh.path()).filename().string() + " " + std::to_string(sh.file_bytes()) + "\n" +
            read_file_bytes(sh.path(), 0, head) +
            read_file_bytes(sh.path(), std::max<int64_t>(head, sh.file_bytes() - 65536), 65536);
    }
  d.sha256 = sha256_hex(fp);

  const int64_t vocab = tok.vocab_size();
  const std::string fix =
      "Use the tokenizer the shards were made with (" +
      (m.present ? "the manifest names " + m.name
                 : std::string("for llm.c's and nanoGPT's GPT-2 shards: GPT-2's")) +
      "), or make the shards again with this one (ablate data prepare --tokenizer NAME)";
  int64_t eot = -1;
  if (spec.align_documents) {
    eot = tok.eot_id() >= 0 ? tok.eot_id() : m.eot_id;
    if (eot < 0)
      o.fail("align",
             "documents starts windows at an end-of-text id, and neither the tokenizer nor the "
             "shards' manifest "
             "has one; use a tokenizer with an end-of-text id (e.g. byte with eot: true, GPT-2's), "
             "or align: none");
  }
  for (auto* s : {train.get(), val.get()}) {
    for (const Shard& sh : s->shards) {
      check_shard_ids(sh, vocab, fix);
      if (eot >= 0) s->starts.push_back(sh.positions_of(static_cast<uint32_t>(eot)));
      sh.release();  // the scan's pages go back to the page cache, out of the memory estimate
    }
  }
  for (auto* s : {train.get(), val.get()}) {
    const char* part = s == train.get() ? "training" : "validation";
    uint64_t windows = 0;
    int64_t largest = 0;
    for (size_t k = 0; k < s->shards.size(); ++k) {
      windows += windows_in(*s, k, context);
      largest = std::max(largest, s->shards[k].size());
    }
    if (windows > 0) continue;
    if (eot >= 0)
      o.fail("align",
             std::string("no end-of-text id (") + std::to_string(eot) + ") in the " + part +
                 " shards has a whole window (context + 1 = " + std::to_string(context + 1) +
                 " tokens) after it in its shard; use align: none, or a smaller model.context");
    o.fail(o.has("shards")    ? "shards"
           : s == train.get() ? "train"
                              : "val",
           std::string("no ") + part + " shard holds a whole window (context + 1 = " +
               std::to_string(context + 1) + " tokens; the largest has " + std::to_string(largest) +
               "); windows do not cross shards. Use larger shards or a smaller model.context");
  }
  d.train_shards = train;
  d.val_shards = val;
}

void sample_shard_windows(const ShardSplit& s, int64_t B, int64_t T, Rng& rng, int32_t* x,
                          int32_t* y) {
  // Cumulative window counts: shard k holds draws [cum[k], cum[k+1]).
  std::vector<uint64_t> cum(s.shards.size() + 1, 0);
  for (size_t k = 0; k < s.shards.size(); ++k) cum[k + 1] = cum[k] + windows_in(s, k, T);
  if (cum.back() == 0)
    throw Error("no shard holds a whole window of " + std::to_string(T + 1) +
                " tokens (the data were checked for context " +
                "windows; a longer window was asked for)");
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t u = rng.below(cum.back());
    const size_t k =
        static_cast<size_t>(std::upper_bound(cum.begin(), cum.end(), u) - cum.begin()) - 1;
    const uint64_t j = u - cum[k];
    const int64_t i = s.starts.empty() ? static_cast<int64_t>(j) : s.starts[k][j];
    s.shards[k].copy(i, T, x + b * T);
    s.shards[k].copy(i + 1, T, y + b * T);
  }
}

}  // namespace ablate
