// What a run tells while it trains: the progress line on stderr (step, loss, lr, tokens/s,
// elapsed time and ETA) and run.log in the run directory. Internal to the train layer.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

#include "ablate/machine.hpp"  // now_iso

namespace ablate {

// The progress line on stderr (unless quiet) and run.log in the run directory (always,
// on rank 0): one timestamped line per event, and a train line at most every 10 s.
class Progress {
 public:
  Progress(bool quiet, int64_t total);
  void open_log(const std::string& path);
  // A step's line: `per_step` seconds a step give the ETA to the run's last step; `aux` (may be
  // empty) goes after the loss, e.g. "moe_balance 1.003, moe_max_load 1.09".
  void step(int64_t step, double loss, float lr, double tok_s, double elapsed, double per_step,
            const std::string& aux = "");
  // always: also with quiet (what the user must see: how to resume).
  void line(const std::string& s, bool always = false);
  // run.log only (the caller prints it).
  void to_log(const std::string& s);

 private:
  bool quiet_, tty_;
  int64_t total_;
  double last_print_ = -1e9;
  std::ofstream log_;
};

}  // namespace ablate
