// Sweeps on Slurm: one array job per submission (sbatch --array), one task per point, and
// the status of every point from its run file plus Slurm's view of the submitted tasks
// (squeue while queued or running, scontrol after; accounting is not needed). See sweep.hpp.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "ablate/machine.hpp"
#include "ablate/sweep.hpp"

extern char** environ;

namespace ablate {
namespace fs = std::filesystem;

namespace {

// A word for a bash script: single-quoted unless it is plainly safe.
std::string shell_quote(const std::string& s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("/._-=+:,@%", c);
      }))
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool on_path(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return access(prog.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(ss, d, ':');)
    if (!d.empty() && access((fs::path(d) / prog).c_str(), X_OK) == 0) return true;
  return false;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

struct SubmittedJob {
  std::string id;
  std::vector<int64_t> indices;
};

std::string jobs_file(const Sweep& s) { return (fs::path(s.dir) / "slurm_jobs").string(); }

std::vector<SubmittedJob> read_jobs(const Sweep& s) {
  std::vector<SubmittedJob> jobs;
  std::ifstream in(jobs_file(s));
  for (std::string line; std::getline(in, line);) {
    std::stringstream ss(line);
    SubmittedJob j;
    std::string spec;
    if (!(ss >> j.id >> spec) || j.id[0] == '#') continue;
    try {
      j.indices = parse_array_spec(spec);
    } catch (const Error&) {
      continue;
    }
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// One array task as Slurm sees it.
struct TaskView {
  std::string job_id, state, reason,
      exit_code;  // state: PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, ...
};

// "Key=Value Key=Value ..." of one `scontrol -o show job` line.
std::map<std::string, std::string> scontrol_fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::stringstream ss(line);
  for (std::string w; ss >> w;)
    if (auto eq = w.find('='); eq != std::string::npos) f[w.substr(0, eq)] = w.substr(eq + 1);
  return f;
}

// Slurm's view of the tasks of array job `id`: task index -> view. Empty when Slurm does
// not know the job (any more) or cannot be asked.
std::map<int64_t, TaskView> slurm_tasks(const std::string& id) {
  std::map<int64_t, TaskView> out;
  // scontrol knows finished tasks too (until MinJobAge); one line per task or pending range.
  ProcessResult sc = run_process({"scontrol", "-o", "show", "job", id});
  if (sc.status == 0) {
    std::stringstream ss(sc.output);
    for (std::string line; std::getline(ss, line);) {
      auto f = scontrol_fields(line);
      if (!f.count("ArrayTaskId") || !f.count("JobState")) continue;
      std::vector<int64_t> tasks;
      try {
        tasks = parse_array_spec(f["ArrayTaskId"]);
      } catch (const Error&) {
        continue;
      }
      for (int64_t t : tasks)
        out[t] = {id + "_" + std::to_string(t), f["JobState"], f["Reason"], f["ExitCode"]};
    }
  }
  // squeue is authoritative for what is queued or running.
  ProcessResult sq = run_process({"squeue", "-h", "-r", "-j", id, "-o", "%i|%T|%r"});
  if (sq.status == 0) {
    std::stringstream ss(sq.output);
    for (std::string line; std::getline(ss, line);) {
      std::vector<std::string> parts;
      std::stringstream ls(line);
      for (std::string p; std::getline(ls, p, '|');) parts.push_back(trim(p));
      if (parts.size() < 3) continue;
      auto us = parts[0].find('_');
      if (us == std::string::npos) continue;
      try {
        for (int64_t t : parse_array_spec(parts[0].substr(us + 1)))
          out[t] = {id + "_" + std::to_string(t), parts[1], parts[2],
                    out.count(t) ? out[t].exit_code : ""};
      } catch (const Error&) {
      }
    }
  }
  return out;
}

bool slurm_active(const std::string& state) {
  return state == "PENDING" || state == "RUNNING" || state == "CONFIGURING" ||
         state == "COMPLETING" || state == "REQUEUED" || state == "RESIZING" ||
         state == "SUSPENDED";
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv) {
  ProcessResult r;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, copy[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    r.status = 127;
    r.output = copy[0] + ": " + std::strerror(rc);
    return r;
  }
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    r.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  return r;
}

std::string array_spec(const std::vector<int64_t>& indices) {
  std::vector<int64_t> v = indices;
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out +=
        (out.empty() ? "" : ",") + std::to_string(v[i]) + (j > i ? "-" + std::to_string(v[j]) : "");
    i = j + 1;
  }
  return out;
}

std::vector<int64_t> parse_array_spec(const std::string& text) {
  std::string spec = text.substr(0, text.find('%'));  // "0-9%2": at most 2 at once
  if (!spec.empty() && spec.front() == '[' && spec.back() == ']')
    spec = spec.substr(1, spec.size() - 2);
  static const std::regex part(R"((\d+)(?:-(\d+)(?::(\d+))?)?)");
  std::vector<int64_t> out;
  std::stringstream ss(spec);
  for (std::string p; std::getline(ss, p, ',');) {
    std::smatch m;
    if (!std::regex_match(p, m, part)) throw Error("not a Slurm array index list: '" + text + "'");
    int64_t a = std::stoll(m[1]), b = m[2].matched ? std::stoll(m[2]) : a,
            step = m[3].matched ? std::stoll(m[3]) : 1;
    if (step < 1 || b < a || b - a > 10000000)
      throw Error("not a Slurm array index list: '" + text + "'");
    for (int64_t i = a; i <= b; i += step) out.push_back(i);
  }
  return out;
}

namespace {

// The chosen points, each as done, queued or running in an earlier job (not submitted
// twice), or to submit.
SlurmSubmission sort_points(const Sweep& s, const std::vector<PointCheck>& checks,
                            const SlurmOptions& o) {
  SlurmSubmission sub;
  std::set<int64_t> active;
  for (const SubmittedJob& j : read_jobs(s))
    for (const auto& [t, v] : slurm_tasks(j.id))
      if (slurm_active(v.state)) active.insert(t);
  for (const auto& p : s.points) {
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), p.index) == o.only.end())
      continue;
    if (checks[static_cast<size_t>(p.index)].state.status == RunStatus::done)
      sub.done.push_back(p.index);
    else if (active.count(p.index)) sub.queued.push_back(p.index);
    else sub.submitted.push_back(p.index);
  }
  return sub;
}

