// Runs a sweep's points as child processes of the ablate binary, at most `jobs` at a
// time, with a progress display fed by each running point's latest train row (read from
// its run file, which readers open without HDF5's lock). See sweep.hpp.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>

#include "ablate/machine.hpp"
#include "ablate/process.hpp"
#include "ablate/runfile.hpp"
#include "ablate/stop_signals.hpp"
#include "ablate/sweep.hpp"

namespace ablate {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The last lines a child wrote in this attempt (its log from `offset`).
std::string log_tail(const std::string& path, std::uintmax_t offset, size_t max_lines = 12,
                     size_t max_chars = 2000) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(static_cast<std::streamoff>(offset));
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<std::string> lines;
  for (std::string l; std::getline(ss, l);) {
    if (auto cr = l.rfind('\r'); cr != std::string::npos) l = l.substr(cr + 1);  // progress redraws
    if (!l.empty()) lines.push_back(l);
  }
  std::string out;
  for (size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i)
    out += (out.empty() ? "" : "\n") + lines[i];
  if (out.size() > max_chars) out = "..." + out.substr(out.size() - max_chars);
  return out;
}

struct Job {
  const SweepPoint* point = nullptr;
  pid_t pid = -1;
  Clock::time_point started;
  std::string log;
  std::uintmax_t log_offset = 0;
  double step = 0, loss = std::numeric_limits<double>::quiet_NaN(), tok_s = 0;
};

// Progress on stderr: on a terminal a block of lines (a summary plus one line per
// running point) redrawn in place, events printed above it; otherwise one compact line
// per interval.
class Display {
 public:
  Display(bool quiet) : tty_(isatty(STDERR_FILENO)), quiet_(quiet) {}
  bool tty() const { return tty_; }
  void event(const std::string& line) {
    clear();
    std::cerr << line << "\n";
    draw(block_);
  }
  void block(const std::vector<std::string>& lines) {
    if (quiet_) return;
    if (!tty_) {
      if (!lines.empty()) std::cerr << lines.front() << "\n" << std::flush;
      return;
    }
    clear();
    block_ = lines;
    draw(block_);
  }
  void finish() {
    clear();
    block_.clear();
  }

 private:
  void clear() {
    if (tty_ && drawn_ > 0) std::cerr << "\033[" << drawn_ << "A\r\033[J";
    drawn_ = 0;
  }
  void draw(const std::vector<std::string>& lines) {
    if (!tty_ || quiet_) return;
    winsize ws{};
    size_t width =
        (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) ? ws.ws_col - 1 : 119;
    for (const auto& l : lines) std::cerr << (l.size() > width ? l.substr(0, width) : l) << "\n";
    drawn_ = static_cast<int>(lines.size());
    std::cerr << std::flush;
  }
  bool tty_, quiet_;
  int drawn_ = 0;
  std::vector<std::string> block_;
};

// One run of a sweep: the queue, the running children, the display and the log.
class SweepRun {
 public:
  SweepRun(const Sweep& s, const std::vector<PointCheck>& checks, const SweepRunOptions& o);
  SweepRunResult run();

 private:
  void event(const std::string& line) {
    sweep_log_ << now_iso() << " " << line << "\n" << std::flush;
    display_.event(line);
  }
  void queue_points();
  void launch(const SweepPoint& p);
  void finish(Job& j, int wstatus, const std::string& interrupted);
  bool reap();
  void stop_all(int sig);
  std::vector<std::string> progress_lines();

  const Sweep& s_;
  const std::vector<PointCheck>& checks_;
  const SweepRunOptions& o_;
  SweepRunResult result_;
  const Clock::time_point t0_ = Clock::now();
  int64_t jobs_ = 1, threads_ = 1;
  std::ofstream sweep_log_;
  Display display_;
  std::deque<const SweepPoint*> queue_;
  std::vector<Job> running_;
};

