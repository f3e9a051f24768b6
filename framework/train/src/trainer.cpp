// The training loop (see trainer.hpp).
#include "ablate/trainer.hpp"

#include <signal.h>
#include <tbb/global_control.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <new>
#include <optional>
#include <thread>

#include "ablate/checkpoint.hpp"
#include "ablate/communicator.hpp"
#include "ablate/data.hpp"
#include "ablate/evaluator.hpp"
#include "ablate/task.hpp"
#include "ablate/fault.hpp"
#include "ablate/generate.hpp"
#include "ablate/grad_sync.hpp"
#include "ablate/interop.hpp"
#include "ablate/machine.hpp"
#include "ablate/objective.hpp"
#include "ablate/ops.hpp"
#include "ablate/registry.hpp"
#include "ablate/runfile.hpp"
#include "ablate/scheduler.hpp"

namespace ablate {
namespace fs = std::filesystem;

std::string checkpoint_path(const std::string& dir) {
  return (fs::path(dir) / "checkpoint.ckpt").string();
}
std::string run_file_path(const std::string& dir) { return (fs::path(dir) / "run.h5").string(); }
std::string kept_checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / "checkpoints" / ("step-" + std::to_string(step) + ".ckpt")).string();
}

namespace {

constexpr int64_t kDefaultSteps = 1000;

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

struct TrainConfig {
  int64_t steps, schedule_steps, batch, accum, threads, eval_every, eval_batches, checkpoint_every,
      log_every;
  float grad_clip;
  bool eval_at_start, eval_full;
  Precision precision;
  std::vector<int64_t> keep_checkpoints;  // steps whose checkpoint is kept (branch points)
  bool keeps(int64_t step) const {
    return std::find(keep_checkpoints.begin(), keep_checkpoints.end(), step) !=
           keep_checkpoints.end();
  }
};

TrainConfig read_train(const Options& o) {
  TrainConfig t;
  t.steps = o.get_in<int64_t>("steps", kDefaultSteps, 1, int64_t{1} << 40, "optimizer steps");
  t.schedule_steps = o.get_in<int64_t>(
      "schedule_steps", t.steps, 1, int64_t{1} << 40,
      "steps the lr schedule is planned for; later steps hold its last lr (--extend-to)");
  t.batch = o.get_in<int64_t>("batch_size", 32, 1, 1 << 20, "sequences per micro-batch");
  t.accum = o.get_in<int64_t>("grad_accum", 1, 1, 1 << 16, "micro-batches per optimizer step");
  t.grad_clip = o.get_in<float>("grad_clip", 1.0f, 0.0f, 1e9f,
                                "clip the global gradient norm to this (0: off)");
  t.precision =
      o.get_choice(
          "precision", "float32", {"float32", "bf16"},
          "inputs of the matrix products (linear layers, forward and backward): bf16 rounds them "
          "and sums in float32; weights, gradients, optimizer state, norms, softmax, loss stay "
          "float32") == "bf16"
          ? Precision::bf16
          : Precision::float32;
  t.threads = o.get_in<int64_t>("threads", 0, 0, 4096,
                                "worker threads (0: the cores no other ablate run claims)");
  t.eval_every =
      o.get_in<int64_t>("eval_every", 250, 1, int64_t{1} << 40, "steps between evaluations");
  t.eval_batches = o.get_in<int64_t>("eval_batches", 20, 1, 1 << 20, "batches per evaluation");
  t.eval_at_start = o.get<bool>("eval_at_start", true, "evaluate once before training (step 0)");
  t.eval_full = o.get<bool>(
      "eval_full", false,
      "val_loss over the whole validation part in consecutive windows, every token once "
      "(false: eval_batches random batches); random windows only");
  t.checkpoint_every =
      o.get_in<int64_t>("checkpoint_every", 500, 1, int64_t{1} << 40, "steps between checkpoints");
  t.log_every =
      o.get_in<int64_t>("log_every", 10, 1, int64_t{1} << 40, "steps between train-metric rows");
  t.keep_checkpoints = o.get<std::vector<int64_t>>(
      "keep_checkpoints", {},
      "steps whose checkpoint is also kept, as checkpoints/step-<S>.ckpt: points to branch from "
      "(ablate run RUN --branch NEW_DIR --at S)");
  for (int64_t k : t.keep_checkpoints)
    if (k < 1 || k > t.steps)
      o.fail("keep_checkpoints",
             "step " + std::to_string(k) + " is not a step of this run (1 to train.steps = " +
                 std::to_string(t.steps) + "); list steps within the run, e.g. [" +
                 std::to_string(std::max<int64_t>(1, t.steps / 2)) + "]");
  o.check_unused();
  return t;
}

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// The objective's variants whose attention need is `causal`, for an error message.
std::vector<std::string> objectives_for(bool causal) {
  std::vector<std::string> names;
  for (const PluginEntry* e : PluginRegistry::instance().variants(Objective::kFamily)) {
    try {
      YAML::Node n(e->info->name);
      ParamStore none;
      auto obj = PluginRegistry::instance().create<Objective>(
          Options(n, std::make_shared<ConfigSource>(), "objective"),
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
  const std::string name = PluginRegistry::type_of(family_options(root, Objective::kFamily)),
                    a = PluginRegistry::type_of(attn);
  const std::vector<std::string> others = objectives_for(m.causal());
  const std::string alternative =
      others.empty()
          ? ""
          : ", or an objective for this attention (objective: " + join(others, " or ") + ")";
  if (obj.causal())
    model.fail("attention",
               "'" + a + "' lets every position see the tokens after it, and objective '" + name +
                   "' scores each position on the next token: the model would read its answers "
                   "(the loss falls "
                   "towards 0, samples are garbage). Choose a causal attention" +
                   alternative);
  model.fail("attention",
             "objective '" + name + "' predicts tokens from the context on both sides, and '" + a +
                 "' hides what comes after each position. Choose a bidirectional attention" +
                 alternative);
}

// Everything the loop needs, built (and so validated) before any training starts.
struct Setup {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const TextData> data;
  std::unique_ptr<Objective> objective;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::pair<std::string, std::unique_ptr<Evaluator>>> evaluators;  // (table, evaluator)
  std::vector<int32_t>
      token_bytes;  // each id's bytes of raw text, for bits per byte (token_byte_counts)
  TrainConfig train;
  Sampling sampling;
  std::string sample_prompt;
  int64_t sample_tokens = 0;
  uint64_t seed = 0;
  std::string name, out_dir, init_from;
  std::unique_ptr<ParamStore> no_params =
      std::make_unique<ParamStore>();  // for plugins without parameters
};

void build_evaluators(Options& root, Setup& s, const BuildContext& none) {
  const YAML::Node& evn = root.node()["eval"];
  root.mark_used("eval");
  if (!evn.IsDefined() || evn.IsNull()) return;
  if (!evn.IsSequence())
    root.fail("eval", "expected a list of evaluators, e.g. [{type: arithmetic, data: test.txt}]");
  for (size_t i = 0; i < evn.size(); ++i) {
    Options e(evn[i], root.source(), "eval." + std::to_string(i));
    const std::string type = PluginRegistry::type_of(e);
    const std::string name =
        e.get<std::string>("name", type,
                           "its table in the run file, eval/NAME (default: the type; entries with "
                           "one name share the table, row after row)");
    if (name.empty() || name.find('/') != std::string::npos)
      e.fail("name", "'" + name + "' cannot name a table: give a word without '/', e.g. name: ood");
    s.evaluators.emplace_back("eval/" + name, make_evaluator(e, none));
  }
}

void read_sampling(const Options& root, Setup& s) {
  Options smp = root.child("sample");
  s.sample_tokens =
      smp.get_in<int64_t>("tokens", 200, 0, 1 << 24, "tokens generated after training (0: none)");
  s.sample_prompt = smp.get<std::string>("prompt", "\n", "text the sample continues");
  s.sampling.temperature =
      smp.get_in<float>("temperature", 0.8f, 0.0f, 100.0f, "softmax temperature (0: greedy)");
  s.sampling.top_k =
      smp.get_in<int64_t>("top_k", 0, 0, 1 << 24, "sample among the k most likely tokens (0: all)");
  s.sampling.top_p =
      smp.get_in<float>("top_p", 1.0f, 0.0f, 1.0f, "nucleus sampling threshold (1: off)");
  smp.check_unused();
}

// `tokenizer_state`: the state of the tokenizer of the run this one continues or starts
// from (its data is then encoded with it, not with a tokenizer fitted afresh).
Setup build(const Experiment& exp, const RunOptions& ro,
            const std::string* tokenizer_state = nullptr) {
  Setup s;
  Options root = exp.root();
  auto& reg = PluginRegistry::instance();
  s.name = root.get<std::string>(
      "name", ro.name.empty() ? fs::path(exp.file()).stem().string() : ro.name, "run name");
  s.seed = static_cast<uint64_t>(
      root.get_in<int64_t>("seed", 1, 0, int64_t{1} << 62, "seed of every random stream"));
  s.init_from = root.get<std::string>("init_from", "",
                                      "run directory, checkpoint, safetensors file or Hugging Face "
                                      "directory whose weights start this run");
  Options model_opts = root.child("model");
  int64_t context =
      model_opts.get_in<int64_t>("context", 64, 1, 1 << 20, "context length T (tokens)");
  BuildContext none{ModelDims{}, ParamScope(*s.no_params, ""), s.seed};
  const Options tok_opts = family_options(root, Tokenizer::kFamily);
  s.tokenizer = reg.create<Tokenizer>(tok_opts, none);
  if (tokenizer_state) s.tokenizer->load(*tokenizer_state);
  YAML::Emitter tok_key;
  tok_key << tok_opts.node();
  s.data = load_shared_text_data(root.child("data"), exp.dir(), *s.tokenizer, tok_key.c_str(),
                                 context, tokenizer_state == nullptr);
  s.objective = reg.create<Objective>(family_options(root, Objective::kFamily), none);
  s.model =
      std::make_unique<Model>(model_opts, s.tokenizer->vocab_size() + s.objective->extra_tokens(),
                              s.seed, token_texts(*s.tokenizer));
  check_attention(*s.objective, *s.model, root);
  s.token_bytes = token_byte_counts(*s.tokenizer);
  s.token_bytes.resize(static_cast<size_t>(s.model->dims().vocab_size),
                       0);  // the objective's ids: no text
  s.train = read_train(root.child("train"));
  if (s.train.eval_full && s.data->line_windows)
    root.child("train").fail(
        "eval_full",
        "scores consecutive windows of the token stream, and data.windows: lines starts "
        "windows at lines (with their own scoring); set train.eval_full: false");
  s.optimizer = reg.create<Optimizer>(family_options(root, Optimizer::kFamily), none);
  s.scheduler = reg.create<Scheduler>(family_options(root, Scheduler::kFamily), none);
  build_evaluators(root, s, none);
  read_sampling(root, s);
  Options out = root.child("output");
  s.out_dir = out.get<std::string>("dir", "runs/" + s.name,
                                   "run directory (HDF5 metrics, checkpoint, sample)");
  out.check_unused();
  if (!ro.out_dir.empty()) s.out_dir = ro.out_dir;
  root.check_unused();
  return s;
}

// The loss of one batch under the run's objective; every training loss of the trainer
// (the step, the memory probe) goes through here. The unscored positions before each
// row's first scored one are its prompt (a prefix LM's attention reads it whole).
// `prefix` is scratch the caller keeps (no allocation per step).
Var batch_loss(Graph& g, Model& m, const Objective& obj, ForwardArgs a, const int32_t* targets,
               std::vector<int32_t>& prefix) {
  scored_prefix(targets, a.batch, a.time, prefix);
  a.prefix = prefix.data();
  return obj.loss(g, m.forward(g, a), targets, a.batch * a.time);
}

double global_grad_norm(const std::vector<Parameter*>& params) {
  double sq = 0;
  for (const Parameter* p : params)
    for (int64_t i = 0; i < p->grad.numel(); ++i)
      sq += static_cast<double>(p->grad.data[i]) * p->grad.data[i];
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
// every batch, weighted as in the whole batch. `full` (train.eval_full): the whole part in
// consecutive windows instead, each value the mean over every counted target. The last
// entry is "bpb", bits per byte over all the batches' scored targets (ByteLoss, evaluator.hpp).
std::vector<std::pair<std::string, double>> evaluate(Model& m, const Objective& obj, Graph& g,
                                                     const TextData& data, bool train,
                                                     const TrainConfig& t, int64_t T, uint64_t seed,
                                                     std::vector<int32_t>& x,
                                                     std::vector<int32_t>& y, Communicator& comm,
                                                     const std::vector<int32_t>& token_bytes,
                                                     bool full = false) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + 0xE7A1), mask_rng(seed * 0x9E3779B97F4A7C15ull + 0x0B1E);
  const int64_t batches =
      full ? (consecutive_windows(data, train, T) + t.batch - 1) / t.batch : t.eval_batches;
  double counted = 0;  // full: the targets of the whole batches (every rank sees them all)
  NoGrad ng(g);
  bool was = g.training;
  g.training = false;
  const Slice sl = comm.size() == 1 ? Slice{0, t.batch} : batch_slice(t.batch, comm);
  std::vector<std::string> names{"loss"};
  for (const auto& kv : obj.metrics(Tensor{}, nullptr, 0)) names.push_back(kv.first);
  std::vector<double> parts;  // this rank's share of each batch mean, batch-major, a value per name
  ByteLoss bytes;             // this rank's slices, every batch
  for (int64_t b = 0; b < batches; ++b) {
    if (full) consecutive_batch(data, train, b * t.batch, t.batch, T, x.data(), y.data());
    else sample_batch(data, train, t.batch, T, rng, x.data(), y.data());
    obj.prepare(x.data(), y.data(), t.batch, T, m.dims().vocab_size - obj.extra_tokens(), mask_rng);
    const int64_t n_all = counted_targets(y.data(), t.batch * T);
    const int64_t n_mine = counted_targets(y.data() + sl.lo * T, (sl.hi - sl.lo) * T);
    counted += static_cast<double>(n_all);
    std::vector<std::pair<std::string, double>> row{{"loss", 0.0}};
    if (n_mine > 0) {
      g.reset();
      const int32_t* targets = y.data() + sl.lo * T;
      std::vector<int32_t> prefix;
      scored_prefix(targets, sl.hi - sl.lo, T, prefix);
      ForwardArgs fa{x.data() + sl.lo * T, sl.hi - sl.lo, T};
      fa.prefix = prefix.data();
      Var logits = m.forward(g, fa);
      row[0].second = g.value(obj.loss(g, logits, targets, (sl.hi - sl.lo) * T)).data[0];
      for (const auto& kv : obj.metrics(g.value(logits), targets, (sl.hi - sl.lo) * T))
        row.push_back(kv);
      const ByteLoss b =
          byte_loss(g.value(logits), targets, (sl.hi - sl.lo) * T, row[0].second, token_bytes);
      bytes.nats += b.nats;
      bytes.bytes += b.bytes;
    }
    for (size_t k = 0; k < names.size(); ++k) {
      const double v = k < row.size() ? row[k].second : 0.0;
      if (full)
        parts.push_back(v * static_cast<double>(n_mine));  // the slice's sum over its targets
      else
        parts.push_back(
            comm.size() == 1 ? v : v * static_cast<double>(n_mine) / static_cast<double>(n_all));
    }
  }
  parts.push_back(bytes.nats);
  parts.push_back(bytes.bytes);
  comm.allreduce_sum(parts.data(), parts.size());
  std::vector<std::pair<std::string, double>> means;
  for (size_t k = 0; k < names.size(); ++k) {
    double total = 0;
    for (int64_t b = 0; b < batches; ++b) total += parts[static_cast<size_t>(b) * names.size() + k];
    means.emplace_back(names[k],
                       total / (full ? std::max(1.0, counted) : static_cast<double>(batches)));
  }
  means.emplace_back("bpb", ByteLoss{parts[parts.size() - 2], parts.back()}.bpb());
  g.training = was;
  return means;
}

// FNV-1a over the bits of every parameter: equal on every rank while their weights are.
uint64_t weights_hash(const std::vector<Parameter*>& params) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const Parameter* p : params) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(p->value.data);
    for (size_t i = 0; i < static_cast<size_t>(p->value.numel()) * sizeof(float); ++i)
      h = (h ^ b[i]) * 0x100000001b3ull;
  }
  return h;
}

