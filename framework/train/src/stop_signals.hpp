// SIGINT/SIGTERM during a run (RunOptions::handle_signals): the first asks the loop to finish
// its step, write a checkpoint and stop (status interrupted); a second exits at once.
// Internal to the train layer.
#pragma once
#include <signal.h>

namespace ablate {

// Installs the handlers while it lives (when `install`), restoring the previous ones after.
class StopSignals {
 public:
  explicit StopSignals(bool install);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  bool installed_;
  struct sigaction old_int_ {
  }, old_term_{};
};

// The signal received since the handlers were installed, else 0.
int stop_signal();
// "SIGINT", "SIGTERM", else "a signal".
const char* stop_signal_name(int sig);

}  // namespace ablate
