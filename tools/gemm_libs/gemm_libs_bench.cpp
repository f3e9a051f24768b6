// gemm_libs_bench: ablate's GEMM (the kernel path in use: ABLATE_ISA) against oneDNN's
// matmul and BLIS's sgemm at the products of the bench models, on one core, C = op(A) op(B).
// A benchmark program, not a test: docs/BENCHMARKS.md has its table and command, e.g.
//   OMP_NUM_THREADS=1 ABLATE_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 BLIS_ARCH_TYPE=3
//   build/tools/gemm_libs_bench  # 3: haswell
// Built only when oneDNN (libdnnl-dev) and BLIS (libblis-dev) are found, and not by
// default: cmake --build build --target gemm_libs_bench.
#include <blis.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <vector>

#include "../../framework/core/src/ops/dispatch.hpp"
#include "ablate/ops.hpp"
#include "best_time.hpp"

namespace {
struct Shape {
  const char* model;
  const char* what;
  bool ta, tb;
  int64_t m, n, k;
};
// Per-thread blocks as gemm_acc_parallel cuts them (rows in blocks of 1024 for
// nanogpt-baby, 256 for the seed models; weight gradients over half the rows each).
const Shape kShapes[] = {
    {"nanogpt-baby", "x W (qkv)", false, false, 1024, 1152, 384},
    {"nanogpt-baby", "x W (fc)", false, false, 1024, 1536, 384},
    {"nanogpt-baby", "h W (proj)", false, false, 1024, 384, 1536},
    {"nanogpt-baby", "dY W^T", false, true, 1024, 384, 1536},
    {"nanogpt-baby", "X^T dY", true, false, 384, 1536, 8192},
    {"nanogpt-baby", "x E^T (head)", false, true, 1024, 65, 384},
    {"seed002", "x W (qkv)", false, false, 256, 288, 96},
    {"seed002", "h W (proj)", false, false, 256, 96, 384},
    {"seed002", "dY W^T", false, true, 256, 96, 384},
    {"seed002", "X^T dY", true, false, 96, 384, 1024},
    {"seed000", "x W (qkv)", false, false, 256, 96, 32},
    {"seed000", "h W (proj)", false, false, 256, 32, 128},
    {"seed000", "dY W^T", false, true, 256, 32, 128},
    {"seed000", "X^T dY", true, false, 32, 128, 1024},
    // experiments/arithmetic/mixed.yaml on one thread (4,736 rows: 128 problems of 37
    // tokens; weight gradients over half of them each): d 128, FFN 512.
    {"arith-mixed", "x W (fc)", false, false, 4736, 512, 128},
    {"arith-mixed", "h W (proj)", false, false, 4736, 128, 512},
    {"arith-mixed", "dY W^T (fc)", false, true, 4736, 128, 512},
    {"arith-mixed", "X^T dY (fc)", true, false, 128, 512, 2368},
    {"arith-mixed", "H^T dY (proj)", true, false, 512, 128, 2368},
};

// GFLOP/s of f (best_time.hpp).
double gflops(const Shape& s, const std::function<void()>& f) {
  return 2.0 * static_cast<double>(s.m * s.n * s.k) / ablate::bench::best_seconds(f) / 1e9;
}
}  // namespace

int main() {
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  // What each library actually runs (an environment variable it does not understand is
  // ignored: BLIS 0.9's BLIS_ARCH_TYPE takes the arch_t number, e.g. 3 for haswell).
  // One thread for all three (BLIS's OpenMP build otherwise takes every core, whatever
  // OMP_NUM_THREADS says).
  bli_thread_set_num_threads(1);
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const char* dnnl_isa = isa == dnnl::cpu_isa::avx2              ? "avx2"
                         : isa == dnnl::cpu_isa::avx512_core     ? "avx512_core"
                         : isa == dnnl::cpu_isa::avx512_core_amx ? "avx512_core_amx"
                         : isa == dnnl::cpu_isa::sse41           ? "sse41"
                                                                 : "other";
  std::printf(
      "CPU: %s; ablate kernel path %s; oneDNN ISA %s (ONEDNN_MAX_CPU_ISA=%s); BLIS arch %s "
      "(BLIS_ARCH_TYPE=%s); one thread\n\n",
      ablate::cpu_model().c_str(), ablate::kernel_path(), dnnl_isa,
      std::getenv("ONEDNN_MAX_CPU_ISA") ? std::getenv("ONEDNN_MAX_CPU_ISA") : "(unset)",
      bli_arch_string(bli_arch_query_id()),
      std::getenv("BLIS_ARCH_TYPE") ? std::getenv("BLIS_ARCH_TYPE") : "(unset)");
  std::printf(
      "| model | product | m x n x k | ablate GFLOP/s | oneDNN | BLIS | fastest "
      "|\n|---|---|---|---:|---:|---:|---|\n");
  for (const Shape& s : kShapes) {
    // A stored (m,k), or (k,m) when transposed; B (k,n), or (n,k).
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
        c(static_cast<size_t>(s.m * s.n));
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    const double ours = gflops(s, [&] {
      ablate::kernels::isa_kernels().gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(),
                                          ldb, c.data(), s.n, true, nullptr);
    });
    const std::vector<float> ref = c;  // ours; the libraries must agree with it
    auto max_diff = [&] {
      float d = 0;
      for (size_t i = 0; i < c.size(); ++i) d = std::max(d, std::abs(c[i] - ref[i]));
      return d;
    };
    const memory::desc ad({s.m, s.k}, memory::data_type::f32,
                          s.ta ? memory::dims{1, s.m} : memory::dims{s.k, 1});
    const memory::desc bd({s.k, s.n}, memory::data_type::f32,
                          s.tb ? memory::dims{1, s.k} : memory::dims{s.n, 1});
    const memory::desc cd({s.m, s.n}, memory::data_type::f32, memory::dims{s.n, 1});
    dnnl::matmul mm(
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));  // oneDNN 2.x
    memory am(ad, eng, a.data()), bm(bd, eng, b.data()), cm(cd, eng, c.data());
    const double onednn = gflops(s, [&] {
      mm.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      strm.wait();
    });
    const float diff_onednn = max_diff();
    float one = 1.0f, zero = 0.0f;
    const double blis = gflops(s, [&] {
      bli_sgemm(s.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
                s.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.m, s.n, s.k, &one, a.data(), lda, 1,
                b.data(), ldb, 1, &zero, c.data(), s.n, 1);
    });
    const float diff = std::max(diff_onednn, max_diff());
    if (diff > 1e-3f * static_cast<float>(s.k))
      std::fprintf(stderr, "gemm_libs_bench: %s %s: the libraries' C differs from ablate's by %g\n",
                   s.model, s.what, diff);
    const char* best = ours >= onednn && ours >= blis ? "ablate"
                       : onednn >= blis               ? "oneDNN"
                                                      : "BLIS";
    std::printf("| %s | %s | %lld x %lld x %lld | %.0f | %.0f | %.0f | %s |\n", s.model, s.what,
                static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), ours, onednn, blis, best);
  }
  return 0;
}
