// ablate sweep FILE: validates every point of a sweep, then runs the points that are not
// done (--jobs N in parallel, as child processes; or --launcher slurm: as one Slurm array
// job), or one point (--point I), or only lists them (--dry-run), or shows where each point
// is (--status). Format of sweep files: docs/SWEEPS.md; Slurm: docs/CLUSTER.md.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "ablate/sweep.hpp"
#include "commands.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

// 6.6e13 -> "66.0 T"
std::string si(double v) {
  const char* units[] = {"", " k", " M", " G", " T", " P", " E"};
  int u = 0;
  while (std::fabs(v) >= 1000 && u < 6) v /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.3g%s", v, units[u]);
  return buf;
}

std::string pad(const std::string& s, size_t w, bool right = false) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

void print_dry_run(const ablate::Sweep& s, const std::vector<ablate::PointCheck>& checks) {
  std::vector<std::vector<std::string>> rows = {{"#", "id", "params", "FLOPs/token", "tokens/step",
                                                 "steps", "train FLOPs", "run", "overrides"}};
  double total = 0;
  for (const auto& p : s.points) {
    const auto& c = checks[static_cast<size_t>(p.index)];
    const double flops = c.info.flops_per_token * static_cast<double>(c.info.tokens_per_step) *
                         static_cast<double>(c.info.steps);
    total += flops;
    const bool done = c.state.status == ablate::RunStatus::done;
    std::string state =
        c.state.status == ablate::RunStatus::missing ? "-" : ablate::status_name(c.state.status);
    const ablate::StartMode start =
        done ? ablate::StartMode::skip
             : ablate::RunDir(p.run_dir).plan_point(c.state, c.changes).mode;
    if (!c.changes.empty() && !done) state += " (other config: starts afresh)";
    else if (start == ablate::StartMode::resume) state += " (resumes)";
    else if (start == ablate::StartMode::keep_aside)
      state += " (no checkpoint: starts afresh, keeps its files aside)";
    rows.push_back({std::to_string(p.index), p.id, std::to_string(c.info.n_params),
                    si(c.info.flops_per_token), std::to_string(c.info.tokens_per_step),
                    std::to_string(c.info.steps), si(flops), state,
                    ablate::join(p.override_texts(), " ")});
  }
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      const bool num = i == 0 || (i >= 2 && i <= 6);
      line += (i ? "  " : "") + (i + 1 == r.size() ? r[i] : pad(r[i], w[i], num));
    }
    std::cout << line << "\n";
  }
  size_t done = 0;
  for (const auto& c : checks) done += c.state.status == ablate::RunStatus::done;
  const size_t nv = s.variants.empty() ? 1 : s.variants.size();
  const size_t combos = s.points.size() / std::max<size_t>(1, nv * s.seeds.size());
  std::vector<std::string> dims;
  if (!s.variants.empty())
    dims.push_back(std::to_string(nv) + (nv == 1 ? " variant" : " variants"));
  if (combos > 1) dims.push_back(std::to_string(combos) + " grid/zip combinations");
  dims.push_back(std::to_string(s.seeds.size()) + (s.seeds.size() == 1 ? " seed" : " seeds"));
  std::cout << "\n"
            << s.points.size() << " points (" << ablate::join(dims, " x ") << "), " << done
            << " already done; " << si(total)
            << "FLOPs of training in all (6N + attention per token, evaluation not counted).\n"
            << "results: " << s.dir << "  (nothing was run: --dry-run)\n";
}

std::vector<std::string> plugin_dir_args(const po::variables_map& vm) {
  std::vector<std::string> out;
  if (vm.count("plugin-dir"))
    for (const auto& d : vm["plugin-dir"].as<std::vector<std::string>>()) {
      out.push_back("--plugin-dir");
      out.push_back(fs::absolute(d).string());
    }
  return out;
}

