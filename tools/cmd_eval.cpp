// ablate eval RUN --task arithmetic --data test.txt: scores a trained run's checkpoint on a
// task (batched KV-cache decoding), prints the scores with their breakdowns and, with
// --write, appends them to the run's HDF5 file (table eval/arithmetic by default).
#include <tbb/global_control.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <thread>

#include "ablate/arithmetic.hpp"
#include "ablate/data_source.hpp"
#include "ablate/error.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "commands.hpp"

namespace po = boost::program_options;
namespace ar = ablate::arithmetic;

namespace {

std::string pct(const ablate::arithmetic::Bin& b, bool chars = false) {
  char buf[32];
  double v = chars ? b.char_accuracy() : b.exact_match();
  if (std::isnan(v)) return "     -";
  std::snprintf(buf, sizeof buf, "%6.4f", v);
  return buf;
}

void print_bin(const std::string& label, const ar::Bin& b) {
  std::printf("  %-14s %9lld  %s  %s\n", label.c_str(), static_cast<long long>(b.problems), pct(b).c_str(), pct(b, true).c_str());
}

void print_report(const ar::Report& r, int64_t show, const std::vector<ar::ParsedProblem>& problems,
                  const std::vector<ar::AnswerScore>& scores) {
  const auto& a = r.all;
  std::printf("exact match      %.4f  (%lld / %lld)\n", a.exact_match(), static_cast<long long>(a.exact),
              static_cast<long long>(a.problems));
  std::printf("char accuracy    %.4f  (%lld / %lld characters after '=')\n", a.char_accuracy(),
              static_cast<long long>(a.matched), static_cast<long long>(a.chars));
  std::printf("strict match     %.4f  (answer exactly, then '$')\n",
              a.problems ? static_cast<double>(r.strict) / static_cast<double>(a.problems) : 0.0);
  std::printf("speed            %.0f problems/s (%.2f s)\n\n", r.problems_per_s(), r.seconds);
  std::printf("  %-14s %9s  %6s  %6s\n", "by operation", "problems", "exact", "chars");
  for (const auto& [op, b] : r.by_op) print_bin(std::string(1, op) + " (" + ar::op_name(op) + ")", b);
  std::printf("\n  %-14s %9s  %6s  %6s\n", "answer length", "problems", "exact", "chars");
  for (const auto& [len, b] : r.by_length) print_bin(std::to_string(len), b);
  if (!r.by_carries.empty()) {
    std::printf("\n  %-14s %9s  %6s  %6s\n", "carries", "problems", "exact", "chars");
    for (const auto& [key, b] : r.by_carries)
      print_bin(std::string(1, key.first) + (key.first == '+' ? " carries " : " borrows ") + std::to_string(key.second), b);
  }
  std::printf("\naccuracy per answer position (0 = first character after '='):\n ");
  for (size_t i = 0; i < r.by_position.size(); ++i) std::printf(" %zu:%s", i, pct(r.by_position[i], true).c_str());
  std::printf("\n");
  if (show > 0) {
    std::printf("\nwrong answers (reference | prediction):\n");
    int64_t shown = 0;
    for (size_t i = 0; i < scores.size() && shown < show; ++i) {
      if (scores[i].exact) continue;
      std::printf("  %s%s$ | %s\n", problems[i].prompt.c_str(), problems[i].answer.c_str(), scores[i].prediction.c_str());
      ++shown;
    }
    if (shown == 0) std::printf("  none\n");
  }
}

int cmd_eval(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()
    ("run", po::value<std::string>(), "run directory (or its checkpoint file)")
    ("task", po::value<std::string>()->default_value("arithmetic"), "task: arithmetic")
    ("data", po::value<std::string>(), "problem file (path or data-directory name), e.g. written by 'ablate data arithmetic'")
    ("problems,n", po::value<int64_t>()->default_value(0), "score the file's first N problems (0: all)")
    ("batch", po::value<int64_t>()->default_value(256), "sequences decoded together")
    ("temperature,t", po::value<float>()->default_value(0.0f), "sample with this temperature (0: greedy, the default)")
    ("top-k", po::value<int64_t>()->default_value(0), "when sampling: among the k most likely tokens (0: all)")
    ("seed", po::value<uint64_t>()->default_value(1), "sampling seed")
    ("show-errors", po::value<int64_t>()->default_value(5), "print this many wrong answers")
    ("write", po::bool_switch(), "append the scores to the run's run.h5 (at the checkpoint's step)")
    ("table", po::value<std::string>()->default_value("eval/arithmetic"), "with --write: the run file's table")
    ("threads,j", po::value<int64_t>()->default_value(0), "worker threads (0: all cores)")
    ("plugin-dir", po::value<std::vector<std::string>>()->composing(), "extra plugin directory (repeatable)");
  po::positional_options_description pos;
  pos.add("run", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate eval RUN --task arithmetic --data test.txt [--problems N] [--write] [options]", opts, pos, vm))
    return 0;
  if (!vm.count("run")) throw ablate::cli::UsageError("missing the run directory (e.g. runs/addition)");
  const std::string task = vm["task"].as<std::string>();
  if (task != "arithmetic") {
    std::string dym = ablate::did_you_mean(task, {"arithmetic"});
    throw ablate::cli::UsageError("unknown task '" + task + "'. Available: arithmetic" + (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
  if (!vm.count("data")) throw ablate::cli::UsageError("missing --data FILE (a problem file, e.g. from 'ablate data arithmetic')");
  ablate::cli::add_plugin_dirs(vm);
  int64_t threads = vm["threads"].as<int64_t>();
  if (threads < 0) throw ablate::cli::UsageError("--threads must be >= 0");
  if (threads == 0) threads = static_cast<int64_t>(std::thread::hardware_concurrency());
  tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  ar::DecodeOptions d;
  d.batch = vm["batch"].as<int64_t>();
  if (d.batch < 1) throw ablate::cli::UsageError("--batch must be >= 1");
  float temperature = vm["temperature"].as<float>();
  if (temperature < 0) throw ablate::cli::UsageError("--temperature must be >= 0");
  d.sampling.greedy = temperature == 0;
  d.sampling.temperature = temperature;
  d.sampling.top_k = vm["top-k"].as<int64_t>();
  d.seed = vm["seed"].as<uint64_t>();

  const std::string run_arg = vm["run"].as<std::string>();
  auto run = ablate::load_run(run_arg);
  const std::string data = ablate::resolve_data_file(vm["data"].as<std::string>(), "");
  auto all = ar::read_problems(data);
  const ar::Layout layout = ar::layout_of(all);  // columns from the whole file, as the evaluator plugin
  int64_t n = vm["problems"].as<int64_t>();
  if (n < 0) throw ablate::cli::UsageError("--problems must be >= 0");
  if (n > 0 && static_cast<size_t>(n) < all.size()) all.resize(static_cast<size_t>(n));
  std::printf("run %s (step %lld), %zu problems from %s, batch %lld, %s, %lld threads\n", run_arg.c_str(),
              static_cast<long long>(run.step), all.size(), data.c_str(), static_cast<long long>(d.batch),
              d.sampling.greedy ? "greedy" : "sampling", static_cast<long long>(threads));
  std::vector<ar::AnswerScore> scores;
  ar::Report r = ar::evaluate(*run.model, *run.tokenizer, all, d, &scores);
  print_report(r, vm["show-errors"].as<int64_t>(), all, scores);
  if (vm["write"].as<bool>()) {
    namespace fs = std::filesystem;
    std::string dir = fs::is_regular_file(run_arg) ? fs::path(run_arg).parent_path().string() : run_arg;
    std::string table = vm["table"].as<std::string>();
    auto row = r.row(layout, true);
    row.insert(row.begin(), {"step", static_cast<double>(run.step)});
    // The row looks like the trainer's: the root attribute eval_writes says where it came
    // from (one line per write: table, row, step, when, the command's settings).
    std::string previous;
    try {
      const auto d0 = ablate::read_run_file(ablate::run_file_path(dir));
      if (d0.str_attrs.count("eval_writes")) previous = d0.str_attrs.at("eval_writes");
    } catch (const ablate::Error&) {
    }
    int64_t row_index = 0;
    try {
      auto rf = ablate::RunFile::open_append(ablate::run_file_path(dir));
      row_index = rf.rows(table);
      rf.append(table, row);
      char when[32];
      const std::time_t now = std::time(nullptr);
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
      char line[1024];
      std::snprintf(line, sizeof line, "%s row %lld (step %lld): ablate eval --task %s --data %s --problems %zu --batch %lld %s (seed %llu), %s, ablate %s\n",
                    table.c_str(), static_cast<long long>(row_index), static_cast<long long>(run.step), task.c_str(), data.c_str(), all.size(),
                    static_cast<long long>(d.batch), d.sampling.greedy ? "greedy" : ("--temperature " + std::to_string(temperature)).c_str(),
                    static_cast<unsigned long long>(d.seed), when, ablate::cli::version());
      rf.set_attr("eval_writes", previous + line);
      rf.flush();
      rf.close();
    } catch (const ablate::Error& e) {
      throw ablate::Error(std::string(e.what()) + ". To keep these scores apart, write them to another table: --table " + table + "_2");
    }
    std::printf("\nappended to %s, table %s, row %lld (step %lld); recorded in its attribute eval_writes\n", ablate::run_file_path(dir).c_str(),
                table.c_str(), static_cast<long long>(row_index), static_cast<long long>(run.step));
  }
  return 0;
}

}  // namespace

ABLATE_COMMAND("eval", "score a trained run on a task: 'ablate eval RUN --task arithmetic --data test.txt [--write]'", cmd_eval);
