// A named dataset as training data (see dataset_data.hpp and docs/DATA.md "Named datasets").
#include "dataset_data.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <yaml-cpp/yaml.h>

#include "ablate/datasets.hpp"
#include "ablate/error.hpp"
#include "shard_data.hpp"

namespace ablate {

namespace fs = std::filesystem;

namespace {

// The keys of text files and token shards, which a dataset's own files and split replace.
const char* const kOtherKeys[] = {"path",        "train_fraction", "windows", "fill",
                                  "score_after", "line_weights",   "shards",  "train",
                                  "val",         "format"};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(path + ": read error");
  return s;
}

// The tokenizer's type and options as the experiment's section gives them (for the manifest).
void tokenizer_identity(const std::string& key, std::string& name,
                        std::vector<std::pair<std::string, std::string>>& options) {
  name = "(the experiment's tokenizer)";
  if (key.empty()) return;
  try {
    const YAML::Node n = YAML::Load(key);
    if (n.IsScalar()) {
      name = n.as<std::string>();
    } else if (n.IsMap()) {
      for (const auto& kv : n) {
        const std::string k = kv.first.as<std::string>();
        if (k == "type") name = kv.second.as<std::string>();
        else if (kv.second.IsScalar()) options.emplace_back(k, kv.second.as<std::string>());
      }
    }
  } catch (const YAML::Exception&) {
  }
}

// What data: says of a named dataset: which one, whether windows start at documents, and the
// split the evaluations score.
struct DatasetChoice {
  std::string name;
  const NamedDataset* ds = nullptr;
  bool align = false, test = false;
};

DatasetChoice read_dataset_options(const Options& o) {
  for (const char* k : kOtherKeys)
    if (o.has(k))
      o.fail(
          k,
          std::string(k) +
              " does not apply to a named dataset (data.dataset), which brings its own files and "
              "split (docs/DATA.md, \"Named datasets\"): remove " +
              k);
  std::vector<std::string> names;
  for (const auto& ds : named_datasets()) names.push_back(ds.name);
  DatasetChoice c;
  c.name = o.require<std::string>(
      "dataset", "a named public dataset: " + join(names) +
                     " (downloaded, split and prepared in ~/.cache/ablate/data on first use)");
  c.ds = find_named_dataset(c.name);
  if (!c.ds) {
    const std::string dym = did_you_mean(c.name, names);
    o.fail("dataset", "unknown dataset '" + c.name + "'; known: " + join(names) +
                          (dym.empty() ? "" : ". Did you mean '" + dym + "'?") +
                          " Another text file: data.path; token shards: data.shards");
  }
  c.align =
      o.get_choice(
          "align", "none", {"none", "documents"},
          "with a ready-made tokenizer (token shards): where windows start, anywhere (none) or at "
          "an end-of-text id (documents)") == "documents";
  c.test =
      o.get_choice(
          "eval_on", "val", {"val", "test"},
          "the split the evaluations score as validation: val, or test (enwik8, text8: the last "
          "5M bytes, for the final number to compare with published ones)") == "test";
  if (c.test && c.ds->test_parts == 0)
    o.fail("eval_on",
           "'" + c.name + "' has no test split (only enwik8 and text8 do); use eval_on: val");
  o.check_unused();
  return c;
}

// A ready-made tokenizer's token shards of the splits (prepared on first use).
ShardSpec dataset_shard_spec(const Options& o, const DatasetChoice& c, const DatasetSplits& splits,
                             Tokenizer& tok, const std::string& tokenizer_key) {
  std::string tok_name;
  std::vector<std::pair<std::string, std::string>> tok_options;
  tokenizer_identity(tokenizer_key, tok_name, tok_options);
  ShardSpec spec;
  try {
    spec.where = dataset_shards(*c.ds, splits, tok, tok_name, tok_options, c.test);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    o.fail("dataset", "'" + c.name + "': preparing its token shards: " + e.what());
  }
  for (const auto& e : fs::directory_iterator(spec.where)) {
    const std::string f = e.path().filename().string();
    if (f.size() > 4 && f.compare(f.size() - 4, 4, ".bin") == 0)
      (f.find("_train_") != std::string::npos ? spec.train_files : spec.val_files)
          .push_back(e.path().string());
  }
  std::sort(spec.train_files.begin(), spec.train_files.end());
  std::sort(spec.val_files.begin(), spec.val_files.end());
  spec.layout = ShardLayout::kHeader;
  spec.align_documents = c.align;
  spec.manifest = (fs::path(spec.where) / "manifest.json").string();
  return spec;
}

// The splits' text, encoded by a tokenizer fitted on it (when `fit`).
void read_split_texts(const Options& o, const DatasetChoice& c, const DatasetSplits& splits,
                      Tokenizer& tok, int64_t context, bool fit, TextData& d) {
  d.path = splits.dir;
  d.sha256 = splits.sha256;
  // The splits' bytes as they are: enwik8's cuts fall where they fall (a character may be
  // cut), and the char and bpe tokenizers take bytes that are not UTF-8 as characters.
  const std::string& val_file = c.test ? splits.test : splits.val;
  d.train_text = read_bytes(splits.train);
  d.val_text = read_bytes(val_file);
  if (fit) tok.fit(d.train_text);
  d.train = tok.encode(d.train_text);
  d.val = tok.encode(d.val_text);
  for (const auto* part : {&d.train, &d.val})
    if (static_cast<int64_t>(part->size()) < context + 1)
      o.fail("dataset", "'" + c.name + "': the " + (part == &d.train ? "training" : "validation") +
                            " split (" + (part == &d.train ? splits.train : val_file) + ") has " +
                            std::to_string(part->size()) +
                            " tokens, fewer than one window (context + 1 = " +
                            std::to_string(context + 1) + "); use a smaller model.context");
}

}  // namespace

bool names_dataset(const Options& o) { return o.has("dataset"); }

void load_dataset_data(const Options& o, const std::string& yaml_dir, Tokenizer& tok,
                       const std::string& tokenizer_key, int64_t context, bool fit, TextData& d) {
  const DatasetChoice c = read_dataset_options(o);
  DatasetSplits splits;
  try {
    splits = dataset_splits(*c.ds, yaml_dir);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    o.fail("dataset", "'" + c.name + "': " + e.what());
  }
  if (tok.pretrained()) {
    load_shard_data(o, dataset_shard_spec(o, c, splits, tok, tokenizer_key), tok, context, fit, d);
    return;
  }
  if (c.align)
    o.fail("align",
           "documents starts windows at end-of-text ids of token shards, which a named dataset has "
           "only with a "
           "ready-made tokenizer (byte, gpt2); tokenizer '" +
               (tokenizer_key.empty() ? std::string("?") : tokenizer_key) +
               "' is fitted on the text, which is read as text: remove align");
  read_split_texts(o, c, splits, tok, context, fit, d);
}

}  // namespace ablate
