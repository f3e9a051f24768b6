// The Hugging Face architectures and tokenizer forms ablate maps to and from, as data.
//
// The framework never names a concrete variant, except here: a foreign format describes a
// model by what it computes, and that is a set of ablate variants (learned positions, pre-norm
// LayerNorm blocks, GELU-tanh FFN ... for GPT-2), of their options and of the parameter names
// those variants create. So this file holds, per architecture, (a) the configuration it
// requires, key by key, (b) where each parameter goes, (c) how its config.json is written and
// read; and, per tokenizer type, the tokenizer's Hugging Face files. Nothing else in the
// framework depends on which variants these are: interop*.cpp apply the tables generically,
// and a variant that changes its parameter names or options makes export and import fail
// loudly (a parameter without a rule, an option without a rule), never silently.
#include "hf_layout.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <unordered_map>

#include "ablate/error.hpp"

namespace ablate::hf {
namespace {

std::string get(const Flat& f, const std::string& key, const std::string& def = "") {
  auto it = f.find(key);
  return it == f.end() ? def : it->second;
}

double number(const Flat& f, const std::string& key, double def) {
  const std::string v = get(f, key);
  if (v.empty()) return def;
  try {
    return std::stod(v);
  } catch (const std::exception&) {
    throw Error("export: " + key + " is '" + v + "', not a number");
  }
}

int64_t cols_of(Model& m, const std::string& param) {
  const Parameter* p = m.params().find(param);
  if (!p)
    throw Error("export: the model has no parameter '" + param +
                "' (a variant's parameters were renamed?)");
  return p->value.cols;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

// config.json fields, each read with its type checked; a missing field takes `def`, or is a
// problem when it has none.
struct Reader {
  const nlohmann::json& c;
  std::vector<std::string>& problems;
  int64_t integer(const char* key, int64_t def = -1) {
    if (!c.contains(key) || c[key].is_null()) {
      if (def < 0) problems.push_back("config.json has no " + std::string(key));
      return def;
    }
    if (!c[key].is_number_integer() || c[key].get<int64_t>() < 0) {
      problems.push_back(std::string(key) + " is " + c[key].dump() + ", not a size");
      return def < 0 ? 1 : def;
    }
    return c[key].get<int64_t>();
  }
  double real(const char* key, double def) {
    if (!c.contains(key) || c[key].is_null()) return def;
    if (!c[key].is_number()) {
      problems.push_back(std::string(key) + " is " + c[key].dump() + ", not a number");
      return def;
    }
    return c[key].get<double>();
  }
  bool flag(const char* key, bool def) {
    if (!c.contains(key) || c[key].is_null()) return def;
    if (!c[key].is_boolean()) {
      problems.push_back(std::string(key) + " is " + c[key].dump() + ", not true or false");
      return def;
    }
    return c[key].get<bool>();
  }
  std::string text(const char* key, const std::string& def) {
    if (!c.contains(key) || c[key].is_null()) return def;
    if (!c[key].is_string()) {
      problems.push_back(std::string(key) + " is " + c[key].dump() + ", not a text");
      return def;
    }
    return c[key].get<std::string>();
  }
  // A field ablate cannot follow unless it has this value.
  void must(const char* key, const nlohmann::json& want, const std::string& why) {
    if (c.contains(key) && !c[key].is_null() && c[key] != want)
      problems.push_back(std::string(key) + " is " + c[key].dump() + ": " + why);
  }
};

// ---- GPT2LMHeadModel -------------------------------------------------------------------------

Json gpt2_config(const Flat& f, Model& m, int32_t eot) {
  const ModelDims& d = m.dims();
  const double dropout = number(f, "model.dropout", 0.0);
  Json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = d.vocab_size;
  j["n_positions"] = d.context;
  j["n_ctx"] = d.context;
  j["n_embd"] = d.d_model;
  j["n_layer"] = d.n_layers;
  j["n_head"] = d.n_heads;
  j["n_inner"] = cols_of(m, "blocks.0.ffn.up.weight");
  j["activation_function"] = get(f, "model.ffn.approximate") == "none" ? "gelu" : "gelu_new";
  j["resid_pdrop"] = dropout;
  j["embd_pdrop"] = dropout;
  j["attn_pdrop"] = 0.0;
  j["layer_norm_epsilon"] = number(f, "model.norm.eps", 1e-5);
  j["initializer_range"] = 0.02;
  j["scale_attn_weights"] = true;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  j["tie_word_embeddings"] = get(f, "model.tie_embeddings") == "true";
  if (eot >= 0) j["bos_token_id"] = eot, j["eos_token_id"] = eot;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  return j;
}

std::string gpt2_model(const nlohmann::json& c, std::vector<std::string>& problems) {
  Reader r{c, problems};
  const int64_t C = r.integer("n_embd"), NH = r.integer("n_head"), L = r.integer("n_layer");
  const int64_t T = r.integer("n_positions", c.contains("n_ctx") ? r.integer("n_ctx") : -1);
  const int64_t H = r.integer("n_inner", C > 0 ? 4 * C : 1);
  const std::string act = r.text("activation_function", "gelu_new");
  std::string approximate;
  // gelu_fast is the tanh formula written differently; gelu is the exact erf form.
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") approximate = "tanh";
  else if (act == "gelu") approximate = "none";
  else
    problems.push_back("activation_function is '" + act +
                       "'; ablate's GPT-2 FFN has gelu_new (tanh) and gelu (erf)");
  r.must("scale_attn_weights", true, "ablate's attention always scales by 1/sqrt(head size)");
  r.must("scale_attn_by_inverse_layer_idx", false, "ablate's attention does not scale by layer");
  r.must("add_cross_attention", false,
         "a decoder with cross-attention is not a language model ablate builds");
  const double eps = r.real("layer_norm_epsilon", 1e-5);
  const double dropout = r.real("resid_pdrop", 0.1);
  const bool tie = r.flag("tie_word_embeddings", true);
  std::ostringstream y;
  y << "model:\n  d_model: " << C << "\n  n_heads: " << NH << "\n  n_layers: " << L
    << "\n  context: " << T << "\n  tie_embeddings: " << (tie ? "true" : "false")
    << "\n  head_bias: false\n  dropout: " << num(dropout)
    << "\n  positional: {type: learned}\n  block: {type: prenorm}\n  norm: {type: layernorm, eps: "
    << num(eps)
    << "}\n  attention: {type: causal, qkv_bias: true, out_bias: true}\n  ffn: {type: gelu, "
       "approximate: "
    << (approximate.empty() ? "tanh" : approximate) << ", hidden: " << H << ", bias: true}\n";
  return y.str();
}

// What GPT2LMHeadModel requires of a configuration, and where its tensors go.
Architecture gpt2_architecture() {
  return {"GPT2LMHeadModel",
          "gpt2",
          "transformer.",
          {
              {"objective.type", Rule::kRequire, "next_token"},
              {"model.d_model", Rule::kHf, "n_embd"},
              {"model.n_heads", Rule::kHf, "n_head"},
              {"model.n_layers", Rule::kHf, "n_layer"},
              {"model.context", Rule::kHf, "n_positions"},
              {"model.ffn_multiplier", Rule::kHf, "n_inner"},
              {"model.bias", Rule::kFree, "its biases are the options below"},
              {"model.dropout", Rule::kHf, "resid_pdrop"},
              {"model.tie_embeddings", Rule::kHf, "tie_word_embeddings"},
              {"model.head_bias", Rule::kRequire, "false"},
              {"model.head.type", Rule::kRequire, "linear"},
              {"model.positional.type", Rule::kRequire, "learned"},
              {"model.block.type", Rule::kRequire, "prenorm"},
              {"model.norm.type", Rule::kRequire, "layernorm"},
              {"model.norm.eps", Rule::kHf, "layer_norm_epsilon"},
              {"model.norm.scale", Rule::kRequire, "true"},
              {"model.norm.shift", Rule::kRequire, "true"},
              {"model.norm.final", Rule::kRequire, "true"},
              {"model.attention.type", Rule::kRequire, "causal"},
              {"model.attention.qkv_bias", Rule::kRequire, "true"},
              {"model.attention.out_bias", Rule::kRequire, "true"},
              {"model.attention.n_kv_heads", Rule::kRequire, "0|$model.n_heads"},
              {"model.attention.qk_transform.type", Rule::kRequire, "none"},
              {"model.ffn.type", Rule::kRequire, "gelu"},
              {"model.ffn.approximate", Rule::kHf, "activation_function"},
              {"model.ffn.hidden", Rule::kHf, "n_inner"},
              {"model.ffn.bias", Rule::kRequire, "true"},
              {"model.init.*", Rule::kFree, "initial values only"},
          },
          {
              {"tok_emb.weight", "transformer.wte.weight", Layout::kSame},
              {"pos.weight", "transformer.wpe.weight", Layout::kSame},
              {"blocks.{L}.norm1.weight", "transformer.h.{L}.ln_1.weight", Layout::kVector},
              {"blocks.{L}.norm1.bias", "transformer.h.{L}.ln_1.bias", Layout::kVector},
              {"blocks.{L}.attn.qkv.weight", "transformer.h.{L}.attn.c_attn.weight", Layout::kSame,
               "Conv1D"},
              {"blocks.{L}.attn.qkv.bias", "transformer.h.{L}.attn.c_attn.bias", Layout::kVector},
              {"blocks.{L}.attn.proj.weight", "transformer.h.{L}.attn.c_proj.weight", Layout::kSame,
               "Conv1D"},
              {"blocks.{L}.attn.proj.bias", "transformer.h.{L}.attn.c_proj.bias", Layout::kVector},
              {"blocks.{L}.norm2.weight", "transformer.h.{L}.ln_2.weight", Layout::kVector},
              {"blocks.{L}.norm2.bias", "transformer.h.{L}.ln_2.bias", Layout::kVector},
              {"blocks.{L}.ffn.up.weight", "transformer.h.{L}.mlp.c_fc.weight", Layout::kSame,
               "Conv1D"},
              {"blocks.{L}.ffn.up.bias", "transformer.h.{L}.mlp.c_fc.bias", Layout::kVector},
              {"blocks.{L}.ffn.down.weight", "transformer.h.{L}.mlp.c_proj.weight", Layout::kSame,
               "Conv1D"},
              {"blocks.{L}.ffn.down.bias", "transformer.h.{L}.mlp.c_proj.bias", Layout::kVector},
              {"final_norm.weight", "transformer.ln_f.weight", Layout::kVector},
              {"final_norm.bias", "transformer.ln_f.bias", Layout::kVector},
              {"head.weight", "lm_head.weight", Layout::kTranspose},
          },
          {"transformer.h.{L}.attn.bias", "transformer.h.{L}.attn.masked_bias"},
          "lm_head.weight",
          &gpt2_config,
          &gpt2_model};
}

// ---- LlamaForCausalLM ------------------------------------------------------------------------

Json llama_config(const Flat& f, Model& m, int32_t eot) {
  const ModelDims& d = m.dims();
  int64_t kv = static_cast<int64_t>(number(f, "model.attention.n_kv_heads", 0));
  if (kv == 0) kv = d.n_heads;
  Json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = d.vocab_size;
  j["hidden_size"] = d.d_model;
  j["intermediate_size"] = cols_of(m, "blocks.0.ffn.up.weight");
  j["num_hidden_layers"] = d.n_layers;
  j["num_attention_heads"] = d.n_heads;
  j["num_key_value_heads"] = kv;
  j["head_dim"] = d.d_model / d.n_heads;
  j["max_position_embeddings"] = d.context;
  j["rms_norm_eps"] = number(f, "model.norm.eps", 1e-5);
  j["rope_theta"] = number(f, "model.positional.base", 10000.0);
  j["rope_scaling"] = nullptr;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["mlp_bias"] = false;
  j["pretraining_tp"] = 1;
  j["tie_word_embeddings"] = get(f, "model.tie_embeddings") == "true";
  j["initializer_range"] = 0.02;
  if (eot >= 0) j["bos_token_id"] = eot, j["eos_token_id"] = eot;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  return j;
}

std::string llama_model(const nlohmann::json& c, std::vector<std::string>& problems) {
  Reader r{c, problems};
  const int64_t C = r.integer("hidden_size"), H = r.integer("intermediate_size"),
                NH = r.integer("num_attention_heads");
  const int64_t L = r.integer("num_hidden_layers"), T = r.integer("max_position_embeddings", 2048);
  const int64_t KV = r.integer("num_key_value_heads", NH > 0 ? NH : 1);
  if (C > 0 && NH > 0 && c.contains("head_dim") && !c["head_dim"].is_null() &&
      c["head_dim"] != nlohmann::json(C / NH))
    problems.push_back("head_dim is " + c["head_dim"].dump() +
                       ", not hidden_size / num_attention_heads = " + std::to_string(C / NH) +
                       ": ablate's heads split d_model");
  r.must("hidden_act", "silu", "ablate's Llama FFN is SwiGLU (silu)");
  r.must("attention_bias", false, "ablate's Llama attention has no biases");
  r.must("mlp_bias", false, "ablate's SwiGLU has no biases");
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
    problems.push_back("rope_scaling is " + c["rope_scaling"].dump() +
                       "; ablate's rope has no scaling");
  const double eps = r.real("rms_norm_eps", 1e-6), theta = r.real("rope_theta", 10000.0);
  const bool tie = r.flag("tie_word_embeddings", false);
  std::ostringstream y;
  y << "model:\n  d_model: " << C << "\n  n_heads: " << NH << "\n  n_layers: " << L
    << "\n  context: " << T << "\n  tie_embeddings: " << (tie ? "true" : "false")
    << "\n  head_bias: false\n  dropout: 0"
    << "\n  positional: {type: rope, base: " << num(theta)
    << "}\n  block: {type: prenorm}\n  norm: {type: rmsnorm, eps: " << num(eps)
    << "}\n  attention: {type: causal, qkv_bias: false, out_bias: false, n_kv_heads: " << KV
    << "}\n  ffn: {type: swiglu, hidden: " << H << ", bias: false}\n";
  return y.str();
}

// What LlamaForCausalLM requires of a configuration, and where its tensors go.
Architecture llama_architecture() {
  return {
      "LlamaForCausalLM",
      "llama",
      "model.",
      {
          {"objective.type", Rule::kRequire, "next_token"},
          {"model.d_model", Rule::kHf, "hidden_size"},
          {"model.n_heads", Rule::kHf, "num_attention_heads"},
          {"model.n_layers", Rule::kHf, "num_hidden_layers"},
          {"model.context", Rule::kHf, "max_position_embeddings"},
          {"model.ffn_multiplier", Rule::kHf, "intermediate_size"},
          {"model.bias", Rule::kFree, "its biases are the options below"},
          {"model.dropout", Rule::kFree, "dropout acts in training only, and Llama has none there"},
          {"model.tie_embeddings", Rule::kHf, "tie_word_embeddings"},
          {"model.head_bias", Rule::kRequire, "false"},
          {"model.head.type", Rule::kRequire, "linear"},
          {"model.positional.type", Rule::kRequire, "rope"},
          {"model.positional.base", Rule::kHf, "rope_theta"},
          {"model.block.type", Rule::kRequire, "prenorm"},
          {"model.norm.type", Rule::kRequire, "rmsnorm"},
          {"model.norm.eps", Rule::kHf, "rms_norm_eps"},
          {"model.norm.scale", Rule::kRequire, "true"},
          {"model.norm.final", Rule::kRequire, "true"},
          {"model.attention.type", Rule::kRequire, "causal"},
          {"model.attention.qkv_bias", Rule::kRequire, "false"},
          {"model.attention.out_bias", Rule::kRequire, "false"},
          {"model.attention.n_kv_heads", Rule::kHf, "num_key_value_heads"},
          {"model.attention.qk_transform.type", Rule::kRequire, "none"},
          {"model.ffn.type", Rule::kRequire, "swiglu"},
          {"model.ffn.hidden", Rule::kHf, "intermediate_size"},
          {"model.ffn.match_params", Rule::kHf, "intermediate_size"},
          {"model.ffn.bias", Rule::kRequire, "false"},
          {"model.init.*", Rule::kFree, "initial values only"},
      },
      {
          {"tok_emb.weight", "model.embed_tokens.weight", Layout::kSame},
          {"blocks.{L}.norm1.weight", "model.layers.{L}.input_layernorm.weight", Layout::kVector},
          {"blocks.{L}.attn.qkv.weight", "model.layers.{L}.self_attn.{qkv}_proj.weight",
           Layout::kQkv},
          {"blocks.{L}.attn.proj.weight", "model.layers.{L}.self_attn.o_proj.weight",
           Layout::kTranspose},
          {"blocks.{L}.norm2.weight", "model.layers.{L}.post_attention_layernorm.weight",
           Layout::kVector},
          {"blocks.{L}.ffn.gate.weight", "model.layers.{L}.mlp.gate_proj.weight",
           Layout::kTranspose},
          {"blocks.{L}.ffn.up.weight", "model.layers.{L}.mlp.up_proj.weight", Layout::kTranspose},
          {"blocks.{L}.ffn.down.weight", "model.layers.{L}.mlp.down_proj.weight",
           Layout::kTranspose},
          {"final_norm.weight", "model.norm.weight", Layout::kVector},
          {"head.weight", "lm_head.weight", Layout::kTranspose},
      },
      {"model.layers.{L}.self_attn.rotary_emb.inv_freq"},
      "lm_head.weight",
      &llama_config,
      &llama_model};
}

// ---- tokenizers ------------------------------------------------------------------------------

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 for U+0100...
uint32_t byte_char(uint8_t b) {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    uint32_t next = 256;
    for (int i = 0; i < 256; ++i) {
      const bool printable =
          (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
      t[static_cast<size_t>(i)] = printable ? static_cast<uint32_t>(i) : next++;
    }
    return t;
  }();
  return table[b];
}

void put_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string chars_of(const std::string& bytes) {
  std::string s;
  for (unsigned char b : bytes) put_utf8(s, byte_char(b));
  return s;
}

// Whether s is valid UTF-8 (JSON text must be).
bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0, n = s.size(); i < n;) {
    const unsigned char b = p[i];
    size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

Json added_token(int64_t id, const std::string& content) {
  return Json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", true}};
}

Json bpe_model(const Json& vocab, const Json& unk) {
  return Json{{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", unk},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"vocab", vocab},
              {"merges", Json::array()}};
}

std::string fast_tokenizer_config(int64_t context, const std::string& eos) {
  Json j{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", context}};
  if (!eos.empty()) j["eos_token"] = eos;
  return j.dump(2) + "\n";
}

// GPT-2's vocab.json and merges.txt from the gpt2 tokenizer's state ("ablate-gpt2-tokenizer 1",
// then each id's bytes in hex and its merge rank, 'p' for a byte, 's' for a special token).
// A merge is recovered as tiktoken's files are converted: the token's bytes merged with the
// merges before its own leave exactly the pair its merge joins.
std::map<std::string, std::string> gpt2_files(const Tokenizer& t, int64_t context,
                                              std::string& why) {
  std::istringstream in(t.save());
  std::string magic, key;
  int version = 0;
  size_t n = 0;
  if (!(in >> magic >> version >> key >> n) || magic != "ablate-gpt2-tokenizer" || version != 1 ||
      key != "tokens") {
    why = "its state is not the gpt2 tokenizer's version 1, which the export reads";
    return {};
  }
  std::vector<std::string> bytes(n);
  std::vector<int64_t> rank(n, -1);
  std::vector<bool> special(n, false);
  std::unordered_map<std::string, int64_t>
      rank_of;  // bytes -> rank of mergeable tokens (-1: a byte)
  for (size_t id = 0; id < n; ++id) {
    std::string hex, r;
    if (!(in >> hex >> r) || hex.size() % 2) {
      why = "its state is malformed at id " + std::to_string(id);
      return {};
    }
    for (size_t i = 0; i < hex.size(); i += 2)
      bytes[id] += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    if (r == "s") special[id] = true;
    else if (r != "p") rank[id] = std::stoll(r);
    if (!special[id]) rank_of[bytes[id]] = rank[id];
  }
  std::vector<size_t> ranked;
  for (size_t id = 0; id < n; ++id)
    if (rank[id] >= 0) ranked.push_back(id);
  std::sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) { return rank[a] < rank[b]; });
  std::string merges = "#version: 0.2\n";
  for (size_t id : ranked) {
    std::vector<std::string> parts;
    for (char c : bytes[id]) parts.emplace_back(1, c);
    while (parts.size() > 2) {
      size_t best = parts.size();
      int64_t best_rank = rank[id];
      for (size_t k = 0; k + 1 < parts.size(); ++k) {
        auto it = rank_of.find(parts[k] + parts[k + 1]);
        if (it != rank_of.end() && it->second >= 0 && it->second < best_rank)
          best = k, best_rank = it->second;
      }
      if (best == parts.size()) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    if (parts.size() != 2) {
      why = "token " + std::to_string(id) +
            " is not made by one merge of the tokens before it, so no merges.txt gives its ids";
      return {};
    }
    merges += chars_of(parts[0]) + " " + chars_of(parts[1]) + "\n";
  }
  Json vocab = Json::object();
  for (size_t id = 0; id < n; ++id) vocab[chars_of(bytes[id])] = id;
  std::map<std::string, std::string> files;
  files["vocab.json"] = vocab.dump(-1, ' ', false) + "\n";
  files["merges.txt"] = merges;
  Json cfg{{"tokenizer_class", "GPT2Tokenizer"},
           {"model_max_length", context},
           {"add_prefix_space", false}};
  if (t.eot_id() >= 0) {
    const std::string eot = bytes[static_cast<size_t>(t.eot_id())];
    cfg["bos_token"] = eot, cfg["eos_token"] = eot, cfg["unk_token"] = eot;
  }
  files["tokenizer_config.json"] = cfg.dump(2) + "\n";
  return files;
}

// The byte tokenizer as a byte-level BPE without merges: id b is byte b, so every text has the
// ids ablate gives it; padding and end-of-text are added special tokens.
std::map<std::string, std::string> byte_files(const Tokenizer& t, int64_t context, std::string&) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string c;
    put_utf8(c, byte_char(static_cast<uint8_t>(b)));
    vocab[c] = b;
  }
  Json added = Json::array();
  if (t.pad_id() >= 0) added.push_back(added_token(t.pad_id(), "<|pad|>"));
  if (t.eot_id() >= 0) added.push_back(added_token(t.eot_id(), "<|endoftext|>"));
  const Json byte_level{{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  Json j{
      {"version", "1.0"},          {"truncation", nullptr}, {"padding", nullptr},
      {"added_tokens", added},     {"normalizer", nullptr}, {"pre_tokenizer", byte_level},
      {"post_processor", nullptr}, {"decoder", byte_level}, {"model", bpe_model(vocab, nullptr)}};
  return {{"tokenizer.json", j.dump(2) + "\n"},
          {"tokenizer_config.json",
           fast_tokenizer_config(context, t.eot_id() >= 0 ? "<|endoftext|>" : "")}};
}

// The char tokenizer as a BPE without merges or pre-tokenizer over its characters (a text is
// one word, split into characters), the unknown id as BPE's unk_token, decoded by joining.
std::map<std::string, std::string> char_files(const Tokenizer& t, const Flat& f, int64_t context,
                                              std::string& why) {
  const bool add_unknown = get(f, "tokenizer.add_unknown", "true") == "true";
  const int64_t V = t.vocab_size(), chars = add_unknown ? V - 1 : V;
  Json vocab = Json::object();
  for (int64_t id = 0; id < chars; ++id) {
    const std::string c = t.decode({static_cast<int32_t>(id)});
    if (!valid_utf8(c)) {
      why = "id " + std::to_string(id) +
            " is a byte that is not UTF-8 text, which tokenizer.json cannot hold";
      return {};
    }
    vocab[c] = id;
  }
  Json unk = nullptr;
  if (add_unknown) {
    const std::string u = t.decode({static_cast<int32_t>(V - 1)});
    if (vocab.contains(u) || !valid_utf8(u) || u.empty()) {
      why = "its unknown symbol '" + u +
            "' is also one of its characters (or empty), so BPE's unk_token cannot stand for it";
      return {};
    }
    vocab[u] = V - 1;
    unk = u;
  }
  Json j{{"version", "1.0"},
         {"truncation", nullptr},
         {"padding", nullptr},
         {"added_tokens", Json::array()},
         {"normalizer", nullptr},
         {"pre_tokenizer", nullptr},
         {"post_processor", nullptr},
         {"decoder", Json{{"type", "Fuse"}}},
         {"model", bpe_model(vocab, unk)}};
  return {{"tokenizer.json", j.dump(2) + "\n"},
          {"tokenizer_config.json", fast_tokenizer_config(context, "")}};
}

// SentencePiece's own model file, tokenizer.model, from the sentencepiece tokenizer's state
// ("ablate-sentencepiece-tokenizer 1", "model N", then the N bytes of the model proto): the file
// Llama's tokenizers read. Ids are SentencePiece's encode() without BOS or EOS, as ablate's.
std::map<std::string, std::string> sentencepiece_files(const Tokenizer& t, int64_t context,
                                                       std::string& why) {
  const std::string state = t.save();
  const std::string head = "ablate-sentencepiece-tokenizer 1\nmodel ";
  const size_t nl = state.find('\n', head.size());
  if (state.compare(0, head.size(), head) != 0 || nl == std::string::npos) {
    why = "its state is not the sentencepiece tokenizer's version 1, which the export reads";
    return {};
  }
  const std::string proto = state.substr(nl + 1);
  Json cfg{{"tokenizer_class", "LlamaTokenizer"},
           {"model_max_length", context},
           {"add_bos_token", false},
           {"add_eos_token", false},
           {"legacy", true}};
  return {{"tokenizer.model", proto}, {"tokenizer_config.json", cfg.dump(2) + "\n"}};
}

}  // namespace

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> archs = {gpt2_architecture(), llama_architecture()};
  return archs;
}

const Architecture* find_architecture(const std::string& name) {
  for (const Architecture& a : architectures())
    if (name == a.name) return &a;
  return nullptr;
}

std::map<std::string, std::string> tokenizer_files(const std::string& type, const Tokenizer& t,
                                                   const Flat& resolved, int64_t context,
                                                   std::string& why) {
  if (type == "gpt2") return gpt2_files(t, context, why);
  if (type == "byte") return byte_files(t, context, why);
  if (type == "char") return char_files(t, resolved, context, why);
  if (type == "sentencepiece") return sentencepiece_files(t, context, why);
  why = "ablate has no Hugging Face form for tokenizer '" + type +
        "' (gpt2, byte, char and sentencepiece have one)";
  return {};
}

}  // namespace ablate::hf
