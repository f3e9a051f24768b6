// Import of models (see interop.hpp): a safetensors file or a Hugging Face directory read as
// a configuration and weights. Every tensor is checked and converted into a staging copy
// first; the model's parameters are written only when all of them passed.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ablate/error.hpp"
#include "ablate/family.hpp"
#include "ablate/objective.hpp"
#include "ablate/registry.hpp"
#include "ablate/safetensors.hpp"
#include "interop_map.hpp"

namespace ablate {
namespace fs = std::filesystem;
using namespace interop;

namespace {

// Why a tensor of shape `found` is not the `expected` one: transposed (and which layout the file
// has), or simply another shape.
std::string shape_problem(const std::string& name, const std::vector<int64_t>& found,
                          const std::vector<int64_t>& expected, const TensorRule* r,
                          const std::string& config) {
  std::string s = "tensor '" + name + "' has shape " + shape_str(found) + " where " +
                  shape_str(expected) + " is expected";
  if (found.size() == 2 && expected.size() == 2 && found[0] == expected[1] &&
      found[1] == expected[0]) {
    if (r && r->kind)
      s += ": transposed: nn.Linear layout (out, in) where " + std::string(r->kind) +
           " (in, out) is expected";
    else if (r && (r->layout == hf::Layout::kTranspose || r->layout == hf::Layout::kQkv))
      s += ": transposed: (in, out) layout (Conv1D's, or ablate's) where nn.Linear (out, in) is "
           "expected";
    else s += ": transposed";
  } else if (!config.empty()) {
    s += " (from " + config +
         "): a file of another model size, or a config.json that does not belong to these weights";
  }
  return s;
}

std::string model_dir_note(const ModelFile& mf) {
  return mf.architecture.empty() ? std::string() : mf.path + "/config.json";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string yaml_quoted(const std::string& s) {
  YAML::Emitter e;
  e << YAML::DoubleQuoted << s;
  return e.c_str();
}

// The section `key` of a YAML text as YAML text ("key: ..."), or "" when it has none.
std::string section(const std::string& yaml, const char* key) {
  const YAML::Node n = YAML::Load(yaml);
  if (!n.IsMap() || !n[key]) return "";
  YAML::Node out;
  out[key] = n[key];
  YAML::Emitter e;
  e << out;
  return std::string(e.c_str()) + "\n";
}

// `over` merged into `base`: maps key by key, anything else replaced.
YAML::Node merged(const YAML::Node& base, const YAML::Node& over) {
  if (!over.IsDefined() || over.IsNull()) return YAML::Clone(base);
  if (!base.IsMap() || !over.IsMap()) return YAML::Clone(over);
  YAML::Node out = YAML::Clone(base);
  for (auto it = over.begin(); it != over.end(); ++it) {
    const std::string k = it->first.as<std::string>();
    out[k] = merged(base[k], it->second);
  }
  return out;
}

// ---- reading what the model is -----------------------------------------------------------------

// A safetensors file on its own (mf.weights): ablate's configuration from its metadata, else
// the architecture whose tensor names it has ("" when none: ablate's own names).
ModelFile read_safetensors_model(ModelFile mf) {
  const SafetensorsFile f = SafetensorsFile::open(mf.weights);
  const auto& md = f.metadata();
  if (md.count("ablate_config")) {
    mf.config_yaml = build_yaml(md);
    mf.resolved_yaml = md.at("ablate_config");
    mf.tokenizer_state = tokenizer_state_of(md, mf.weights);
    mf.tokenizer_from = mf.path + " (ablate's tokenizer state in its metadata)";
    return mf;
  }
  // No configuration: the names say whose layout it is (ablate's own when no architecture's
  // name occurs); the experiment must describe the model.
  for (const Architecture& a : hf::architectures())
    for (const TensorRule& r : a.tensors) {
      const std::string full = replaced(r.hf, "{qkv}", "q");
      const std::string bare =
          starts_with(full, a.base_prefix) ? full.substr(std::strlen(a.base_prefix)) : full;
      for (const SafetensorsEntry& e : f.entries()) {
        int64_t layer;
        if (match(full, e.name, layer) || match(bare, e.name, layer)) mf.architecture = a.name;
      }
    }
  return mf;
}

// The model.safetensors of a Hugging Face directory; Error for the forms ablate does not read.
std::string hf_weights(const std::string& dir_path) {
  const fs::path dir(dir_path);
  const std::string weights = (dir / "model.safetensors").string();
  std::error_code ec;
  if (fs::is_regular_file(weights, ec)) return weights;
  if (fs::exists(dir / "model.safetensors.index.json", ec))
    throw Error(dir_path +
                ": the weights are sharded (model.safetensors.index.json); ablate reads one "
                "model.safetensors");
  if (fs::exists(dir / "pytorch_model.bin", ec))
    throw Error(dir_path +
                ": has pytorch_model.bin but no model.safetensors; ablate reads safetensors only "
                "(convert it, "
                "e.g. with transformers: model.save_pretrained(DIR, safe_serialization=True))");
  throw Error(dir_path + ": no model.safetensors in this Hugging Face directory");
}

nlohmann::json read_config_json(const std::string& cfg_path) {
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(read_text(cfg_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(cfg_path + ": not valid JSON: " + e.what());
  }
  if (!cfg.is_object()) throw Error(cfg_path + ": not a JSON object");
  return cfg;
}

// The architecture config.json names (architectures[0], else its model_type).
const Architecture& hf_architecture_of(const nlohmann::json& cfg, const std::string& cfg_path) {
  std::string arch;
  if (cfg.contains("architectures") && cfg["architectures"].is_array() &&
      !cfg["architectures"].empty() && cfg["architectures"][0].is_string())
    arch = cfg["architectures"][0].get<std::string>();
  const std::string type = cfg.contains("model_type") && cfg["model_type"].is_string()
                               ? cfg["model_type"].get<std::string>()
                               : "";
  const Architecture* a = hf::find_architecture(arch);
  if (!a && arch.empty())
    for (const Architecture& c : hf::architectures())
      if (type == c.model_type) a = &c;
  if (!a) {
    std::string known;
    for (const Architecture& c : hf::architectures())
      known +=
          (known.empty() ? "" : ", ") + std::string(c.name) + " (model_type " + c.model_type + ")";
    throw Error(cfg_path + ": describes " +
                (arch.empty() ? "model_type '" + type + "'" : "a " + arch) +
                (type.empty() || arch.empty() ? "" : " (model_type " + type + ")") +
                "; ablate maps " + known);
  }
  if (!type.empty() && type != a->model_type)
    throw Error(cfg_path + ": architectures says " + a->name + " but model_type is '" + type +
                "' (expected '" + a->model_type + "')");
  return *a;
}

// The tokenizer: section of a Hugging Face directory's model: ablate's state from the weights'
// metadata, else the tokenizer files beside them. Sets mf's tokenizer state and origin.
std::string hf_tokenizer_yaml(ModelFile& mf, const std::map<std::string, std::string>& md) {
  const fs::path dir(mf.path);
  std::error_code ec;
  if (md.count("ablate_config") &&
      (md.count("ablate_tokenizer") || md.count("ablate_tokenizer_base64"))) {
    std::string tokenizer = section(build_yaml(md), "tokenizer");
    mf.tokenizer_state = tokenizer_state_of(md, mf.weights);
    mf.tokenizer_from = mf.weights + " (ablate's tokenizer state in its metadata)";
    if (!tokenizer.empty()) return tokenizer;
  }
  mf.tokenizer_state.clear();
  if (fs::is_regular_file(dir / "vocab.json", ec) && fs::is_regular_file(dir / "merges.txt", ec)) {
    mf.tokenizer_from = (dir / "vocab.json").string() + " and merges.txt";
    return "tokenizer: {type: gpt2, encoder: " + yaml_quoted((dir / "vocab.json").string()) +
           ", merges: " + yaml_quoted((dir / "merges.txt").string()) + "}\n";
  }
  if (fs::is_regular_file(dir / "tokenizer.model",
                          ec)) {  // SentencePiece's (Llama 1 and 2, Mistral)
    mf.tokenizer_from = (dir / "tokenizer.model").string();
    return "tokenizer: {type: sentencepiece, model: " +
           yaml_quoted((dir / "tokenizer.model").string()) + "}\n";
  }
  if (fs::is_regular_file(dir / "tokenizer.json", ec)) {
    mf.tokenizer_from = (dir / "tokenizer.json").string();
    return "tokenizer: {type: gpt2, tokenizer_json: " +
           yaml_quoted((dir / "tokenizer.json").string()) + "}\n";
  }
  throw Error(mf.path +
              ": no tokenizer: ablate reads vocab.json with merges.txt, SentencePiece's "
              "tokenizer.model, or a "
              "tokenizer.json of a byte-level BPE");
}

// A Hugging Face model directory (mf.path): config.json as a model: section, the weights'
// header checked, the tokenizer.
ModelFile read_hf_directory(ModelFile mf) {
  const std::string cfg_path = (fs::path(mf.path) / "config.json").string();
  mf.weights = hf_weights(mf.path);
  const nlohmann::json cfg = read_config_json(cfg_path);
  const Architecture& a = hf_architecture_of(cfg, cfg_path);
  mf.architecture = a.name;
  std::vector<std::string> problems;
  const std::string model = a.model_yaml(cfg, problems);
  if (!cfg.contains("vocab_size") || !cfg["vocab_size"].is_number_integer() ||
      cfg["vocab_size"].get<int64_t>() <= 0)
    problems.push_back("vocab_size is missing or not a positive integer");
  else mf.vocab_size = cfg["vocab_size"].get<int64_t>();
  if (!problems.empty())
    throw Error(cfg_path + ": ablate cannot build this " + std::string(a.name) + ": " +
                join(problems, "; "));
  // The header is checked now; the values are read when the weights load.
  const SafetensorsFile f = SafetensorsFile::open(mf.weights);
  const std::string tokenizer = hf_tokenizer_yaml(mf, f.metadata());
  mf.config_yaml = "seed: 1\nobjective: next_token\n" + tokenizer + model;
  mf.resolved_yaml = model;  // every model option ablate derives from config.json, as a map
  return mf;
}

// ---- loading the weights -----------------------------------------------------------------------

void check_vocab_size(const Model& model, const ModelFile& mf) {
  const int64_t V = model.dims().vocab_size;
  if (mf.vocab_size >= 0 && mf.vocab_size != V)
    throw Error(model_dir_note(mf) + ": vocab_size is " + std::to_string(mf.vocab_size) +
                " but the tokenizer (" + mf.tokenizer_from + ") has " + std::to_string(V) +
                " tokens: the tokenizer files do not belong to these weights (give the model's own "
                "tokenizer)");
}

// An experiment that starts from the file may change how it trains, not what it computes.
void check_same_computation(const ModelFile& mf, const YAML::Node& resolved) {
  if (mf.resolved_yaml.empty()) return;
  const Flat file = flat_of(YAML::Load(mf.resolved_yaml)), now = flat_of(resolved);
  std::vector<std::string> changed;
  for (const auto& [k, v] : file) {
    if (!starts_with(k, "model.") || k == "model.dropout" || k == "model.context" ||
        starts_with(k, "model.init."))
      continue;
    auto it = now.find(k);
    if (it == now.end()) changed.push_back(k + " is not set, the file's is " + v);
    else if (it->second != v) changed.push_back(k + " is " + it->second + ", the file's is " + v);
  }
  if (!changed.empty())
    throw Error(mf.path + ": the experiment changes what the model of the file computes: " +
                join(changed, "; ") +
                ". Leave out the model options that change it (model.dropout and model.context "
                "may differ)");
}

// The import's staging: each of the file's tensors is checked and read into a copy of the
// parameter it belongs to; `problems_` collects what does not fit, `used_` the file's tensors
// accounted for. The model is written only by load(), when nothing is wrong.
class WeightStager {
 public:
  WeightStager(Model& model, const ModelFile& mf, const SafetensorsFile& f)
      : model_(model), mf_(mf), f_(f) {}

  // A file with ablate's own names and shapes.
  void stage_ablate_names() {
    for (Parameter* p : model_.params().all()) {
      const std::vector<int64_t> shape{p->value.rows, p->value.cols};
      Staged s{p, {}};
      if (!f_.find(p->name))
        problems_.push_back("missing tensor '" + p->name + "' " + shape_str(shape) +
                            " (the model has it)");
      else if (fetch(p->name, shape, nullptr, s.values)) staged_.push_back(std::move(s));
    }
  }

  // A file of architecture `a`, in its names and layouts.
  void stage_architecture(const Architecture& a) {
    Sizes sz = sizes_of(model_.dims());
    for (Parameter* p : model_.params().all()) stage_parameter(a, *p, sz);
    check_tied_head(a);
    mark_buffers(a);
  }

  // Copies the staged values into the model; Error listing every problem (nothing loaded) when
  // a tensor did not fit or the file has tensors the model has no place for.
  void load() {
    for (const SafetensorsEntry& e : f_.entries())
      if (!used_.count(e.name))
        problems_.push_back("unexpected tensor '" + e.name + "' " + shape_str(e.shape) +
                            ": the model configured has no place for it" +
                            (mf_.architecture.empty()
                                 ? std::string("")
                                 : " (" + std::to_string(model_.dims().n_layers) + " layers)"));
    if (!problems_.empty()) {
      const size_t shown = std::min<size_t>(problems_.size(), 12);
      std::vector<std::string> head(problems_.begin(),
                                    problems_.begin() + static_cast<std::ptrdiff_t>(shown));
      throw Error(mf_.weights + ": " + std::to_string(problems_.size()) + " tensor" +
                  (problems_.size() == 1 ? "" : "s") +
                  " do not fit the model (nothing was loaded):\n  " + join(head, "\n  ") +
                  (problems_.size() > shown
                       ? "\n  ... and " + std::to_string(problems_.size() - shown) + " more"
                       : ""));
    }
    for (Staged& s : staged_) std::copy(s.values.begin(), s.values.end(), s.param->value.data);
  }

 private:
  struct Staged {
    Parameter* param;
    std::vector<float> values;
  };

  // Checks one tensor of the file and reads it; false (and a problem) when it is not as expected.
  bool fetch(const std::string& name, const std::vector<int64_t>& shape, const TensorRule* r,
             std::vector<float>& out) {
    const SafetensorsEntry* e = f_.find(name);
    if (!e) return false;
    used_.insert(name);
    if (e->shape != shape) {
      problems_.push_back(shape_problem(name, e->shape, shape, r, model_dir_note(mf_)));
      return false;
    }
    if (!SafetensorsFile::readable(e->dtype)) {
      problems_.push_back("tensor '" + name + "' has dtype " + e->dtype + "; ablate reads " +
                          safetensors_readable_dtypes());
      return false;
    }
    out.resize(static_cast<size_t>(e->numel()));
    f_.read(*e, out.data());
    return true;
  }

  // A name as the file writes it: with the base model's prefix, or without (GPT-2's own files).
  std::string in_file(const Architecture& a, const std::string& name) const {
    const std::string prefix = a.base_prefix;
    if (f_.find(name) || !starts_with(name, prefix)) return name;
    const std::string bare = name.substr(prefix.size());
    return f_.find(bare) ? bare : name;
  }

  // The parameter's parts read and converted into its staged copy.
  void stage_parameter(const Architecture& a, Parameter& p, Sizes& sz) {
    int64_t layer = -1;
    const TensorRule* rule = tensor_rule(a, p.name, layer);
    if (!rule) {
      problems_.push_back("the model's parameter '" + p.name + "' has no place in " + a.name);
      return;
    }
    sz.KV = (p.value.cols - sz.C) / 2;
    Staged s{&p, std::vector<float>(static_cast<size_t>(p.value.numel()))};
    bool ok = true;
    for (const Part& part : parts_of(*rule, layer, p, sz)) {
      const std::string name = in_file(a, part.name);
      std::vector<float> v;
      if (!f_.find(name)) {
        problems_.push_back("missing tensor '" + part.name + "' " + shape_str(part.shape) + " (" +
                            a.name + ", for ablate's " + p.name + ")");
        ok = false;
      } else if (!fetch(name, part.shape, rule, v)) {
        ok = false;
      } else {
        from_hf(*rule, part, v, p, sz, s.values);
      }
    }
    if (ok) staged_.push_back(std::move(s));
  }

  // A tied model's file may still carry the output projection: it must be the embedding.
  void check_tied_head(const Architecture& a) {
    const std::string head = in_file(a, a.head);
    if (model_.params().find("head.weight") || !f_.find(head)) return;
    const Parameter* emb = model_.params().find("tok_emb.weight");
    const Staged* emb_values = nullptr;
    for (const Staged& s : staged_)
      if (s.param == emb) emb_values = &s;
    std::vector<float> v;
    if (emb && emb_values && fetch(head, {emb->value.rows, emb->value.cols}, nullptr, v) &&
        v != emb_values->values)
      problems_.push_back("tensor '" + head +
                          "' differs from the token embedding, but config.json ties them "
                          "(tie_word_embeddings): set tie_word_embeddings to false for a separate "
                          "output projection");
  }

  // Buffers some files carry (causal masks, rotary frequencies): not weights.
  void mark_buffers(const Architecture& a) {
    const std::string prefix = a.base_prefix;
    for (const SafetensorsEntry& e : f_.entries())
      for (const char* b : a.buffers) {
        int64_t layer;
        const std::string full = b,
                          bare = starts_with(full, prefix) ? full.substr(prefix.size()) : full;
        if (match(full, e.name, layer) || match(bare, e.name, layer)) used_.insert(e.name);
      }
  }

  Model& model_;
  const ModelFile& mf_;
  const SafetensorsFile& f_;
  std::vector<std::string> problems_;
  std::set<std::string> used_;
  std::vector<Staged> staged_;
};

}  // namespace

bool is_model_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return fs::is_regular_file(fs::path(path) / "config.json", ec) &&
           !fs::exists(fs::path(path) / "checkpoint.ckpt", ec);
  if (!fs::is_regular_file(path, ec)) return false;
  return fs::path(path).extension() == ".safetensors" || SafetensorsFile::looks_like(path);
}

ModelFile read_model_file(const std::string& path) {
  ModelFile mf;
  mf.path = fs::absolute(path).lexically_normal().string();
  if (!mf.path.empty() && mf.path.size() > 1 && mf.path.back() == '/') mf.path.pop_back();
  std::error_code ec;
  if (fs::is_directory(mf.path, ec)) return read_hf_directory(std::move(mf));
  mf.weights = mf.path;
  return read_safetensors_model(std::move(mf));
}

Experiment merge_model_file(const Experiment& exp, ModelFile& mf) {
  YAML::Node node = YAML::Clone(exp.node());
  if (mf.config_yaml.empty()) {
    if (!node["model"])
      throw Error("init_from: " + mf.path +
                  " holds weights without a configuration (no config.json, no ablate_config "
                  "metadata): describe the model in the experiment's model: section");
    return Experiment::parse(exp.yaml(), exp.file(), exp.dir());
  }
  const YAML::Node cfg = YAML::Load(mf.config_yaml);
  node["model"] = merged(cfg["model"], node["model"]);
  if (node["tokenizer"]) mf.tokenizer_state.clear();
  else node["tokenizer"] = cfg["tokenizer"];
  if (!node["objective"] && cfg["objective"]) node["objective"] = cfg["objective"];
  YAML::Emitter e;
  e << node;
  return Experiment::parse(e.c_str(), exp.file(), exp.dir());
}

void load_model_file_weights(Model& model, const ModelFile& mf, const YAML::Node& resolved) {
  const SafetensorsFile f = SafetensorsFile::open(mf.weights);
  check_vocab_size(model, mf);
  check_same_computation(mf, resolved);
  WeightStager stager(model, mf, f);
  if (mf.architecture.empty()) {
    stager.stage_ablate_names();
  } else {
    const Architecture& a = architecture_named(mf.architecture);
    const std::vector<std::string> differ = mismatches(a, flat_of(resolved));
    if (!differ.empty())
      throw Error(mf.weights + ": holds a " + a.name +
                  ", and the model configured does not compute what it computes: " +
                  join(differ, "; ") + ". Leave out the model options that change it");
    stager.stage_architecture(a);
  }
  stager.load();
}

LoadedRun load_model_file(const std::string& path) {
  ModelFile mf = read_model_file(path);
  if (mf.config_yaml.empty())
    throw Error(
        mf.path + ": a safetensors file without a configuration (no ablate_config in its metadata" +
        (mf.architecture.empty() ? std::string() : "; its names are " + mf.architecture + "'s") +
        "): give its Hugging Face directory (with config.json), or start a run from it (init_from) "
        "whose model: "
        "section describes the model");
  LoadedRun r;
  r.dir = mf.path;
  const std::string dir =
      fs::is_directory(mf.path) ? mf.path : fs::path(mf.path).parent_path().string();
  r.experiment = std::make_unique<Experiment>(
      Experiment::parse(mf.config_yaml, mf.path + " (configuration)", dir));
  Options root = r.experiment->root();
  auto& reg = PluginRegistry::instance();
  ParamStore no_params;
  BuildContext none{ModelDims{}, ParamScope(no_params, ""), 0};
  r.tokenizer = reg.create<Tokenizer>(family_options(root, Tokenizer::kFamily), none);
  if (!mf.tokenizer_state.empty()) r.tokenizer->load(mf.tokenizer_state);
  else r.tokenizer->fit("");
  const uint64_t seed = static_cast<uint64_t>(root.get<int64_t>("seed", 1));
  auto objective = reg.create<Objective>(family_options(root, Objective::kFamily), none);
  r.model = std::make_unique<Model>(root.child("model"),
                                    r.tokenizer->vocab_size() + objective->extra_tokens(), seed,
                                    token_texts(*r.tokenizer));
  load_model_file_weights(*r.model, mf, YAML::Load(r.experiment->resolved_yaml()));
  r.step = 0;
  r.objective = PluginRegistry::type_of(family_options(root, Objective::kFamily));
  r.generates = objective->generates();
  return r;
}

}  // namespace ablate
