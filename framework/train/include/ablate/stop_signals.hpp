// The owner of SIGINT, SIGTERM and SIGHUP (a closed terminal; left alone where it is ignored,
// as under nohup) while a loop runs that stops on them: a run (RunOptions::handle_signals),
// where the first asks the loop to finish its step, write a checkpoint and stop (status
// interrupted) and a second exits at once; a sweep, which records the signal and stops its
// points.
#pragma once
#include <signal.h>

namespace ablate {

// What the handlers do on a signal.
enum class OnStop {
  finish_step,  // a run: the first is recorded and announced on stderr, a second exits at once
  record,       // a sweep: each is recorded (the latest wins); the loop polls stop_signal()
};

// Installs the handlers while it lives (when `install`), restoring the previous ones after.
class StopSignals {
 public:
  explicit StopSignals(OnStop on_stop, bool install = true);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  bool installed_;
  bool hup_ = false;  // SIGHUP's handler installed (it was not ignored)
  struct sigaction old_int_ {
  }, old_term_{}, old_hup_{};
};

// The signal received since the handlers were installed, else 0.
int stop_signal();

}  // namespace ablate