// The command an array task runs: `ablate sweep FILE --point $SLURM_ARRAY_TASK_ID ...`.
std::string task_command(const Sweep& s, const SlurmOptions& o, const fs::path& dir) {
  std::vector<std::string> task = {o.binary,
                                   "sweep",
                                   fs::absolute(s.file).string(),
                                   "--point",
                                   "$SLURM_ARRAY_TASK_ID",
                                   "--dir",
                                   dir.string(),
                                   "--threads",
                                   "${SLURM_CPUS_PER_TASK:-1}",
                                   "--quiet"};
  task.insert(task.end(), o.extra_args.begin(), o.extra_args.end());
  std::string cmd;
  for (size_t i = 0; i < task.size(); ++i)
    cmd += (i ? " " : "") + (task[i].front() == '$' ? "\"" + task[i] + "\"" : shell_quote(task[i]));
  return cmd;
}

std::string batch_script(const Sweep& s, const SlurmOptions& o, const SlurmSubmission& sub,
                         const fs::path& dir) {
  std::ostringstream sc;
  sc << "#!/bin/bash\n"
     << "# Sweep " << s.name << " (" << s.file << "): " << sub.submitted.size() << " of "
     << s.points.size()
     << " points as one Slurm array job,\n# written by 'ablate sweep --launcher slurm' at "
     << now_iso() << ". Array task i runs point i (" << (dir / "manifest.yaml").string() << ").\n"
     << "#SBATCH --job-name=" << shell_quote("ablate-" + s.name) << "\n"
     << "#SBATCH --array=" << array_spec(sub.submitted)
     << (o.max_running > 0 ? "%" + std::to_string(o.max_running) : "") << "\n"
     << "#SBATCH --output=" << (dir / "logs" / "slurm-%A_%a.log").string() << "\n"
     << "#SBATCH --ntasks=1\n";
  if (!o.partition.empty()) sc << "#SBATCH --partition=" << o.partition << "\n";
  if (!o.time.empty()) sc << "#SBATCH --time=" << o.time << "\n";
  if (o.cpus_per_task > 0) sc << "#SBATCH --cpus-per-task=" << o.cpus_per_task << "\n";
  if (!o.mem.empty()) sc << "#SBATCH --mem=" << o.mem << "\n";
  for (const auto& a : o.sbatch_args) sc << "#SBATCH " << a << "\n";
  sc << "set -eu\ncd " << shell_quote(fs::current_path().string()) << "\n"
     << "echo \"$(date -u +%FT%TZ) array task $SLURM_ARRAY_TASK_ID of job $SLURM_ARRAY_JOB_ID on "
        "$(hostname)\"\n"
     << "exec " << task_command(s, o, dir) << "\n";
  return sc.str();
}