// The checkpoint at `step`, written to the run's checkpoint.ckpt and, for a kept step, also to
// checkpoints/step-<step>.ckpt with the run's CPU seconds so far (a branch from it starts its
// count there; a branch from the latest checkpoint takes them from run.h5, written with it).
void save_checkpoint(const std::string& dir, const Experiment& exp, const Setup& s, int64_t step,
                     const Rng& data_rng, const LossWindow& window, double cpu_seconds,
                     double eval_cpu_seconds, bool keep) {
  Checkpoint ck;
  ck.texts["config"] = exp.yaml();
  ck.texts["tokenizer"] = s.tokenizer->save();
  for (Parameter* p : s.model->params().all()) {
    ck.tensors["param/" + p->name] =
        std::vector<float>(p->value.data, p->value.data + p->value.numel());
    ck.shapes["param/" + p->name] = {p->value.rows, p->value.cols};
  }
  for (auto& b : s.optimizer->state()) ck.tensors["optimizer/" + b.name] = *b.data;
  ck.ints["step"] = static_cast<uint64_t>(step);
  ck.ints["rng/data"] = data_rng.state();
  ck.ints["seed"] = s.seed;
  ck.texts["data_sha256"] = s.data->sha256;
  ck.ints["train/window_loss"] = to_bits(window.loss);
  ck.ints["train/window_steps"] = static_cast<uint64_t>(window.steps);
  write_checkpoint(checkpoint_path(dir), ck);
  if (keep) {
    ck.ints["cpu/seconds"] =
        to_bits(cpu_seconds);  // not in checkpoint.ckpt, which holds the state alone
    ck.ints["cpu/eval_seconds"] = to_bits(eval_cpu_seconds);
    fs::create_directories(fs::path(dir) / "checkpoints");
    write_checkpoint(kept_checkpoint_path(dir, step), ck);
  }
}