int print_status(const ablate::Sweep& s) {
  std::vector<ablate::PointStatus> st = ablate::sweep_status(s);
  std::vector<std::vector<std::string>> rows = {{"#", "id", "state", "slurm", "detail"}};
  std::map<std::string, size_t> counts;
  for (const auto& p : s.points) {
    const auto& x = st[static_cast<size_t>(p.index)];
    ++counts[x.state];
    rows.push_back(
        {std::to_string(p.index), p.id, x.state, x.slurm.empty() ? "-" : x.slurm, x.detail});
  }
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i)
      line += (i ? "  " : "") + (i + 1 == r.size() ? r[i] : pad(r[i], w[i], i == 0));
    std::cout << line << "\n";
  }
  std::vector<std::string> summary;
  for (const char* k :
       {"done", "running", "pending", "failed", "interrupted", "stopped", "not started"})
    if (counts[k]) summary.push_back(std::to_string(counts[k]) + " " + k);
  std::cout << "\n"
            << s.points.size() << " points: " << ablate::join(summary) << " -> " << s.dir << "\n";
  return 0;
}

int submit(const ablate::Sweep& s, const std::vector<ablate::PointCheck>& checks,
           const po::variables_map& vm, const std::vector<int64_t>& only) {
  ablate::SlurmOptions o;
  o.only = only;
  if (vm.count("partition")) o.partition = vm["partition"].as<std::string>();
  if (vm.count("time")) o.time = vm["time"].as<std::string>();
  if (vm.count("mem")) o.mem = vm["mem"].as<std::string>();
  if (vm.count("cpus-per-task")) {
    o.cpus_per_task = vm["cpus-per-task"].as<int64_t>();
    if (o.cpus_per_task < 1)
      throw ablate::cli::UsageError("--cpus-per-task must be at least 1, got " +
                                    std::to_string(o.cpus_per_task));
  }
  if (!vm["jobs"].defaulted()) o.max_running = vm["jobs"].as<int64_t>();
  if (vm.count("threads"))
    throw ablate::cli::UsageError(
        "with --launcher slurm each point's threads are its --cpus-per-task; drop --threads");
  if (vm.count("sbatch-arg")) o.sbatch_args = vm["sbatch-arg"].as<std::vector<std::string>>();
  o.binary = fs::read_symlink("/proc/self/exe").string();
  o.extra_args = plugin_dir_args(vm);
  ablate::SlurmSubmission sub = ablate::submit_slurm(s, checks, o);
  std::cout << "sweep " << s.name << ": " << s.points.size() << " points"
            << (only.empty() ? "" : " (" + std::to_string(only.size()) + " chosen with --points)")
            << ", " << sub.done.size() << " already done";
  if (!sub.queued.empty())
    std::cout << ", " << sub.queued.size() << " still queued or running in Slurm ("
              << ablate::array_spec(sub.queued) << ")";
  if (sub.job_id.empty()) {
    std::cout << "; nothing to submit -> " << s.dir << "\n";
  } else {
    std::cout << "; submitted " << sub.submitted.size() << " as Slurm array job " << sub.job_id
              << " (--array=" << ablate::array_spec(sub.submitted) << ")\n"
              << "  script: " << sub.script << "\n  logs:   " << (fs::path(s.dir) / "logs").string()
              << "/slurm-" << sub.job_id << "_<point>.log\n";
  }
  std::cout << "status:  ablate sweep " << s.file << " --dir " << s.dir << " --status\n"
            << "compare: ablate compare " << s.dir << " --metric val_loss\n";
  return 0;
}

po::options_description sweep_options() {
  po::options_description opts("options");
  opts.add_options()("sweep", po::value<std::string>(), "sweep YAML file")(
      "dry-run,n", po::bool_switch(),
      "validate and list the points with parameter counts and FLOPs; run nothing")(
      "jobs", po::value<int64_t>()->default_value(1),
      "points run at once (child processes; with --launcher slurm: --array=...%N)")(
      "threads,j", po::value<int64_t>(), "threads per point (default: max(1, cores / jobs))")(
      "point,p", po::value<int64_t>(),
      "run only point I in this process (what each job, e.g. a Slurm array task, runs)")(
      "points", po::value<std::string>(),
      "run (or submit) only these points: indices, ranges and id globs, e.g. 0-2,21 or "
      "'recipe-*,*-seed0'")("dir,d", po::value<std::string>(),
                            "result directory (default: the sweep's dir:, else sweeps/<name>)")(
      "quiet,q", po::bool_switch(), "no progress display")(
      "progress-every", po::value<double>(),
      "seconds between progress updates (default 2 on a terminal, 15 otherwise)")(
      "plugin-dir", po::value<std::vector<std::string>>()->composing(),
      "extra plugin directory (repeatable)")(
      "launcher", po::value<std::string>()->default_value("local"),
      "local (child processes here) or slurm (one sbatch array job, a task per point not done)")(
      "status", po::bool_switch(),
      "show each point as pending / running / done / failed (run files and Slurm's view); run "
      "nothing")("partition", po::value<std::string>(), "slurm: sbatch --partition")(
      "time", po::value<std::string>(), "slurm: sbatch --time per point (e.g. 2:00:00)")(
      "cpus-per-task", po::value<int64_t>(),
      "slurm: sbatch --cpus-per-task, also each point's --threads (default 1)")(
      "mem", po::value<std::string>(), "slurm: sbatch --mem per point (e.g. 4G)")(
      "sbatch-arg", po::value<std::vector<std::string>>()->composing(),
      "slurm: another sbatch option, verbatim (repeatable), e.g. --sbatch-arg=--account=abc");
  return opts;
}