// Submits the batch script; returns the job id sbatch prints.
std::string submit_batch_script(const std::string& script) {
  ProcessResult r = run_process({"sbatch", "--parsable", script});
  if (r.status != 0)
    throw Error("sbatch " + script + " failed (exit " + std::to_string(r.status) +
                "): " + trim(r.output));
  // --parsable prints "<job id>" or "<job id>;<cluster>", possibly after warnings.
  static const std::regex id_line(R"((?:^|\n)(\d+)(?:;[^\n]*)?\s*$)");
  std::smatch m;
  if (!std::regex_search(r.output, m, id_line))
    throw Error("sbatch printed no job id: '" + trim(r.output) + "'");
  return m[1];
}

}  // namespace

SlurmSubmission submit_slurm(const Sweep& s, const std::vector<PointCheck>& checks,
                             const SlurmOptions& o) {
  if (!on_path("sbatch"))
    throw Error(
        "--launcher slurm: 'sbatch' is not on PATH. Run this on a Slurm login node (there: 'module "
        "load slurm' if "
        "needed), or install Slurm's client commands (Debian: apt-get install slurm-client), or "
        "use --launcher local");
  if (o.binary.empty()) throw Error("submit_slurm: no ablate binary for the tasks to run");
  SlurmSubmission sub = sort_points(s, checks, o);
  if (sub.submitted.empty()) return sub;

  const fs::path dir = fs::absolute(s.dir);
  fs::create_directories(dir / "logs");
  fs::create_directories(dir / "slurm");
  write_manifest(s);
  int n = 1;
  while (fs::exists(dir / "slurm" / ("submit-" + std::to_string(n) + ".sbatch"))) ++n;
  sub.script = (dir / "slurm" / ("submit-" + std::to_string(n) + ".sbatch")).string();
  {
    std::ofstream f(sub.script);
    f << batch_script(s, o, sub, dir);
    if (!f) throw Error(sub.script + ": cannot write the batch script");
  }
  fs::permissions(sub.script, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);

  sub.job_id = submit_batch_script(sub.script);
  std::ofstream(jobs_file(s), std::ios::app)
      << sub.job_id << " " << array_spec(sub.submitted) << " " << now_iso() << "\n";
  std::ofstream(dir / "sweep.log", std::ios::app)
      << now_iso() << " submitted Slurm array job " << sub.job_id << " ("
      << array_spec(sub.submitted) << ") with " << sub.script << "\n";
  return sub;
}

