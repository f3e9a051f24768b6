// Export and import of models (see interop.hpp): the generic part, which applies the tables of
// hf_layout.cpp. Every tensor of an import is checked and converted into a staging copy first;
// the model's parameters are written only when all of them passed.
#include "ablate/interop.hpp"

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
#include "hf_layout.hpp"

namespace ablate {
namespace fs = std::filesystem;
using hf::Architecture;
using hf::ConfigRule;
using hf::Flat;
using hf::Layout;
using hf::Rule;
using hf::TensorRule;

namespace {

Flat flat_of(const YAML::Node& resolved) {
  Flat f;
  for (const auto& [k, v] : flatten(resolved)) f[k] = v;
  return f;
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// Whether `name` is `pattern` with "{L}" standing for a layer index; the index in `layer`.
bool match(const std::string& pattern, const std::string& name, int64_t& layer) {
  const size_t at = pattern.find("{L}");
  layer = -1;
  if (at == std::string::npos) return pattern == name;
  const std::string pre = pattern.substr(0, at), post = pattern.substr(at + 3);
  if (name.size() <= pre.size() + post.size() || !starts_with(name, pre) ||
      name.compare(name.size() - post.size(), post.size(), post) != 0)
    return false;
  const std::string mid = name.substr(pre.size(), name.size() - pre.size() - post.size());
  if (mid.empty() || mid.size() > 6 || mid.find_first_not_of("0123456789") != std::string::npos)
    return false;
  layer = std::stoll(mid);
  return true;
}

std::string replaced(std::string s, const std::string& what, const std::string& by) {
  const size_t at = s.find(what);
  if (at != std::string::npos) s.replace(at, what.size(), by);
  return s;
}

const ConfigRule* find_rule(const Architecture& a, const std::string& key) {
  for (const ConfigRule& r : a.config) {
    const std::string k = r.key;
    if (k == key) return &r;
    if (k.size() > 2 && k.compare(k.size() - 2, 2, ".*") == 0 &&
        starts_with(key, k.substr(0, k.size() - 1)))
      return &r;
  }
  return nullptr;
}

// The values a kRequire rule allows, "$key" replaced by that key's value.
std::vector<std::string> allowed(const ConfigRule& r, const Flat& f) {
  std::vector<std::string> out;
  std::string v = r.value;
  for (size_t at = 0;;) {
    const size_t bar = v.find('|', at);
    std::string one = v.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
    if (!one.empty() && one[0] == '$') {
      auto it = f.find(one.substr(1));
      one = it == f.end() ? "" : it->second;
    }
    out.push_back(one);
    if (bar == std::string::npos) break;
    at = bar + 1;
  }
  return out;
}

std::vector<std::string> mismatches(const Architecture& a, const Flat& f) {
  std::vector<std::string> problems;
  std::set<std::string> wrong_type;  // "model.positional." when its type is not the one needed
  std::string arch = a.name;
  for (const ConfigRule& r : a.config) {
    const std::string k = r.key;
    if (r.rule != Rule::kRequire || k.size() < 5 || k.compare(k.size() - 5, 5, ".type") != 0)
      continue;
    auto it = f.find(k);
    const std::vector<std::string> ok = allowed(r, f);
    if (it == f.end() || std::find(ok.begin(), ok.end(), it->second) == ok.end()) {
      problems.push_back(k + " is " + (it == f.end() ? std::string("not set") : it->second) + "; " +
                         arch + " needs " + join(ok, " or "));
      wrong_type.insert(k.substr(0, k.size() - 4));
    }
  }
  auto under_wrong_type = [&](const std::string& key) {
    for (const std::string& p : wrong_type)
      if (starts_with(key, p)) return true;
    return false;
  };
  for (const auto& [k, v] : f) {
    if (!starts_with(k, "model.") && !starts_with(k, "objective.")) continue;
    if (under_wrong_type(k)) continue;
    const ConfigRule* r = find_rule(a, k);
    if (!r) {
      problems.push_back(k + " = " + v + " has no " + arch + " equivalent");
      continue;
    }
    const std::string rk = r->key;
    if (r->rule != Rule::kRequire || (rk.size() >= 5 && rk.compare(rk.size() - 5, 5, ".type") == 0))
      continue;
    const std::vector<std::string> ok = allowed(*r, f);
    if (std::find(ok.begin(), ok.end(), v) == ok.end())
      problems.push_back(k + " is " + v + "; " + arch + " needs " + join(ok, " or "));
  }
  for (const ConfigRule& r : a.config) {
    const std::string k = r.key;
    if (r.rule == Rule::kRequire && k.find('*') == std::string::npos && !f.count(k) &&
        !under_wrong_type(k) && k.compare(k.size() - 5, 5, ".type") != 0)
      problems.push_back(k + " is not set; " + arch + " needs " + join(allowed(r, f), " or "));
  }
  return problems;
}

// ---- one parameter in Hugging Face's layout ----------------------------------------------------

// A tensor of the file that holds (part of) an ablate parameter.
struct Part {
  std::string name;
  std::vector<int64_t> shape;
  char qkv = 0;  // kQkv: 'q', 'k' or 'v'
};

struct Sizes {
  int64_t C = 0, HS = 0, KV = 0;  // d_model, head size, kv width (kQkv)
};

std::vector<Part> parts_of(const TensorRule& r, int64_t layer, const Parameter& p, const Sizes& s) {
  std::string name = r.hf;
  if (layer >= 0) name = replaced(name, "{L}", std::to_string(layer));
  const int64_t R = p.value.rows, C = p.value.cols;
  switch (r.layout) {
    case Layout::kSame: return {{name, {R, C}}};
    case Layout::kVector: return {{name, {C}}};
    case Layout::kTranspose: return {{name, {C, R}}};
    case Layout::kQkv:
      return {{replaced(name, "{qkv}", "q"), {s.C, R}, 'q'},
              {replaced(name, "{qkv}", "k"), {s.KV, R}, 'k'},
              {replaced(name, "{qkv}", "v"), {s.KV, R}, 'v'}};
  }
  return {};
}

// ablate column of row r of a q or k head in rotate_half order: the first half pairs with the
// second (r and r + HS/2), where ablate's rope rotates the pairs (2i, 2i+1).
int64_t rope_col(int64_t r, int64_t HS) { return r < HS / 2 ? 2 * r : 2 * (r - HS / 2) + 1; }

// The column of ablate's fused q|k|v matrix that row `o` of part q, k or v comes from.
int64_t qkv_col(char which, int64_t o, const Sizes& s) {
  const int64_t h = o / s.HS, r = o % s.HS;
  if (which == 'q') return h * s.HS + rope_col(r, s.HS);
  if (which == 'k') return s.C + h * s.HS + rope_col(r, s.HS);
  return s.C + s.KV + o;
}

// The part's values from the ablate parameter (export).
std::vector<float> to_hf(const TensorRule& r, const Part& part, const Parameter& p,
                         const Sizes& s) {
  const int64_t R = p.value.rows, C = p.value.cols;
  const float* w = p.value.data;
  std::vector<float> out(static_cast<size_t>(R * C));
  if (r.layout == Layout::kSame || r.layout == Layout::kVector) {
    std::copy(w, w + R * C, out.begin());
  } else if (r.layout == Layout::kTranspose) {
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) out[static_cast<size_t>(j * R + i)] = w[i * C + j];
  } else {
    const int64_t rows = part.shape[0];
    out.resize(static_cast<size_t>(rows * R));
    for (int64_t o = 0; o < rows; ++o) {
      const int64_t col = qkv_col(part.qkv, o, s);
      for (int64_t i = 0; i < R; ++i) out[static_cast<size_t>(o * R + i)] = w[i * C + col];
    }
  }
  return out;
}

// Writes the part's values `v` (in the file's layout) into the staged parameter `dst` (import).
void from_hf(const TensorRule& r, const Part& part, const std::vector<float>& v, const Parameter& p,
             const Sizes& s, std::vector<float>& dst) {
  const int64_t R = p.value.rows, C = p.value.cols;
  if (r.layout == Layout::kSame || r.layout == Layout::kVector) {
    std::copy(v.begin(), v.end(), dst.begin());
  } else if (r.layout == Layout::kTranspose) {
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j)
        dst[static_cast<size_t>(i * C + j)] = v[static_cast<size_t>(j * R + i)];
  } else {
    const int64_t rows = part.shape[0];
    for (int64_t o = 0; o < rows; ++o) {
      const int64_t col = qkv_col(part.qkv, o, s);
      for (int64_t i = 0; i < R; ++i)
        dst[static_cast<size_t>(i * C + col)] = v[static_cast<size_t>(o * R + i)];
    }
  }
}

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
    else if (r && (r->layout == Layout::kTranspose || r->layout == Layout::kQkv))
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

struct Staged {
  Parameter* param;
  std::vector<float> values;
};

const Architecture& architecture_named(const std::string& name) {
  const Architecture* a = hf::find_architecture(name);
  if (!a)
    throw Error("'" + name + "' is not an architecture ablate maps; it maps " +
                join(hf_architectures()));
  return *a;
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

// Metadata are JSON texts: a tokenizer state that is not UTF-8 (sentencepiece's model proto)
// goes in base64, under its own key.
bool utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const std::string& in) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v =
        uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += kB64[(v >> k) & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string unbase64(const std::string& in, const std::string& what) {
  std::string out;
  uint32_t v = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const char* p = std::strchr(kB64, c);
    if (!p || c == '\0') throw Error(what + ": ablate_tokenizer_base64 is not base64");
    v = (v << 6) | static_cast<uint32_t>(p - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xFF);
    }
  }
  return out;
}

