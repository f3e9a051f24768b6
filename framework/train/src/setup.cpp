// Building a run from an experiment (see setup.hpp), and loading a trained one back.
#include "setup.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "ablate/checkpoint.hpp"
#include "ablate/head.hpp"
#include "ablate/interop.hpp"
#include "ablate/registry.hpp"
#include "ablate/task.hpp"
#include "memory_estimate.hpp"
#include "run_checkpoint.hpp"

namespace ablate {
namespace fs = std::filesystem;

bool TrainConfig::keeps(int64_t step) const {
  return std::find(keep_checkpoints.begin(), keep_checkpoints.end(), step) !=
         keep_checkpoints.end();
}

namespace {

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

// The objective's variants whose attention need is `causal`, for an error message.
std::vector<std::string> objectives_for(bool causal) {
  std::vector<std::string> names;
  for (const PluginEntry* e : PluginRegistry::instance().variants(Objective::kFamily)) {
    try {
      YAML::Node n(e->info->name);
      auto obj = PluginRegistry::instance().create<Objective>(
          Options(n, std::make_shared<ConfigSource>(), "objective"), StandaloneContext());
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

// The head's logits must be what the objective reads: one forward of one token tells their
// width before anything trains.
void check_head(const Objective& obj, Model& m, const Options& root) {
  Graph g;
  NoGrad ng(g);
  const int32_t id = 0;
  const int64_t cols = g.value(m.forward(g, Batch{&id, 1, 1})).cols, vocab = m.dims().vocab_size;
  if (obj.reads_logits(cols, vocab)) return;
  const Options model = root.child("model");
  model.fail("head", "head '" + PluginRegistry::type_of(family_options(model, Head::kFamily)) +
                         "' gives " + std::to_string(cols) +
                         " logits per position, and objective '" +
                         PluginRegistry::type_of(family_options(root, Objective::kFamily)) +
                         "' reads " + std::to_string(vocab) +
                         " (one per token of the vocabulary): they cannot combine. Choose a "
                         "head with one logit per token (linear, softcap), or an objective "
                         "written for this head");
}

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

}  // namespace

Setup build_setup(const Experiment& exp, const RunOptions& ro, const std::string* tokenizer_state) {
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
  const std::vector<std::string> texts = token_texts(*s.tokenizer);
  s.objective = build_objective(root, texts, none);
  s.model = build_model(model_opts, texts, *s.objective, s.seed);
  check_attention(*s.objective, *s.model, root);
  check_head(*s.objective, *s.model, root);
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

std::string out_dir_of(const Experiment& exp, const RunOptions& ro) {
  if (!ro.out_dir.empty()) return ro.out_dir;
  const YAML::Node n = exp.node();
  const std::string dir = scalar_at(map_at(n, "output"), "dir"), name = scalar_at(n, "name");
  if (!dir.empty()) return dir;
  return "runs/" + (!name.empty()     ? name
                    : ro.name.empty() ? fs::path(exp.file()).stem().string()
                                      : ro.name);
}

std::unique_ptr<Objective> build_objective(const Options& root,
                                           const std::vector<std::string>& texts,
                                           BuildContext ctx) {
  ctx.dims.vocab_size = static_cast<int64_t>(texts.size());
  ctx.vocab = &texts;
  return PluginRegistry::instance().create<Objective>(family_options(root, Objective::kFamily),
                                                      ctx);
}

std::unique_ptr<Model> build_model(const Options& model_opts, const std::vector<std::string>& texts,
                                   const Objective& objective, uint64_t seed) {
  return std::make_unique<Model>(
      model_opts, static_cast<int64_t>(texts.size()) + objective.extra_tokens(), seed, texts);
}

void check_loss_count(const LossSum& loss, int64_t scored, int64_t n, const char* batch) {
  ABLATE_CHECK(loss.count == scored, "the objective's loss counts ", loss.count,
               " scored positions in ", batch, " whose targets score ", scored,
               " (targets >= 0 of ", n,
               "); Objective::loss's count must be the positions it scores, which the framework "
               "divides the summed loss by (fix the objective plugin; `ablate plugin check` "
               "tests it)");
}

float step_share(int64_t count, int64_t step_count) {
  return step_count > 0
             ? static_cast<float>(static_cast<double>(count) / static_cast<double>(step_count))
             : 0.0f;
}

Var batch_loss(Graph& g, Model& m, const Objective& obj, Batch a, const int32_t* targets,
               std::vector<int32_t>& prefix, int64_t step_count, LossSum* objective_loss) {
  scored_prefix(targets, a.batch, a.time, prefix);
  a.prefix = prefix.data();
  const int64_t n = a.batch * a.time;
  const LossSum ls = obj.loss(g, m.forward(g, a), targets, n);
  const int64_t scored = std::count_if(targets, targets + n, [](int32_t y) { return y >= 0; });
  check_loss_count(ls, scored, n, "a batch");
  if (objective_loss) *objective_loss = ls;
  if (step_count <= 0) step_count = ls.count;
  // The per-position gradient is (d loss / d position) / step_count, formed once in the
  // objective's backward (cross_entropy_sum's: the scale's factor times its rows).
  Var loss = scale(g, ls.sum, step_count > 0 ? 1.0f / static_cast<float>(step_count) : 0.0f);
  const float share = step_share(ls.count, step_count);
  for (const AuxTerm& t : g.aux())
    if (t.weight > 0) loss = add(g, loss, scale(g, t.value, t.weight * share));
  g.value(ls.sum);
  for (const AuxTerm& t : g.aux()) g.value(t.value);
  return loss;
}

MetricSpecs metric_specs_of(const Setup& s) {
  const double inf = std::numeric_limits<double>::infinity();
  MetricSpecs m;
  m["train"] = {{"loss", Better::lower, 0, inf},
                {"lr", Better::neither, 0, inf},
                {"grad_norm", Better::neither, 0, inf},
                {"tokens_per_s", Better::higher, 0, inf},
                {"aux_*", Better::neither, -inf, inf}};
  std::vector<MetricSpec>& ev = m["eval"];
  for (const char* split : {"train_", "val_"}) {
    ev.push_back({std::string(split) + "loss", Better::lower, 0, inf});
    ev.push_back({std::string(split) + "ppl", Better::lower, 1, inf});
    ev.push_back({std::string(split) + "bpb", Better::lower, 0, inf});
    for (MetricSpec spec : s.objective->metric_specs()) {
      spec.column = split + spec.column;
      ev.push_back(spec);
    }
  }
  for (const auto& [table, e] : s.evaluators) m[table] = e->metric_specs();
  return m;
}

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

int64_t planned_steps(const YAML::Node& cfg) {
  const YAML::Node t = map_at(cfg, "train");
  for (const char* key : {"schedule_steps", "steps"})
    if (!scalar_at(t, key).empty()) return std::stoll(scalar_at(t, key));
  return kDefaultSteps;
}

ExperimentInfo describe_experiment(const Experiment& exp, const RunOptions& ro, bool estimate) {
  Setup s = build_setup(exp, ro);
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
  info.tokens_per_step = s.train.tokens_per_step(s.model->dims().context);
  if (estimate) {
    s.optimizer->init(s.model->params().all());
    info.memory = estimate_memory(s, s.train.batch);
  }
  return info;
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
  const std::vector<std::string> texts = token_texts(*r.tokenizer);
  auto objective = build_objective(root, texts, none);
  r.model = build_model(root.child("model"), texts, *objective, seed);
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

}  // namespace ablate