std::vector<PointStatus> sweep_status(const Sweep& s) {
  std::vector<PointStatus> out(s.points.size());
  // The latest submission of a point decides which Slurm task speaks for it.
  std::map<int64_t, TaskView> view;
  std::set<int64_t> submitted;
  for (const SubmittedJob& j : read_jobs(s)) {
    auto tasks = slurm_tasks(j.id);
    for (int64_t i : j.indices) {
      submitted.insert(i);
      auto it = tasks.find(i);
      if (it != tasks.end()) view[i] = it->second;
      else view.erase(i);  // Slurm forgot it (finished long ago): the run file decides
    }
  }
  for (const auto& p : s.points) {
    PointStatus& st = out[static_cast<size_t>(p.index)];
    RunState rs = run_state(p.run_dir);
    const TaskView* tv = view.count(p.index) ? &view[p.index] : nullptr;
    if (tv) st.slurm = tv->job_id;
    std::string progress = rs.last_step >= 0 ? "step " + std::to_string(rs.last_step) : "";
    if (!progress.empty() && rs.total_steps > 0) progress += "/" + std::to_string(rs.total_steps);
    const std::string resumes = "resumes from its checkpoint on the next run of the sweep";
    const std::string first_line = rs.error.substr(0, rs.error.find('\n'));
    if (rs.status == RunStatus::done) {
      st.state = "done";
      if (rs.cpu_seconds >= 0) {
        char buf[64];
        const int n = std::snprintf(buf, sizeof buf, "%.1f CPU-minutes", rs.cpu_seconds / 60.0);
        if (rs.eval_cpu_seconds >= 0)
          std::snprintf(buf + n, sizeof buf - n, " (%.1f evaluating)", rs.eval_cpu_seconds / 60.0);
        st.detail = buf;
      }
    } else if (tv && slurm_active(tv->state)) {
      st.state = tv->state == "PENDING" ? "pending" : "running";
      st.detail = tv->state == "PENDING" ? "Slurm: PENDING (" + tv->reason + ")" : progress;
    } else if (rs.status == RunStatus::failed) {
      st.state = "failed";
      st.detail = (progress.empty() ? "" : "at " + progress + ": ") + first_line;
    } else if (tv && tv->state != "COMPLETED") {
      st.state = "failed";
      st.detail =
          "Slurm: " + tv->state + (tv->exit_code.empty() ? "" : " exit " + tv->exit_code) +
          " (log: " + (fs::path(s.dir) / "logs" / ("slurm-" + tv->job_id + ".log")).string() + ")";
    } else if (rs.status == RunStatus::running && submitted.count(p.index)) {
      // Its task is gone but the run never finished: killed without a chance to record it.
      st.state = "failed";
      st.detail = "the run file says running but its Slurm task is gone" +
                  (progress.empty() ? "" : " (" + progress + ")");
    } else if (rs.status == RunStatus::interrupted) {
      st.state = "interrupted";
      st.detail = (progress.empty() ? "" : "at " + progress + "; ") + resumes;
    } else if (rs.status == RunStatus::running && !tv && !RunDir(p.run_dir).lock_owner_alive()) {
      // Killed without a chance to record it (kill -9, out of memory, a machine's reboot).
      st.state = "stopped";
      st.detail =
          "its process is gone" + (progress.empty() ? "" : " (at " + progress + ")") + "; " +
          (rs.checkpoint ? resumes : "starts afresh on the next run of the sweep (no checkpoint)");
    } else if (rs.status == RunStatus::running) {
      st.state = "running";
      st.detail = progress;
      if (rs.seconds_left >= 0) st.detail += ", " + hms(rs.seconds_left) + " of training left";
    } else if (rs.status == RunStatus::unreadable) {
      st.state = "failed";
      st.detail = "unreadable run file: " + first_line;
    } else {
      st.state = "not started";
      if (tv) st.detail = "Slurm: " + tv->state + " but no run file";
    }
  }
  return out;
}

}  // namespace ablate