SweepRun::SweepRun(const Sweep& s, const std::vector<PointCheck>& checks, const SweepRunOptions& o)
    : s_(s), checks_(checks), o_(o), display_(o.quiet) {
  jobs_ = std::max<int64_t>(1, o.jobs);
  // The cores other ablate processes have claimed (a run or another sweep's points) are not
  // shared out again: each point gets its part of the rest.
  threads_ = o.threads > 0
                 ? o.threads
                 : std::max<int64_t>(1, (usable_cores() - CoreClaim::claimed_by_others()) / jobs_);
  if (o.binary.empty()) throw Error("run_sweep: no ablate binary to run the points with");
  fs::create_directories(fs::path(s.dir) / "logs");
  write_manifest(s);
  sweep_log_.open(fs::path(s.dir) / "sweep.log", std::ios::app);
}

void SweepRun::queue_points() {
  for (const auto& p : s_.points) {
    if (!o_.only.empty() && std::find(o_.only.begin(), o_.only.end(), p.index) == o_.only.end())
      continue;
    if (checks_[static_cast<size_t>(p.index)].state.status == RunStatus::done) {
      result_.skipped.push_back(p.index);
      sweep_log_ << now_iso() << " skip point " << p.index << " (" << p.id << "): done\n";
    } else {
      queue_.push_back(&p);
    }
  }
  // Order: points with a checkpoint first (finish what was begun), then seed by seed, so
  // that a sweep stopped half-way has every variant on its first seeds, not every seed of
  // its first variants.
  std::stable_sort(queue_.begin(), queue_.end(), [&](const SweepPoint* a, const SweepPoint* b) {
    auto key = [&](const SweepPoint* p) {
      return std::make_pair(!checks_[static_cast<size_t>(p->index)].state.checkpoint,
                            p->seed_index);
    };
    return key(a) < key(b);
  });
  event("sweep " + s_.name + ": " + std::to_string(s_.points.size()) + " points" +
        (o_.only.empty() ? std::string()
                         : " (" + std::to_string(o_.only.size()) +
                               " chosen with --points: " + array_spec(o_.only) + ")") +
        ", " + std::to_string(result_.skipped.size()) + " already done, " +
        std::to_string(queue_.size()) + " to run, " +
        std::to_string(std::min<int64_t>(jobs_, static_cast<int64_t>(queue_.size()))) +
        " at a time with " + std::to_string(threads_) + " thread" + (threads_ == 1 ? "" : "s") +
        " each -> " + s_.dir);
}

