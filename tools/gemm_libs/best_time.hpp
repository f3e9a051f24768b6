// The timing of the kernel benchmarks in this directory (gemm_libs_bench, gemm_bf16_bench,
// attention_bench): seconds per call of f, the best of 5 batches of at least 0.1 s each,
// after one untimed call.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>

namespace ablate::bench {

inline double best_seconds(const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    int64_t reps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double dt = 0;
    while (dt < 0.1) {
      f();
      ++reps;
      dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    best = std::min(best, dt / static_cast<double>(reps));
  }
  return best;
}

}  // namespace ablate::bench
