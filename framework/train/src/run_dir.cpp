// A run directory (see run_dir.hpp).
#include "ablate/run_dir.hpp"

#include <cmath>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "ablate/error.hpp"
#include "ablate/machine.hpp"
#include "progress.hpp"
#include "run_checkpoint.hpp"

namespace ablate {
namespace fs = std::filesystem;

namespace {

// The files a run writes in its directory: what --overwrite deletes (nothing else), and
// (kept_aside) what moves aside when a sweep starts an unfinished run afresh, in this order.
struct RunDirFile {
  const char* name;
  bool kept_aside;
};
constexpr RunDirFile kRunFiles[] = {{"run.h5", true},
                                    {"run.log", true},
                                    {"checkpoint.ckpt", true},
                                    {"checkpoint.ckpt.tmp", false},
                                    {"sample.txt", false},
                                    {"config.yaml", false},
                                    {"config.resolved.yaml", false}};

constexpr const char* kStatusNames[] = {"missing",     "running",  "done",      "failed",
                                        "interrupted", "branched", "unreadable"};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The state recorded in a readable run file.
void read_state(const std::string& h5, RunState& st) {
  RunData d = read_run_file(h5);
  auto get = [&](const char* k) {
    return d.str_attrs.count(k) ? d.str_attrs.at(k) : std::string();
  };
  st.status = parse_status(get("status"));
  st.error = get("error");
  st.config = get("config");
  auto it = d.tables.find("train");
  if (it != d.tables.end() && it->second.count("step") && !it->second.at("step").empty())
    st.last_step = static_cast<int64_t>(it->second.at("step").back());
  if (d.num_attrs.count("cpu_seconds")) st.cpu_seconds = d.num_attrs.at("cpu_seconds");
  if (d.num_attrs.count("eval_cpu_seconds"))
    st.eval_cpu_seconds = d.num_attrs.at("eval_cpu_seconds");
  auto seg = d.tables.find("segments");
  if (seg != d.tables.end() && seg->second.count("steps") && !seg->second.at("steps").empty())
    st.total_steps = static_cast<int64_t>(seg->second.at("steps").back());
  // Time left: steps left x tokens a step / the last logged rate (tokens a step from the
  // resolved config: batch_size x grad_accum x context).
  if (st.status == RunStatus::running && st.last_step >= 0 && st.total_steps > st.last_step &&
      it->second.count("tokens_per_s") && it->second.at("tokens_per_s").back() > 0) {
    const double tokens = run_tokens_per_step(d);  // NaN: no estimate
    if (std::isfinite(tokens))
      st.seconds_left =
          double(st.total_steps - st.last_step) * tokens / it->second.at("tokens_per_s").back();
  }
}

}  // namespace

double run_tokens_per_step(const RunData& d) {
  if (d.num_attrs.count("tokens_per_step")) return d.num_attrs.at("tokens_per_step");
  auto cfg = d.str_attrs.find("config_resolved");
  if (cfg == d.str_attrs.end()) return std::nan("");
  try {
    YAML::Node c = YAML::Load(cfg->second);
    return c["train"]["batch_size"].as<double>() * c["train"]["grad_accum"].as<double>(1.0) *
           c["model"]["context"].as<double>();
  } catch (const YAML::Exception&) {
    return std::nan("");
  }
}

std::string checkpoint_path(const std::string& dir) {
  return (fs::path(dir) / "checkpoint.ckpt").string();
}
std::string run_file_path(const std::string& dir) { return (fs::path(dir) / "run.h5").string(); }
std::string kept_checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / "checkpoints" / ("step-" + std::to_string(step) + ".ckpt")).string();
}

const char* status_name(RunStatus status) { return kStatusNames[static_cast<int>(status)]; }

RunStatus parse_status(const std::string& name) {
  if (name.empty()) return RunStatus::running;
  for (size_t i = 0; i < std::size(kStatusNames); ++i)
    if (name == kStatusNames[i]) return static_cast<RunStatus>(i);
  return RunStatus::unreadable;
}

void set_status(RunFile& rf, RunStatus status) { rf.set_attr("status", status_name(status)); }

void StartFlags::check() const {
  if (resume && overwrite) throw Error("--resume and --overwrite exclude each other");
  if (extend_to > 0 && !resume) throw Error("--extend-to continues a run: it needs --resume");
}

RunDir::RunDir(std::string dir) : dir_(std::move(dir)) {}
RunDir::~RunDir() = default;
RunDir::RunDir(RunDir&&) noexcept = default;
RunDir& RunDir::operator=(RunDir&&) noexcept = default;

