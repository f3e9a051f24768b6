// Family "scheduler": the learning-rate factor at each step (lr = base_lr * factor).
#pragma once
#include <cstdint>

namespace ablate {

class Scheduler {
 public:
  static constexpr const char* kFamily = "scheduler";
  virtual ~Scheduler() = default;
  // step counts from 0; total is train.steps.
  virtual float factor(int64_t step, int64_t total) const = 0;
};

}  // namespace ablate
