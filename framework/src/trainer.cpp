// The training loop (see trainer.hpp).
#include "ablate/trainer.hpp"

#include <tbb/global_control.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "ablate/checkpoint.hpp"
#include "ablate/communicator.hpp"
#include "ablate/data.hpp"
#include "ablate/evaluator.hpp"
#include "ablate/task.hpp"
#include "ablate/fault.hpp"
#include "ablate/grad_sync.hpp"
#include "ablate/generate.hpp"
#include "ablate/objective.hpp"
#include "ablate/ops.hpp"
#include "ablate/registry.hpp"
#include "ablate/runfile.hpp"
#include "ablate/scheduler.hpp"

namespace ablate {
namespace fs = std::filesystem;

std::string checkpoint_path(const std::string& dir) { return (fs::path(dir) / "checkpoint.ckpt").string(); }
std::string run_file_path(const std::string& dir) { return (fs::path(dir) / "run.h5").string(); }

namespace {

struct TrainConfig {
  int64_t steps, batch, accum, threads, eval_every, eval_batches, checkpoint_every, log_every;
  float grad_clip;
};

TrainConfig read_train(const Options& o) {
  TrainConfig t;
  t.steps = o.get_in<int64_t>("steps", 1000, 1, int64_t{1} << 40, "optimizer steps");
  t.batch = o.get_in<int64_t>("batch_size", 32, 1, 1 << 20, "sequences per micro-batch");
  t.accum = o.get_in<int64_t>("grad_accum", 1, 1, 1 << 16, "micro-batches per optimizer step");
  t.grad_clip = o.get_in<float>("grad_clip", 1.0f, 0.0f, 1e9f, "clip the global gradient norm to this (0: off)");
  t.threads = o.get_in<int64_t>("threads", 0, 0, 4096, "worker threads (0: all cores)");
  t.eval_every = o.get_in<int64_t>("eval_every", 250, 1, int64_t{1} << 40, "steps between evaluations");
  t.eval_batches = o.get_in<int64_t>("eval_batches", 20, 1, 1 << 20, "batches per evaluation");
  t.checkpoint_every = o.get_in<int64_t>("checkpoint_every", 500, 1, int64_t{1} << 40, "steps between checkpoints");
  t.log_every = o.get_in<int64_t>("log_every", 10, 1, int64_t{1} << 40, "steps between train-metric rows");
  o.check_unused();
  return t;
}

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string hms(double s) {
  long v = static_cast<long>(s + 0.5);
  char buf[32];
  if (v >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", v / 3600, (v / 60) % 60, v % 60);
  else std::snprintf(buf, sizeof buf, "%02ld:%02ld", v / 60, v % 60);
  return buf;
}

// The objective's variants whose attention need is `causal`, for an error message.
std::vector<std::string> objectives_for(bool causal) {
  std::vector<std::string> names;
  for (const PluginEntry* e : PluginRegistry::instance().variants(Objective::kFamily)) {
    try {
      YAML::Node n(e->info->name);
      ParamStore none;
      auto obj = PluginRegistry::instance().create<Objective>(Options(n, std::make_shared<ConfigSource>(), "objective"),
                                                              BuildContext{ModelDims{}, ParamScope(none, ""), 0});
      if (obj->causal() == causal) names.push_back(e->info->name);
    } catch (const std::exception&) {
      // a variant that needs options: not suggested
    }
  }
  return names;
}

// A causal objective (next token) must not see what it predicts; a bidirectional one
// needs both sides: the model's attention must be what the objective says.
void check_attention(const Objective& obj, const Model& m, const Options& root) {
  if (obj.causal() == m.causal()) return;
  const Options model = root.child("model"), attn = family_options(model, Attention::kFamily);
  const std::string name = PluginRegistry::type_of(family_options(root, Objective::kFamily)), a = PluginRegistry::type_of(attn);
  const std::vector<std::string> others = objectives_for(m.causal());
  const std::string alternative = others.empty() ? "" : ", or an objective for this attention (objective: " + join(others, " or ") + ")";
  if (obj.causal())
    model.fail("attention", "'" + a + "' lets every position see the tokens after it, and objective '" + name +
                          "' scores each position on the next token: the model would read its answers (the loss falls "
                          "towards 0, samples are garbage). Choose a causal attention" + alternative);
  model.fail("attention", "objective '" + name + "' predicts tokens from the context on both sides, and '" + a +
                        "' hides what comes after each position. Choose a bidirectional attention" + alternative);
}

// Everything the loop needs, built (and so validated) before any training starts.
struct Setup {
  std::unique_ptr<Tokenizer> tokenizer;
  TextData data;
  std::unique_ptr<Objective> objective;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::pair<std::string, std::unique_ptr<Evaluator>>> evaluators;  // (table, evaluator)
  TrainConfig train;
  Sampling sampling;
  std::string sample_prompt;
  int64_t sample_tokens = 0;
  uint64_t seed = 0;
  std::string name, out_dir;
  std::unique_ptr<ParamStore> no_params = std::make_unique<ParamStore>();  // for plugins without parameters
};

Setup build(const Experiment& exp, const RunOptions& ro) {
  Setup s;
  Options root = exp.root();
  auto& reg = PluginRegistry::instance();
  s.name = root.get<std::string>("name", fs::path(exp.file()).stem().string(), "run name");
  s.seed = static_cast<uint64_t>(root.get_in<int64_t>("seed", 1, 0, int64_t{1} << 62, "seed of every random stream"));
  Options model_opts = root.child("model");
  int64_t context = model_opts.get_in<int64_t>("context", 64, 1, 1 << 20, "context length T (tokens)");
  BuildContext none{ModelDims{}, ParamScope(*s.no_params, ""), s.seed};
  s.tokenizer = reg.create<Tokenizer>(family_options(root, Tokenizer::kFamily), none);
  s.data = load_text_data(root.child("data"), exp.dir(), *s.tokenizer, context);
  s.objective = reg.create<Objective>(family_options(root, Objective::kFamily), none);
  s.model = std::make_unique<Model>(model_opts, s.tokenizer->vocab_size() + s.objective->extra_tokens(), s.seed);
  check_attention(*s.objective, *s.model, root);
  s.train = read_train(root.child("train"));
  s.optimizer = reg.create<Optimizer>(family_options(root, Optimizer::kFamily), none);
  s.scheduler = reg.create<Scheduler>(family_options(root, Scheduler::kFamily), none);
  const YAML::Node& evn = root.node()["eval"];
  root.mark_used("eval");
  if (evn.IsDefined() && !evn.IsNull()) {
    if (!evn.IsSequence()) root.fail("eval", "expected a list of evaluators, e.g. [{type: arithmetic, data: test.txt}]");
    for (size_t i = 0; i < evn.size(); ++i) {
      Options e(evn[i], root.source(), "eval." + std::to_string(i));
      std::string type = PluginRegistry::type_of(e);
      s.evaluators.emplace_back("eval/" + type, make_evaluator(e, none));
    }
  }
  Options smp = root.child("sample");
  s.sample_tokens = smp.get_in<int64_t>("tokens", 200, 0, 1 << 24, "tokens generated after training (0: none)");
  s.sample_prompt = smp.get<std::string>("prompt", "\n", "text the sample continues");
  s.sampling.temperature = smp.get_in<float>("temperature", 0.8f, 0.0f, 100.0f, "softmax temperature (0: greedy)");
  s.sampling.top_k = smp.get_in<int64_t>("top_k", 0, 0, 1 << 24, "sample among the k most likely tokens (0: all)");
  s.sampling.top_p = smp.get_in<float>("top_p", 1.0f, 0.0f, 1.0f, "nucleus sampling threshold (1: off)");
  smp.check_unused();
  Options out = root.child("output");
  s.out_dir = out.get<std::string>("dir", "runs/" + s.name, "run directory (HDF5 metrics, checkpoint, sample)");
  out.check_unused();
  if (!ro.out_dir.empty()) s.out_dir = ro.out_dir;
  root.check_unused();
  return s;
}

double global_grad_norm(const std::vector<Parameter*>& params) {
  double sq = 0;
  for (const Parameter* p : params)
    for (int64_t i = 0; i < p->grad.numel(); ++i) sq += static_cast<double>(p->grad.data[i]) * p->grad.data[i];
  return std::sqrt(sq);
}

// The first parameter (in creation order) whose gradient (grad = true) or value has a
// non-finite entry.
const Parameter* first_non_finite(const std::vector<Parameter*>& params, bool grad) {
  for (const Parameter* p : params) {
    const Tensor& t = grad ? p->grad : p->value;
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(t.data[i])) return p;
  }
  return nullptr;
}

// The parameter with the largest |value| and that value (what overflowed, when every
// value is still finite but the forward pass is not).
std::pair<const Parameter*, float> largest_value(const std::vector<Parameter*>& params) {
  std::pair<const Parameter*, float> best{nullptr, 0.0f};
  for (const Parameter* p : params)
    for (int64_t i = 0; i < p->value.numel(); ++i)
      if (std::fabs(p->value.data[i]) > best.second) best = {p, std::fabs(p->value.data[i])};
  return best;
}

// The train-metric row averages the steps since the last row; a checkpoint between two
// rows carries that partial window so that a resumed run logs the same row.
struct LossWindow {
  double loss = 0;
  int64_t steps = 0;
};

// The rows of a global batch of B sequences that rank r of n computes: [lo, hi).
struct Slice {
  int64_t lo = 0, hi = 0;
};
Slice batch_slice(int64_t B, const Communicator& c) {
  return {B * c.rank() / c.size(), B * (c.rank() + 1) / c.size()};
}

// Targets that count in the loss (not padding) among n.
int64_t counted_targets(const int32_t* y, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += y[i] >= 0;
  return c;
}

// The mean loss and the objective's metrics over a fixed set of batches (the same batches,
// and the same masks, at every evaluation, so that evaluations of one run, and of runs with
// the same seed, are directly comparable). With several ranks each computes its slice of
// every batch, weighted as in the whole batch.
std::vector<std::pair<std::string, double>> evaluate(Model& m, const Objective& obj, Graph& g, const TextData& data, bool train,
                                                     const TrainConfig& t, int64_t T, uint64_t seed, std::vector<int32_t>& x,
                                                     std::vector<int32_t>& y, Communicator& comm) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + 0xE7A1), mask_rng(seed * 0x9E3779B97F4A7C15ull + 0x0B1E);
  NoGrad ng(g);
  bool was = g.training;
  g.training = false;
  const Slice sl = comm.size() == 1 ? Slice{0, t.batch} : batch_slice(t.batch, comm);
  std::vector<std::string> names{"loss"};
  for (const auto& kv : obj.metrics(Tensor{}, nullptr, 0)) names.push_back(kv.first);
  std::vector<double> parts;  // this rank's share of each batch mean, batch-major, a value per name
  for (int64_t b = 0; b < t.eval_batches; ++b) {
    sample_batch(data, train, t.batch, T, rng, x.data(), y.data());
    obj.prepare(x.data(), y.data(), t.batch, T, m.dims().vocab_size - obj.extra_tokens(), mask_rng);
    const int64_t n_all = counted_targets(y.data(), t.batch * T);
    const int64_t n_mine = counted_targets(y.data() + sl.lo * T, (sl.hi - sl.lo) * T);
    std::vector<std::pair<std::string, double>> row{{"loss", 0.0}};
    if (n_mine > 0) {
      g.reset();
      Var logits = m.forward(g, ForwardArgs{x.data() + sl.lo * T, sl.hi - sl.lo, T});
      const int32_t* targets = y.data() + sl.lo * T;
      row[0].second = g.value(obj.loss(g, logits, targets, (sl.hi - sl.lo) * T)).data[0];
      for (const auto& kv : obj.metrics(g.value(logits), targets, (sl.hi - sl.lo) * T)) row.push_back(kv);
    }
    for (size_t k = 0; k < names.size(); ++k) {
      const double v = k < row.size() ? row[k].second : 0.0;
      parts.push_back(comm.size() == 1 ? v : v * static_cast<double>(n_mine) / static_cast<double>(n_all));
    }
  }
  comm.allreduce_sum(parts.data(), parts.size());
  std::vector<std::pair<std::string, double>> means;
  for (size_t k = 0; k < names.size(); ++k) {
    double total = 0;
    for (int64_t b = 0; b < t.eval_batches; ++b) total += parts[static_cast<size_t>(b) * names.size() + k];
    means.emplace_back(names[k], total / static_cast<double>(t.eval_batches));
  }
  g.training = was;
  return means;
}

