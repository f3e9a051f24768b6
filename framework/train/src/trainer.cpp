// The training loop (see trainer.hpp).
#include "ablate/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <optional>

#include "ablate/checkpoint.hpp"
#include "ablate/communicator.hpp"
#include "ablate/fault.hpp"
#include "ablate/generate.hpp"
#include "ablate/grad_sync.hpp"
#include "ablate/interop.hpp"
#include "ablate/machine.hpp"
#include "ablate/process.hpp"
#include "ablate/runfile.hpp"
#include "ablate/stop_signals.hpp"
#include "aux_terms.hpp"
#include "evaluate.hpp"
#include "memory_estimate.hpp"
#include "param_checks.hpp"
#include "progress.hpp"
#include "run_checkpoint.hpp"
#include "run_scope.hpp"
#include "setup.hpp"

namespace ablate {

const char* build_commit();  // the checkout's commit at build time (tools/git_commit.cmake)

namespace fs = std::filesystem;

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// One run of run_experiment, step by step.
class Trainer {
 public:
  Trainer(const Experiment& exp, const RunOptions& ro)
      : ro_(ro),
        exp_(&exp),
        comm_(ro.comm ? *ro.comm : world()),
        root_(comm_.root()),
        signals_(OnStop::finish_step, ro.handle_signals) {}
  RunSummary run();