// How each point runs: --jobs, --threads (0: the default), --quiet.
struct PointLimits {
  int64_t jobs = 1, threads = 0;
  bool quiet = false;
};

PointLimits point_limits(const po::variables_map& vm) {
  PointLimits l;
  l.jobs = vm["jobs"].as<int64_t>();
  if (l.jobs < 1)
    throw ablate::cli::UsageError("--jobs must be at least 1, got " + std::to_string(l.jobs));
  if (vm.count("threads")) {
    l.threads = vm["threads"].as<int64_t>();
    if (l.threads < 1)
      throw ablate::cli::UsageError("--threads must be at least 1, got " +
                                    std::to_string(l.threads));
  }
  l.quiet = vm["quiet"].as<bool>();
  return l;
}

// --point I: runs that point in this process.
int run_one_point(const ablate::Sweep& s, int64_t i, const PointLimits& l) {
  if (i < 0 || i >= static_cast<int64_t>(s.points.size()))
    throw ablate::cli::UsageError("--point " + std::to_string(i) +
                                  " is out of range: the sweep has " +
                                  std::to_string(s.points.size()) + " points (0 to " +
                                  std::to_string(s.points.size() - 1) + ")");
  const ablate::SweepPoint& p = s.points[static_cast<size_t>(i)];
  ablate::RunOptions ro;
  ro.threads = l.threads;
  ro.quiet = l.quiet;
  ro.handle_signals = true;  // the sweep stops its points with SIGTERM: they checkpoint
  if (!ablate::run_point(s, p, ro))
    std::cout << "point " << i << " (" << p.id << "): already done in " << p.run_dir << "\n";
  else std::cout << "point " << i << " (" << p.id << "): done -> " << p.run_dir << "\n";
  return 0;
}

// --launcher, with the sbatch options refused without slurm.
std::string chosen_launcher(const po::variables_map& vm) {
  const std::string launcher = vm["launcher"].as<std::string>();
  if (launcher != "local" && launcher != "slurm")
    throw ablate::cli::UsageError("--launcher must be local or slurm, got '" + launcher + "'");
  if (launcher != "slurm")
    for (const char* k : {"partition", "time", "cpus-per-task", "mem", "sbatch-arg"})
      if (vm.count(k))
        throw ablate::cli::UsageError(std::string("--") + k +
                                      " is an sbatch option: it needs --launcher slurm");
  return launcher;
}

// The points --points chooses; empty: all.
std::vector<int64_t> chosen_points(const ablate::Sweep& s, const po::variables_map& vm) {
  if (!vm.count("points")) return {};
  if (vm["status"].as<bool>() || vm["dry-run"].as<bool>())
    throw ablate::cli::UsageError(
        "--points chooses what runs; --status and --dry-run show every point: drop --points");
  try {
    return ablate::select_points(s, vm["points"].as<std::string>());
  } catch (const ablate::Error& e) {
    throw ablate::cli::UsageError(e.what());
  }
}

// Validates every point; on a terminal a line counts the points checked, with an ETA, in place.
std::vector<ablate::PointCheck> validate_showing_progress(const ablate::Sweep& s, bool quiet) {
  const std::string what = "validating " + std::to_string(s.points.size()) + " point" +
                           (s.points.size() == 1 ? "" : "s") + " of " + s.file;
  const bool tty = !quiet && isatty(STDERR_FILENO);
  if (!quiet) std::cerr << what << (tty ? "" : "\n") << std::flush;
  const auto began = std::chrono::steady_clock::now();
  std::vector<ablate::PointCheck> checks;
  try {
    checks = ablate::validate_sweep(s, [&](size_t k, size_t n) {
      if (!tty) return;
      const double t =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      std::cerr << "\r\033[K" << what << ": " << k << "/" << n
                << (k < n ? ", ETA " +
                                ablate::hms(t / static_cast<double>(k) * static_cast<double>(n - k))
                          : ", " + ablate::hms(t))
                << std::flush;
    });
  } catch (...) {
    if (tty) std::cerr << "\n";
    throw;
  }
  if (tty) std::cerr << "\n";
  return checks;
}