std::string RunDir::log() const { return (fs::path(dir_) / "run.log").string(); }
std::string RunDir::config() const { return (fs::path(dir_) / "config.yaml").string(); }
std::string RunDir::resolved_config() const {
  return (fs::path(dir_) / "config.resolved.yaml").string();
}
std::string RunDir::sample() const { return (fs::path(dir_) / "sample.txt").string(); }
std::string RunDir::failure_marker() const { return (fs::path(dir_) / "failed.txt").string(); }

bool RunDir::exists() const { return fs::is_directory(dir_); }

bool RunDir::holds_run() const {
  std::error_code ec;
  return fs::exists(run_file(), ec) || fs::exists(checkpoint(), ec);
}

std::vector<int64_t> RunDir::kept_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  const fs::path kept = fs::path(dir_) / "checkpoints";
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

RunState RunDir::state() const {
  RunState st;
  st.checkpoint = fs::exists(checkpoint());
  const std::string h5 = run_file(), marker = failure_marker();
  if (!fs::exists(h5)) {
    st.status = fs::exists(marker) ? RunStatus::failed : RunStatus::missing;
    if (st.status == RunStatus::failed) st.error = read_text(marker);
    return st;
  }
  try {
    read_state(h5, st);
  } catch (const Error& e) {
    st.status = fs::exists(marker) ? RunStatus::failed : RunStatus::unreadable;
    st.error = fs::exists(marker) ? read_text(marker) : e.what();
  }
  return st;
}

std::string RunDir::describe() const {
  std::string state;
  auto add = [&](const std::string& s) { state += (state.empty() ? "" : ", ") + s; };
  if (fs::exists(run_file())) {
    try {
      add("status " + read_run_file(run_file()).str_attrs["status"]);
    } catch (const Error&) {
      add("run.h5 unreadable");
    }
  }
  if (fs::exists(checkpoint())) {
    try {
      add("checkpoint at step " + std::to_string(read_checkpoint(checkpoint()).ints["step"]));
    } catch (const Error&) {
      add("checkpoint unreadable");
    }
  }
  return state;
}

void RunDir::lock(bool create) {
  if (create) fs::create_directories(dir_);
  lock_ = std::make_unique<RunLock>(dir_);
}

bool RunDir::lock_owner_alive() const { return run_lock_owner_alive(dir_); }

StartPlan RunDir::plan(const StartFlags& flags) const {
  flags.check();
  StartPlan p;
  const bool has_ck = fs::exists(checkpoint()), has_h5 = fs::exists(run_file());
  if (flags.overwrite) {
    p.mode = StartMode::overwrite;
    return p;
  }
  if (!flags.resume) {
    if (has_ck || has_h5)
      throw Error(dir_ + " already holds a run (" + describe() +
                  "); not overwriting it. Use --resume to continue "
                  "it, --overwrite to delete it and start again, or --fork NEW_DIR to start a new "
                  "run in NEW_DIR from its weights");
    return p;
  }
  if (!has_ck)
    throw Error(
        dir_ + ": nothing to resume: " +
        (has_h5 ? "the run stopped before its first checkpoint (" + describe() +
                      "). Start it again with --overwrite"
                : std::string(
                      "no run here (no checkpoint.ckpt). Start a run there without --resume")));
  p.checkpoint_step = checkpoint_step(read_run_checkpoint(checkpoint()));  // a broken one says so
  if (!has_h5)
    throw Error(dir_ +
                ": has a checkpoint but no run.h5 (its metrics are gone), so it cannot be resumed. "
                "Use --fork NEW_DIR "
                "to start a new run from its weights, or --overwrite");
  p.previous = read_run_file(run_file());
  if (parse_status(p.previous->str_attrs["status"]) == RunStatus::done && flags.extend_to == 0)
    throw Error(dir_ + " is a finished run (status done, step " +
                std::to_string(p.checkpoint_step) +
                "): nothing to resume. --extend-to N "
                "continues it to step N; --fork NEW_DIR starts a new run from its weights");
  p.mode = flags.extend_to > 0 ? StartMode::extend : StartMode::resume;
  return p;
}

namespace {

// The suffix an unfinished run's files move aside with, "" when there is nothing to keep (no
// run, a finished one, or one that never trained nor checkpointed).
std::string aside_suffix(const std::string& dir, const RunState& st) {
  if (st.status == RunStatus::done || st.status == RunStatus::unreadable ||
      (st.last_step <= 0 && !st.checkpoint))
    return "";
  const std::string base = ".stopped-at-" + std::to_string(std::max<int64_t>(st.last_step, 0));
  std::string suffix = base;
  auto taken = [&] {
    for (const RunDirFile& f : kRunFiles)
      if (f.kept_aside && fs::exists(fs::path(dir) / (f.name + suffix))) return true;
    return false;
  };
  for (int k = 2; taken(); ++k) suffix = base + "-" + std::to_string(k);
  return suffix;
}

}  // namespace