// Every parameter is checked (name, shape where the checkpoint records it, size) before any is
// written: a checkpoint that does not fit the model loads nothing.
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

// The progress line on stderr (unless quiet) and run.log in the run directory (always,
// on rank 0): one timestamped line per event, and a train line at most every 10 s.
class Progress {
 public:
  Progress(bool quiet, int64_t total) : quiet_(quiet), tty_(isatty(STDERR_FILENO)), total_(total) {}
  void open_log(const std::string& path) { log_.open(path, std::ios::app); }
  void step(int64_t step, double loss, float lr, double tok_s, double elapsed, double per_step) {
    double eta = per_step * static_cast<double>(total_ - step);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "step %lld/%lld | loss %.4f | lr %.2e | %.1fk tok/s | %s elapsed, ETA %s",
                  static_cast<long long>(step), static_cast<long long>(total_), loss, lr,
                  tok_s / 1000.0, hms(elapsed).c_str(), hms(eta).c_str());
    const bool periodic = elapsed - last_print_ >= 10.0 || step == total_;
    if (periodic) {
      last_print_ = elapsed;
      to_log(buf);
    }
    if (quiet_) return;
    if (tty_) std::fprintf(stderr, "\r%-110s", buf);
    else if (periodic) std::fprintf(stderr, "%s\n", buf);
    std::fflush(stderr);
  }
  // always: also with quiet (what the user must see: how to resume).
  void line(const std::string& s, bool always = false) {
    to_log(s);
    if (quiet_ && !always) return;
    std::fprintf(stderr, tty_ && !quiet_ ? "\r%-110s\n" : "%s\n", s.c_str());
    std::fflush(stderr);
  }
  // run.log only (the caller prints it).
  void to_log(const std::string& s) {
    if (log_.is_open()) log_ << now_iso() << " " << s << "\n" << std::flush;
  }

 private:
  bool quiet_, tty_;
  int64_t total_;
  double last_print_ = -1e9;
  std::ofstream log_;
};

// SIGINT/SIGTERM while installed: the first sets the flag (the loop checkpoints at the end
// of the step and stops), a second exits at once.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_run_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    static const char msg[] =
        "\nsecond interrupt: exiting now; the run keeps its last checkpoint\n";
    [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(128 + sig);
  }
  g_stop_signal = sig;
  static const char msg[] =
      "\ninterrupt: finishing this step and writing a checkpoint (interrupt again to exit at "
      "once)\n";
  [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
}

class StopSignals {
 public:
  explicit StopSignals(bool install) : installed_(install) {
    if (!installed_) return;
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_run_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    if (!installed_) return;
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  bool installed_;
  struct sigaction old_int_ {
  }, old_term_{};
};

// train.precision for every graph made while the run goes on (its evaluators', the final
// sample's), and the default before it afterwards.
struct PrecisionScope {
  Precision saved = default_precision();
  explicit PrecisionScope(Precision p) { set_default_precision(p); }
  ~PrecisionScope() { set_default_precision(saved); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;
};

const char* signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

// Memory of a run at its micro-batch of `rows` sequences (see MemoryEstimate). The probe
// runs a forward and backward pass at 1 and 2 sequences on a graph of its own; it touches
// no state the run carries (its gradients are zeroed again at every step).
MemoryEstimate estimate_memory(Setup& s, int64_t rows) {
  MemoryEstimate m;
  Model& model = *s.model;
  auto params = model.params().all();
  for (const Parameter* p : params) m.params += 4.0 * static_cast<double>(p->value.numel());
  m.grads = m.params;
  for (auto& b : s.optimizer->state()) m.optimizer += 4.0 * static_cast<double>(b.data->size());
  const int64_t T = model.dims().context;
  std::vector<int32_t> x(static_cast<size_t>(2 * T)), y(static_cast<size_t>(2 * T));
  double bytes[2] = {0, 0};
  for (int64_t b = 1; b <= 2; ++b) {
    Graph g;
    g.training = true;
    g.precision =
        s.train.precision;  // bf16: the products' bf16 copies of activations are in the arena
    g.seed = s.seed;
    Rng rng(s.seed ^ 0x3E3A0ull);
    sample_batch(*s.data, true, b, T, rng, x.data(), y.data());
    s.objective->prepare(x.data(), y.data(), b, T, s.tokenizer->vocab_size(), rng);
    std::vector<int32_t> prefix;
    g.backward(batch_loss(g, model, *s.objective, ForwardArgs{x.data(), b, T}, y.data(), prefix));
    bytes[b - 1] =
        static_cast<double>(g.step_bytes() + product_buffer_bytes(g));  // bf16: x and dy rounded
    m.param_copies = static_cast<double>(param_copy_bytes(g));
  }
  model.params().zero_grad();
  m.activations_per_sequence = std::max(0.0, bytes[1] - bytes[0]);
  m.activations = bytes[0] + m.activations_per_sequence * static_cast<double>(rows - 1);
  m.other = std::max(0.0, resident_bytes() - m.params - m.grads);
  return m;
}

std::string describe_memory(const MemoryEstimate& m, int64_t rows) {
  return human_bytes(m.total()) + " (parameters " + human_bytes(m.params) + ", gradients " +
         human_bytes(m.grads) + ", optimizer state " + human_bytes(m.optimizer) + ", activations " +
         human_bytes(m.activations) + " = " + std::to_string(rows) + " sequences x " +
         human_bytes(m.activations_per_sequence) + ", data and code " + human_bytes(m.other) +
         (m.param_copies > 0 ? ", bf16 weights " + human_bytes(m.param_copies) : std::string()) +
         ")";
}

// The options that bring a run's memory under `room` bytes.
std::string memory_fixes(const MemoryEstimate& m, int64_t batch, int64_t grad_accum, double room) {
  const double fixed = m.total() - m.activations + m.activations_per_sequence;  // with one sequence
  std::string out = "Lower train.batch_size (each sequence of the micro-batch holds " +
                    human_bytes(m.activations_per_sequence) + " of activations)";
  if (m.activations_per_sequence > 0 && room > fixed) {
    const int64_t fit = std::max<int64_t>(
        1, 1 + static_cast<int64_t>((room - fixed) / m.activations_per_sequence * 0.8));
    if (fit < batch) {
      const int64_t accum = (batch * grad_accum + fit - 1) / fit;
      out += ", e.g. train.batch_size=" + std::to_string(fit) +
             " train.grad_accum=" + std::to_string(accum) + " for about the same tokens per step";
    }
  }
  return out +
         "; or lower model.context (activations grow with it, attention's quadratically). "
         "If the estimate is wrong, --no-memory-check skips this check";
}

// A checkpoint written by `ablate run`, with the keys resuming needs.
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

// The scalar at key in a map node as text, else "" (no exceptions on missing keys).
std::string scalar_at(const YAML::Node& n, const char* key) {
  if (!n.IsMap()) return "";
  const YAML::Node v = n[key];
  return v.IsDefined() && v.IsScalar() ? v.Scalar() : "";
}
YAML::Node map_at(const YAML::Node& n, const char* key) {
  if (!n.IsMap()) return YAML::Node();
  const YAML::Node v = n[key];
  return v.IsDefined() && v.IsMap() ? v : YAML::Node();
}

// train.schedule_steps of a config (else train.steps, else the default).
int64_t planned_steps(const YAML::Node& cfg) {
  const YAML::Node t = map_at(cfg, "train");
  for (const char* key : {"schedule_steps", "steps"})
    if (!scalar_at(t, key).empty()) return std::stoll(scalar_at(t, key));
  return kDefaultSteps;
}

// The run directory or checkpoint file `ref` names (relative to the working directory,
// else to the experiment's), as the checkpoint file to read.
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

// The files ablate writes in a run directory (what --overwrite removes; nothing else).
const char* const kRunFiles[] = {"run.h5",     "checkpoint.ckpt", "checkpoint.ckpt.tmp",
                                 "sample.txt", "config.yaml",     "config.resolved.yaml",
                                 "run.log"};

// The kept checkpoints (checkpoints/step-<S>.ckpt[.tmp]) and their folder if that leaves
// it empty; nothing else there.
void remove_kept_checkpoints(const std::string& dir) {
  const fs::path kept = fs::path(dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(kept, ec)) return;
  for (const auto& e : fs::directory_iterator(kept, ec)) {
    const std::string f = e.path().filename().string();
    const std::string ext = e.path().extension().string();
    if (f.rfind("step-", 0) == 0 && (ext == ".ckpt" || ext == ".tmp")) fs::remove(e.path(), ec);
  }
  fs::remove(kept, ec);  // only if empty
}

}  // namespace

namespace {

// One run of run_experiment, step by step.
class Trainer {
 public:
  Trainer(const Experiment& exp, const RunOptions& ro)
      : ro_(ro),
        exp_(&exp),
        comm_(ro.comm ? *ro.comm : world()),
        root_(comm_.root()),
        signals_(ro.handle_signals) {}
  RunSummary run();

