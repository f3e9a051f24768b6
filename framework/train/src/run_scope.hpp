// What a run holds of its process while it lives (trainer.cpp): the worker threads, the
// default precision of the graphs it makes, and the account of the CPU time it spends.
// Internal to the train layer.
#pragma once
#include <tbb/global_control.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>

#include "ablate/communicator.hpp"
#include "ablate/graph.hpp"
#include "ablate/machine.hpp"
#include "ablate/runfile.hpp"

namespace ablate {

// train.precision for every graph made while the run goes on (its evaluators', the final
// sample's), and the default before it afterwards.
struct PrecisionScope {
  Precision saved = default_precision();
  explicit PrecisionScope(Precision p) { set_default_precision(p); }
  ~PrecisionScope() { set_default_precision(saved); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;
};

// The CPU time of a run. Attribute cpu_seconds: the CPU time (user + system, all threads) of
// every process that has trained the run, this one included; eval_cpu_seconds: the part of it
// spent evaluating (so cpu_seconds - eval_cpu_seconds is the training's). Written at each
// checkpoint and at the end.
struct CpuTime {
  double before = 0;  // CPU seconds of the processes that trained this run before this one
  double eval = 0;    // CPU seconds spent in evaluate_at, by every process of this run
  static double now() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }
  double total() const { return before + now(); }
  double write(RunFile& rf) const {  // returns the cpu_seconds written
    const double cpu = total();
    rf.set_attr("cpu_seconds", cpu);
    rf.set_attr("eval_cpu_seconds", eval);
    return cpu;
  }
};

// The worker threads of a run, held while it lives. One process: the cores no other ablate
// run claims (CoreClaim); ranks on one machine share its cores.
struct Threads {
  std::unique_ptr<CoreClaim> claim;
  std::optional<tbb::global_control> parallelism;
  int64_t n = 1, others = 0;  // others: the cores other ablate runs claim
  void take(int64_t want, const Communicator& comm) {
    if (comm.size() == 1) {
      claim = std::make_unique<CoreClaim>(want, &others);
      n = claim->threads();
    } else {
      n = want > 0 ? want : std::max<int64_t>(1, usable_cores() / comm.local_size());
    }
    parallelism.emplace(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(n));
  }
};

}  // namespace ablate
