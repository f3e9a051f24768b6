// Stopping a run or a sweep on SIGINT, SIGTERM or SIGHUP (see stop_signals.hpp).
#include "ablate/stop_signals.hpp"

#include <unistd.h>

#include <csignal>

namespace ablate {
namespace {

// Set by a signal while the handlers are installed; the loop reads it after each step.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_run_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    static const char msg[] =
        "\nsecond interrupt: exiting now; the run keeps its last checkpoint\n";
    [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(128 + sig);
  }
  g_stop_signal = sig;
  static const char msg[] =
      "\ninterrupt: finishing this step and writing a checkpoint (interrupt again to exit at "
      "once)\n";
  [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
}

extern "C" void on_recorded_stop_signal(int sig) { g_stop_signal = sig; }

}  // namespace

StopSignals::StopSignals(OnStop on_stop, bool install) : installed_(install) {
  if (!installed_) return;
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop == OnStop::finish_step ? on_run_stop_signal : on_recorded_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
  sigaction(SIGHUP, nullptr, &old_hup_);
  hup_ = old_hup_.sa_handler != SIG_IGN;
  if (hup_) sigaction(SIGHUP, &sa, nullptr);
}

StopSignals::~StopSignals() {
  if (!installed_) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  if (hup_) sigaction(SIGHUP, &old_hup_, nullptr);
}

int stop_signal() { return static_cast<int>(g_stop_signal); }

}  // namespace ablate