std::map<std::string, std::string> ablate_metadata(LoadedRun& run, const std::string& resolved) {
  const std::string state = run.tokenizer->save();
  std::map<std::string, std::string> md{{"format", "pt"},
                                        {"ablate_config", resolved},
                                        {"ablate_experiment", run.experiment->yaml()},
                                        {"ablate_step", std::to_string(run.step)}};
  if (utf8(state)) md["ablate_tokenizer"] = state;
  else md["ablate_tokenizer_base64"] = base64(state);
  return md;
}

// What ablate builds the model from: the seed, tokenizer, objective and model sections of the
// configuration as given (a resolved configuration states every default, which a plugin may
// refuse to be given, as an empty file name); files without ablate_experiment: ablate_config.
std::string build_yaml(const std::map<std::string, std::string>& md) {
  const std::string& cfg =
      md.count("ablate_experiment") ? md.at("ablate_experiment") : md.at("ablate_config");
  const YAML::Node n = YAML::Load(cfg);
  YAML::Node out;
  for (const char* key : {"seed", "tokenizer", "objective", "model"})
    if (n.IsMap() && n[key]) out[key] = n[key];
  YAML::Emitter e;
  e << out;
  return std::string(e.c_str()) + "\n";
}

// The tokenizer state in ablate's metadata, or "" when there is none.
std::string tokenizer_state_of(const std::map<std::string, std::string>& md,
                               const std::string& file) {
  if (md.count("ablate_tokenizer")) return md.at("ablate_tokenizer");
  if (md.count("ablate_tokenizer_base64")) return unbase64(md.at("ablate_tokenizer_base64"), file);
  return "";
}

}  // namespace