// FNV-1a over the bits of every parameter: equal on every rank while their weights are.
uint64_t weights_hash(const std::vector<Parameter*>& params) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const Parameter* p : params) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(p->value.data);
    for (size_t i = 0; i < static_cast<size_t>(p->value.numel()) * sizeof(float); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  return h;
}

void save_checkpoint(const std::string& dir, const Experiment& exp, Setup& s, int64_t step, const Rng& data_rng,
                     const LossWindow& window) {
  Checkpoint ck;
  ck.texts["config"] = exp.yaml();
  ck.texts["tokenizer"] = s.tokenizer->save();
  for (Parameter* p : s.model->params().all())
    ck.tensors["param/" + p->name] = std::vector<float>(p->value.data, p->value.data + p->value.numel());
  for (auto& b : s.optimizer->state()) ck.tensors["optimizer/" + b.name] = *b.data;
  ck.ints["step"] = static_cast<uint64_t>(step);
  ck.ints["rng/data"] = data_rng.state();
  ck.ints["seed"] = s.seed;
  uint64_t loss_bits;
  std::memcpy(&loss_bits, &window.loss, sizeof loss_bits);
  ck.ints["train/window_loss"] = loss_bits;
  ck.ints["train/window_steps"] = static_cast<uint64_t>(window.steps);
  write_checkpoint(checkpoint_path(dir), ck);
}

