// ablate eval RUN --task TASK --data FILE [--flag value ...]: scores a trained run's
// checkpoint with a task's evaluator (tasks are plugins, ablate/task.hpp), prints its report
// and, with --write, appends the scores to the run's HDF5 file (table eval/TASK by default).
// ablate's own flags are below; every other flag goes to the task's evaluator as an option
// (--problems 100 is problems: 100), as in an experiment's eval entry.
#include <tbb/global_control.h>

#include <filesystem>
#include <iostream>
#include <thread>

#include "ablate/error.hpp"
#include "ablate/machine.hpp"
#include "ablate/metric_spec.hpp"
#include "ablate/ops.hpp"
#include "ablate/registry.hpp"
#include "ablate/runfile.hpp"
#include "ablate/task.hpp"
#include "ablate/trainer.hpp"
#include "commands.hpp"

namespace {

struct EvalFlags {
  std::string run, task, table;
  bool write = false;
  int64_t threads = 0;
  uint64_t seed = 1;
  std::string precision;          // empty: the run's train.precision
  std::vector<std::string> rest;  // the evaluator's
};

int64_t integer(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size() && x >= 0) return x;
  } catch (const std::exception&) {
  }
  throw ablate::cli::UsageError(flag + " must be a non-negative integer, got '" + v + "'");
}

EvalFlags parse_flags(const std::vector<std::string>& args) {
  EvalFlags f;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw ablate::cli::UsageError(a + " needs a value");
      return args[++i];
    };
    if (a == "--task") f.task = value();
    else if (a == "--table") f.table = value();
    else if (a == "--write") f.write = true;
    else if (a == "--threads" || a == "-j") f.threads = integer(a, value());
    else if (a == "--seed") f.seed = static_cast<uint64_t>(integer(a, value()));
    else if (a == "--precision") f.precision = value();
    else if (a == "--plugin-dir") ablate::PluginRegistry::instance().add_directory(value());
    else if (a == "-n") f.rest.insert(f.rest.end(), {"--problems", value()});
    else if (a.rfind("-", 0) != 0 && f.run.empty()) f.run = a;
    else f.rest.push_back(a);
  }
  return f;
}

const char* kUsage =
    "usage: ablate eval RUN --task TASK --data FILE [--flag value ...] [--write [--table NAME]] "
    "[-j N] [--seed S]\n"
    "  RUN          run directory (or its checkpoint file)\n"
    "  --task       the task (ablate data --help lists them)\n"
    "  --write      append the scores to the run's run.h5, at the checkpoint's step (table "
    "eval/TASK, or --table)\n"
    "  -j N         worker threads (0: all cores)     --seed S  sampling seed     --plugin-dir "
    "DIR\n"
    "  --precision  float32 or bf16: inputs of the matrix products (default: the run's "
    "train.precision)\n"
    "  other flags are the task evaluator's options (e.g. --data FILE --problems N --batch 256); "
    "'ablate plugins task'\n"
    "  lists them. --problems defaults to 0 (the whole file).\n";

// The task's name checked against the installed tasks.
void check_task(const std::string& task) {
  auto& reg = ablate::PluginRegistry::instance();
  std::vector<std::string> names;
  for (const ablate::PluginEntry* e : reg.variants(ablate::Task::kFamily))
    names.push_back(e->info->name);
  if (task.empty())
    throw ablate::cli::UsageError("missing --task; available: " + ablate::join(names));
  if (!reg.find(ablate::Task::kFamily, task)) {
    const std::string dym = ablate::did_you_mean(task, names);
    throw ablate::cli::UsageError("unknown task '" + task + "'. Available: " + ablate::join(names) +
                                  (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
}

// --write: appends the scores to the run's run.h5 as the trainer writes its rows; the root
// attribute eval_writes says where they came from (one line per write: table, row, step,
// the command's flags, when).
void append_scores(const EvalFlags& f, const ablate::LoadedRun& run, const ablate::Evaluator& ev,
                   std::vector<std::pair<std::string, double>> row) {
  namespace fs = std::filesystem;
  const std::string dir =
      fs::is_regular_file(f.run) ? fs::path(f.run).parent_path().string() : f.run;
  row.insert(row.begin(), {"step", static_cast<double>(run.step)});
  std::string previous;
  ablate::MetricSpecs specs;  // the table's columns declared beside the run's own
  try {
    const auto d0 = ablate::read_run_file(ablate::run_file_path(dir));
    if (d0.str_attrs.count("eval_writes")) previous = d0.str_attrs.at("eval_writes");
    if (d0.str_attrs.count("metric_specs"))
      specs = ablate::parse_metric_specs(d0.str_attrs.at("metric_specs"));
  } catch (const ablate::Error&) {
  }
  specs[f.table] = ev.metric_specs();
  int64_t row_index = 0;
  try {
    auto rf = ablate::RunFile::open_append(ablate::run_file_path(dir));
    row_index = rf.rows(f.table);
    rf.append(f.table, row);
    const std::string when = ablate::now_iso();
    std::string cmd = "ablate eval --task " + f.task;
    for (const auto& a : f.rest) cmd += " " + a;
    rf.set_attr("eval_writes", previous + f.table + " row " + std::to_string(row_index) +
                                   " (step " + std::to_string(run.step) + "): " + cmd + " (seed " +
                                   std::to_string(f.seed) + "), " + when + ", ablate " +
                                   ablate::cli::version() + "\n");
    rf.set_attr("metric_specs", ablate::metric_specs_yaml(specs));
    rf.flush();
    rf.close();
  } catch (const ablate::Error& e) {
    throw ablate::Error(std::string(e.what()) +
                        ". To keep these scores apart, write them to another table: --table " +
                        f.table + "_2");
  }
  std::cout << "\nappended to " << ablate::run_file_path(dir) << ", table " << f.table << ", row "
            << row_index << " (step " << run.step << "); recorded in its attribute eval_writes\n";
}

int cmd_eval(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
  EvalFlags f = parse_flags(args);
  if (f.run.empty())
    throw ablate::cli::UsageError("missing the run directory (e.g. runs/addition)");
  check_task(f.task);
  if (f.table.empty()) f.table = "eval/" + f.task;
  if (f.threads == 0) f.threads = static_cast<int64_t>(std::thread::hardware_concurrency());
  tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism,
                                  static_cast<size_t>(f.threads));

  ablate::Options o = ablate::cli::flag_options(f.rest, "ablate eval");
  YAML::Node node = o.node();
  if (!node["problems"]) node["problems"] = 0;  // the whole file unless told otherwise
  node["type"] = f.task;
  auto run = ablate::load_run(f.run);
  ablate::require_generating(run, "decoding " + f.task + " answers");
  ablate::cli::use_precision(run, f.precision);
  std::unique_ptr<ablate::Evaluator> ev =
      ablate::make_evaluator(o, ablate::StandaloneContext(f.seed));
  std::cout << "run " << f.run << " (step " << run.step << "), task " << f.task << ", " << f.threads
            << " threads" << std::endl;
  ablate::EvalContext ctx{*run.model, *run.tokenizer, run.step, true, f.seed, ""};
  auto row = ev->evaluate(ctx);
  const std::string report = ev->report();  // the line training prints, then the details
  std::cout << ev->summary(row) << "\n" << (report.empty() ? "" : "\n" + report);
  if (f.write) append_scores(f, run, *ev, std::move(row));
  return 0;
}

}  // namespace

ABLATE_COMMAND(
    "eval",
    "score a trained run on a task: 'ablate eval RUN --task TASK --data test.txt [--write]'",
    cmd_eval);