StartPlan RunDir::plan_point(const RunState& st, const std::vector<std::string>& changes) const {
  StartPlan p;
  if (st.status == RunStatus::done) {
    if (!changes.empty())
      throw Error(dir_ + " holds a finished run of a different config (" + join(changes, "; ") +
                  "). Delete it to rerun, or give the sweep another directory (dir: or --dir)");
    p.mode = StartMode::skip;
    return p;
  }
  // Resume what can be resumed: a checkpoint and run.h5 of the same config. Anything else
  // (another config's run, a run killed before its first checkpoint, a run file broken by a
  // crash) starts afresh.
  const bool resumable = changes.empty() && fs::exists(checkpoint()) && fs::exists(run_file());
  // Also for a resume: the files' suffix should its run file prove unreadable (prepare_point).
  p.aside_suffix = aside_suffix(dir_, st);
  if (resumable && st.status != RunStatus::unreadable) {
    p.mode = StartMode::resume;
    return p;
  }
  p.unreadable_aside = resumable;
  p.mode = p.aside_suffix.empty() ? StartMode::overwrite : StartMode::keep_aside;
  return p;
}

std::vector<std::string> RunDir::prepare_point(StartPlan& plan) const {
  if (plan.mode == StartMode::resume) {
    try {
      read_run_file(run_file());
      return {};
    } catch (const Error&) {
      plan.unreadable_aside = true;
      plan.mode = plan.aside_suffix.empty() ? StartMode::overwrite : StartMode::keep_aside;
    }
  }
  std::error_code ec;
  // A run file broken by a crash: kept aside, the run file starts afresh.
  if (plan.unreadable_aside) fs::rename(run_file(), run_file() + ".unreadable", ec);
  std::vector<std::string> kept;
  if (plan.mode != StartMode::keep_aside) return kept;
  for (const RunDirFile& f : kRunFiles) {
    if (!f.kept_aside) continue;
    const fs::path from = fs::path(dir_) / f.name;
    if (!fs::exists(from)) continue;
    fs::rename(from, from.string() + plan.aside_suffix, ec);
    if (ec)
      throw Error(from.string() + ": cannot keep the earlier run's file aside as " +
                  from.filename().string() + plan.aside_suffix + " (" + ec.message() +
                  "); not starting the point over it");
    kept.push_back(from.filename().string() + plan.aside_suffix);
  }
  return kept;
}

void RunDir::remove_run() const {
  std::error_code ec;
  for (const RunDirFile& f : kRunFiles) fs::remove(fs::path(dir_) / f.name, ec);
  // The kept checkpoints (checkpoints/step-<S>.ckpt[.tmp]) and their folder if that leaves
  // it empty; nothing else there.
  const fs::path kept = fs::path(dir_) / "checkpoints";
  if (!fs::is_directory(kept, ec)) return;
  for (const auto& e : fs::directory_iterator(kept, ec)) {
    const std::string f = e.path().filename().string();
    const std::string ext = e.path().extension().string();
    if (f.rfind("step-", 0) == 0 && (ext == ".ckpt" || ext == ".tmp")) fs::remove(e.path(), ec);
  }
  fs::remove(kept, ec);  // only if empty
}

void RunDir::mark_failed(RunFile& rf, const std::string& error) {
  set_status(rf, RunStatus::failed);
  rf.set_attr("error", error);
  rf.set_attr("finished", now_iso());
}

void RunDir::mark_failed(const std::string& name, const std::string& config,
                         const std::string& error) const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  const std::string h5 = run_file();
  try {
    bool existed = fs::exists(h5);
    RunFile rf = existed ? RunFile::open_append(h5) : RunFile::create(h5);
    if (!existed) {
      rf.set_attr("name", name);
      rf.set_attr("config", config);
    }
    mark_failed(rf, error);
    rf.close();
  } catch (const std::exception&) {
    std::ofstream(failure_marker()) << error << "\n";
  }
}

void RunDir::clear_failure() const {
  std::error_code ec;
  fs::remove(failure_marker(), ec);
}

RunState run_state(const std::string& run_dir) { return RunDir(run_dir).state(); }

}  // namespace ablate
