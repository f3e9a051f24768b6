// What import and export of models share (interop.cpp): the check of a configuration against
// an architecture's table, the place of each ablate parameter among the architecture's tensors
// and the conversion of its values, and ablate's metadata in a safetensors file. Internal to
// the train layer; interop_import.cpp reads models, interop_export.cpp writes them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "ablate/interop.hpp"
#include "hf_layout.hpp"

namespace ablate::interop {

using hf::Architecture;
using hf::Flat;
using hf::TensorRule;

Flat flat_of(const YAML::Node& resolved);
bool starts_with(const std::string& s, const std::string& p);
// "(2, 3)", "(4,)".
std::string shape_str(const std::vector<int64_t>& s);
// Whether `name` is `pattern` with "{L}" standing for a layer index; the index in `layer`.
bool match(const std::string& pattern, const std::string& name, int64_t& layer);
// `s` with the first `what` replaced by `by`.
std::string replaced(std::string s, const std::string& what, const std::string& by);

// What of the configuration `f` has no equivalent in `a` (empty when it maps).
std::vector<std::string> mismatches(const Architecture& a, const Flat& f);
// The architecture by its Hugging Face class name; Error listing the known ones otherwise.
const Architecture& architecture_named(const std::string& name);

// A tensor of the file that holds (part of) an ablate parameter.
struct Part {
  std::string name;
  std::vector<int64_t> shape;
  char qkv = 0;  // kQkv: 'q', 'k' or 'v'
};

struct Sizes {
  int64_t C = 0, HS = 0, KV = 0;  // d_model, head size, kv width (kQkv)
};

// The rule of `a` that places the ablate parameter `name` (its layer in `layer`), or null.
const TensorRule* tensor_rule(const Architecture& a, const std::string& name, int64_t& layer);
// The model's sizes; the kv width is set per parameter (parts_of's caller).
Sizes sizes_of(const ModelDims& d);
// The file's tensors that hold parameter p under rule r (three for a fused q|k|v).
std::vector<Part> parts_of(const TensorRule& r, int64_t layer, const Parameter& p, const Sizes& s);
// The part's values from the ablate parameter (export).
std::vector<float> to_hf(const TensorRule& r, const Part& part, const Parameter& p, const Sizes& s);
// Writes the part's values `v` (in the file's layout) into the staged parameter `dst` (import).
void from_hf(const TensorRule& r, const Part& part, const std::vector<float>& v, const Parameter& p,
             const Sizes& s, std::vector<float>& dst);

// ablate's metadata of an exported file: format "pt", ablate_config (`resolved`),
// ablate_experiment, ablate_step and the tokenizer's state (ablate_tokenizer, or
// ablate_tokenizer_base64 when it is not UTF-8).
std::map<std::string, std::string> ablate_metadata(LoadedRun& run, const std::string& resolved);
// What ablate builds the model from: the seed, tokenizer, objective and model sections of the
// configuration as given (a resolved configuration states every default, which a plugin may
// refuse to be given, as an empty file name); files without ablate_experiment: ablate_config.
std::string build_yaml(const std::map<std::string, std::string>& md);
// The tokenizer state in ablate's metadata, or "" when there is none (`file` for messages).
std::string tokenizer_state_of(const std::map<std::string, std::string>& md,
                               const std::string& file);

}  // namespace ablate::interop