 private:
  using clock = std::chrono::steady_clock;
  void plan_start(const std::string& dir);
  void prepare_extension();
  void build_and_configure();
  void check_memory();
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
  std::optional<RunDir> run_dir_;     // rank 0 only
  Threads threads_;
  std::optional<RunFile> rf_;  // rank 0 only
  RunFile* rfp_ = nullptr;
  Progress progress_{true, 0};
  Rng data_rng_{0};
  LossWindow window_;
  AuxTerms aux_;
  int64_t start_ = 0, last_checkpoint_ = -1, trained_steps_ = 0, init_step_ = 0;
  Graph g_;
  Slice sl_;
  std::unique_ptr<GradientSync> sync_;
  std::vector<int32_t> x_, y_;            // an evaluation batch
  std::vector<int32_t> prefix_;           // scored-prefix lengths of the batch at work
  std::vector<int32_t> step_x_, step_y_;  // the step's micro-batches, one after another
  RunSummary sum_;
  clock::time_point t0_ = clock::now(), last_flush_ = clock::now();
  double train_seconds_ = 0, allreduce_seconds_ = 0;  // this process's part (not of a resumed one)
  CpuTime cpu_;
  bool evaluated_ = false;
};

// How the run starts in its directory (rank 0; under its lock): a directory that holds a run
// is never written over silently (RunDir::plan).
void Trainer::plan_start(const std::string& dir) {
  run_dir_.emplace(dir);
  if (run_dir_->exists()) run_dir_->lock();
  StartPlan plan = run_dir_->plan({ro_.resume, ro_.overwrite, ro_.extend_to});
  if (plan.mode == StartMode::overwrite) run_dir_->remove_run();
  if (!plan.previous) return;
  previous_ = std::move(plan.previous);
  if (auto it = previous_->num_attrs.find("cpu_seconds"); it != previous_->num_attrs.end())
    cpu_.before = it->second;
  if (auto it = previous_->num_attrs.find("eval_cpu_seconds"); it != previous_->num_attrs.end())
    cpu_.eval = it->second;
}

// --extend-to N: the same config with train.steps = N; the schedule keeps the length it
// was planned for (train.schedule_steps), so steps past it hold its last lr.
void Trainer::prepare_extension() {
  const YAML::Node old = checkpoint_config(*ck_, checkpoint_path(out_dir_of(*exp_, ro_)));
  const int64_t at = checkpoint_step(*ck_), planned = planned_steps(old);
  if (ro_.extend_to <= at)
    throw Error(out_dir_of(*exp_, ro_) + ": --extend-to " + std::to_string(ro_.extend_to) +
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
  const std::string dir = out_dir_of(*exp_, ro_);
  if (root_) plan_start(dir);
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
  s_ = build_setup(*exp_, ro_, tokenizer_state);
  s_.out_dir = dir;
  if (root_ && !run_dir_->locked()) run_dir_->lock(/*create=*/true);
  const TrainConfig& t = s_.train;
  if (t.batch < comm_.size())
    throw Error("train.batch_size " + std::to_string(t.batch) + " is smaller than the " +
                std::to_string(comm_.size()) +
                " ranks it is split across; give every rank at least one sequence (batch_size >= " +
                std::to_string(comm_.size()) + ")");
  threads_.take(ro_.threads > 0 ? ro_.threads : t.threads, comm_);
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
    restore_init_params(*s_.model, init, exp_->node());
    s_.init_from = init.texts["path"];
    init_step_ = static_cast<int64_t>(init.ints["step"]);
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
  changes_ = resume_changes(ck, s_.out_dir, *exp_, *s_.data, ro_);
  restore_params(*s_.model, ck, path);
  restore_optimizer(*s_.optimizer, ck, path);
  const CheckpointPosition at = checkpoint_position(ck);
  start_ = at.step;
  last_checkpoint_ = start_;
  data_rng_.set_state(at.data_rng);
  window_ = at.window;
  // Checkpoints hold the eval point (Optimizer::eval_point); training continues from y.
  if (start_ < s_.train.steps) s_.optimizer->train_point(s_.model->params().all());
}

void Trainer::open_run_file() {
  progress_ = Progress(ro_.quiet || !root_, s_.train.steps);
  if (!root_) return;
  const std::string h5 = run_dir_->run_file();
  progress_.open_log(run_dir_->log());
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
    rf.set_attr("git_commit", build_commit());
    rf.set_attr("compiler", ABLATE_COMPILER);
    rf.set_attr("threads", threads_.n);
    rf.set_attr("cpu", cpu_model());
    rf.set_attr("kernel_path", kernel_path());
    rf.set_attr("bf16_kernel", bf16_kernel());
    rf.set_attr("precision", precision_name(s_.train.precision));
    rf.set_attr("n_params", model.n_params());
    rf.set_attr("flops_per_token", model.flops_per_token());
    rf.set_attr("tokens_per_step", s_.train.tokens_per_step(model.dims().context));
    rf.set_attr("metric_specs", metric_specs_yaml(metric_specs_of(s_)));
    rf.set_attr("vocab_size", model.dims().vocab_size);
    rf.set_attr("data_file", s_.data->path);
    rf.set_attr("data_sha256", s_.data->sha256);
    if (!ck_ && !s_.init_from.empty()) {
      rf.set_attr("init_from", s_.init_from);
      rf.set_attr("init_from_step", init_step_);
    }
    if (comm_.size() > 1) rf.set_attr("ranks", static_cast<int64_t>(comm_.size()));
    set_status(rf, RunStatus::running);
    rf.set_attr("error", "");
    record_segment();
    rf.flush();
    std::ofstream(run_dir_->config()) << given << "\n";
    std::ofstream(run_dir_->resolved_config())
        << "# Every option of this run with the value it had, defaults included (ablate "
        << ABLATE_VERSION << ").\n"
        << resolved << "\n";
  }
  const std::string shared =
      threads_.others > 0 ? " (of " + std::to_string(usable_cores()) + " cores, " +
                                std::to_string(threads_.others) + " claimed by other ablate runs)"
                          : "";
  progress_.line(s_.name + ": " + std::to_string(model.n_params()) + " parameters, vocab " +
                 std::to_string(model.dims().vocab_size) + ", " +
                 std::to_string(s_.data->tokens(true)) + " train / " +
                 std::to_string(s_.data->tokens(false)) + " val tokens, " +
                 std::to_string(threads_.n) + " threads" + shared +
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
// check, clipping and the update. Returns the objective's loss (its mean over the step's scored
// positions); `norm` gets the gradient norm.
double Trainer::train_step(int64_t step, float lr, double& norm) {
  const TrainConfig& t = s_.train;
  Model& model = *s_.model;
  auto params = model.params().all();
  const int64_t B = t.batch, T = model.dims().context;
  model.params().zero_grad();
  // The step's micro-batches, drawn and prepared before the first backward: the loss is the
  // step's summed loss over the step's scored positions, so its count must be known before
  // any gradient is formed. Every rank draws the whole batch from the same stream and the
  // objective's randomness from the step, so every rank counts the same positions: the count
  // needs no allreduce, and each rank divides its slice's sum by the same number.
  int64_t step_count = 0;
  for (int64_t m = 0; m < t.accum; ++m) {
    int32_t *xm = step_x_.data() + m * B * T, *ym = step_y_.data() + m * B * T;
    sample_batch(*s_.data, true, B, T, data_rng_, xm, ym, step);
    // The objective's randomness (masks) from the step, not from a stream to checkpoint.
    Rng mask_rng((s_.seed ^ 0x0B1Eull) * 0x9E3779B97F4A7C15ull +
                 static_cast<uint64_t>(step * t.accum + m));
    s_.objective->prepare(xm, ym, B, T, s_.tokenizer->vocab_size(), mask_rng);
    step_count += counted_targets(ym, B * T);
  }
  double loss_sum = 0;  // this rank's summed objective loss
  aux_.begin_step();
  g_.training = true;
  g_.step = static_cast<uint64_t>(step);
  g_.param_epoch =
      new_param_epoch();  // the weights' bf16 copies serve every micro-batch of the step
  if (!g_.planned()) {
    // One sequence plans the values' lifetimes of the micro-batches (graph.hpp, "Values'
    // lifetimes"), so that none holds every value of its tape; then dropped.
    g_.reset();
    batch_loss(g_, model, *s_.objective, Batch{step_x_.data(), 1, T}, step_y_.data(), prefix_,
               step_count);
  }
  for (int64_t m = 0; m < t.accum; ++m) {
    // This rank's rows of micro-batch m, read in place.
    const int64_t lo = comm_.size() > 1 ? sl_.lo : 0, rows = comm_.size() > 1 ? sl_.hi - lo : B;
    const int32_t* targets = step_y_.data() + (m * B + lo) * T;
    // A slice that scores nothing adds nothing to the loss, its terms weigh 0.
    if (counted_targets(targets, rows * T) == 0) continue;
    if (comm_.size() > 1) {
      g_.batch_rows = sl_.hi - sl_.lo;
      g_.batch_offset = sl_.lo;
    }
    g_.reset();
    const Batch a{step_x_.data() + (m * B + lo) * T, rows, T};
    LossSum objective_loss;
    Var loss =
        batch_loss(g_, model, *s_.objective, a, targets, prefix_, step_count, &objective_loss);
    // The logged loss is the objective's (comparable across variants); the auxiliary terms
    // have columns of their own.
    loss_sum += g_.value(objective_loss.sum).data[0];
    aux_.add(g_, step, step_share(objective_loss.count, step_count));
    if (comm_.size() > 1 && m + 1 == t.accum) sync_->attach(g_);
    g_.backward(loss);
  }
  g_.param_epoch = 0;  // the update below changes the weights
  if (comm_.size() > 1) {
    auto tc = clock::now();
    sync_->finish();
    comm_.allreduce_sum(&loss_sum, 1);
    aux_.allreduce(comm_);
    allreduce_seconds_ += std::chrono::duration<double>(clock::now() - tc).count();
  }
  aux_.finish_step(step, window_.aux);
  const double loss = step_count > 0 ? loss_sum / static_cast<double>(step_count) : 0.0;
  norm = global_grad_norm(params);
  check_finite(step, loss, norm);
  if (t.grad_clip > 0 && norm > t.grad_clip) {
    float c = static_cast<float>(t.grad_clip / (norm + 1e-6));
    for (Parameter* p : params)
      for (int64_t i = 0; i < p->grad.numel(); ++i) p->grad.data[i] *= c;
  }
  s_.optimizer->step(params, lr, step);
  return loss;
}

void Trainer::check_finite(int64_t step, double loss, double norm) {
  if (std::isfinite(loss) && std::isfinite(norm)) return;
  fail(non_finite_error(s_.model->params().all(), step, loss, norm));
}

void Trainer::log_row(int64_t step, float lr, double norm) {
  const TrainConfig& t = s_.train;
  const double tok_s = static_cast<double>(t.tokens_per_step(s_.model->dims().context)) *
                       static_cast<double>(trained_steps_) / train_seconds_;
  const double loss = window_.loss / double(window_.steps);
  if (rfp_) {
    std::vector<std::pair<std::string, double>> row{{"step", double(step)},
                                                    {"loss", loss},
                                                    {"lr", lr},
                                                    {"grad_norm", norm},
                                                    {"tokens_per_s", tok_s}};
    for (const auto& [name, sum] : window_.aux)
      row.emplace_back("aux_" + name, sum / double(window_.steps));
    rfp_->append("train", row);
    // Readers (h5py, reports) see the rows as of the last flush: at most a second old.
    if (std::chrono::duration<double>(clock::now() - last_flush_).count() >= 1.0) {
      rfp_->flush();
      last_flush_ = clock::now();
    }
  }
  std::string aux;  // the auxiliary terms' row values, after the loss
  for (const auto& [name, sum] : window_.aux) {
    char v[64];
    std::snprintf(v, sizeof v, "%s%s %.4g", aux.empty() ? "" : ", ", name.c_str(),
                  sum / double(window_.steps));
    aux += v;
  }
  progress_.step(step, loss, lr, tok_s, std::chrono::duration<double>(clock::now() - t0_).count(),
                 train_seconds_ / double(trained_steps_), aux);
  window_ = LossWindow{};
}

// Losses on fixed train and validation batches, then the evaluators (rank 0 only; the
// others wait at the next step's allreduce).
void Trainer::evaluate_at(int64_t step) {
  const double cpu0 = CpuTime::now();
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
    EvalContext ctx{model,       *s_.tokenizer,   step,         step == s_.train.steps, s_.seed,
                    exp_->dir(), &s_.token_bytes, s_.data.get()};
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
  cpu_.eval += CpuTime::now() - cpu0;
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
    const double cpu = cpu_.write(*rfp_);
    rfp_->flush();
    last_flush_ = clock::now();
    save_run_checkpoint(s_.out_dir, *exp_, s_, step, {step, data_rng_.state(), window_}, cpu,
                        cpu_.eval, s_.train.keeps(step));
  }
  last_checkpoint_ = step;
}

// The signal that asks this run to stop (on any rank), else 0.
int Trainer::stop_requested() {
  if (!ro_.handle_signals) return 0;
  double sig = stop_signal();
  if (comm_.size() > 1) comm_.allreduce_sum(&sig, 1);  // the same decision on every rank
  return sig > 0 ? (stop_signal() ? stop_signal() : SIGTERM) : 0;
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
  set_status(*rfp_, RunStatus::interrupted);
  rfp_->set_attr("error", "stopped by " + signal_name(sig) + " after step " + std::to_string(step));
  rfp_->set_attr("train_seconds", train_seconds_);
  cpu_.write(*rfp_);
  rfp_->close();
  progress_.line("interrupted by " + signal_name(sig) + " at step " + std::to_string(step) +
                     " of " + std::to_string(s_.train.steps) +
                     ": checkpoint written, status 'interrupted'. Continue with:\n  ablate run " +
                     s_.out_dir + " --resume",
                 true);
}

void Trainer::finish() {
  const TrainConfig& t = s_.train;
  sum_.steps = t.steps;
  sum_.tokens_per_s = trained_steps_
                          ? static_cast<double>(t.tokens_per_step(s_.model->dims().context)) *
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
    std::ofstream(run_dir_->sample()) << sum_.sample << "\n";
  }
  set_status(rf, RunStatus::done);
  rf.set_attr("finished", now_iso());
  rf.set_attr("train_seconds", train_seconds_);
  const double cpu = cpu_.write(rf);
  if (comm_.size() > 1) {
    rf.set_attr("allreduce_seconds", allreduce_seconds_);  // rank 0's wait included
    rf.set_attr("allreduce_buckets", static_cast<int64_t>(sync_->buckets()));
    rf.set_attr("allreduce_buckets_during_backward",
                static_cast<int64_t>(sync_->started_during_backward()));  // last step
  }
  rf.close();
  progress_.line("done: " + s_.out_dir + " (step " + std::to_string(t.steps) + ", " +
                 fmt("%.1f", cpu / 60.0) + " CPU-minutes" + (comm_.size() > 1 ? " on rank 0" : "") +
                 ", " + fmt("%.1f", cpu_.eval / 60.0) + " of them evaluating)");
}

void Trainer::mark_failed(const std::string& msg) {
  progress_.to_log("error: " + msg);
  if (!rfp_ || !rfp_->is_open()) return;
  try {
    RunDir::mark_failed(*rfp_, msg);
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
    step_x_.resize(static_cast<size_t>(s_.train.accum * B * T));
    step_y_.resize(step_x_.size());
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

RunSummary run_experiment(const Experiment& exp, const RunOptions& ro) {
  StartFlags{ro.resume, ro.overwrite, ro.extend_to}.check();
  Trainer t(exp, ro);
  return t.run();
}

}  // namespace ablate
