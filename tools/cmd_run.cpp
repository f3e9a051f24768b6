// ablate run FILE [key.path=value ...]: trains one experiment; under mpirun (or srun
// --mpi=pmix) data-parallel over the ranks, rank 0 writing everything (docs/CLUSTER.md).
#include <iostream>

#include "ablate/communicator.hpp"
#include "ablate/trainer.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

static int cmd_run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()
    ("experiment", po::value<std::string>(), "experiment YAML file")
    ("override", po::value<std::vector<std::string>>()->composing(), "key.path=value overrides (positional)")
    ("out,o", po::value<std::string>(), "run directory (default: output.dir, else runs/<name>)")
    ("resume", po::bool_switch(), "continue from the run directory's last checkpoint")
    ("allow-config-change", po::bool_switch(), "with --resume: accept a config that differs from the checkpoint's")
    ("threads,j", po::value<int64_t>(), "worker threads (default: train.threads, else all cores / ranks on this machine)")
    ("quiet,q", po::bool_switch(), "no progress line")
    ("plugin-dir", po::value<std::vector<std::string>>()->composing(), "extra plugin directory (repeatable)");
  po::positional_options_description pos;
  pos.add("experiment", 1).add("override", -1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate run FILE [key.path=value ...] [options]", opts, pos, vm)) return 0;
  if (!vm.count("experiment")) throw ablate::cli::UsageError("missing the experiment file (e.g. experiments/quickstart.yaml)");
  ablate::cli::add_plugin_dirs(vm);
  std::vector<std::string> overrides;
  if (vm.count("override")) overrides = vm["override"].as<std::vector<std::string>>();
  for (const auto& o : overrides)
    if (o.find('=') == std::string::npos)
      throw ablate::cli::UsageError("'" + o + "' is not an override; write key.path=value (e.g. train.steps=200)");
  ablate::RunOptions ro;
  if (vm.count("out")) ro.out_dir = vm["out"].as<std::string>();
  ro.resume = vm["resume"].as<bool>();
  ro.allow_config_change = vm["allow-config-change"].as<bool>();
  ro.quiet = vm["quiet"].as<bool>();
  if (vm.count("threads")) {
    ro.threads = vm["threads"].as<int64_t>();
    if (ro.threads < 1) throw ablate::cli::UsageError("--threads must be at least 1, got " + std::to_string(ro.threads));
  }
  auto exp = ablate::Experiment::load(vm["experiment"].as<std::string>(), overrides);
  auto sum = ablate::run_experiment(exp, ro);
  if (!ablate::world().root()) return 0;
  std::cout << "run " << sum.run_dir << ": " << sum.n_params << " parameters, " << sum.steps << " steps, train loss " << sum.train_loss << ", val loss "
            << sum.val_loss << " (ppl " << std::exp(sum.val_loss) << "), " << static_cast<int64_t>(sum.tokens_per_s)
            << " tokens/s\n";
  if (!sum.sample.empty()) std::cout << "--- sample ---\n" << sum.sample << "\n--------------\n";
  return 0;
}

ABLATE_COMMAND("run", "train an experiment (YAML) and write runs/<name>/{run.h5,checkpoint.ckpt,sample.txt}", cmd_run);
