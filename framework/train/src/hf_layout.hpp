// The Hugging Face layouts ablate maps to and from, as data (hf_layout.cpp), and the
// tokenizers' Hugging Face forms; interop*.cpp do the reading, checking and writing.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ablate/model.hpp"
#include "ablate/tokenizer.hpp"

namespace ablate::hf {

using Json = nlohmann::ordered_json;
// A resolved configuration flattened: "model.norm.eps" -> "1e-05" (ablate::flatten).
using Flat = std::map<std::string, std::string>;

// What the architecture needs of one configuration key ("a.b.*": every key under a.b):
//   kRequire: one of the values in `value`, '|'-separated; "$key" stands for that key's value;
//   kHf:      any value; config.json records it (field `value`);
//   kFree:    any value; it does not change what the model computes (`value` says why).
// A key of model.* or objective.* with no rule has no equivalent.
enum class Rule { kRequire, kHf, kFree };
struct ConfigRule {
  const char* key;
  Rule rule;
  const char* value;
};

// Where one ablate parameter (rows, cols) goes; "{L}" in both names is the layer index.
//   kSame:      the same (rows, cols) matrix (an embedding; a Conv1D weight, stored (in, out) as
//   ablate's); kVector:    ablate's (1, C) as (C) (norm gains and shifts, biases); kTranspose:
//   (cols, rows): nn.Linear stores (out, in); kQkv:       ablate's fused (C, C + 2 KV) q|k|v
//   columns as three nn.Linear weights, "{qkv}" in the
//               name being q, k and v: (C, C), (KV, C), (KV, C); the rows of q and k in Hugging
//               Face's rotate_half order (a head's first half pairs with its second half) where
//               ablate's rope rotates (even, odd) pairs.
enum class Layout { kSame, kVector, kTranspose, kQkv };
struct TensorRule {
  const char* ablate;
  const char* hf;
  Layout layout;
  const char* kind = nullptr;  // the module that stores it, for messages ("Conv1D")
};

struct Architecture {
  const char* name;         // config.json "architectures": the class
  const char* model_type;   // config.json "model_type"
  const char* base_prefix;  // files may store the base model's tensors without it ("transformer.",
                            // "model.")
  std::vector<ConfigRule> config;
  std::vector<TensorRule> tensors;
  // Tensors some files carry that are not weights (GPT-2's causal-mask buffers), ignored;
  // "{L}" stands for a layer index.
  std::vector<const char*> buffers;
  const char*
      head;  // the output projection's name; in a file of a tied model it must equal the embedding
  // config.json of a model of this architecture (`resolved` its configuration).
  Json (*config_json)(const Flat& resolved, Model& model, int32_t eot_id);
  // The `model:` section (YAML) that computes what config.json describes; `problems` gets
  // what of config.json ablate cannot follow.
  std::string (*model_yaml)(const nlohmann::json& config, std::vector<std::string>& problems);
};

const std::vector<Architecture>& architectures();
const Architecture* find_architecture(const std::string& name);

// The tokenizer's files in Hugging Face's form (file name -> contents), by the tokenizer's
// type; empty, with `why` saying so, when it has none.
std::map<std::string, std::string> tokenizer_files(const std::string& type, const Tokenizer& t,
                                                   const Flat& resolved, int64_t context,
                                                   std::string& why);

}  // namespace ablate::hf
