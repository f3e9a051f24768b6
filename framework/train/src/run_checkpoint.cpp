// A run's checkpoint and its keys (see run_checkpoint.hpp).
#include "run_checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

namespace ablate {
namespace fs = std::filesystem;
namespace {

// A double stored in a checkpoint's integers, bit for bit.
uint64_t to_bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
double from_bits(uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

}  // namespace

void save_run_checkpoint(const std::string& dir, const Experiment& exp, const Setup& s,
                         int64_t step, const CheckpointPosition& at, double cpu_seconds,
                         double eval_cpu_seconds, bool keep) {
  Checkpoint ck;
  ck.texts["config"] = exp.yaml();
  ck.texts["tokenizer"] = s.tokenizer->save();
  // The parameters and optimizer state are written from where they live: no copy of them.
  for (Parameter* p : s.model->params().all()) {
    ck.tensor_views["param/" + p->name] = {p->value.data, static_cast<size_t>(p->value.numel())};
    ck.shapes["param/" + p->name] = {p->value.rows, p->value.cols};
  }
  for (auto& b : s.optimizer->state())
    ck.tensor_views["optimizer/" + b.name] = {b.data->data(), b.data->size()};
  ck.ints["step"] = static_cast<uint64_t>(step);
  ck.ints["rng/data"] = at.data_rng;
  ck.ints["seed"] = s.seed;
  ck.texts["data_sha256"] = s.data->sha256;
  ck.ints["train/window_loss"] = to_bits(at.window.loss);
  ck.ints["train/window_steps"] = static_cast<uint64_t>(at.window.steps);
  for (const auto& [name, sum] : at.window.aux) ck.ints["train/window_aux/" + name] = to_bits(sum);
  write_checkpoint(checkpoint_path(dir), ck);
  if (keep) {
    ck.ints["cpu/seconds"] =
        to_bits(cpu_seconds);  // not in checkpoint.ckpt, which holds the state alone
    ck.ints["cpu/eval_seconds"] = to_bits(eval_cpu_seconds);
    fs::create_directories(fs::path(dir) / "checkpoints");
    write_checkpoint(kept_checkpoint_path(dir, step), ck);
  }
}

void restore_params(Model& m, const Checkpoint& ck, const std::string& path) {
  auto dims = [](const std::vector<int64_t>& s) {
    std::string t;
    for (int64_t d : s) t += (t.empty() ? "" : ", ") + std::to_string(d);
    return "(" + t + ")";
  };
  for (Parameter* p : m.params().all()) {
    const std::string key = "param/" + p->name;
    auto it = ck.tensors.find(key);
    if (it == ck.tensors.end())
      throw Error(path + ": checkpoint has no parameter '" + p->name + "' (model changed?)");
    const std::vector<int64_t> want{p->value.rows, p->value.cols};
    if (auto sh = ck.shapes.find(key); sh != ck.shapes.end() && sh->second != want) {
      const bool transposed =
          sh->second.size() == 2 && sh->second[0] == want[1] && sh->second[1] == want[0];
      throw Error(path + ": parameter '" + p->name + "' has shape " + dims(sh->second) +
                  " in the checkpoint, the model needs " + dims(want) +
                  (transposed ? ": transposed" : ""));
    }
    if (static_cast<int64_t>(it->second.size()) != p->value.numel())
      throw Error(path + ": parameter '" + p->name + "' has " + std::to_string(it->second.size()) +
                  " values in the checkpoint, the model needs " + std::to_string(p->value.numel()));
  }
  for (Parameter* p : m.params().all()) {
    const std::vector<float>& v = ck.tensors.at("param/" + p->name);
    std::copy(v.begin(), v.end(), p->value.data);
  }
}

void restore_optimizer(Optimizer& opt, const Checkpoint& ck, const std::string& path) {
  for (auto& buf : opt.state()) {
    auto it = ck.tensors.find("optimizer/" + buf.name);
    if (it == ck.tensors.end() || it->second.size() != buf.data->size())
      throw Error(path + ": optimizer state '" + buf.name + "' missing or of the wrong size");
    *buf.data = it->second;
  }
}

Checkpoint read_run_checkpoint(const std::string& path) {
  Checkpoint ck = read_checkpoint(path);
  for (const char* key : {"step", "rng/data"})
    if (!ck.ints.count(key))
      throw Error(path + ": checkpoint lacks '" + key +
                  "'; not written by 'ablate run', cannot resume from it");
  for (const char* key : {"config", "tokenizer"})
    if (!ck.texts.count(key))
      throw Error(path + ": checkpoint lacks '" + key +
                  "'; not written by 'ablate run', cannot resume from it");
  return ck;
}

YAML::Node checkpoint_config(const Checkpoint& ck, const std::string& path) {
  try {
    return YAML::Load(ck.texts.at("config"));
  } catch (const YAML::Exception& e) {
    throw Error(path + ": the config stored in the checkpoint does not parse: " + e.what());
  }
}

int64_t checkpoint_step(const Checkpoint& ck) { return static_cast<int64_t>(ck.ints.at("step")); }

CheckpointPosition checkpoint_position(const Checkpoint& ck) {
  CheckpointPosition at;
  at.step = checkpoint_step(ck);
  at.data_rng = ck.ints.at("rng/data");
  at.window.loss = from_bits(ck.ints.count("train/window_loss") ? ck.ints.at("train/window_loss")
                                                                : 0);  // 0.0 in older checkpoints
  at.window.steps = ck.ints.count("train/window_steps")
                        ? static_cast<int64_t>(ck.ints.at("train/window_steps"))
                        : 0;
  const std::string aux = "train/window_aux/";
  for (const auto& [key, bits] : ck.ints)
    if (key.compare(0, aux.size(), aux) == 0)
      at.window.aux[key.substr(aux.size())] = from_bits(bits);
  return at;
}

bool kept_cpu_seconds(const Checkpoint& ck, double& cpu, double& eval_cpu) {
  if (!ck.ints.count("cpu/seconds")) return false;
  cpu = from_bits(ck.ints.at("cpu/seconds"));
  eval_cpu = from_bits(ck.ints.at("cpu/eval_seconds"));
  return true;
}

void drop_kept_cpu_seconds(Checkpoint& ck) {
  ck.ints.erase("cpu/seconds");
  ck.ints.erase("cpu/eval_seconds");
}

// init_from / --fork: the weights of another run, which must have this model's parameters.
// A mismatch names the model options that differ from the run's (what usually causes it).
void restore_init_params(Model& m, const Checkpoint& init, const YAML::Node& config) {
  const std::string& path = init.texts.at("path");
  try {
    restore_params(m, init, path);
  } catch (const Error& e) {
    std::string differ;
    try {
      const YAML::Node from = YAML::Load(init.texts.at("config"));
      for (const std::string& c : config_changes(from, config))
        if (c.rfind("model.", 0) == 0 || c.rfind("tokenizer", 0) == 0) differ += "\n  " + c;
    } catch (const std::exception&) {
    }
    throw Error(
        std::string(e.what()) + ".\ninit_from/--fork starts from " + path +
        "'s weights, so the model must have the same parameters as that run" +
        (differ.empty() ? std::string(".") : "; these model options differ from it:" + differ) +
        "\nKeep that run's model options, or train the new model from scratch (without "
        "--fork/init_from).");
  }
}

std::vector<std::string> resume_changes(const Checkpoint& ck, const std::string& out_dir,
                                        const Experiment& exp, const TextData& data,
                                        const RunOptions& ro) {
  const std::string path = checkpoint_path(out_dir);
  const YAML::Node old = checkpoint_config(ck, path);
  std::vector<std::string> changes = config_changes(old, exp.node());
  std::vector<std::string> refused;
  for (const auto& c : config_changes(old, exp.node(), /*results_only=*/true))
    if (!(ro.extend_to > 0 &&
          (c.rfind("train.steps", 0) == 0 || c.rfind("train.schedule_steps", 0) == 0)) &&
        c.rfind("train.precision", 0) != 0)  // a run may go on in another precision (a new segment)
      refused.push_back(c);
  if (!refused.empty() && !ro.allow_config_change)
    throw Error(out_dir + ": cannot resume: the config differs from the checkpoint's: " +
                join(refused, "; ") +
                ". Resume with the same config, or pass --allow-config-change");
  // The training file itself: the same name with other contents (regenerated, edited) is
  // another run's data. Checkpoints from before data_sha256 was recorded are not checked.
  if (auto it = ck.texts.find("data_sha256"); it != ck.texts.end() && it->second != data.sha256) {
    if (!ro.allow_config_change)
      throw Error(out_dir + ": cannot resume: the training data changed since the checkpoint: " +
                  data.path + " had sha256 " + it->second + ", it now has " + data.sha256 +
                  " (edited or regenerated). Restore the file the run trained on, start a new run "
                  "from its weights with "
                  "--fork NEW_DIR, or pass --allow-config-change to continue on the new contents");
    changes.push_back("data " + data.path + ": sha256 " + it->second.substr(0, 12) + "... -> " +
                      data.sha256.substr(0, 12) + "...");
  }
  return changes;
}

std::string init_checkpoint(const std::string& ref, const std::string& exp_dir) {
  fs::path p(ref);
  if (p.is_relative() && !fs::exists(p) && fs::exists(fs::path(exp_dir) / p))
    p = fs::path(exp_dir) / p;
  if (fs::is_directory(p)) p = checkpoint_path(p.string());
  if (!fs::is_regular_file(p))
    throw Error("init_from: " + ref + ": no checkpoint there (" + p.string() +
                "); name a run directory written by 'ablate run' (e.g. runs/quickstart) or its "
                "checkpoint.ckpt");
  return fs::absolute(p).lexically_normal().string();
}

}  // namespace ablate