 private:
  using clock = std::chrono::steady_clock;
  std::string out_dir_of(const Experiment& exp) const;
  void check_run_dir(const std::string& dir);
  void prepare_extension();
  void build_and_configure();
  void check_memory();
  void restore_init_params(const Checkpoint& init);
  void restore(const Checkpoint& ck);
  void open_run_file();
  void write_metadata();
  void record_segment();
  void train_loop();
  double train_step(int64_t step, float lr, double& norm);
  void check_finite(int64_t step, double loss, double norm);
  void log_row(int64_t step, float lr, double norm);
  void evaluate_at(int64_t step);
  void check_ranks_agree(int64_t step);
  void checkpoint_at(int64_t step);
  int stop_requested();
  void interrupt(int64_t step, int sig);
  void finish();
  [[noreturn]] void fail(const std::string& msg);
  void mark_failed(const std::string& msg);
  float lr_at(int64_t step) const {
    const int64_t p = s_.train.schedule_steps;
    return s_.optimizer->base_lr() * s_.scheduler->factor(std::min(step, p) - 1, p);
  }

  const RunOptions& ro_;
  const Experiment* exp_;
  std::optional<Experiment> extended_;  // the config with train.steps = --extend-to
  std::optional<ModelFile> imported_;   // init_from: a safetensors file or Hugging Face directory
  std::optional<Experiment>
      with_import_;  // the config with the imported model's sections filled in
  Communicator& comm_;
  const bool root_;
  StopSignals signals_;
  Setup s_;
  std::optional<Checkpoint> ck_;      // the checkpoint resumed from
  std::optional<RunData> previous_;   // the run file found when resuming (rank 0)
  std::vector<std::string> changes_;  // config changes against the checkpoint (a new segment)
  std::optional<RunLock> lock_;
  std::unique_ptr<CoreClaim> claim_;
  std::optional<tbb::global_control> parallelism_;
  int64_t threads_ = 1, other_threads_ = 0;
  std::optional<RunFile> rf_;  // rank 0 only
  RunFile* rfp_ = nullptr;
  Progress progress_{true, 0};
  Rng data_rng_{0};
  LossWindow window_;
  int64_t start_ = 0, last_checkpoint_ = -1, trained_steps_ = 0, init_step_ = 0;
  Graph g_;
  Slice sl_;
  std::unique_ptr<GradientSync> sync_;
  std::vector<int32_t> x_, y_, prefix_;
  RunSummary sum_;
  clock::time_point t0_ = clock::now(), last_flush_ = clock::now();
  double train_seconds_ = 0, allreduce_seconds_ = 0;  // this process's part (not of a resumed one)
  double cpu_before_ = 0;  // CPU seconds of the processes that trained this run before this one
  double eval_cpu_ = 0;    // CPU seconds spent in evaluate_at, by every process of this run
  bool evaluated_ = false;
  // Attribute cpu_seconds: the CPU time (user + system, all threads) of every process that
  // has trained this run, this one included; eval_cpu_seconds: the part of it spent
  // evaluating (so cpu_seconds - eval_cpu_seconds is the training's). Written at each
  // checkpoint and at the end.
  static double cpu_now() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }
  double cpu_seconds() const { return cpu_before_ + cpu_now(); }
  double set_cpu_attrs(RunFile& rf) const {  // returns the cpu_seconds written
    const double cpu = cpu_seconds();
    rf.set_attr("cpu_seconds", cpu);
    rf.set_attr("eval_cpu_seconds", eval_cpu_);
    return cpu;
  }
};

// Where the run goes: as build() decides, read before building (the checkpoint there
// decides how to build).
std::string Trainer::out_dir_of(const Experiment& exp) const {
  if (!ro_.out_dir.empty()) return ro_.out_dir;
  const YAML::Node n = exp.node();
  const std::string dir = scalar_at(map_at(n, "output"), "dir"), name = scalar_at(n, "name");
  if (!dir.empty()) return dir;
  return "runs/" + (!name.empty()      ? name
                    : ro_.name.empty() ? fs::path(exp.file()).stem().string()
                                       : ro_.name);
}

// What a run directory holds, for messages ("status done, checkpoint at step 60").
std::string describe_run_dir(const std::string& dir) {
  std::string state;
  auto add = [&](const std::string& s) { state += (state.empty() ? "" : ", ") + s; };
  if (fs::exists(run_file_path(dir))) {
    try {
      add("status " + read_run_file(run_file_path(dir)).str_attrs["status"]);
    } catch (const Error&) {
      add("run.h5 unreadable");
    }
  }
  if (fs::exists(checkpoint_path(dir))) {
    try {
      add("checkpoint at step " +
          std::to_string(read_checkpoint(checkpoint_path(dir)).ints["step"]));
    } catch (const Error&) {
      add("checkpoint unreadable");
    }
  }
  return state;
}

// A directory that holds a run is never written over silently (rank 0; under its lock).
void Trainer::check_run_dir(const std::string& dir) {
  const std::string ck = checkpoint_path(dir), h5 = run_file_path(dir);
  const bool has_ck = fs::exists(ck), has_h5 = fs::exists(h5);
  if (ro_.overwrite) {
    std::error_code ec;
    for (const char* f : kRunFiles) fs::remove(fs::path(dir) / f, ec);
    remove_kept_checkpoints(dir);
    return;
  }
  if (!ro_.resume) {
    if (has_ck || has_h5)
      throw Error(dir + " already holds a run (" + describe_run_dir(dir) +
                  "); not overwriting it. Use --resume to continue "
                  "it, --overwrite to delete it and start again, or --fork NEW_DIR to start a new "
                  "run in NEW_DIR from its weights");
    return;
  }
  if (!has_ck)
    throw Error(
        dir + ": nothing to resume: " +
        (has_h5 ? "the run stopped before its first checkpoint (" + describe_run_dir(dir) +
                      "). Start it again with --overwrite"
                : std::string(
                      "no run here (no checkpoint.ckpt). Start a run there without --resume")));
  const int64_t ck_step =
      static_cast<int64_t>(read_run_checkpoint(ck).ints["step"]);  // a broken one says so here
  if (!has_h5)
    throw Error(dir +
                ": has a checkpoint but no run.h5 (its metrics are gone), so it cannot be resumed. "
                "Use --fork NEW_DIR "
                "to start a new run from its weights, or --overwrite");
  previous_ = read_run_file(h5);
  if (auto it = previous_->num_attrs.find("cpu_seconds"); it != previous_->num_attrs.end())
    cpu_before_ = it->second;
  if (auto it = previous_->num_attrs.find("eval_cpu_seconds"); it != previous_->num_attrs.end())
    eval_cpu_ = it->second;
  if (previous_->str_attrs["status"] == "done" && ro_.extend_to == 0)
    throw Error(dir + " is a finished run (status done, step " + std::to_string(ck_step) +
                "): nothing to resume. --extend-to N "
                "continues it to step N; --fork NEW_DIR starts a new run from its weights");
}

// --extend-to N: the same config with train.steps = N; the schedule keeps the length it
// was planned for (train.schedule_steps), so steps past it hold its last lr.
void Trainer::prepare_extension() {
  const YAML::Node old = checkpoint_config(*ck_, checkpoint_path(out_dir_of(*exp_)));
  const int64_t at = static_cast<int64_t>(ck_->ints.at("step")), planned = planned_steps(old);
  if (ro_.extend_to <= at)
    throw Error(out_dir_of(*exp_) + ": --extend-to " + std::to_string(ro_.extend_to) +
                " is not past the checkpoint's step " + std::to_string(at) +
                "; give a larger step");
  extended_.emplace(Experiment::parse(exp_->yaml(), exp_->file(), exp_->dir(),
                                      {"train.steps=" + std::to_string(ro_.extend_to),
                                       "train.schedule_steps=" + std::to_string(planned)}));
  exp_ = &*extended_;
}

void Trainer::build_and_configure() {
  // init_from naming a safetensors file or a Hugging Face directory (interop.hpp): its model and
  // tokenizer sections fill in what the experiment does not give, also when resuming (so that
  // the config compares equal to the checkpoint's).
  if (const std::string ref = scalar_at(exp_->node(), "init_from"); !ref.empty()) {
    fs::path p(ref);
    if (p.is_relative() && !fs::exists(p) && fs::exists(fs::path(exp_->dir()) / p))
      p = fs::path(exp_->dir()) / p;
    if (is_model_file(p.string())) {
      imported_.emplace(read_model_file(p.string()));
      with_import_.emplace(merge_model_file(*exp_, *imported_));
      exp_ = &*with_import_;
    }
  }
  const std::string dir = out_dir_of(*exp_);
  if (root_) {
    if (fs::is_directory(dir)) lock_.emplace(dir);
    check_run_dir(dir);
  }
  // Rank 0 decided; every rank reads the checkpoint, which must be on a shared filesystem.
  uint64_t resume = ro_.resume;
  comm_.broadcast(&resume, 1);
  const std::string* tokenizer_state = nullptr;
  Checkpoint init;
  if (resume) {
    ck_ = read_run_checkpoint(checkpoint_path(dir));
    if (ro_.extend_to > 0) prepare_extension();
    tokenizer_state = &ck_->texts.at("tokenizer");
  } else if (imported_) {
    if (!imported_->tokenizer_state.empty()) tokenizer_state = &imported_->tokenizer_state;
  } else if (!scalar_at(exp_->node(), "init_from").empty()) {
    const std::string path = init_checkpoint(scalar_at(exp_->node(), "init_from"), exp_->dir());
    init = read_run_checkpoint(path);
    init.texts["path"] = path;
    tokenizer_state = &init.texts.at("tokenizer");
  }
  s_ = build(*exp_, ro_, tokenizer_state);
  s_.out_dir = dir;
  if (root_ && !lock_) {
    fs::create_directories(dir);
    lock_.emplace(dir);
  }
  const TrainConfig& t = s_.train;
  if (t.batch < comm_.size())
    throw Error("train.batch_size " + std::to_string(t.batch) + " is smaller than the " +
                std::to_string(comm_.size()) +
                " ranks it is split across; give every rank at least one sequence (batch_size >= " +
                std::to_string(comm_.size()) + ")");
  // One process: the cores no other ablate run claims; ranks on one machine share its cores.
  const int64_t want = ro_.threads > 0 ? ro_.threads : t.threads;
  if (comm_.size() == 1) {
    claim_ = std::make_unique<CoreClaim>(want, &other_threads_);
    threads_ = claim_->threads();
  } else {
    threads_ = want > 0 ? want : std::max<int64_t>(1, usable_cores() / comm_.local_size());
  }
  parallelism_.emplace(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads_));
  s_.optimizer->init(s_.model->params().all());
  sl_ = batch_slice(t.batch, comm_);
  check_memory();
  data_rng_ = Rng(s_.seed ^ 0xDA7Aull);
  if (ck_) {
    restore(*ck_);
  } else if (imported_) {
    load_model_file_weights(*s_.model, *imported_, YAML::Load(exp_->resolved_yaml()));
    s_.init_from = imported_->path;
  } else if (!init.texts.empty()) {
    restore_init_params(init);
    s_.init_from = init.texts["path"];
    init_step_ = static_cast<int64_t>(init.ints["step"]);
  }
}

