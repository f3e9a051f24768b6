// Child processes for the commands that run other programs (a dataset download through curl
// or wget, a sweep's points): start one with its standard streams redirected, wait for it.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace ablate {

// Where a child's stdin, stdout and stderr go: an open descriptor of this process (the child
// gets a copy; the caller still closes its own), or -1 for /dev/null.
struct ChildStreams {
  int in = -1, out = -1, err = -1;
};

// Starts argv[0] (a path; PATH is not searched) with argv and this process's environment.
// Returns 0 and sets `pid`, or the error number posix_spawn gave. With own_group the child
// leads a process group of its own: a terminal's Ctrl-C (sent to its foreground group) then
// reaches this process only, which stops the child itself (a sweep's points get one SIGTERM).
int spawn_process(const std::vector<std::string>& argv, const ChildStreams& streams, pid_t& pid,
                  bool own_group = false);

// Waits for the child to end (through interrupted waits) and returns its wait status.
int wait_process(pid_t pid);

// True, with its wait status in `status`, if the child has ended; never waits.
bool process_ended(pid_t pid, int& status);

// "SIGINT", "SIGTERM", "SIGKILL", ... for the common signals, else "signal N".
std::string signal_name(int sig);

}  // namespace ablate
