// What this process may use of the machine it shares: cores (affinity and cgroup quota,
// minus the threads other ablate runs hold), memory (MemAvailable, cgroup limit, address
// space limit), and a lock that keeps two processes from writing one run directory.
#pragma once
#include <cstdint>
#include <string>

namespace ablate {

// The time now, UTC, as 2026-01-31T12:00:00Z (run.log, sweep.log, the run file's timestamps).
std::string now_iso();

// Cores this process may run on: its CPU affinity mask, capped by a cgroup v2 cpu.max
// quota (rounded up). At least 1.
int64_t usable_cores();

// A claim of `threads` cores by a training process, held while the object lives: a file
// <pid> in the claims directory ($ABLATE_RUNTIME_DIR, else $XDG_RUNTIME_DIR/ablate, else
// /tmp/ablate-<uid>), locked with flock so that a process that dies drops its claim.
class CoreClaim {
 public:
  // Threads claimed by other live processes (stale claims are removed on the way).
  static int64_t claimed_by_others();
  // Registers the claim; `others` (if not null) receives claimed_by_others() read under
  // the same directory lock, so that two runs starting together see each other.
  // Threads = want > 0 ? want : max(1, usable_cores() - others).
  explicit CoreClaim(int64_t want, int64_t* others = nullptr);
  ~CoreClaim();
  CoreClaim(const CoreClaim&) = delete;
  CoreClaim& operator=(const CoreClaim&) = delete;
  int64_t threads() const { return threads_; }

 private:
  int fd_ = -1;
  std::string path_;
  int64_t threads_ = 1;
};

// Memory this process can still allocate, in bytes: the smallest of MemAvailable
// (/proc/meminfo), the cgroup v2 memory.max minus memory.current, and RLIMIT_AS minus
// the current address space. `limited_by` names which one. Negative when unknown.
struct MemoryRoom {
  double bytes = -1;
  std::string limited_by;
};
MemoryRoom memory_room();
// Resident set size of this process, bytes (0 if unknown).
double resident_bytes();
// "1.23 GB", "456 MB", "12 KB".
std::string human_bytes(double bytes);

// Whether a thread of process `pid` on this machine has not exited yet (a process whose main
// thread is a zombie may still hold files and locks while its other threads exit).
bool process_alive(long pid);
// Whether the process that last took <dir>/run.lock (its pid is in the file) is still
// alive on this machine. False without a lock file. Looks only: it never takes the lock.
bool run_lock_owner_alive(const std::string& dir);

// An exclusive lock on <dir>/run.lock (flock), held while the object lives, so that two
// processes never write one run. Error naming the other process when it is taken; a killed
// owner that is still exiting (main thread a zombie) is waited for, up to 10 s.
class RunLock {
 public:
  explicit RunLock(const std::string& dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ablate