std::vector<std::string> hf_architectures() {
  std::vector<std::string> names;
  for (const Architecture& a : hf::architectures()) names.push_back(a.name);
  return names;
}

std::vector<std::string> hf_mismatches(const std::string& architecture,
                                       const YAML::Node& resolved) {
  return mismatches(architecture_named(architecture), flat_of(resolved));
}

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
  if (!fs::is_directory(mf.path, ec)) {
    mf.weights = mf.path;
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
  const fs::path dir(mf.path);
  const std::string cfg_path = (dir / "config.json").string();
  mf.weights = (dir / "model.safetensors").string();
  if (!fs::is_regular_file(mf.weights, ec)) {
    if (fs::exists(dir / "model.safetensors.index.json", ec))
      throw Error(mf.path +
                  ": the weights are sharded (model.safetensors.index.json); ablate reads one "
                  "model.safetensors");
    if (fs::exists(dir / "pytorch_model.bin", ec))
      throw Error(mf.path +
                  ": has pytorch_model.bin but no model.safetensors; ablate reads safetensors only "
                  "(convert it, "
                  "e.g. with transformers: model.save_pretrained(DIR, safe_serialization=True))");
    throw Error(mf.path + ": no model.safetensors in this Hugging Face directory");
  }
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(read_text(cfg_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(cfg_path + ": not valid JSON: " + e.what());
  }
  if (!cfg.is_object()) throw Error(cfg_path + ": not a JSON object");
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
  mf.architecture = a->name;
  std::vector<std::string> problems;
  const std::string model = a->model_yaml(cfg, problems);
  if (!cfg.contains("vocab_size") || !cfg["vocab_size"].is_number_integer() ||
      cfg["vocab_size"].get<int64_t>() <= 0)
    problems.push_back("vocab_size is missing or not a positive integer");
  else mf.vocab_size = cfg["vocab_size"].get<int64_t>();
  if (!problems.empty())
    throw Error(cfg_path + ": ablate cannot build this " + std::string(a->name) + ": " +
                join(problems, "; "));
  // The header is checked now; the values are read when the weights load.
  const SafetensorsFile f = SafetensorsFile::open(mf.weights);
  std::string tokenizer;
  const auto& md = f.metadata();
  if (md.count("ablate_config") &&
      (md.count("ablate_tokenizer") || md.count("ablate_tokenizer_base64"))) {
    tokenizer = section(build_yaml(md), "tokenizer");
    mf.tokenizer_state = tokenizer_state_of(md, mf.weights);
    mf.tokenizer_from = mf.weights + " (ablate's tokenizer state in its metadata)";
  }
  if (tokenizer.empty()) {
    mf.tokenizer_state.clear();
    if (fs::is_regular_file(dir / "vocab.json", ec) &&
        fs::is_regular_file(dir / "merges.txt", ec)) {
      tokenizer = "tokenizer: {type: gpt2, encoder: " + yaml_quoted((dir / "vocab.json").string()) +
                  ", merges: " + yaml_quoted((dir / "merges.txt").string()) + "}\n";
      mf.tokenizer_from = (dir / "vocab.json").string() + " and merges.txt";
    } else if (fs::is_regular_file(dir / "tokenizer.model",
                                   ec)) {  // SentencePiece's (Llama 1 and 2, Mistral)
      tokenizer = "tokenizer: {type: sentencepiece, model: " +
                  yaml_quoted((dir / "tokenizer.model").string()) + "}\n";
      mf.tokenizer_from = (dir / "tokenizer.model").string();
    } else if (fs::is_regular_file(dir / "tokenizer.json", ec)) {
      tokenizer = "tokenizer: {type: gpt2, tokenizer_json: " +
                  yaml_quoted((dir / "tokenizer.json").string()) + "}\n";
      mf.tokenizer_from = (dir / "tokenizer.json").string();
    } else {
      throw Error(mf.path +
                  ": no tokenizer: ablate reads vocab.json with merges.txt, SentencePiece's "
                  "tokenizer.model, or a "
                  "tokenizer.json of a byte-level BPE");
    }
  }
  mf.config_yaml = "seed: 1\nobjective: next_token\n" + tokenizer + model;
  mf.resolved_yaml = model;  // every model option ablate derives from config.json, as a map
  return mf;
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
  const std::string& file = mf.weights;
  const int64_t V = model.dims().vocab_size;
  if (mf.vocab_size >= 0 && mf.vocab_size != V)
    throw Error(model_dir_note(mf) + ": vocab_size is " + std::to_string(mf.vocab_size) +
                " but the tokenizer (" + mf.tokenizer_from + ") has " + std::to_string(V) +
                " tokens: the tokenizer files do not belong to these weights (give the model's own "
                "tokenizer)");
  // An experiment that starts from the file may change how it trains, not what it computes.
  if (!mf.resolved_yaml.empty()) {
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
  std::vector<std::string> problems;
  std::set<std::string> used;
  std::vector<Staged> staged;
  // Checks one tensor of the file and reads it; false (and a problem) when it is not as expected.
  auto fetch = [&](const std::string& name, const std::vector<int64_t>& shape, const TensorRule* r,
                   std::vector<float>& out) -> bool {
    const SafetensorsEntry* e = f.find(name);
    if (!e) return false;
    used.insert(name);
    if (e->shape != shape) {
      problems.push_back(shape_problem(name, e->shape, shape, r, model_dir_note(mf)));
      return false;
    }
    if (!SafetensorsFile::readable(e->dtype)) {
      problems.push_back("tensor '" + name + "' has dtype " + e->dtype + "; ablate reads " +
                         safetensors_readable_dtypes());
      return false;
    }
    out.resize(static_cast<size_t>(e->numel()));
    f.read(*e, out.data());
    return true;
  };
  if (mf.architecture.empty()) {
    // ablate's own names and shapes.
    for (Parameter* p : model.params().all()) {
      const std::vector<int64_t> shape{p->value.rows, p->value.cols};
      Staged s{p, {}};
      if (!f.find(p->name))
        problems.push_back("missing tensor '" + p->name + "' " + shape_str(shape) +
                           " (the model has it)");
      else if (fetch(p->name, shape, nullptr, s.values)) staged.push_back(std::move(s));
    }
  } else {
    const Architecture& a = architecture_named(mf.architecture);
    const std::vector<std::string> differ = mismatches(a, flat_of(resolved));
    if (!differ.empty())
      throw Error(file + ": holds a " + a.name +
                  ", and the model configured does not compute what it computes: " +
                  join(differ, "; ") + ". Leave out the model options that change it");
    const std::string prefix = a.base_prefix;
    // A name as the file writes it: with the base model's prefix, or without (GPT-2's own files).
    auto in_file = [&](const std::string& name) {
      if (f.find(name) || !starts_with(name, prefix)) return name;
      const std::string bare = name.substr(prefix.size());
      return f.find(bare) ? bare : name;
    };
    Sizes sz;
    sz.C = model.dims().d_model;
    sz.HS = model.dims().d_model / model.dims().n_heads;
    for (Parameter* p : model.params().all()) {
      const TensorRule* rule = nullptr;
      int64_t layer = -1;
      for (const TensorRule& r : a.tensors)
        if (match(r.ablate, p->name, layer)) {
          rule = &r;
          break;
        }
      if (!rule) {
        problems.push_back("the model's parameter '" + p->name + "' has no place in " + a.name);
        continue;
      }
      sz.KV = (p->value.cols - sz.C) / 2;
      Staged s{p, std::vector<float>(static_cast<size_t>(p->value.numel()))};
      bool ok = true;
      for (const Part& part : parts_of(*rule, layer, *p, sz)) {
        const std::string name = in_file(part.name);
        std::vector<float> v;
        if (!f.find(name)) {
          problems.push_back("missing tensor '" + part.name + "' " + shape_str(part.shape) + " (" +
                             a.name + ", for ablate's " + p->name + ")");
          ok = false;
        } else if (!fetch(name, part.shape, rule, v)) {
          ok = false;
        } else {
          from_hf(*rule, part, v, *p, sz, s.values);
        }
      }
      if (ok) staged.push_back(std::move(s));
    }
    // A tied model's file may still carry the output projection: it must be the embedding.
    const std::string head = in_file(a.head);
    if (!model.params().find("head.weight") && f.find(head)) {
      const Parameter* emb = model.params().find("tok_emb.weight");
      const Staged* emb_values = nullptr;
      for (const Staged& s : staged)
        if (s.param == emb) emb_values = &s;
      std::vector<float> v;
      if (emb && emb_values && fetch(head, {emb->value.rows, emb->value.cols}, nullptr, v) &&
          v != emb_values->values)
        problems.push_back("tensor '" + head +
                           "' differs from the token embedding, but config.json ties them "
                           "(tie_word_embeddings): set tie_word_embeddings to false for a separate "
                           "output projection");
    }
    // Buffers some files carry (causal masks, rotary frequencies): not weights.
    for (const SafetensorsEntry& e : f.entries())
      for (const char* b : a.buffers) {
        int64_t layer;
        const std::string full = b,
                          bare = starts_with(full, prefix) ? full.substr(prefix.size()) : full;
        if (match(full, e.name, layer) || match(bare, e.name, layer)) used.insert(e.name);
      }
  }
  for (const SafetensorsEntry& e : f.entries())
    if (!used.count(e.name))
      problems.push_back("unexpected tensor '" + e.name + "' " + shape_str(e.shape) +
                         ": the model configured has no place for it" +
                         (mf.architecture.empty()
                              ? std::string("")
                              : " (" + std::to_string(model.dims().n_layers) + " layers)"));
  if (!problems.empty()) {
    const size_t shown = std::min<size_t>(problems.size(), 12);
    std::vector<std::string> head(problems.begin(),
                                  problems.begin() + static_cast<std::ptrdiff_t>(shown));
    throw Error(file + ": " + std::to_string(problems.size()) + " tensor" +
                (problems.size() == 1 ? "" : "s") +
                " do not fit the model (nothing was loaded):\n  " + join(head, "\n  ") +
                (problems.size() > shown
                     ? "\n  ... and " + std::to_string(problems.size() - shown) + " more"
                     : ""));
  }
  for (Staged& s : staged) std::copy(s.values.begin(), s.values.end(), s.param->value.data);
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

// ---- export ----------------------------------------------------------------------------------

void export_safetensors(LoadedRun& run, const std::string& path) {
  std::vector<SafetensorsTensor> tensors;
  for (Parameter* p : run.model->params().all())
    tensors.push_back({p->name, {p->value.rows, p->value.cols}, p->value.data});
  write_safetensors(path, tensors, ablate_metadata(run, run.experiment->resolved_yaml()));
}

std::vector<std::string> export_hf(LoadedRun& run, const std::string& dir) {
  const std::string resolved_text = run.experiment->resolved_yaml();
  const Flat flat = flat_of(YAML::Load(resolved_text));
  const Architecture* arch = nullptr;
  std::string why;
  for (const Architecture& a : hf::architectures()) {
    const std::vector<std::string> p = mismatches(a, flat);
    if (p.empty()) {
      arch = &a;
      break;
    }
    why += "\n  not " + std::string(a.name) + ":\n    " + join(p, "\n    ");
  }
  if (!arch)
    throw Error(run.dir + ": its model has no Hugging Face equivalent (ablate maps " +
                join(hf_architectures()) + "):" + why +
                "\nExport its weights with ablate's names instead: ablate export " + run.dir +
                " --format safetensors -o FILE");
  Model& m = *run.model;
  Sizes sz;
  sz.C = m.dims().d_model;
  sz.HS = m.dims().d_model / m.dims().n_heads;
  std::vector<std::vector<float>> data;
  std::vector<std::pair<std::string, std::vector<int64_t>>> names;
  for (Parameter* p : m.params().all()) {
    const TensorRule* rule = nullptr;
    int64_t layer = -1;
    for (const TensorRule& r : arch->tensors)
      if (match(r.ablate, p->name, layer)) {
        rule = &r;
        break;
      }
    if (!rule)
      throw Error(run.dir + ": parameter '" + p->name + "' has no place in " + arch->name +
                  " (a variant's parameters were renamed?)");
    sz.KV = (p->value.cols - sz.C) / 2;
    for (const Part& part : parts_of(*rule, layer, *p, sz)) {
      data.push_back(to_hf(*rule, part, *p, sz));
      names.emplace_back(part.name, part.shape);
    }
  }
  std::vector<SafetensorsTensor> tensors;
  for (size_t i = 0; i < data.size(); ++i)
    tensors.push_back({names[i].first, names[i].second, data[i].data()});
  std::string type;
  if (auto it = flat.find("tokenizer.type"); it != flat.end()) type = it->second;
  std::string tok_why;
  const auto tok_files = hf::tokenizer_files(type, *run.tokenizer, flat, m.dims().context, tok_why);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw Error(dir + ": cannot create the directory" + (ec ? ": " + ec.message() : std::string()));
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors,
                    ablate_metadata(run, resolved_text));
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (fs::path(dir) / name).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw Error(path + ": cannot write: " + std::strerror(errno));
  };
  write("config.json", arch->config_json(flat, m, run.tokenizer->eot_id()).dump(2) + "\n");
  for (const auto& [name, text] : tok_files) write(name, text);
  std::vector<std::string> notes;
  notes.push_back(std::string(arch->name) + ": " + std::to_string(tensors.size()) +
                  " tensors in model.safetensors, config.json");
  if (tok_files.empty())
    notes.push_back("the tokenizer does not export (" + tok_why +
                    "); ablate reads it back from model.safetensors' metadata, "
                    "other programs need a tokenizer of their own");
  else {
    std::string list;
    for (const auto& [name, text] : tok_files) list += (list.empty() ? "" : ", ") + name;
    notes.push_back("tokenizer '" + type + "': " + list);
  }
  return notes;
}

}  // namespace ablate
