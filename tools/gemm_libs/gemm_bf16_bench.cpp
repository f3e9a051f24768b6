// gemm_bf16_bench: the AVX512_BF16 GEMM (VDPBF16PS; isa_avx512_bf16.cpp) and oneDNN's bf16
// matmul (bf16_onednn.cpp; AMX-BF16 tiles where the CPU has them) against the float32 GEMM of
// the kernel path in use (ABLATE_ISA), plain and rounding B to bf16 as it packs it (what bf16
// products run on CPUs where the dot product is not the faster one: linalg.cpp), on one core,
// at the products of the bench models and two larger ones. First it measures the
// instruction rates that decide between them: 12 independent chains of 512-bit FMAs against
// 12 of VDPBF16PS.
// A benchmark program, not a test (docs/BENCHMARKS.md has its table):
//   cmake --build build --target gemm_bf16_bench && taskset -c 1 build/tools/gemm_bf16_bench
// Not part of the default build.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "../../framework/core/src/ops/dispatch.hpp"
#include "../../framework/core/src/ops/kernels.hpp"
#include "ablate/ops.hpp"
#include "best_time.hpp"

namespace {
using namespace ablate::kernels;

struct Shape {
  const char* model;
  const char* what;
  bool ta, tb;
  int64_t m, n, k;
};
// Per-thread blocks as gemm_bf16_parallel cuts them (gemm_libs_bench.cpp has the same), and
// two whole products of 4,096 and 2,048 rows.
const Shape kShapes[] = {
    {"nanogpt-baby", "x W (qkv)", false, false, 1024, 1152, 384},
    {"nanogpt-baby", "x W (fc)", false, false, 1024, 1536, 384},
    {"nanogpt-baby", "h W (proj)", false, false, 1024, 384, 1536},
    {"nanogpt-baby", "dY W^T", false, true, 1024, 384, 1536},
    {"nanogpt-baby", "X^T dY", true, false, 384, 1536, 8192},
    {"seed002", "x W (qkv)", false, false, 256, 288, 96},
    {"seed002", "h W (proj)", false, false, 256, 96, 384},
    {"seed002", "dY W^T", false, true, 256, 96, 384},
    {"seed002", "X^T dY", true, false, 96, 384, 1024},
    {"seed000", "x W (qkv)", false, false, 256, 96, 32},
    {"seed000", "dY W^T", false, true, 256, 32, 128},
    {"d 384", "x W (fc)", false, false, 4096, 1536, 384},
    {"d 384", "h W (proj)", false, false, 4096, 384, 1536},
    {"d 96", "x W (fc)", false, false, 2048, 384, 96},
};

// GFLOP/s of f (best_time.hpp).
double gflops(double flop, const std::function<void()>& f) {
  return flop / ablate::bench::best_seconds(f) / 1e9;
}

#if defined(__x86_64__)
// Instructions per ns of 12 independent chains: 512-bit FMA, and VDPBF16PS.
__attribute__((target("avx512f"))) float fma_chains(int64_t iters) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_fmadd_ps(a, x, y);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0];
}
__attribute__((target("avx512f,avx512bf16"))) float dot_chains(int64_t iters) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3F803F80);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, x);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0];
}
double per_ns(float (*f)(int64_t)) {
  constexpr int64_t kIters = 20000000;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    volatile float sink = f(kIters);
    (void)sink;
    best = std::max(
        best, 12.0 * kIters /
                  std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                      .count());
  }
  return best;
}
#endif
}  // namespace

int main() {
  const IsaKernels& isa = isa_kernels();
  const bool dot = cpu_has_avx512_bf16();
  std::printf("CPU: %s; kernel path %s; bf16 products: %s\n", ablate::cpu_model().c_str(),
              ablate::kernel_path(), ablate::bf16_kernel());
#if defined(__x86_64__)
  if (cpu_isa() == Isa::avx512) {
    const double f = per_ns(&fma_chains);
    std::printf("512-bit FMA: %.2f instructions/ns = %.0f GFLOP/s\n", f, f * 32);
    if (dot) {
      const double d = per_ns(&dot_chains);
      std::printf("VDPBF16PS:   %.2f instructions/ns = %.0f GFLOP/s (bf16 products)\n", d, d * 64);
    }
  }
#endif
  std::printf("\nGFLOP/s on one core (2 m n k per product):\n\n");
  const Bf16Kernels* onednn = cpu_isa() == Isa::avx512 ? onednn::kernels() : nullptr;
  if (onednn) std::printf("oneDNN: %s\n", onednn::isa().c_str());
  std::printf(
      "| model | product | m x n x k | float32 (%s) | float32, B rounded as packed | bf16 "
      "VDPBF16PS | bf16 oneDNN |\n|---|---|---|---:|---:|---:|---:|\n",
      ablate::kernel_path());
  std::mt19937 rng(1);
  std::normal_distribution<float> u(0, 1);
  for (const Shape& s : kShapes) {
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
        c(static_cast<size_t>(s.m * s.n));
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    std::vector<uint16_t> ab(a.size()), bb(b.size());
    isa.bf16.to_bf16(a.data(), static_cast<int64_t>(a.size()), ab.data());
    isa.bf16.to_bf16(b.data(), static_cast<int64_t>(b.size()), bb.data());
    const double flop = 2.0 * static_cast<double>(s.m * s.n * s.k);
    const double f32 = gflops(flop, [&] {
      isa.gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, c.data(), s.n, true,
               nullptr);
    });
    // What bf16 products run without a bf16 GEMM: B (the weights) rounded as it is packed.
    const double rb = gflops(flop, [&] {
      isa.bf16.gemm_round_b(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, c.data(),
                            s.n, true, nullptr);
    });
    double dp = 0;
#if defined(__x86_64__)
    if (dot)
      dp = gflops(flop, [&] {
        avx512_bf16::kBf16.gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, ab.data(), lda, bb.data(), ldb,
                                c.data(), s.n, true, nullptr);
      });
#endif
    const double dn = !onednn ? 0 : gflops(flop, [&] {
      onednn->gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, ab.data(), lda, bb.data(), ldb, c.data(), s.n,
                   true, nullptr);
    });
    auto cell = [](bool ran, double v) {
      return ran ? std::to_string(static_cast<int>(std::lround(v))) : std::string("-");
    };
    std::printf("| %s | %s | %lld x %lld x %lld | %.0f | %.0f | %s | %s |\n", s.model, s.what,
                static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), f32, rb, cell(dot, dp).c_str(),
                cell(onednn != nullptr, dn).c_str());
  }
  return 0;
}
