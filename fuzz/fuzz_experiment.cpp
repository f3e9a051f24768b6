// libFuzzer target: the YAML experiment loader with full validation. Each input is parsed
// as an experiment (data.path forced to a small text file), then describe_experiment builds
// everything a run needs (tokenizer fitted on the data, model, optimizer, scheduler,
// evaluators) without training. Every input must be accepted or refused with an
// ablate::Error; any other exception escapes and is reported as a crash. An accepted
// config must survive the round trip that resume relies on: the YAML written into the
// checkpoint parses back to the same flattened config.
// Harness limit: inputs whose model would need more than ~64 MB of parameters are
// skipped (a large but legal model is not a bug, and would only trip the RSS limit).
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "ablate/experiment.hpp"
#include "ablate/registry.hpp"
#include "ablate/trainer.hpp"

namespace {

std::string g_dir, g_data_override;

// An integer under `section` ("model.d_model") if the input sets one, else def.
double number_at(const YAML::Node& root, const char* section, const char* key, double def) {
  try {
    const YAML::Node s = root[section];
    if (!s.IsMap() || !s[key].IsScalar()) return def;
    return s[key].as<double>();
  } catch (const YAML::Exception&) {
    return def;
  }
}

// The largest integer anywhere below n (plugin options such as an FFN's hidden width).
double largest_number(const YAML::Node& n, int depth = 0) {
  if (depth > 70 || !n.IsDefined()) return 0;
  double m = 0;
  if (n.IsScalar()) {
    try {
      m = std::fabs(n.as<double>());
    } catch (const YAML::Exception&) {
    }
  } else if (n.IsMap() || n.IsSequence()) {
    for (auto it = n.begin(); it != n.end(); ++it)
      m = std::max(m, largest_number(n.IsMap() ? it->second : *it, depth + 1));
  }
  return m;
}

bool too_big(const YAML::Node root) {
  const double d = number_at(root, "model", "d_model", 64),
               layers = number_at(root, "model", "n_layers", 4),
               ctx = number_at(root, "model", "context", 64),
               mult = number_at(root, "model", "ffn_multiplier", 4);
  const double floats = d * d * layers * (4 + 3 * mult) + d * (ctx + 512);
  return !(floats < 16e6) || largest_number(root["model"]) > 1e5;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ablate::PluginRegistry::instance().add_directory(ABLATE_PLUGIN_DIR);
  ablate::PluginRegistry::instance().load_all();
  g_dir = (std::filesystem::temp_directory_path() / "ablate-fuzz-experiment").string();
  std::filesystem::create_directories(g_dir);
  // The first 4 KB of the test text (cut at a line end): loading and fitting it is a
  // fraction of each execution.
  std::ifstream in(ABLATE_FUZZ_DATA_FILE, std::ios::binary);
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(text.rfind('\n') + 1);
  const std::string data = g_dir + "/data.txt";
  std::ofstream(data, std::ios::binary) << text;
  g_data_override = "data.path=" + data;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    ablate::Experiment exp = ablate::Experiment::parse(text, "fuzz.yaml", g_dir, {g_data_override});
    if (too_big(exp.node())) return 0;
    ablate::RunOptions ro;
    ro.out_dir = g_dir + "/run";
    ablate::describe_experiment(exp, ro);
    ablate::Experiment again = ablate::Experiment::parse(exp.yaml(), "again.yaml", g_dir);
    if (ablate::flatten(again.node()) != ablate::flatten(exp.node())) __builtin_trap();
  } catch (const ablate::Error&) {
  }
  return 0;
}