// Prints what a local run did; returns the exit status (130 when interrupted).
int report_run(const ablate::Sweep& s, ablate::SweepRunResult r) {
  std::cout << "sweep " << s.name << ": " << r.done.size() << " done, " << r.skipped.size()
            << " already done, " << r.failed.size() << " failed"
            << (r.interrupted ? ", " + std::to_string(r.stopped.size()) + " stopped (interrupted)"
                              : "")
            << " -> " << s.dir << "\n";
  for (int64_t i : r.failed) {
    const std::string& e = r.errors[i];
    std::cout << "  failed: point " << i << " (" << s.points[static_cast<size_t>(i)].id
              << "): " << e.substr(0, e.find('\n')) << "\n";
  }
  for (int64_t i : r.stopped)
    std::cout << "  stopped: point " << i << " (" << s.points[static_cast<size_t>(i)].id
              << "): checkpointed, resumes when the sweep runs again\n";
  if (!r.failed.empty())
    std::cout << "  (logs in " << (fs::path(s.dir) / "logs").string()
              << "; running the sweep again retries the failed points)\n";
  std::cout << "compare: ablate compare " << s.dir << " --metric val_loss\n";
  if (r.interrupted) return 130;
  return r.failed.empty() ? 0 : 1;
}

// Runs the points not done here, --jobs at a time, as child processes.
int run_locally(const ablate::Sweep& s, const std::vector<ablate::PointCheck>& checks,
                const po::variables_map& vm, const PointLimits& l,
                const std::vector<int64_t>& only) {
  ablate::SweepRunOptions ro;
  ro.jobs = l.jobs;
  ro.threads = l.threads;
  ro.quiet = l.quiet;
  ro.binary = fs::read_symlink("/proc/self/exe").string();
  if (vm.count("progress-every")) ro.progress_every = vm["progress-every"].as<double>();
  ro.extra_args = plugin_dir_args(vm);
  ro.only = only;
  return report_run(s, ablate::run_sweep(s, checks, ro));
}

int cmd_sweep(const std::vector<std::string>& args) {
  po::options_description opts = sweep_options();
  po::positional_options_description pos;
  pos.add("sweep", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args,
                          "ablate sweep FILE [--dry-run | --status | --jobs N [--points LIST] | "
                          "--launcher slurm | --point I] [options]",
                          opts, pos, vm))
    return 0;
  if (!vm.count("sweep"))
    throw ablate::cli::UsageError(
        "missing the sweep file (e.g. experiments/ablations/swiglu_vs_relu.yaml)");
  ablate::cli::add_plugin_dirs(vm);
  const PointLimits limits = point_limits(vm);
  ablate::Sweep s = ablate::load_sweep(vm["sweep"].as<std::string>(),
                                       vm.count("dir") ? vm["dir"].as<std::string>() : "");
  if (vm.count("point") && vm.count("points"))
    throw ablate::cli::UsageError(
        "--points and --point: give one (--point runs one point in this process, --points several "
        "as a sweep)");
  if (vm.count("point")) return run_one_point(s, vm["point"].as<int64_t>(), limits);
  const std::string how = chosen_launcher(vm);
  const std::vector<int64_t> only = chosen_points(s, vm);
  if (vm["status"].as<bool>()) return print_status(s);
  const std::vector<ablate::PointCheck> checks = validate_showing_progress(s, limits.quiet);
  if (vm["dry-run"].as<bool>()) {
    print_dry_run(s, checks);
    return 0;
  }
  if (how == "slurm") return submit(s, checks, vm, only);
  return run_locally(s, checks, vm, limits, only);
}

}  // namespace

ABLATE_COMMAND("sweep",
               "run a sweep (grid, zip, variants, seeds) in parallel; --dry-run lists its points",
               cmd_sweep);
