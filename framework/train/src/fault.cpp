// Fault injection points (see fault.hpp).
#include "ablate/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ablate {
namespace {

struct Target {
  std::string point;
  long at = 0;  // kill on this arrival
  long seen = 0;
  long sleep_ms = 0;  // "point:Nms": sleep this long at every arrival instead
};

struct Plan {
  bool active = false;
  std::mutex mutex;
  std::vector<Target> targets;
};

// "step:12,checkpoint.partial:2,step:20ms"; malformed entries are ignored (test-only input).
Plan& plan() {
  static Plan* p = [] {
    auto* pl = new Plan();
    const char* env = std::getenv("ABLATE_FAULT");
    if (!env || !*env) return pl;
    std::string s = env;
    size_t start = 0;
    while (start < s.size()) {
      size_t end = s.find(',', start);
      if (end == std::string::npos) end = s.size();
      std::string item = s.substr(start, end - start);
      size_t colon = item.rfind(':');
      if (colon != std::string::npos && colon > 0) {
        char* rest = nullptr;
        long n = std::strtol(item.c_str() + colon + 1, &rest, 10);
        if (n > 0 && std::strcmp(rest, "ms") == 0)
          pl->targets.push_back({item.substr(0, colon), 0, 0, n});
        else if (n > 0 && *rest == '\0') pl->targets.push_back({item.substr(0, colon), n, 0, 0});
      }
      start = end + 1;
    }
    pl->active = !pl->targets.empty();
    return pl;
  }();
  return *p;
}

}  // namespace

void fault_point(const char* name) {
  Plan& p = plan();
  if (!p.active) return;
  long sleep_ms = 0;
  std::unique_lock<std::mutex> lock(p.mutex);
  for (Target& t : p.targets) {
    if (t.point == name) sleep_ms += t.sleep_ms;
    if (t.point != name || t.sleep_ms > 0 || ++t.seen != t.at) continue;
    static const char kMsg[] = "ablate: ABLATE_FAULT: killing the process at fault point ";
    ssize_t ignored = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    ignored = ::write(STDERR_FILENO, name, std::strlen(name));
    ignored = ::write(STDERR_FILENO, "\n", 1);
    (void)ignored;
    ::kill(::getpid(), SIGKILL);
  }
  lock.unlock();
  if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
}

}  // namespace ablate
