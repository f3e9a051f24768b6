// What this process may use of the machine (see machine.hpp).
#include "ablate/machine.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "ablate/error.hpp"

namespace ablate {

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}
namespace fs = std::filesystem;

namespace {

// The cgroup v2 directories of this process, innermost first (limits set on an ancestor
// apply too). Empty outside cgroup v2.
std::vector<fs::path> cgroup_dirs() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, rel;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) rel = line.substr(3);
  std::vector<fs::path> out;
  if (rel.empty()) return out;
  fs::path p = fs::path("/sys/fs/cgroup") / fs::path(rel).relative_path();
  for (; p.string().size() >= std::string("/sys/fs/cgroup").size(); p = p.parent_path()) {
    out.push_back(p);
    if (p == p.parent_path() || p == "/sys/fs/cgroup") break;
  }
  return out;
}

std::string first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

// A claims directory private to this user.
std::string claims_dir() {
  if (const char* d = std::getenv("ABLATE_RUNTIME_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x)
    return (fs::path(x) / "ablate").string();
  return "/tmp/ablate-" + std::to_string(static_cast<long>(getuid()));
}

// Holds an flock on `path` (created if missing) while it lives.
struct DirLock {
  int fd;
  explicit DirLock(const std::string& path)
      : fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd >= 0)
      while (::flock(fd, LOCK_EX) < 0 && errno == EINTR) {
      }
  }
  ~DirLock() {
    if (fd >= 0) ::close(fd);
  }
};

int64_t count_claims(const std::string& dir, const std::string& own) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || e.path().string() == own) continue;
    int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      fs::remove(e.path(), ec);  // nobody holds it: its process is gone
    } else {
      char buf[32] = {};
      ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      if (n > 0) total += std::max<int64_t>(0, std::atoll(buf));
    }
    ::close(fd);
  }
  return total;
}

}  // namespace

int64_t usable_cores() {
  int64_t n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int64_t>(std::thread::hardware_concurrency());
  for (const auto& d : cgroup_dirs()) {
    std::istringstream q(first_line(d / "cpu.max"));
    std::string quota;
    double period = 0;
    if (q >> quota >> period && quota != "max" && period > 0)
      n = std::min<int64_t>(n, static_cast<int64_t>(std::ceil(std::atof(quota.c_str()) / period)));
  }
  return std::max<int64_t>(1, n);
}

int64_t CoreClaim::claimed_by_others() {
  const std::string dir = claims_dir();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  DirLock lock((fs::path(dir) / ".lock").string());
  return count_claims(dir, "");
}

CoreClaim::CoreClaim(int64_t want, int64_t* others_out) {
  const std::string dir = claims_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  ::chmod(dir.c_str(), 0700);
  DirLock lock((fs::path(dir) / ".lock").string());
  path_ = (fs::path(dir) / std::to_string(static_cast<long>(getpid()))).string();
  const int64_t others = lock.fd >= 0 ? count_claims(dir, path_) : 0;
  if (others_out) *others_out = others;
  threads_ = want > 0 ? want : std::max<int64_t>(1, usable_cores() - others);
  if (lock.fd < 0) return;  // no claims directory: nothing to register
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd_ < 0) return;
  ::flock(fd_, LOCK_EX);
  const std::string text = std::to_string(threads_) + "\n";
  [[maybe_unused]] ssize_t w = ::write(fd_, text.data(), text.size());
}

CoreClaim::~CoreClaim() {
  if (fd_ < 0) return;
  std::error_code ec;
  fs::remove(path_, ec);
  ::close(fd_);
}

MemoryRoom memory_room() {
  MemoryRoom r;
  auto consider = [&](double bytes, const std::string& what) {
    if (bytes < 0) return;
    if (r.bytes < 0 || bytes < r.bytes) r = {bytes, what};
  };
  std::ifstream mi("/proc/meminfo");
  for (std::string key; mi >> key;) {
    double kb = 0;
    std::string unit;
    mi >> kb >> unit;
    if (key == "MemAvailable:") consider(kb * 1024.0, "MemAvailable in /proc/meminfo");
  }
  for (const auto& d : cgroup_dirs()) {
    std::string max = first_line(d / "memory.max"), cur = first_line(d / "memory.current");
    if (!max.empty() && max != "max" && !cur.empty())
      consider(std::max(0.0, std::atof(max.c_str()) - std::atof(cur.c_str())),
               "cgroup limit " + (d / "memory.max").string());
  }
  rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    std::ifstream st("/proc/self/statm");
    double pages = 0;
    st >> pages;
    consider(std::max(0.0, static_cast<double>(rl.rlim_cur) -
                               pages * static_cast<double>(sysconf(_SC_PAGESIZE))),
             "address-space limit (ulimit -v)");
  }
  return r;
}

double resident_bytes() {
  std::ifstream st("/proc/self/statm");
  double size = 0, resident = 0;
  st >> size >> resident;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE));
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.0f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f KB", b / 1e3);
  return buf;
}

namespace {

// The state letter of /proc/<pid>[/task/<tid>]/stat ('R', 'S', 'Z', ...), or 0 if unreadable.
char proc_state(const fs::path& stat) {
  const std::string line = first_line(stat);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : 0;
}

bool exited(char state) { return state == 'Z' || state == 'X'; }

// The pid written in <dir>/run.lock by the process that last took it, or 0.
long run_lock_pid(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "run.lock");
  long pid = 0;
  return in >> pid && pid > 0 ? pid : 0;
}

}  // namespace

bool process_alive(long pid) {
  // A killed process's main thread can be a zombie (state Z) while its other threads still
  // exit, holding its files and their locks; and one whose parent died may stay a zombie if
  // nothing reaps it. So: alive while any of its threads has not exited.
  const fs::path task = fs::path("/proc") / std::to_string(pid) / "task";
  std::error_code ec;
  fs::directory_iterator it(task, ec);
  if (ec)
    return fs::exists("/proc/self/stat")
               ? false
               : ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const char state = proc_state(it->path() / "stat");
    if (state != 0 && !exited(state)) return true;
  }
  return false;
}

bool run_lock_owner_alive(const std::string& dir) {
  const long pid = run_lock_pid(dir);
  return pid > 0 && process_alive(pid);
}

RunLock::RunLock(const std::string& dir) {
  const std::string path = (fs::path(dir) / "run.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path + ": cannot create the run's lock file: " + std::strerror(errno));
  // A killed owner whose main thread has exited releases the lock when its last thread has:
  // wait for that (a few ms, longer on a loaded machine), not for a live owner.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::flock(fd_, LOCK_EX | LOCK_NB) < 0) {
    const int err = errno;
    if (err == EINTR) continue;
    const long owner = run_lock_pid(dir);
    if (err == EWOULDBLOCK && owner > 0 &&
        exited(proc_state(fs::path("/proc") / std::to_string(owner) / "stat")) &&
        std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    ::close(fd_);
    fd_ = -1;
    throw Error(dir + ": another ablate process" +
                (owner > 0 ? " (pid " + std::to_string(owner) + ")" : "") +
                " is writing this run; wait for it to end, or stop it first (Ctrl-C or kill: it "
                "checkpoints)");
  }
  const std::string pid = std::to_string(static_cast<long>(getpid())) + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] ssize_t w = ::pwrite(fd_, pid.data(), pid.size(), 0);
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ablate
