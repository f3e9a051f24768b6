// Export and import of models (see interop.hpp): the generic part, which applies the tables of
// hf_layout.cpp (interop_map.hpp); interop_import.cpp reads models, interop_export.cpp writes
// them.
#include <algorithm>
#include <cstring>
#include <set>

#include "ablate/error.hpp"
#include "interop_map.hpp"

namespace ablate {
namespace interop {

using hf::ConfigRule;
using hf::Layout;
using hf::Rule;

namespace {

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

}  // namespace

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

const TensorRule* tensor_rule(const Architecture& a, const std::string& name, int64_t& layer) {
  for (const TensorRule& r : a.tensors)
    if (match(r.ablate, name, layer)) return &r;
  return nullptr;
}

Sizes sizes_of(const ModelDims& d) {
  Sizes s;
  s.C = d.d_model;
  s.HS = d.d_model / d.n_heads;
  return s;
}

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

const Architecture& architecture_named(const std::string& name) {
  const Architecture* a = hf::find_architecture(name);
  if (!a)
    throw Error("'" + name + "' is not an architecture ablate maps; it maps " +
                join(hf_architectures()));
  return *a;
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

std::string tokenizer_state_of(const std::map<std::string, std::string>& md,
                               const std::string& file) {
  if (md.count("ablate_tokenizer")) return md.at("ablate_tokenizer");
  if (md.count("ablate_tokenizer_base64")) return unbase64(md.at("ablate_tokenizer_base64"), file);
  return "";
}

}  // namespace interop

std::vector<std::string> hf_architectures() {
  std::vector<std::string> names;
  for (const hf::Architecture& a : hf::architectures()) names.push_back(a.name);
  return names;
}

std::vector<std::string> hf_mismatches(const std::string& architecture,
                                       const YAML::Node& resolved) {
  return interop::mismatches(interop::architecture_named(architecture), interop::flat_of(resolved));
}

}  // namespace ablate