void SweepRun::launch(const SweepPoint& p) {
  Job j;
  j.point = &p;
  // How the point starts, told before the child moves anything.
  const PointCheck& c = checks_[static_cast<size_t>(p.index)];
  const StartPlan plan = RunDir(p.run_dir).plan_point(c.state, c.changes);
  std::string how = plan.mode == StartMode::resume ? " resuming from its checkpoint" : "";
  if (plan.mode == StartMode::keep_aside)
    how = " from step 0: its earlier run (" + std::string(status_name(c.state.status)) +
          " at step " + std::to_string(std::max<int64_t>(c.state.last_step, 0)) + ") " +
          (c.changes.empty() ? "has no checkpoint" : "has another config") +
          "; its files are kept as *" + plan.aside_suffix;
  j.log = (fs::path(s_.dir) / "logs" / (p.id + ".log")).string();
  std::vector<std::string> argv = {o_.binary,
                                   "sweep",
                                   s_.file,
                                   "--point",
                                   std::to_string(p.index),
                                   "--dir",
                                   s_.dir,
                                   "--threads",
                                   std::to_string(threads_),
                                   "--quiet"};
  argv.insert(argv.end(), o_.extra_args.begin(), o_.extra_args.end());
  int fd = ::open(j.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(j.log + ": cannot open the point's log (" + std::strerror(errno) + ")");
  std::string header = "==== " + now_iso() + " " + join(argv, " ") + "\n";
  [[maybe_unused]] ssize_t written = ::write(fd, header.data(), header.size());
  j.log_offset = fs::file_size(j.log);
  // In a group of its own: Ctrl-C reaches the sweep alone, which stops each point with one
  // SIGTERM (a second signal would make the point exit without its checkpoint).
  int rc = spawn_process(argv, {-1, fd, fd}, j.pid, /*own_group=*/true);
  ::close(fd);
  if (rc != 0)
    throw Error("cannot start " + o_.binary + " for point " + std::to_string(p.index) + ": " +
                std::strerror(rc));
  j.started = Clock::now();
  event("start point " + std::to_string(p.index) + " (" + p.id + ")" + how + ", pid " +
        std::to_string(j.pid));
  running_.push_back(j);
}

void SweepRun::finish(Job& j, int wstatus, const std::string& interrupted) {
  const SweepPoint& p = *j.point;
  const PointCheck& c = checks_[static_cast<size_t>(p.index)];
  RunState st = run_state(p.run_dir);
  const bool exited_ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  if (st.status == RunStatus::done && exited_ok) {
    std::string val;
    try {
      RunData d = read_run_file(run_file_path(p.run_dir));
      const auto& ev = d.tables.at("eval");
      if (ev.count("val_loss") && !ev.at("val_loss").empty()) {
        char buf[64];
        std::snprintf(buf, sizeof buf, ", val loss %.4f", ev.at("val_loss").back());
        val = buf;
      }
    } catch (const std::exception&) {
    }
    result_.done.push_back(p.index);
    event("done point " + std::to_string(p.index) + " (" + p.id + ") in " + hms(since(j.started)) +
          val);
    return;
  }
  std::string how = WIFSIGNALED(wstatus)
                        ? "killed by " + signal_name(WTERMSIG(wstatus))
                        : "exited with status " + std::to_string(WEXITSTATUS(wstatus));
  if (!interrupted.empty()) how = interrupted + " (" + how + ")";
  if (st.status == RunStatus::interrupted) {  // checkpointed at its last step: not a failure
    result_.stopped.push_back(p.index);
    event("stopped point " + std::to_string(p.index) + " (" + p.id + ") after " +
          hms(since(j.started)) + ": " + how +
          "; checkpointed, resumes on the next run of the sweep");
    return;
  }
  std::string error;
  if (st.status == RunStatus::failed && !st.error.empty() && interrupted.empty()) {
    error = st.error;  // the child recorded why
  } else {
    std::string tail = log_tail(j.log, j.log_offset);
    error = "ablate " + how + (tail.empty() ? "" : "; last output:\n" + tail);
    RunDir(p.run_dir).mark_failed(c.info.name, c.config, error);
  }
  result_.failed.push_back(p.index);
  result_.errors[p.index] = error;
  std::string first = error.substr(0, error.find('\n'));
  event("FAILED point " + std::to_string(p.index) + " (" + p.id + ") after " +
        hms(since(j.started)) + ": " + first + " (log: " + j.log + ")");
}

std::vector<std::string> SweepRun::progress_lines() {
  // Latest train row of every running point.
  double flops_left = 0, flops_rate = 0;
  for (Job& j : running_) {
    try {
      RunData d = read_run_file(run_file_path(j.point->run_dir));
      auto it = d.tables.find("train");
      if (it != d.tables.end() && it->second.count("step") && !it->second.at("step").empty()) {
        j.step = it->second.at("step").back();
        j.loss = it->second.count("loss") ? it->second.at("loss").back() : j.loss;
        j.tok_s = it->second.count("tokens_per_s") ? it->second.at("tokens_per_s").back() : 0;
      }
    } catch (const std::exception&) {
      // not written yet, or caught mid-write: keep the last values
    }
    const ExperimentInfo& in = checks_[static_cast<size_t>(j.point->index)].info;
    flops_left += (static_cast<double>(in.steps) - j.step) *
                  static_cast<double>(in.tokens_per_step) * in.flops_per_token;
    flops_rate += j.tok_s * in.flops_per_token;
  }
  for (const SweepPoint* p : queue_) {
    const ExperimentInfo& in = checks_[static_cast<size_t>(p->index)].info;
    flops_left += static_cast<double>(in.steps) * static_cast<double>(in.tokens_per_step) *
                  in.flops_per_token;
  }
  const double eta =
      flops_rate > 0 ? flops_left / flops_rate : std::numeric_limits<double>::quiet_NaN();
  const size_t total = o_.only.empty() ? s_.points.size()
                                       : o_.only.size();  // the points this sweep run was asked for
  const size_t finished = result_.done.size() + result_.skipped.size();
  char head[256];
  std::snprintf(head, sizeof head,
                "[%s] %zu/%zu done, %zu failed, %zu running, %zu queued | ETA %s",
                hms(since(t0_)).c_str(), finished, total, result_.failed.size(), running_.size(),
                queue_.size(), hms(eta).c_str());
  std::vector<std::string> lines{head};
  if (!display_.tty()) {
    std::string brief;
    for (const Job& j : running_) {
      const ExperimentInfo& in = checks_[static_cast<size_t>(j.point->index)].info;
      brief += (brief.empty() ? " | " : ", ") + j.point->id + " " +
               std::to_string(static_cast<int64_t>(j.step)) + "/" + std::to_string(in.steps);
    }
    lines[0] += brief;
    return lines;
  }
  for (const Job& j : running_) {
    const ExperimentInfo& in = checks_[static_cast<size_t>(j.point->index)].info;
    const double steps_per_s =
        in.tokens_per_step > 0 ? j.tok_s / static_cast<double>(in.tokens_per_step) : 0;
    const double left = steps_per_s > 0 ? (static_cast<double>(in.steps) - j.step) / steps_per_s
                                        : std::numeric_limits<double>::quiet_NaN();
    char loss[32] = "   -  ", buf[256];
    if (std::isfinite(j.loss)) std::snprintf(loss, sizeof loss, "%.4f", j.loss);
    std::snprintf(
        buf, sizeof buf, "  %-28s step %6lld/%-6lld %3.0f%%  loss %s  %6.1fk tok/s  ETA %s",
        j.point->id.c_str(), static_cast<long long>(j.step), static_cast<long long>(in.steps),
        in.steps > 0 ? 100.0 * j.step / static_cast<double>(in.steps) : 0.0, loss, j.tok_s / 1000.0,
        hms(left).c_str());
    lines.push_back(buf);
  }
  return lines;
}

// Finished children are recorded; true if any finished.
bool SweepRun::reap() {
  bool any = false;
  for (size_t i = 0; i < running_.size();) {
    int ws = 0;
    if (process_ended(running_[i].pid, ws)) {
      finish(running_[i], ws, "");
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      any = true;
    } else {
      ++i;
    }
  }
  return any;
}

// SIGINT, SIGTERM, SIGHUP: the children get SIGTERM (each checkpoints its step and stops).
void SweepRun::stop_all(int sig) {
  result_.interrupted = true;
  event("interrupted by " + signal_name(sig) + ": stopping " + std::to_string(running_.size()) +
        " running point(s); " + std::to_string(queue_.size()) + " not started");
  for (Job& j : running_) kill(j.pid, SIGTERM);
  for (Job& j : running_) finish(j, wait_process(j.pid), "interrupted by " + signal_name(sig));
  running_.clear();
}

SweepRunResult SweepRun::run() {
  queue_points();
  StopSignals signals(OnStop::record);
  const double every = o_.progress_every > 0 ? o_.progress_every : (display_.tty() ? 2.0 : 15.0);
  auto last_progress = Clock::now();
  bool changed = true;
  while (true) {
    while (stop_signal() == 0 && static_cast<int64_t>(running_.size()) < jobs_ && !queue_.empty()) {
      launch(*queue_.front());
      queue_.pop_front();
      changed = true;
    }
    changed |= reap();
    if (int sig = stop_signal()) {
      stop_all(sig);
      break;
    }
    if (running_.empty() && queue_.empty()) break;
    // A terminal redraws soon after a change; a log gets one line per interval.
    if (since(last_progress) >= every ||
        (changed && display_.tty() && since(last_progress) >= 0.5)) {
      display_.block(progress_lines());
      last_progress = Clock::now();
      changed = false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  display_.finish();
  result_.seconds = since(t0_);
  sweep_log_ << now_iso() << " finished: " << result_.done.size() << " done, "
             << result_.skipped.size() << " skipped, " << result_.failed.size() << " failed, "
             << result_.stopped.size() << " stopped"
             << (result_.interrupted ? " (interrupted)" : "") << " in " << hms(result_.seconds)
             << "\n";
  return result_;
}

}  // namespace

SweepRunResult run_sweep(const Sweep& s, const std::vector<PointCheck>& checks,
                         const SweepRunOptions& o) {
  SweepRun r(s, checks, o);
  return r.run();
}

}  // namespace ablate
