// attention_bench: the fused attention op (attention.cpp, attention_lanes.inc) at the bench
// models' shapes on one core, forward alone and forward + backward, in float32 and bf16
// graphs, with the kernel path of ABLATE_ISA. GFLOP/s count the causal products actually
// needed (query i against keys 0..i): 2 products forward, 4 more backward, 2 HS flops each.
// A benchmark program, not a test (docs/BENCHMARKS.md has its table):
//   cmake --build build --target attention_bench && taskset -c 1 build/tools/attention_bench
// (an argument: only the shapes of that model).
// Not part of the default build.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ablate/graph.hpp"
#include "ablate/ops.hpp"
#include "best_time.hpp"

namespace {

struct Shape {
  const char* model;
  int64_t B, T, NH, NKV, HS;  // B: the batch rows one of two threads takes
};
const Shape kShapes[] = {
    {"nanogpt-baby", 32, 256, 6, 6, 64},
    {"seed002", 8, 128, 8, 8, 12},
    {"seed000", 16, 64, 4, 4, 8},
    {"smollm-135m", 4, 256, 9, 3, 64},  // grouped-query heads (3 per kv head), as imported
};

ablate::Parameter make_param(int64_t rows, int64_t cols, std::mt19937& rng) {
  ablate::Parameter p;
  p.value_storage.assign(static_cast<size_t>(rows * cols), 0.0f);
  p.grad_storage.assign(static_cast<size_t>(rows * cols), 0.0f);
  p.value = ablate::Tensor{p.value_storage.data(), rows, cols};
  p.grad = ablate::Tensor{p.grad_storage.data(), rows, cols};
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (auto& x : p.value_storage) x = n(rng);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::printf("CPU: %s; kernel path %s; bf16 products: %s; threads: as many as taskset gives\n\n",
              ablate::cpu_model().c_str(), ablate::kernel_path(), ablate::bf16_kernel());
  std::printf(
      "| model | B x T x NH (kv) x HS | precision | forward ms | GFLOP/s | forward + backward ms | "
      "GFLOP/s |\n|---|---|---|---:|---:|---:|---:|\n");
  std::mt19937 rng(1);
  for (const Shape& s : kShapes) {
    if (argc > 1 && std::string(argv[1]) != s.model) continue;
    const int64_t C = s.NH * s.HS, KV = s.NKV * s.HS;
    ablate::Parameter q = make_param(s.B * s.T, C, rng), k = make_param(s.B * s.T, KV, rng),
                      v = make_param(s.B * s.T, KV, rng);
    // query i against keys 0..i: T (T + 1) / 2 pairs per (batch, head), 2 HS flops per product
    const double pairs = static_cast<double>(s.B * s.NH) * static_cast<double>(s.T * (s.T + 1) / 2);
    const double flop = 2.0 * static_cast<double>(s.HS) * pairs;
    for (const ablate::Precision p : {ablate::Precision::float32, ablate::Precision::bf16}) {
      ablate::set_default_precision(p);
      ablate::Graph g;
      ablate::AttentionSpec spec;
      spec.batch = s.B;
      spec.time = s.T;
      spec.n_heads = s.NH;
      spec.n_kv_heads = s.NKV;
      spec.head_size = s.HS;
      auto step = [&](bool backward) {
        g.reset();
        ablate::Var out = ablate::attention(g, g.param(q), g.param(k), g.param(v), spec);
        if (backward) g.backward(out);
      };
      const double fwd = ablate::bench::best_seconds([&] { step(false); });
      const double both = ablate::bench::best_seconds([&] { step(true); });
      std::printf("| %s | %lld x %lld x %lld (%lld) x %lld | %s | %.2f | %.1f | %.2f | %.1f |\n",
                  s.model, static_cast<long long>(s.B), static_cast<long long>(s.T),
                  static_cast<long long>(s.NH), static_cast<long long>(s.NKV),
                  static_cast<long long>(s.HS), ablate::precision_name(p), fwd * 1e3,
                  2 * flop / fwd / 1e9, both * 1e3, 6 * flop / both / 1e9);
    }
  }
  return 0;
}