void restore_params(Model& m, const Checkpoint& ck, const std::string& path) {
  for (Parameter* p : m.params().all()) {
    auto it = ck.tensors.find("param/" + p->name);
    if (it == ck.tensors.end()) throw Error(path + ": checkpoint has no parameter '" + p->name + "' (model changed?)");
    if (static_cast<int64_t>(it->second.size()) != p->value.numel())
      throw Error(path + ": parameter '" + p->name + "' has " + std::to_string(it->second.size()) +
                  " values in the checkpoint, the model needs " + std::to_string(p->value.numel()));
    std::copy(it->second.begin(), it->second.end(), p->value.data);
  }
}

class Progress {
 public:
  Progress(bool quiet, int64_t total) : quiet_(quiet), tty_(isatty(STDERR_FILENO)), total_(total) {}
  void step(int64_t step, double loss, float lr, double tok_s, double elapsed, double per_step) {
    if (quiet_) return;
    double eta = per_step * static_cast<double>(total_ - step);
    char buf[256];
    std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.4f | lr %.2e | %.1fk tok/s | %s elapsed, ETA %s",
                  static_cast<long long>(step), static_cast<long long>(total_), loss, lr, tok_s / 1000.0,
                  hms(elapsed).c_str(), hms(eta).c_str());
    if (tty_) {
      std::fprintf(stderr, "\r%-110s", buf);
    } else if (elapsed - last_print_ >= 10.0 || step == total_) {
      std::fprintf(stderr, "%s\n", buf);
      last_print_ = elapsed;
    }
    std::fflush(stderr);
  }
  void line(const std::string& s) {
    if (quiet_) return;
    std::fprintf(stderr, tty_ ? "\r%-110s\n" : "%s\n", s.c_str());
    std::fflush(stderr);
  }

 private:
  bool quiet_, tty_;
  int64_t total_;
  double last_print_ = -1e9;
};

}  // namespace

