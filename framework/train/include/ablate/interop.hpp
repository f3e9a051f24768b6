// Models in and out of ablate (docs/INTEROP.md): a run's weights as a safetensors file with
// ablate's parameter names, or as a Hugging Face model directory (config.json,
// model.safetensors and the tokenizer's files) for the architectures that compute what an
// ablate configuration computes (GPT2LMHeadModel, LlamaForCausalLM; the table is in
// src/hf_layout.cpp); and back: a safetensors file or a Hugging Face directory as the start
// of a run (init_from), or as a model that generate, eval and inspect take in place of a run.
// Every tensor is checked by name, shape and dtype before any value is copied: a missing,
// extra, transposed or mis-shaped tensor is an Error naming it; nothing loads half.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "ablate/experiment.hpp"
#include "ablate/model.hpp"
#include "ablate/trainer.hpp"

namespace ablate {

// A model from outside ablate's run directories.
struct ModelFile {
  std::string path;           // the file or directory, absolute
  std::string weights;        // its .safetensors file
  std::string architecture;   // "GPT2LMHeadModel", "LlamaForCausalLM"; "" for ablate's own names
  std::string config_yaml;    // its seed, tokenizer, objective and model sections (no data): an
                              // experiment; "" when unknown
  std::string resolved_yaml;  // the same with every option's value (what an experiment that starts
                              // from it is checked against)
  std::string tokenizer_state;  // the tokenizer's state written by ablate's export, else "" (the
                                // tokenizer reads its files)
  std::string tokenizer_from;   // where the tokenizer comes from, for messages
  int64_t vocab_size = -1;      // as config.json gives it (-1: not given)
};

// Whether `path` names a safetensors file or a Hugging Face model directory (a directory with
// config.json and no ablate checkpoint), as opposed to a run directory or checkpoint.
bool is_model_file(const std::string& path);

// Reads what the model is (config.json, the safetensors header and its metadata), checking
// the header; the values are read by load_model_file_weights.
ModelFile read_model_file(const std::string& path);

// `exp` with the model file's sections where the experiment gives none: its model keys win
// over the file's (e.g. model.dropout), its own tokenizer replaces the file's (whose state is
// then dropped from mf). Errors when the file has no configuration and the experiment no model.
Experiment merge_model_file(const Experiment& exp, ModelFile& mf);

// Copies the file's weights into a built model, after checking every tensor and that the
// model's configuration (`resolved`: Experiment::resolved_yaml) computes what the file's
// architecture computes.
void load_model_file_weights(Model& model, const ModelFile& mf, const YAML::Node& resolved);

// A model file as a run at step 0: its configuration, tokenizer and weights.
LoadedRun load_model_file(const std::string& path);

// What of a resolved configuration has no equivalent in `architecture` (a Hugging Face class
// name): "model.positional.type is alibi; GPT2LMHeadModel needs learned". Empty if it maps.
std::vector<std::string> hf_mismatches(const std::string& architecture, const YAML::Node& resolved);
// The architectures ablate maps to, by their Hugging Face class names.
std::vector<std::string> hf_architectures();

// Every parameter of the run with its ablate name and shape, as F32, and the metadata
// ablate_config (the resolved configuration: every option with its value), ablate_experiment
// (the configuration as the run was given it, which ablate builds the model from again),
// ablate_tokenizer (the tokenizer's state; ablate_tokenizer_base64 when it is not UTF-8 text),
// ablate_step and format "pt".
void export_safetensors(LoadedRun& run, const std::string& path);

// A Hugging Face model directory (created if missing): config.json, model.safetensors and the
// tokenizer's files where it has a standard form. Error listing what does not map when the
// configuration has no Hugging Face equivalent. Returns notes for the user (the architecture,
// how the tokenizer was written or why it was not).
std::vector<std::string> export_hf(LoadedRun& run, const std::string& dir);

}  // namespace ablate