// init_from / --fork: the weights of another run, which must have this model's parameters.
// A mismatch names the model options that differ from the run's (what usually causes it).
void Trainer::restore_init_params(const Checkpoint& init) {
  const std::string& path = init.texts.at("path");
  try {
    restore_params(*s_.model, init, path);
  } catch (const Error& e) {
    std::string differ;
    try {
      const YAML::Node from = YAML::Load(init.texts.at("config"));
      for (const std::string& c : config_changes(from, exp_->node()))
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

void Trainer::check_memory() {
  const int64_t rows = sl_.hi - sl_.lo;
  const MemoryEstimate m = estimate_memory(s_, rows);
  if (!ro_.memory_check) return;
  const std::string problem = memory_shortfall(m, rows, s_.train.accum);
  if (!problem.empty()) throw Error(problem);
}

void Trainer::restore(const Checkpoint& ck) {
  const std::string path = checkpoint_path(s_.out_dir);
  const YAML::Node old = checkpoint_config(ck, path);
  changes_ = config_changes(old, exp_->node());
  std::vector<std::string> refused;
  for (const auto& c : config_changes(old, exp_->node(), /*results_only=*/true))
    if (!(ro_.extend_to > 0 &&
          (c.rfind("train.steps", 0) == 0 || c.rfind("train.schedule_steps", 0) == 0)) &&
        c.rfind("train.precision", 0) != 0)  // a run may go on in another precision (a new segment)
      refused.push_back(c);
  if (!refused.empty() && !ro_.allow_config_change)
    throw Error(s_.out_dir + ": cannot resume: the config differs from the checkpoint's: " +
                join(refused, "; ") +
                ". Resume with the same config, or pass --allow-config-change");
  // The training file itself: the same name with other contents (regenerated, edited) is
  // another run's data. Checkpoints from before data_sha256 was recorded are not checked.
  if (auto it = ck.texts.find("data_sha256");
      it != ck.texts.end() && it->second != s_.data->sha256) {
    if (!ro_.allow_config_change)
      throw Error(s_.out_dir + ": cannot resume: the training data changed since the checkpoint: " +
                  s_.data->path + " had sha256 " + it->second + ", it now has " + s_.data->sha256 +
                  " (edited or regenerated). Restore the file the run trained on, start a new run "
                  "from its weights with "
                  "--fork NEW_DIR, or pass --allow-config-change to continue on the new contents");
    changes_.push_back("data " + s_.data->path + ": sha256 " + it->second.substr(0, 12) +
                       "... -> " + s_.data->sha256.substr(0, 12) + "...");
  }
  restore_params(*s_.model, ck, path);
  for (auto& buf : s_.optimizer->state()) {
    auto it = ck.tensors.find("optimizer/" + buf.name);
    if (it == ck.tensors.end() || it->second.size() != buf.data->size())
      throw Error(path + ": optimizer state '" + buf.name + "' missing or of the wrong size");
    *buf.data = it->second;
  }
  start_ = static_cast<int64_t>(ck.ints.at("step"));
  last_checkpoint_ = start_;
  data_rng_.set_state(ck.ints.at("rng/data"));
  window_.loss = from_bits(ck.ints.count("train/window_loss") ? ck.ints.at("train/window_loss")
                                                              : 0);  // 0.0 in older checkpoints
  window_.steps = ck.ints.count("train/window_steps")
                      ? static_cast<int64_t>(ck.ints.at("train/window_steps"))
                      : 0;
  // Checkpoints hold the eval point (Optimizer::eval_point); training continues from y.
  if (start_ < s_.train.steps) s_.optimizer->train_point(s_.model->params().all());
}

void Trainer::open_run_file() {
  const std::string h5 = run_file_path(s_.out_dir);
  progress_ = Progress(ro_.quiet || !root_, s_.train.steps);
  if (!root_) return;
  progress_.open_log((fs::path(s_.out_dir) / "run.log").string());
  if (ck_) {
    rf_.emplace(RunFile::open_append(h5));
    rf_->truncate_after_step(static_cast<double>(start_));
  } else {
    rf_.emplace(RunFile::create(h5));
    rf_->set_attr("started", now_iso());
  }
  rfp_ = &*rf_;
}

void Trainer::write_metadata() {
  Model& model = *s_.model;
  if (root_) {
    RunFile& rf = *rfp_;
    const std::string given = exp_->yaml(), resolved = exp_->resolved_yaml();
    rf.set_attr("config", given);
    rf.set_attr("config_resolved", resolved);
    rf.set_attr("experiment_dir", fs::absolute(exp_->dir()).lexically_normal().string());
    rf.set_attr("name", s_.name);
    rf.set_attr("ablate_version", ABLATE_VERSION);
    rf.set_attr("git_commit", ABLATE_GIT_COMMIT);
    rf.set_attr("compiler", ABLATE_COMPILER);
    rf.set_attr("threads", threads_);
    rf.set_attr("cpu", cpu_model());
    rf.set_attr("kernel_path", kernel_path());
    rf.set_attr("precision", precision_name(s_.train.precision));
    rf.set_attr("n_params", model.n_params());
    rf.set_attr("flops_per_token", model.flops_per_token());
    rf.set_attr("vocab_size", model.dims().vocab_size);
    rf.set_attr("data_file", s_.data->path);
    rf.set_attr("data_sha256", s_.data->sha256);
    if (!ck_ && !s_.init_from.empty()) {
      rf.set_attr("init_from", s_.init_from);
      rf.set_attr("init_from_step", init_step_);
    }
    if (comm_.size() > 1) rf.set_attr("ranks", static_cast<int64_t>(comm_.size()));
    rf.set_attr("status", "running");
    rf.set_attr("error", "");
    record_segment();
    rf.flush();
    std::ofstream(fs::path(s_.out_dir) / "config.yaml") << given << "\n";
    std::ofstream(fs::path(s_.out_dir) / "config.resolved.yaml")
        << "# Every option of this run with the value it had, defaults included (ablate "
        << ABLATE_VERSION << ").\n"
        << resolved << "\n";
  }
  const std::string shared = other_threads_ > 0 ? " (of " + std::to_string(usable_cores()) +
                                                      " cores, " + std::to_string(other_threads_) +
                                                      " claimed by other ablate runs)"
                                                : "";
  progress_.line(s_.name + ": " + std::to_string(model.n_params()) + " parameters, vocab " +
                 std::to_string(model.dims().vocab_size) + ", " +
                 std::to_string(s_.data->tokens(true)) + " train / " +
                 std::to_string(s_.data->tokens(false)) + " val tokens, " +
                 std::to_string(threads_) + " threads" + shared +
                 (comm_.size() > 1 ? " x " + comm_.description() : "") + " -> " + s_.out_dir);
  if (ck_) progress_.line("resuming " + s_.out_dir + " at step " + std::to_string(start_));
  if (s_.train.precision == Precision::bf16 && !bf16_notice().empty())
    progress_.line(bf16_notice());
  if (ro_.extend_to > 0)
    progress_.line(
        "extending to step " + std::to_string(s_.train.steps) +
            ": the lr schedule was planned for " + std::to_string(s_.train.schedule_steps) +
            " steps and ends at lr " + fmt("%.3g", lr_at(s_.train.schedule_steps)) + "; steps " +
            std::to_string(s_.train.schedule_steps + 1) + "-" + std::to_string(s_.train.steps) +
            " hold that lr (train.schedule_steps = " + std::to_string(s_.train.schedule_steps) +
            ")",
        true);
}

// Segments: the configs that produced the run's steps, one per start or config change
// (table `segments`: segment, start_step, steps, schedule_steps; text segments/<k>).
void Trainer::record_segment() {
  RunFile& rf = *rfp_;
  if (ck_ && changes_.empty() && rf.rows("segments") > 0) return;  // the same config goes on
  if (ck_ && rf.rows("segments") == 0) {
    // A run from before segments were recorded: its first segment is the checkpoint's config.
    const YAML::Node old = checkpoint_config(*ck_, checkpoint_path(s_.out_dir));
    rf.write_text("segments/0", ck_->texts.at("config"));
    rf.append("segments", {{"segment", 0},
                           {"start_step", 0},
                           {"steps", double(planned_steps(old))},
                           {"schedule_steps", double(planned_steps(old))}});
  }
  // Segments that began at or after the step resumed from were superseded.
  int64_t keep = 0;
  for (double st : rf.column("segments", "start_step")) keep += st < static_cast<double>(start_);
  rf.keep_rows("segments", keep);
  rf.write_text("segments/" + std::to_string(keep), exp_->yaml());
  rf.append("segments", {{"segment", double(keep)},
                         {"start_step", double(start_)},
                         {"steps", double(s_.train.steps)},
                         {"schedule_steps", double(s_.train.schedule_steps)}});
}

// One optimizer step: accumulated micro-batches, gradient sync across ranks, the finite
// check, clipping and the update. Returns the loss; `norm` gets the gradient norm.
double Trainer::train_step(int64_t step, float lr, double& norm) {
  const TrainConfig& t = s_.train;
  Model& model = *s_.model;
  auto params = model.params().all();
  const int64_t B = t.batch, T = model.dims().context;
  model.params().zero_grad();
  double loss_sum = 0;
  g_.training = true;
  g_.step = static_cast<uint64_t>(step);
  g_.param_epoch =
      new_param_epoch();  // the weights' bf16 copies serve every micro-batch of the step
  for (int64_t m = 0; m < t.accum; ++m) {
    // Every rank draws the whole batch from the same stream and computes its slice.
    sample_batch(*s_.data, true, B, T, data_rng_, x_.data(), y_.data(), step);
    // The objective's randomness (masks) from the step, not from a stream to checkpoint.
    Rng mask_rng((s_.seed ^ 0x0B1Eull) * 0x9E3779B97F4A7C15ull +
                 static_cast<uint64_t>(step * t.accum + m));
    s_.objective->prepare(x_.data(), y_.data(), B, T, s_.tokenizer->vocab_size(), mask_rng);
    float weight = t.accum > 1 ? 1.0f / static_cast<float>(t.accum) : 1.0f;
    if (comm_.size() > 1) {
      // The slice's mean loss, weighted by its share of the batch's counted targets:
      // the ranks' losses (and gradients) then sum to those of the whole batch.
      const int64_t n_all = counted_targets(y_.data(), B * T);
      const int64_t n_mine = counted_targets(y_.data() + sl_.lo * T, (sl_.hi - sl_.lo) * T);
      if (n_mine == 0) continue;
      weight *= static_cast<float>(n_mine) / static_cast<float>(n_all);
      g_.batch_rows = sl_.hi - sl_.lo;
      g_.batch_offset = sl_.lo;
    }
    g_.reset();
    ForwardArgs a = comm_.size() > 1 ? ForwardArgs{x_.data() + sl_.lo * T, sl_.hi - sl_.lo, T}
                                     : ForwardArgs{x_.data(), B, T};
    Var loss = batch_loss(g_, model, *s_.objective, a,
                          comm_.size() > 1 ? y_.data() + sl_.lo * T : y_.data(), prefix_);
    if (weight != 1.0f) loss = scale(g_, loss, weight);
    loss_sum += g_.value(loss).data[0];
    if (comm_.size() > 1 && m + 1 == t.accum) sync_->attach(g_);
    g_.backward(loss);
  }
  g_.param_epoch = 0;  // the update below changes the weights
  if (comm_.size() > 1) {
    auto tc = clock::now();
    sync_->finish();
    comm_.allreduce_sum(&loss_sum, 1);
    allreduce_seconds_ += std::chrono::duration<double>(clock::now() - tc).count();
  }
  norm = global_grad_norm(params);
  check_finite(step, loss_sum, norm);
  if (t.grad_clip > 0 && norm > t.grad_clip) {
    float c = static_cast<float>(t.grad_clip / (norm + 1e-6));
    for (Parameter* p : params)
      for (int64_t i = 0; i < p->grad.numel(); ++i) p->grad.data[i] *= c;
  }
  s_.optimizer->step(params, lr, step);
  return loss_sum;
}

void Trainer::check_finite(int64_t step, double loss, double norm) {
  if (std::isfinite(loss) && std::isfinite(norm)) return;
  // A non-finite value (the previous update overflowed) is the cause; a non-finite
  // gradient with finite values is the symptom seen at this step.
  auto params = s_.model->params().all();
  const Parameter* bad_value = first_non_finite(params, false);
  const Parameter* bad_grad = first_non_finite(params, true);
  auto [big, big_value] = largest_value(params);
  fail("step " + std::to_string(step) + ": " + (std::isfinite(loss) ? "gradient" : "loss") +
       " is not finite (loss " + std::to_string(loss) + ", gradient norm " + std::to_string(norm) +
       ")" +
       (bad_value ? "; first parameter with non-finite values: '" + bad_value->name + "'" : "") +
       (bad_grad ? "; first parameter with a non-finite gradient: '" + bad_grad->name + "'" : "") +
       (!bad_value && big
            ? "; largest parameter value: " + fmt("%.3g", big_value) + " in '" + big->name + "'"
            : "") +
       ". Lower the learning rate, enable train.grad_clip, or check the data");
}

void Trainer::log_row(int64_t step, float lr, double norm) {
  const TrainConfig& t = s_.train;
  const double tok_s = static_cast<double>(t.batch * t.accum * s_.model->dims().context) *
                       static_cast<double>(trained_steps_) / train_seconds_;
  const double loss = window_.loss / double(window_.steps);
  if (rfp_) {
    rfp_->append("train", {{"step", double(step)},
                           {"loss", loss},
                           {"lr", lr},
                           {"grad_norm", norm},
                           {"tokens_per_s", tok_s}});
    // Readers (h5py, reports) see the rows as of the last flush: at most a second old.
    if (std::chrono::duration<double>(clock::now() - last_flush_).count() >= 1.0) {
      rfp_->flush();
      last_flush_ = clock::now();
    }
  }
  progress_.step(step, loss, lr, tok_s, std::chrono::duration<double>(clock::now() - t0_).count(),
                 train_seconds_ / double(trained_steps_));
  window_ = LossWindow{};
}

// Losses on fixed train and validation batches, then the evaluators (rank 0 only; the
// others wait at the next step's allreduce).
void Trainer::evaluate_at(int64_t step) {
  const double cpu0 = cpu_now();
  Model& model = *s_.model;
  const int64_t T = model.dims().context;
  g_.batch_rows = g_.batch_offset = 0;
  const auto train_m = evaluate(model, *s_.objective, g_, *s_.data, true, s_.train, T, s_.seed, x_,
                                y_, comm_, s_.token_bytes);
  const auto val_m = evaluate(model, *s_.objective, g_, *s_.data, false, s_.train, T, s_.seed + 1,
                              x_, y_, comm_, s_.token_bytes, s_.train.eval_full);
  const double tl = train_m[0].second, vl = val_m[0].second, vb = val_m.back().second;
  std::vector<std::pair<std::string, double>> eval_row{
      {"step", double(step)}, {"train_loss", tl}, {"val_loss", vl}, {"val_ppl", std::exp(vl)}};
  // A run file begun without the bits-per-byte columns (an older ablate) continues without
  // them: every row of a table has the same columns.
  if (!(previous_ && previous_->tables.count("eval") &&
        !previous_->tables.at("eval").count("val_bpb"))) {
    eval_row.emplace_back("train_bpb", train_m.back().second);
    eval_row.emplace_back("val_bpb", vb);
  }
  for (size_t k = 1; k + 1 < val_m.size(); ++k) {
    eval_row.emplace_back("train_" + train_m[k].first, train_m[k].second);
    eval_row.emplace_back("val_" + val_m[k].first, val_m[k].second);
  }
  if (rfp_) rfp_->append("eval", eval_row);
  for (auto& [table, ev] : s_.evaluators) {
    if (!rfp_) break;
    EvalContext ctx{model,   *s_.tokenizer, step,           step == s_.train.steps,
                    s_.seed, exp_->dir(),   &s_.token_bytes};
    auto row = ev->evaluate(ctx);
    const std::string shown = ev->summary(row);
    row.insert(row.begin(), {"step", double(step)});
    rfp_->append(table, row);
    progress_.line(table + " step " + std::to_string(step) + ": " + shown);
  }
  if (rfp_) {
    rfp_->flush();
    last_flush_ = clock::now();
  }
  sum_.train_loss = tl;
  sum_.val_loss = vl;
  evaluated_ = true;
  eval_cpu_ += cpu_now() - cpu0;
  char buf[192];
  std::snprintf(buf, sizeof buf,
                "eval step %lld: train loss %.4f, val loss %.4f, val ppl %.2f, val bpb %.4f",
                static_cast<long long>(step), tl, vl, std::exp(vl), vb);
  progress_.line(buf);
}

// Every rank applied the same summed gradients to the same weights; check it.
void Trainer::check_ranks_agree(int64_t step) {
  if (comm_.size() == 1) return;
  auto params = s_.model->params().all();
  uint64_t h = weights_hash(params), h0 = h;
  comm_.broadcast(&h0, 1);
  double differ = h != h0;
  comm_.allreduce_sum(&differ, 1);
  if (differ > 0)
    fail("step " + std::to_string(step) + ": the weights of " +
         std::to_string(static_cast<int64_t>(differ)) +
         " rank(s) differ from rank 0's (an MPI reduction that is not bitwise identical on every "
         "rank?)");
}

void Trainer::checkpoint_at(int64_t step) {
  check_ranks_agree(step);
  if (rfp_) {
    const double cpu = set_cpu_attrs(*rfp_);
    rfp_->flush();
    last_flush_ = clock::now();
    save_checkpoint(s_.out_dir, *exp_, s_, step, data_rng_, window_, cpu, eval_cpu_,
                    s_.train.keeps(step));
  }
  last_checkpoint_ = step;
}

// The signal that asks this run to stop (on any rank), else 0.
int Trainer::stop_requested() {
  if (!ro_.handle_signals) return 0;
  double sig = g_stop_signal;
  if (comm_.size() > 1) comm_.allreduce_sum(&sig, 1);  // the same decision on every rank
  return sig > 0 ? (g_stop_signal ? static_cast<int>(g_stop_signal) : SIGTERM) : 0;
}

void Trainer::train_loop() {
  const TrainConfig& t = s_.train;
  for (int64_t step = start_ + 1; step <= t.steps; ++step) {
    fault_point("step");
    auto ts = clock::now();
    const float lr = lr_at(step);
    double norm = 0;
    const double loss = train_step(step, lr, norm);
    train_seconds_ += std::chrono::duration<double>(clock::now() - ts).count();
    ++trained_steps_;
    window_.loss += loss;
    ++window_.steps;
    sum_.steps = step;
    if (step % t.log_every == 0 || step == t.steps) log_row(step, lr, norm);
    // Evaluations and checkpoints see the optimizer's eval point (schedule-free: its average).
    const bool evaluating = step % t.eval_every == 0 || step == t.steps;
    const bool saving = step % t.checkpoint_every == 0 || step == t.steps || t.keeps(step);
    auto& params = s_.model->params().all();
    if (evaluating || saving) s_.optimizer->eval_point(params);
    if (evaluating) evaluate_at(step);
    if (saving) checkpoint_at(step);
    if (int sig = stop_requested()) {
      if (!(evaluating || saving)) s_.optimizer->eval_point(params);  // the interrupt's checkpoint
      interrupt(step, sig);
      return;
    }
    // After the last step the weights stay at the eval point (the sample uses them).
    if ((evaluating || saving) && step < t.steps) s_.optimizer->train_point(params);
  }
}

void Trainer::interrupt(int64_t step, int sig) {
  if (last_checkpoint_ != step) checkpoint_at(step);
  sum_.interrupted_by = sig;
  if (!rfp_) return;
  rfp_->set_attr("status", "interrupted");
  rfp_->set_attr("error", std::string("stopped by ") + signal_name(sig) + " after step " +
                              std::to_string(step));
  rfp_->set_attr("train_seconds", train_seconds_);
  set_cpu_attrs(*rfp_);
  rfp_->close();
  progress_.line("interrupted by " + std::string(signal_name(sig)) + " at step " +
                     std::to_string(step) + " of " + std::to_string(s_.train.steps) +
                     ": checkpoint written, status 'interrupted'. Continue with:\n  ablate run " +
                     s_.out_dir + " --resume",
                 true);
}

void Trainer::finish() {
  const TrainConfig& t = s_.train;
  sum_.steps = t.steps;
  sum_.tokens_per_s = trained_steps_
                          ? static_cast<double>(t.batch * t.accum * s_.model->dims().context) *
                                double(trained_steps_) / train_seconds_
                          : 0;
  if (!root_) return;
  if (!evaluated_ && previous_ && previous_->tables.count("eval")) {
    // Resumed after the last step (killed while finishing): the last evaluation stands.
    const auto& ev = previous_->tables.at("eval");
    if (!ev.at("val_loss").empty()) {
      sum_.train_loss = ev.at("train_loss").back();
      sum_.val_loss = ev.at("val_loss").back();
    }
  }
  RunFile& rf = *rfp_;
  if (s_.sample_tokens > 0 && s_.objective->generates()) {
    Rng rng(s_.seed ^ 0x5A3Bull);
    std::vector<int32_t> prompt = s_.tokenizer->encode(s_.sample_prompt);
    auto out = generate(*s_.model, prompt, s_.sample_tokens, s_.sampling, rng);
    // Decoded together with the prompt: a tokenizer may join them (BPE's implied spaces).
    prompt.insert(prompt.end(), out.begin(), out.end());
    sum_.sample = s_.tokenizer->decode(prompt);
    rf.write_text("samples/final", sum_.sample);
    std::ofstream(fs::path(s_.out_dir) / "sample.txt") << sum_.sample << "\n";
  }
  rf.set_attr("status", "done");
  rf.set_attr("finished", now_iso());
  rf.set_attr("train_seconds", train_seconds_);
  const double cpu = set_cpu_attrs(rf);
  if (comm_.size() > 1) {
    rf.set_attr("allreduce_seconds", allreduce_seconds_);  // rank 0's wait included
    rf.set_attr("allreduce_buckets", static_cast<int64_t>(sync_->buckets()));
    rf.set_attr("allreduce_buckets_during_backward",
                static_cast<int64_t>(sync_->started_during_backward()));  // last step
  }
  rf.close();
  progress_.line("done: " + s_.out_dir + " (step " + std::to_string(t.steps) + ", " +
                 fmt("%.1f", cpu / 60.0) + " CPU-minutes" + (comm_.size() > 1 ? " on rank 0" : "") +
                 ", " + fmt("%.1f", eval_cpu_ / 60.0) + " of them evaluating)");
}

void Trainer::mark_failed(const std::string& msg) {
  progress_.to_log("error: " + msg);
  if (!rfp_ || !rfp_->is_open()) return;
  try {
    rfp_->set_attr("status", "failed");
    rfp_->set_attr("error", msg);
    rfp_->set_attr("finished", now_iso());
    rfp_->flush();
  } catch (const std::exception&) {
  }
}

void Trainer::fail(const std::string& msg) { throw Error(msg); }

RunSummary Trainer::run() {
  std::optional<PrecisionScope> precision;
  try {
    build_and_configure();
    precision.emplace(s_.train.precision);
    g_.precision = s_.train.precision;
    sum_.run_dir = s_.out_dir;
    sum_.n_params = s_.model->n_params();
    const int64_t B = s_.train.batch, T = s_.model->dims().context;
    x_.resize(static_cast<size_t>(B * T));
    y_.resize(static_cast<size_t>(B * T));
    g_.seed = s_.seed;
    // ABLATE_ALLREDUCE_OVERLAP=0: start every bucket after backward (to measure the overlap).
    const char* overlap = std::getenv("ABLATE_ALLREDUCE_OVERLAP");
    sync_ = std::make_unique<GradientSync>(comm_, s_.model->params().all(),
                                           !(overlap && std::string(overlap) == "0"));
    open_run_file();
    // Identical weights on every rank from the start (each built them from the same seed or
    // checkpoint; this makes it so whatever the platform).
    for (Parameter* p : s_.model->params().all())
      comm_.broadcast(p->value.data, static_cast<size_t>(p->value.numel()));
    write_metadata();
    if (start_ == 0 && s_.train.eval_at_start) {
      s_.optimizer->eval_point(s_.model->params().all());
      evaluate_at(0);
      s_.optimizer->train_point(s_.model->params().all());
    }
    train_loop();
  } catch (const std::bad_alloc&) {
    const std::string msg = "out of memory (std::bad_alloc) " +
                            std::string(trained_steps_ ? "during training" : "before training") +
                            " of " + (s_.out_dir.empty() ? std::string("the run") : s_.out_dir) +
                            ". Lower train.batch_size (raise train.grad_accum to keep the tokens "
                            "per step) or model.context; "
                            "'ablate run --dry-run' prints the memory estimate";
    mark_failed(msg);
    throw Error(msg);
  } catch (const std::exception& e) {
    mark_failed(e.what());
    throw;
  }
  if (!sum_.interrupted_by) finish();
  return sum_;
}

}  // namespace

std::string memory_shortfall(const MemoryEstimate& m, int64_t batch, int64_t grad_accum) {
  const MemoryRoom room = memory_room();
  const double held = m.other + m.params + m.grads;  // allocated already
  const double needed = m.total() - held;
  if (room.bytes < 0 || needed <= room.bytes) return "";
  return "estimated peak memory " + describe_memory(m, batch) + " needs " + human_bytes(needed) +
         " more than this process holds, but only " + human_bytes(room.bytes) + " is available (" +
         room.limited_by + "). " + memory_fixes(m, batch, grad_accum, room.bytes + held);
}

ExperimentInfo describe_experiment(const Experiment& exp, const RunOptions& ro, bool estimate) {
  Setup s = build(exp, ro);
  ExperimentInfo info;
  info.name = s.name;
  info.out_dir = s.out_dir;
  info.n_params = s.model->n_params();
  info.flops_per_token = s.model->flops_per_token();
  info.vocab_size = s.model->dims().vocab_size;
  info.steps = s.train.steps;
  info.batch_size = s.train.batch;
  info.grad_accum = s.train.accum;
  info.context = s.model->dims().context;
  info.tokens_per_step = s.train.batch * s.train.accum * s.model->dims().context;
  if (estimate) {
    s.optimizer->init(s.model->params().all());
    info.memory = estimate_memory(s, s.train.batch);
  }
  return info;
}

RunSummary run_experiment(const Experiment& exp, const RunOptions& ro) {
  if (ro.resume && ro.overwrite)
    throw Error("--resume and --overwrite exclude each other: continue the run, or start it again");
  if (ro.extend_to > 0 && !ro.resume) throw Error("--extend-to continues a run: it needs --resume");
  Trainer t(exp, ro);
  return t.run();
}

LoadedRun load_run(const std::string& dir) {
  // A safetensors file or a Hugging Face directory (interop.hpp) is a run at step 0.
  if (is_model_file(dir)) return load_model_file(dir);
  LoadedRun r;
  r.dir = dir;
  std::string path = fs::is_regular_file(dir) ? dir : checkpoint_path(dir);
  if (!fs::exists(path))
    throw Error(path +
                ": no checkpoint here; give a run directory written by 'ablate run' (e.g. "
                "runs/quickstart)");
  Checkpoint ck = read_checkpoint(path);
  if (!ck.texts.count("config") || !ck.texts.count("tokenizer"))
    throw Error(path + ": checkpoint lacks the config or tokenizer; not written by 'ablate run'");
  r.experiment = std::make_unique<Experiment>(
      Experiment::parse(ck.texts["config"], path + " (config)", fs::current_path().string()));
  Options root = r.experiment->root();
  auto& reg = PluginRegistry::instance();
  ParamStore no_params;
  BuildContext none{ModelDims{}, ParamScope(no_params, ""), 0};
  r.tokenizer = reg.create<Tokenizer>(family_options(root, Tokenizer::kFamily), none);
  r.tokenizer->load(ck.texts["tokenizer"]);
  uint64_t seed = static_cast<uint64_t>(root.get<int64_t>("seed", 1));
  auto objective = reg.create<Objective>(family_options(root, Objective::kFamily), none);
  r.model = std::make_unique<Model>(root.child("model"),
                                    r.tokenizer->vocab_size() + objective->extra_tokens(), seed,
                                    token_texts(*r.tokenizer));
  restore_params(*r.model, ck, path);
  r.step = static_cast<int64_t>(ck.ints["step"]);
  r.objective = PluginRegistry::type_of(family_options(root, Objective::kFamily));
  r.generates = objective->generates();
  return r;
}

Precision run_precision(const LoadedRun& run) {
  if (!run.experiment) return Precision::float32;
  const YAML::Node train = run.experiment->node()["train"];
  if (!train.IsMap() || !train["precision"]) return Precision::float32;
  return parse_precision(train["precision"].as<std::string>(), run.dir + ": train.precision");
}

void require_generating(const LoadedRun& run, const std::string& use) {
  if (run.generates) return;
  throw Error(run.dir + ": trained with objective '" + run.objective +
              "', which does not predict the next token, so " + use +
              " from it would mean nothing; use a run trained with a next-token objective "
              "(objective: next_token)");
}

namespace {

// The steps of a run's kept checkpoints, ascending.
std::vector<int64_t> kept_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  const fs::path kept = fs::path(dir) / "checkpoints";
  if (!fs::is_directory(kept, ec)) return steps;
  for (const auto& e : fs::directory_iterator(kept, ec)) {
    const std::string f = e.path().filename().string();
    if (f.rfind("step-", 0) != 0 || e.path().extension() != ".ckpt") continue;
    try {
      steps.push_back(std::stoll(f.substr(5, f.size() - 10)));
    } catch (const std::exception&) {
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// The checkpoint a branch at `step` starts from (0: the latest), read; b gets its path, step
// and config.
Checkpoint branch_checkpoint(const std::string& source_dir, int64_t step, Branch& b) {
  const std::string latest = checkpoint_path(source_dir);
  if (!fs::exists(latest) || !fs::exists(run_file_path(source_dir)))
    throw Error("--branch: " + source_dir +
                " is not a run to branch from (it needs run.h5 and checkpoint.ckpt, written by "
                "'ablate run')");
  b.checkpoint = step > 0 && fs::exists(kept_checkpoint_path(source_dir, step))
                     ? kept_checkpoint_path(source_dir, step)
                     : latest;
  Checkpoint ck = read_run_checkpoint(b.checkpoint);
  b.step = static_cast<int64_t>(ck.ints.at("step"));
  if (step > 0 && b.step != step) {
    std::string kept;
    for (int64_t k : kept_steps(source_dir)) kept += (kept.empty() ? "" : ", ") + std::to_string(k);
    throw Error("--branch: " + source_dir + " has no checkpoint at step " + std::to_string(step) +
                " (kept: " + (kept.empty() ? "none" : kept) + "; latest: step " +
                std::to_string(b.step) + "). Branch --at one of those, " +
                "or keep the step's checkpoint when training the run: train.keep_checkpoints: [" +
                std::to_string(step) + "]");
  }
  b.config = ck.texts.at("config");
  return ck;
}

}  // namespace

Branch find_branch(const std::string& source_dir, int64_t step) {
  Branch b;
  branch_checkpoint(source_dir, step, b);
  return b;
}

Branch prepare_branch(const std::string& source_dir, int64_t step, const std::string& new_dir) {
  Branch b;
  Checkpoint ck = branch_checkpoint(source_dir, step, b);
  const std::string h5 = run_file_path(source_dir);
  if (fs::exists(checkpoint_path(new_dir)) || fs::exists(run_file_path(new_dir)))
    throw Error("--branch: " + new_dir + " already holds a run; branch into a new directory");
  // The source may be training: its run file is read as of its last flush, which is at or
  // after the checkpoint (every checkpoint flushes first).
  RunData d = read_run_file(h5);
  fs::create_directories(new_dir);
  RunLock lock(new_dir);
  RunFile rf = RunFile::create(run_file_path(new_dir));
  for (const auto& [k, v] : d.str_attrs)
    if (k != "format") rf.set_attr(k, v);
  for (const auto& [k, v] : d.num_attrs) {
    if (k == "format_version") continue;
    if (d.int_attrs.count(k))
      rf.set_attr(k, static_cast<int64_t>(v));  // each attribute keeps its type
    else rf.set_attr(k, v);
  }
  if (ck.ints.count("cpu/seconds")) {  // the CPU time up to the branch point
    rf.set_attr("cpu_seconds", from_bits(ck.ints.at("cpu/seconds")));
    rf.set_attr("eval_cpu_seconds", from_bits(ck.ints.at("cpu/eval_seconds")));
  }
  rf.set_attr("status", "branched");
  rf.set_attr("error", "");
  rf.set_attr("branched_from", fs::absolute(b.checkpoint).lexically_normal().string());
  rf.set_attr("branched_at", b.step);
  // Rows up to the branch point: metrics at steps <= it, segments begun before it.
  int64_t segments = 0;
  for (const auto& [group, cols] : d.tables) {
    const auto st = cols.find(group == "segments" ? "start_step" : "step");
    const size_t rows = cols.empty() ? 0 : cols.begin()->second.size();
    std::vector<std::pair<std::string, double>> row;
    for (size_t i = 0; i < rows; ++i) {
      const double at = static_cast<double>(b.step);
      if (st != cols.end() && (group == "segments" ? st->second[i] >= at : st->second[i] > at))
        continue;
      row.clear();
      for (const auto& [c, v] : cols) row.emplace_back(c, v[i]);
      rf.append(group, row);
      segments += group == "segments";
    }
  }
  for (const auto& [name, text] : d.texts) {
    if (name.rfind("samples/", 0) == 0) continue;  // the source's samples are not the branch's
    if (name.rfind("segments/", 0) == 0 && std::atoll(name.c_str() + 9) >= segments) continue;
    rf.write_text(name, text);
  }
  rf.close();
  ck.ints.erase("cpu/seconds");
  ck.ints.erase("cpu/eval_seconds");
  write_checkpoint(checkpoint_path(new_dir), ck);
  return b;
}

}  // namespace ablate