ExperimentInfo describe_experiment(const Experiment& exp, const RunOptions& ro) {
  Setup s = build(exp, ro);
  ExperimentInfo info;
  info.name = s.name;
  info.out_dir = s.out_dir;
  info.n_params = s.model->n_params();
  info.flops_per_token = s.model->flops_per_token();
  info.vocab_size = s.model->dims().vocab_size;
  info.steps = s.train.steps;
  info.tokens_per_step = s.train.batch * s.train.accum * s.model->dims().context;
  return info;
}

RunSummary run_experiment(const Experiment& exp, const RunOptions& ro) {
  Communicator& comm = ro.comm ? *ro.comm : world();
  const bool root = comm.root();
  Setup s = build(exp, ro);
  const TrainConfig& t = s.train;
  // Ranks on one machine share its cores unless told otherwise.
  const int64_t cores = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()) / comm.local_size());
  const int64_t threads = ro.threads > 0 ? ro.threads : (t.threads > 0 ? t.threads : cores);
  if (t.batch < comm.size())
    throw Error("train.batch_size " + std::to_string(t.batch) + " is smaller than the " + std::to_string(comm.size()) +
                " ranks it is split across; give every rank at least one sequence (batch_size >= " + std::to_string(comm.size()) + ")");
  tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  Model& model = *s.model;
  const int64_t B = t.batch, T = model.dims().context;
  auto params = model.params().all();
  s.optimizer->init(params);

  if (root) fs::create_directories(s.out_dir);
  const std::string ck_path = checkpoint_path(s.out_dir), h5_path = run_file_path(s.out_dir);
  Rng data_rng(s.seed ^ 0xDA7Aull);
  LossWindow window;
  int64_t start = 0;
  std::optional<RunFile> rf_holder;  // rank 0 only
  // Rank 0 decides (the others may not see its files yet); every rank then reads the
  // checkpoint, which must be on a filesystem they share.
  uint64_t resume_flag = ro.resume && fs::exists(ck_path) && fs::exists(h5_path);
  comm.broadcast(&resume_flag, 1);
  const bool resumed = resume_flag != 0;
  Progress progress(ro.quiet || !root, t.steps);
  if (resumed) {
    Checkpoint ck = read_checkpoint(ck_path);
    for (const char* key : {"step", "rng/data"})
      if (!ck.ints.count(key))
        throw Error(ck_path + ": checkpoint lacks '" + key + "'; not written by 'ablate run', cannot resume from it");
    for (const char* key : {"config", "tokenizer"})
      if (!ck.texts.count(key))
        throw Error(ck_path + ": checkpoint lacks '" + key + "'; not written by 'ablate run', cannot resume from it");
    YAML::Node old;
    try {
      old = YAML::Load(ck.texts["config"]);
    } catch (const YAML::Exception& e) {
      throw Error(ck_path + ": the config stored in the checkpoint does not parse: " + e.what());
    }
    auto a = flatten(old), b = flatten(exp.node());
    if (a != b && !ro.allow_config_change) {
      std::vector<std::string> changed;
      size_t i = 0, j = 0;
      while (i < a.size() || j < b.size()) {
        if (j >= b.size() || (i < a.size() && a[i].first < b[j].first)) changed.push_back(a[i++].first + " (removed)");
        else if (i >= a.size() || b[j].first < a[i].first) changed.push_back(b[j++].first + " (added)");
        else {
          if (a[i].second != b[j].second) changed.push_back(a[i].first + ": " + a[i].second + " -> " + b[j].second);
          ++i, ++j;
        }
      }
      throw Error(s.out_dir + ": cannot resume: the config differs from the checkpoint's: " + join(changed, "; ") +
                  ". Resume with the same config, or pass --allow-config-change");
    }
    s.tokenizer->load(ck.texts["tokenizer"]);
    restore_params(model, ck, ck_path);
    for (auto& buf : s.optimizer->state()) {
      auto it = ck.tensors.find("optimizer/" + buf.name);
      if (it == ck.tensors.end() || it->second.size() != buf.data->size())
        throw Error(ck_path + ": optimizer state '" + buf.name + "' missing or of the wrong size");
      *buf.data = it->second;
    }
    start = static_cast<int64_t>(ck.ints["step"]);
    data_rng.set_state(ck.ints["rng/data"]);
    uint64_t loss_bits = ck.ints["train/window_loss"];  // 0 (= 0.0) in older checkpoints
    std::memcpy(&window.loss, &loss_bits, sizeof loss_bits);
    window.steps = static_cast<int64_t>(ck.ints["train/window_steps"]);
    if (root) {
      rf_holder.emplace(RunFile::open_append(h5_path));
      rf_holder->truncate_after_step(static_cast<double>(start));
    }
    progress.line("resuming " + s.out_dir + " at step " + std::to_string(start));
  } else {
    if (ro.resume)
      progress.line("nothing to resume in " + s.out_dir + " (" + (fs::exists(ck_path) ? "no run.h5" : "no checkpoint") +
                    "): starting at step 0");
    if (root) {
      rf_holder.emplace(RunFile::create(h5_path));
      rf_holder->set_attr("started", now_iso());
    }
  }
  // Identical weights on every rank from the start (each built them from the same seed or
  // checkpoint; this makes it so whatever the platform).
  for (Parameter* p : params) comm.broadcast(p->value.data, static_cast<size_t>(p->value.numel()));
  // Metrics, checkpoints and files: rank 0 alone (rfp is null on the others).
  RunFile* rfp = root ? &*rf_holder : nullptr;
  if (root) {
    RunFile& rf = *rfp;
    const std::string given = exp.yaml(), resolved = exp.resolved_yaml();
    rf.set_attr("config", given);
    rf.set_attr("config_resolved", resolved);
    rf.set_attr("name", s.name);
    rf.set_attr("ablate_version", ABLATE_VERSION);
    rf.set_attr("git_commit", ABLATE_GIT_COMMIT);
    rf.set_attr("compiler", ABLATE_COMPILER);
    rf.set_attr("threads", threads);
    rf.set_attr("n_params", model.n_params());
    rf.set_attr("flops_per_token", model.flops_per_token());
    rf.set_attr("vocab_size", model.dims().vocab_size);
    rf.set_attr("data_file", s.data.path);
    if (comm.size() > 1) rf.set_attr("ranks", static_cast<int64_t>(comm.size()));
    rf.set_attr("status", "running");
    rf.set_attr("error", "");
    rf.flush();
    std::ofstream(fs::path(s.out_dir) / "config.yaml") << given << "\n";
    std::ofstream(fs::path(s.out_dir) / "config.resolved.yaml")
        << "# Every option of this run with the value it had, defaults included (ablate " << ABLATE_VERSION << ").\n"
        << resolved << "\n";
  }
  if (!ro.quiet)
    progress.line(s.name + ": " + std::to_string(model.n_params()) + " parameters, vocab " +
                  std::to_string(model.dims().vocab_size) + ", " + std::to_string(s.data.train.size()) + " train / " +
                  std::to_string(s.data.val.size()) + " val tokens, " + std::to_string(threads) + " threads" +
                  (comm.size() > 1 ? " x " + comm.description() : "") + " -> " + s.out_dir);

  Graph g;
  g.seed = s.seed;
  const Slice sl = batch_slice(B, comm);
  // ABLATE_ALLREDUCE_OVERLAP=0: start every bucket after backward (to measure the overlap).
  const char* overlap_env = std::getenv("ABLATE_ALLREDUCE_OVERLAP");
  GradientSync sync(comm, params, !(overlap_env && std::string(overlap_env) == "0"));
  std::vector<int32_t> x(static_cast<size_t>(B * T)), y(static_cast<size_t>(B * T));
  RunSummary sum;
  sum.run_dir = s.out_dir;
  sum.n_params = model.n_params();
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  double train_seconds = 0, allreduce_seconds = 0;  // this run's part (not of a resumed one)
  int64_t trained_steps = 0;
  auto fail = [&](const std::string& msg) {
    if (rfp) {
      rfp->set_attr("status", "failed");
      rfp->set_attr("error", msg);
      rfp->set_attr("finished", now_iso());
      rfp->flush();
    }
    throw Error(msg);
  };
  try {
    for (int64_t step = start + 1; step <= t.steps; ++step) {
      fault_point("step");
      auto ts = clock::now();
      float lr = s.optimizer->base_lr() * s.scheduler->factor(step - 1, t.steps);
      model.params().zero_grad();
      double loss_sum = 0;
      g.training = true;
      g.step = static_cast<uint64_t>(step);
      for (int64_t m = 0; m < t.accum; ++m) {
        // Every rank draws the whole batch from the same stream and computes its slice.
        sample_batch(s.data, true, B, T, data_rng, x.data(), y.data());
        // The objective's randomness (masks) from the step, not from a stream to checkpoint.
        Rng mask_rng((s.seed ^ 0x0B1Eull) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step * t.accum + m));
        s.objective->prepare(x.data(), y.data(), B, T, s.tokenizer->vocab_size(), mask_rng);
        float weight = t.accum > 1 ? 1.0f / static_cast<float>(t.accum) : 1.0f;
        if (comm.size() > 1) {
          // The slice's mean loss, weighted by its share of the batch's counted targets:
          // the ranks' losses (and gradients) then sum to those of the whole batch.
          const int64_t n_all = counted_targets(y.data(), B * T);
          const int64_t n_mine = counted_targets(y.data() + sl.lo * T, (sl.hi - sl.lo) * T);
          if (n_mine == 0) continue;
          weight *= static_cast<float>(n_mine) / static_cast<float>(n_all);
          g.batch_rows = sl.hi - sl.lo;
          g.batch_offset = sl.lo;
        }
        g.reset();
        ForwardArgs a = comm.size() > 1 ? ForwardArgs{x.data() + sl.lo * T, sl.hi - sl.lo, T} : ForwardArgs{x.data(), B, T};
        const int32_t* targets = comm.size() > 1 ? y.data() + sl.lo * T : y.data();
        Var loss = s.objective->loss(g, model.forward(g, a), targets, a.batch * T);
        if (weight != 1.0f) loss = scale(g, loss, weight);
        loss_sum += g.value(loss).data[0];
        if (comm.size() > 1 && m + 1 == t.accum) sync.attach(g);
        g.backward(loss);
      }
      if (comm.size() > 1) {
        auto tc = clock::now();
        sync.finish();
        comm.allreduce_sum(&loss_sum, 1);
        allreduce_seconds += std::chrono::duration<double>(clock::now() - tc).count();
      }
      double norm = global_grad_norm(params);
      if (!std::isfinite(loss_sum) || !std::isfinite(norm)) {
        // A non-finite value (the previous update overflowed) is the cause; a non-finite
        // gradient with finite values is the symptom seen at this step.
        const Parameter* bad_value = first_non_finite(params, false);
        const Parameter* bad_grad = first_non_finite(params, true);
        auto [big, big_value] = largest_value(params);
        char big_text[32];
        std::snprintf(big_text, sizeof big_text, "%.3g", static_cast<double>(big_value));
        fail("step " + std::to_string(step) + ": " + (std::isfinite(loss_sum) ? "gradient" : "loss") +
             " is not finite (loss " + std::to_string(loss_sum) + ", gradient norm " + std::to_string(norm) + ")" +
             (bad_value ? "; first parameter with non-finite values: '" + bad_value->name + "'" : "") +
             (bad_grad ? "; first parameter with a non-finite gradient: '" + bad_grad->name + "'" : "") +
             (!bad_value && big ? "; largest parameter value: " + std::string(big_text) + " in '" + big->name + "'" : "") +
             ". Lower the learning rate, enable train.grad_clip, or check the data");
      }
      if (t.grad_clip > 0 && norm > t.grad_clip) {
        float c = static_cast<float>(t.grad_clip / (norm + 1e-6));
        for (Parameter* p : params)
          for (int64_t i = 0; i < p->grad.numel(); ++i) p->grad.data[i] *= c;
      }
      s.optimizer->step(params, lr, step);
      double dt = std::chrono::duration<double>(clock::now() - ts).count();
      train_seconds += dt;
      ++trained_steps;
      window.loss += loss_sum;
      ++window.steps;
      double tok_s = static_cast<double>(B * T * t.accum) * static_cast<double>(trained_steps) / train_seconds;
      if (step % t.log_every == 0 || step == t.steps) {
        if (rfp)
          rfp->append("train", {{"step", double(step)}, {"loss", window.loss / double(window.steps)}, {"lr", lr},
                                {"grad_norm", norm}, {"tokens_per_s", tok_s}});
        progress.step(step, window.loss / double(window.steps), lr, tok_s,
                      std::chrono::duration<double>(clock::now() - t0).count(), train_seconds / double(trained_steps));
        window = LossWindow{};
      }
      if (step % t.eval_every == 0 || step == t.steps) {
        g.batch_rows = g.batch_offset = 0;
        const auto train_m = evaluate(model, *s.objective, g, s.data, true, t, T, s.seed, x, y, comm);
        const auto val_m = evaluate(model, *s.objective, g, s.data, false, t, T, s.seed + 1, x, y, comm);
        const double tl = train_m[0].second, vl = val_m[0].second;
        std::vector<std::pair<std::string, double>> eval_row{
            {"step", double(step)}, {"train_loss", tl}, {"val_loss", vl}, {"val_ppl", std::exp(vl)}};
        for (size_t k = 1; k < val_m.size(); ++k) {
          eval_row.emplace_back("train_" + train_m[k].first, train_m[k].second);
          eval_row.emplace_back("val_" + val_m[k].first, val_m[k].second);
        }
        if (rfp) rfp->append("eval", eval_row);
        // Evaluators (generation, task metrics) run on rank 0 only; the others wait at the
        // next step's allreduce.
        for (auto& [table, ev] : s.evaluators) {
          if (!rfp) break;
          EvalContext ctx{model, *s.tokenizer, step, step == t.steps, s.seed, exp.dir()};
          auto row = ev->evaluate(ctx);
          const std::string shown = ev->summary(row);
          row.insert(row.begin(), {"step", double(step)});
          rfp->append(table, row);
          progress.line(table + " step " + std::to_string(step) + ": " + shown);
        }
        if (rfp) rfp->flush();
        sum.train_loss = tl;
        sum.val_loss = vl;
        char buf[160];
        std::snprintf(buf, sizeof buf, "eval step %lld: train loss %.4f, val loss %.4f, val ppl %.2f",
                      static_cast<long long>(step), tl, vl, std::exp(vl));
        progress.line(buf);
      }
      if (step % t.checkpoint_every == 0 || step == t.steps) {
        if (comm.size() > 1) {
          // Every rank applied the same summed gradients to the same weights; check it.
          uint64_t h = weights_hash(params), h0 = h;
          comm.broadcast(&h0, 1);
          double differ = h != h0;
          comm.allreduce_sum(&differ, 1);
          if (differ > 0)
            fail("step " + std::to_string(step) + ": the weights of " + std::to_string(static_cast<int64_t>(differ)) +
                 " rank(s) differ from rank 0's (an MPI reduction that is not bitwise identical on every rank?)");
        }
        if (rfp) {
          rfp->flush();
          save_checkpoint(s.out_dir, exp, s, step, data_rng, window);
        }
      }
    }
  } catch (const std::exception& e) {
    if (rfp && rfp->is_open()) {
      rfp->set_attr("status", "failed");
      rfp->set_attr("error", e.what());
      rfp->flush();
    }
    throw;
  }
  sum.steps = t.steps;
  sum.tokens_per_s = trained_steps ? static_cast<double>(B * T * t.accum) * double(trained_steps) / train_seconds : 0;
  if (!root) return sum;
  RunFile& rf = *rfp;
  if (s.sample_tokens > 0 && s.objective->generates()) {
    Rng rng(s.seed ^ 0x5A3Bull);
    std::vector<int32_t> prompt = s.tokenizer->encode(s.sample_prompt);
    auto out = generate(model, prompt, s.sample_tokens, s.sampling, rng);
    // Decoded together with the prompt: a tokenizer may join them (BPE's implied spaces).
    prompt.insert(prompt.end(), out.begin(), out.end());
    sum.sample = s.tokenizer->decode(prompt);
    rf.write_text("samples/final", sum.sample);
    std::ofstream(fs::path(s.out_dir) / "sample.txt") << sum.sample << "\n";
  }
  rf.set_attr("status", "done");
  rf.set_attr("finished", now_iso());
  rf.set_attr("train_seconds", train_seconds);
  if (comm.size() > 1) {
    rf.set_attr("allreduce_seconds", allreduce_seconds);  // rank 0's wait included
    rf.set_attr("allreduce_buckets", static_cast<int64_t>(sync.buckets()));
    rf.set_attr("allreduce_buckets_during_backward", static_cast<int64_t>(sync.started_during_backward()));  // last step
  }
  rf.close();
  return sum;
}

