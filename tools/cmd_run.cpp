// ablate run FILE|RUN_DIR [key.path=value ...]: trains one experiment; under mpirun (or
// srun --mpi=pmix) data-parallel over the ranks, rank 0 writing everything
// (docs/CLUSTER.md). A run directory is never written over silently: --resume, --overwrite,
// --fork, --branch and --extend-to say what to do with one (docs/RELIABILITY.md).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "ablate/checkpoint.hpp"
#include "ablate/communicator.hpp"
#include "ablate/machine.hpp"
#include "ablate/run_dir.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "commands.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

bool is_run_dir(const fs::path& d) { return ablate::RunDir(d.string()).holds_run(); }

// What the run directory recorded about where its experiment came from (empty if unknown).
void recorded(const std::string& dir, std::string& exp_dir, std::string& name) {
  try {
    auto d = ablate::read_run_file(ablate::run_file_path(dir));
    exp_dir = d.str_attrs["experiment_dir"];
    name = d.str_attrs["name"];
  } catch (const ablate::Error&) {
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ablate::Error(path + ": cannot read the experiment file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The experiment and its run directory from FILE or RUN_DIR: a run directory runs its own
// saved config (from its checkpoint, else run.h5); a config file inside a run directory
// (runs/x/config.yaml) runs in that directory. Relative data paths resolve where the run's
// experiment file was (recorded in run.h5 as experiment_dir).
ablate::Experiment load_target(const std::string& target, const std::vector<std::string>& overrides,
                               ablate::RunOptions& ro) {
  std::string exp_dir, name;
  if (fs::is_directory(target)) {
    if (!is_run_dir(target))
      throw ablate::cli::UsageError(
          target +
          " is a directory without a run (no run.h5 or checkpoint.ckpt); give an experiment "
          "file (e.g. experiments/quickstart.yaml) or a run directory");
    recorded(target, exp_dir, name);
    std::string config;
    if (fs::exists(ablate::checkpoint_path(target)))
      config = ablate::read_checkpoint(ablate::checkpoint_path(target)).texts["config"];
    if (config.empty()) config = read_text(ablate::RunDir(target).config());
    if (ro.out_dir.empty()) ro.out_dir = target;
    if (ro.name.empty()) ro.name = name;
    return ablate::Experiment::parse(config, target + " (its saved config)",
                                     exp_dir.empty() ? fs::current_path().string() : exp_dir,
                                     overrides);
  }
  const fs::path parent = fs::path(target).parent_path();
  if (!parent.empty() && is_run_dir(parent) && fs::is_regular_file(target)) {
    recorded(parent.string(), exp_dir, name);
    if (ro.out_dir.empty()) ro.out_dir = parent.string();
    if (ro.name.empty()) ro.name = name;
    if (!exp_dir.empty())
      return ablate::Experiment::parse(read_text(target), target, exp_dir, overrides);
  }
  return ablate::Experiment::load(target, overrides);
}

// --fork NEW: the run FILE|RUN_DIR (and -o) names is the source; the new run goes to NEW
// with the same config, the overrides, and init_from: the source.
ablate::Experiment fork_target(const std::string& target, std::vector<std::string> overrides,
                               const std::string& new_dir, ablate::RunOptions& ro) {
  ablate::RunOptions src = ro;
  auto source_exp = load_target(target, overrides, src);
  const std::string source =
      src.out_dir.empty() ? ablate::describe_experiment(source_exp, src).out_dir : src.out_dir;
  if (!fs::exists(ablate::checkpoint_path(source)))
    throw ablate::Error("--fork: " + source +
                        " has no checkpoint to start from; name a run written by 'ablate run'");
  overrides.push_back("init_from=" + fs::absolute(source).lexically_normal().string());
  ro.out_dir = new_dir;
  if (ro.name.empty()) ro.name = fs::path(new_dir).filename().string();
  ablate::RunOptions ignored;
  return load_target(target, overrides, ignored);
}

// --branch NEW [--at STEP]: the run FILE|RUN_DIR names is the source; NEW continues it from
// its checkpoint at STEP (kept with train.keep_checkpoints, or its latest) under the
// checkpoint's config plus the overrides: a resume that may change the config.
ablate::Experiment branch_target(const std::string& target,
                                 const std::vector<std::string>& overrides,
                                 const std::string& new_dir, int64_t at, bool dry_run,
                                 ablate::RunOptions& ro) {
  ablate::RunOptions src = ro;
  auto source_exp = load_target(target, {}, src);
  const std::string source =
      src.out_dir.empty() ? ablate::describe_experiment(source_exp, src).out_dir : src.out_dir;
  std::string exp_dir, name;
  recorded(source, exp_dir, name);
  if (exp_dir.empty()) exp_dir = source_exp.dir();
  ro.out_dir = new_dir;
  ro.resume = ro.allow_config_change = true;
  if (ro.name.empty()) ro.name = fs::path(new_dir).filename().string();
  if (dry_run) ro.resume = false;  // validate what the branch would run; write nothing
  const ablate::Branch b =
      dry_run ? ablate::find_branch(source, at) : ablate::prepare_branch(source, at, new_dir);
  if (!dry_run)
    std::cout << "branch of " << source << " at step " << b.step << " (" << b.checkpoint << ") -> "
              << new_dir << "\n";
  return ablate::Experiment::parse(b.config, b.checkpoint + " (its config)", exp_dir, overrides);
}

std::string flops_text(double f) {
  char buf[32];
  if (f >= 1e12) std::snprintf(buf, sizeof buf, "%.2f TFLOP", f / 1e12);
  else if (f >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GFLOP", f / 1e9);
  else std::snprintf(buf, sizeof buf, "%.2f MFLOP", f / 1e6);
  return buf;
}

// --dry-run: validate, print sizes, cost and the memory estimate; fail if it does not fit.
int dry_run(const ablate::Experiment& exp, const ablate::RunOptions& ro) {
  ablate::ExperimentInfo in = ablate::describe_experiment(exp, ro, true);
  const ablate::MemoryEstimate& m = in.memory;
  const double per_step = in.flops_per_token * static_cast<double>(in.tokens_per_step);
  std::cout << "experiment " << exp.file() << ": valid\n"
            << "  run directory   " << in.out_dir
            << (is_run_dir(in.out_dir) ? " (holds a run: --resume, --overwrite or --fork)" : "")
            << "\n"
            << "  parameters      " << in.n_params << " (vocab " << in.vocab_size << ")\n"
            << "  tokens per step " << in.tokens_per_step << " (batch_size " << in.batch_size
            << " x grad_accum " << in.grad_accum << " x context " << in.context << "), " << in.steps
            << " steps\n"
            << "  FLOPs per step  " << flops_text(per_step)
            << " (training, forward + backward), whole run "
            << flops_text(per_step * static_cast<double>(in.steps)) << "\n"
            << "  peak memory     " << ablate::human_bytes(m.total()) << " (estimate)\n"
            << "    parameters    " << ablate::human_bytes(m.params) << "\n"
            << "    gradients     " << ablate::human_bytes(m.grads) << "\n"
            << "    optimizer     " << ablate::human_bytes(m.optimizer) << "\n"
            << "    activations   " << ablate::human_bytes(m.activations) << " ("
            << (m.activations > m.planning ? ""
                                           : "the pass that plans them, one sequence; a step: ")
            << in.batch_size << (in.batch_size == 1 ? " sequence x " : " sequences x ")
            << ablate::human_bytes(m.activations_per_sequence)
            << (in.batch_size > 1 ? ", measured at 1 and 2)\n" : ", measured)\n")
            << "    data and code " << ablate::human_bytes(m.other) << "\n";
  if (m.param_copies > 0)
    std::cout << "    bf16 weights  " << ablate::human_bytes(m.param_copies)
              << " (train.precision: bf16)\n";
  const ablate::MemoryRoom room = ablate::memory_room();
  if (room.bytes >= 0)
    std::cout << "  available       " << ablate::human_bytes(room.bytes) << " more ("
              << room.limited_by << ")\n";
  std::cout << "  threads         "
            << (ro.threads > 0 ? std::to_string(ro.threads) + " (-j)"
                               : std::to_string(ablate::usable_cores()) + " usable cores, " +
                                     std::to_string(ablate::CoreClaim::claimed_by_others()) +
                                     " claimed by running ablate runs")
            << "\n";
  const std::string problem = ablate::memory_shortfall(m, in.batch_size, in.grad_accum);
  if (!problem.empty()) throw ablate::Error(problem);
  return 0;
}

po::options_description run_command_options() {
  po::options_description opts("options");
  opts.add_options()("experiment", po::value<std::string>(),
                     "experiment YAML file, or a run directory (runs its saved config)")(
      "override", po::value<std::vector<std::string>>()->composing(),
      "key.path=value overrides (positional)")(
      "out,o", po::value<std::string>(), "run directory (default: output.dir, else runs/<name>)")(
      "resume", po::bool_switch(),
      "continue the run in the run directory from its last checkpoint")(
      "overwrite", po::bool_switch(), "delete the run in the run directory and start again")(
      "fork", po::value<std::string>(),
      "start a new run in this directory from the weights of the run named (init_from)")(
      "branch", po::value<std::string>(),
      "continue the run named in this new directory from its checkpoint at --at (its latest "
      "without --at), with the overrides given (e.g. another train.steps)")(
      "at", po::value<int64_t>(),
      "with --branch: the step to branch at (a checkpoint kept with train.keep_checkpoints, or the "
      "latest)")(
      "extend-to", po::value<int64_t>(),
      "continue the run past its planned end, to this step (the lr schedule holds its last value)")(
      "allow-config-change", po::bool_switch(),
      "with --resume: accept a config that differs from the checkpoint's")(
      "dry-run", po::bool_switch(),
      "validate, print parameters, FLOPs per step and the memory estimate; train nothing")(
      "no-memory-check", po::bool_switch(),
      "start even when the memory estimate exceeds the memory available")(
      "threads,j", po::value<int64_t>(),
      "worker threads (default: train.threads, else the cores no other ablate run claims)")(
      "quiet,q", po::bool_switch(),
      "no progress line (run.log in the run directory is written all the same)")(
      "plugin-dir", po::value<std::vector<std::string>>()->composing(),
      "extra plugin directory (repeatable)");
  return opts;
}

// The key.path=value overrides, checked for their '='.
std::vector<std::string> overrides_given(const po::variables_map& vm) {
  std::vector<std::string> overrides;
  if (vm.count("override")) overrides = vm["override"].as<std::vector<std::string>>();
  for (const auto& o : overrides)
    if (o.find('=') == std::string::npos)
      throw ablate::cli::UsageError(
          "'" + o + "' is not an override; write key.path=value (e.g. train.steps=200)");
  return overrides;
}

// How the run starts and runs, from the flags.
ablate::RunOptions run_options(const po::variables_map& vm) {
  ablate::RunOptions ro;
  if (vm.count("out")) ro.out_dir = vm["out"].as<std::string>();
  ro.resume = vm["resume"].as<bool>();
  ro.overwrite = vm["overwrite"].as<bool>();
  ro.allow_config_change = vm["allow-config-change"].as<bool>();
  ro.quiet = vm["quiet"].as<bool>();
  ro.memory_check = !vm["no-memory-check"].as<bool>();
  ro.handle_signals = true;
  if (vm.count("threads")) {
    ro.threads = vm["threads"].as<int64_t>();
    if (ro.threads < 1)
      throw ablate::cli::UsageError("--threads must be at least 1, got " +
                                    std::to_string(ro.threads));
  }
  if (vm.count("extend-to")) {
    ro.extend_to = vm["extend-to"].as<int64_t>();
    if (ro.extend_to < 1)
      throw ablate::cli::UsageError("--extend-to must be a step >= 1, got " +
                                    std::to_string(ro.extend_to));
    ro.resume = true;
  }
  try {
    ablate::StartFlags{ro.resume, ro.overwrite, ro.extend_to}.check();
  } catch (const ablate::Error& e) {
    throw ablate::cli::UsageError(e.what());
  }
  return ro;
}

// --fork, --branch and --at checked against each other and the start flags; the step of
// --at (0: none).
int64_t branch_step(const po::variables_map& vm, const ablate::RunOptions& ro) {
  if (vm.count("fork") && ro.resume)
    throw ablate::cli::UsageError("--fork starts a new run: it excludes --resume and --extend-to");
  if (vm.count("at") && !vm.count("branch"))
    throw ablate::cli::UsageError("--at goes with --branch NEW_DIR (the step to branch at)");
  if (vm.count("branch") && (ro.resume || ro.overwrite || vm.count("fork") || vm.count("out")))
    throw ablate::cli::UsageError(
        "--branch NEW_DIR makes a new run directory: it excludes --resume, --extend-to, "
        "--overwrite, "
        "--fork and --out");
  int64_t at = 0;
  if (vm.count("at") && (at = vm["at"].as<int64_t>()) < 1)
    throw ablate::cli::UsageError("--at must be a step >= 1, got " + std::to_string(at));
  return at;
}

int cmd_run(const std::vector<std::string>& args) {
  po::options_description opts = run_command_options();
  po::positional_options_description pos;
  pos.add("experiment", 1).add("override", -1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate run FILE|RUN_DIR [key.path=value ...] [options]", opts, pos,
                          vm))
    return 0;
  if (!vm.count("experiment"))
    throw ablate::cli::UsageError("missing the experiment file (e.g. experiments/quickstart.yaml)");
  ablate::cli::add_plugin_dirs(vm);
  const std::vector<std::string> overrides = overrides_given(vm);
  ablate::RunOptions ro = run_options(vm);
  const std::string target = vm["experiment"].as<std::string>();
  const int64_t at = branch_step(vm, ro);
  const bool dry = vm["dry-run"].as<bool>();
  auto exp = vm.count("branch")
                 ? branch_target(target, overrides, vm["branch"].as<std::string>(), at, dry, ro)
             : vm.count("fork") ? fork_target(target, overrides, vm["fork"].as<std::string>(), ro)
                                : load_target(target, overrides, ro);
  if (dry) return dry_run(exp, ro);
  auto sum = ablate::run_experiment(exp, ro);
  if (!ablate::world().root()) return 0;
  if (sum.interrupted_by) return 128 + sum.interrupted_by;
  std::cout << "run " << sum.run_dir << ": " << sum.n_params << " parameters, " << sum.steps
            << " steps, train loss " << sum.train_loss << ", val loss " << sum.val_loss << " (ppl "
            << std::exp(sum.val_loss) << "), " << static_cast<int64_t>(sum.tokens_per_s)
            << " tokens/s\n";
  if (!sum.sample.empty()) std::cout << "--- sample ---\n" << sum.sample << "\n--------------\n";
  return 0;
}

}  // namespace

ABLATE_COMMAND(
    "run",
    "train an experiment (YAML) and write runs/<name>/{run.h5,checkpoint.ckpt,sample.txt,run.log}",
    cmd_run);