LoadedRun load_run(const std::string& dir) {
  LoadedRun r;
  r.dir = dir;
  std::string path = fs::is_regular_file(dir) ? dir : checkpoint_path(dir);
  if (!fs::exists(path))
    throw Error(path + ": no checkpoint here; give a run directory written by 'ablate run' (e.g. runs/quickstart)");
  Checkpoint ck = read_checkpoint(path);
  if (!ck.texts.count("config") || !ck.texts.count("tokenizer"))
    throw Error(path + ": checkpoint lacks the config or tokenizer; not written by 'ablate run'");
  r.experiment = std::make_unique<Experiment>(Experiment::parse(ck.texts["config"], path + " (config)", fs::current_path().string()));
  Options root = r.experiment->root();
  auto& reg = PluginRegistry::instance();
  ParamStore no_params;
  BuildContext none{ModelDims{}, ParamScope(no_params, ""), 0};
  r.tokenizer = reg.create<Tokenizer>(family_options(root, Tokenizer::kFamily), none);
  r.tokenizer->load(ck.texts["tokenizer"]);
  uint64_t seed = static_cast<uint64_t>(root.get<int64_t>("seed", 1));
  auto objective = reg.create<Objective>(family_options(root, Objective::kFamily), none);
  r.model = std::make_unique<Model>(root.child("model"), r.tokenizer->vocab_size() + objective->extra_tokens(), seed);
  restore_params(*r.model, ck, path);
  r.step = static_cast<int64_t>(ck.ints["step"]);
  return r;
}

}  // namespace ablate
