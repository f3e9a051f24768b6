// Tests of bf16 matrix products (Graph::precision, framework/core/src/ops/linalg.cpp and the
// bf16 GEMMs of dispatch.hpp): the rounding, the kernels against the exact product of their
// bf16 inputs, linear forward and backward against float64 references and against float32
// within bf16's tolerance, finite differences, the parameters' bf16 copies, determinism.
// ctest runs them once per kernel path (kernel_path_*, tests/CMakeLists.txt).
#include <doctest/doctest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <sys/utsname.h>

#include "ops/dispatch.hpp"  // private to the core layer (include path set in CMakeLists.txt)
#include "ops/kernels.hpp"
#include "ablate/graph.hpp"
#include "ablate/ops.hpp"
#include "ablate/tensor.hpp"

namespace {
using namespace ablate;

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Round to nearest even bf16, written plainly: the nearer of the two bf16 values around x
// (ties: the one with an even last bit); NaN quiet; denormals to a signed zero.
uint16_t reference_bf16(float x) {
  const uint32_t u = bits_of(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);
  if ((u & 0x7F800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
  const double dl = std::fabs(static_cast<double>(x) - float_of(lo));
  const double dh = std::isinf(float_of(hi)) && !std::isinf(x)
                        ? std::ldexp(1.0, 128) -
                              std::fabs(static_cast<double>(x))  // rounding up overflows to inf
                        : std::fabs(static_cast<double>(float_of(hi)) - x);
  if (std::isinf(x)) return static_cast<uint16_t>(u >> 16);
  if (dl < dh) return static_cast<uint16_t>(lo >> 16);
  if (dh < dl) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

std::vector<float> random_values(size_t n, Rng& rng, float scale = 1.0f) {
  std::vector<float> v(n);
  for (float& x : v) x = scale * rng.normal();
  return v;
}

// C = init + alpha op(A) op(B) (or C + alpha op(A) op(B)) of the bf16 values, in float64,
// with abs = the same sum of absolute values (the scale of float32's rounding error).
struct Reference {
  std::vector<double> c, abs;
};
Reference reference_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                         const std::vector<uint16_t>& a, int64_t lda,
                         const std::vector<uint16_t>& b, int64_t ldb,
                         const std::vector<float>& c0) {
  Reference r{std::vector<double>(static_cast<size_t>(m * n)),
              std::vector<double>(static_cast<size_t>(m * n))};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, sa = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x =
            kernels::bf16_to_float(a[static_cast<size_t>(ta ? p * lda + i : i * lda + p)]);
        const double y =
            kernels::bf16_to_float(b[static_cast<size_t>(tb ? j * ldb + p : p * ldb + j)]);
        s += x * y;
        sa += std::fabs(x * y);
      }
      r.c[static_cast<size_t>(i * n + j)] = c0[static_cast<size_t>(i * n + j)] + alpha * s;
      r.abs[static_cast<size_t>(i * n + j)] =
          std::fabs(c0[static_cast<size_t>(i * n + j)]) + std::fabs(alpha) * sa;
    }
  return r;
}

// float32 sums of k exact products: at most about k * 2^-24 of the sum of their absolute
// values off (a bound for any order of summation); 4e-7 k leaves room for FMA's single rounding.
void check_close(const float* got, const Reference& ref, int64_t k, const std::string& what) {
  const double tol = 4e-7 * static_cast<double>(k + 2);
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.c.size(); ++i) {
    const double err = std::fabs(got[i] - ref.c[i]);
    if (err > tol * ref.abs[i] + 1e-30) ++bad;
    worst = std::max(worst, err / (ref.abs[i] + 1e-30));
  }
  INFO(what << ": worst error " << worst << " of the absolute sum (tolerance " << tol << ")");
  CHECK(bad == 0);
}

struct GemmCase {
  bool ta, tb;
  int64_t m, n, k,
      pad;  // pad: extra columns of every stored row (a leading dimension above the width)
};
const GemmCase kGemmCases[] = {
    {false, false, 1, 1, 1, 0},    {false, false, 13, 33, 7, 0},
    {false, true, 12, 32, 384, 0}, {true, false, 25, 47, 9, 3},
    {true, true, 31, 17, 801, 1},  {false, false, 130, 520, 385, 2},
    {false, true, 121, 65, 96, 5}, {true, false, 129, 70, 1030, 0},
    {false, false, 5, 2, 33, 1},   {false, true, 14, 64, 96, 0},
};

void check_kernel(const kernels::Bf16Kernels& kern, const char* name) {
  Rng rng(5);
  for (const GemmCase& t : kGemmCases) {
    const int64_t ar = t.ta ? t.k : t.m, ac = t.ta ? t.m : t.k, br = t.tb ? t.n : t.k,
                  bc = t.tb ? t.k : t.n;
    const int64_t lda = ac + t.pad, ldb = bc + t.pad;
    std::vector<uint16_t> a(static_cast<size_t>(ar * lda)), b(static_cast<size_t>(br * ldb));
    for (auto& x : a) x = reference_bf16(rng.normal());
    for (auto& x : b) x = reference_bf16(rng.normal());
    std::vector<float> init = random_values(static_cast<size_t>(t.n), rng),
                       c0 = random_values(static_cast<size_t>(t.m * t.n), rng);
    for (int mode = 0; mode < 2; ++mode) {
      // mode 0: C += 0.5 op(A) op(B); mode 1: C = init + op(A) op(B), C not read (NaN before).
      std::vector<float> c =
          mode == 0 ? c0 : std::vector<float>(c0.size(), std::numeric_limits<float>::quiet_NaN());
      std::vector<float> start = c0;
      if (mode == 1)
        for (int64_t i = 0; i < t.m; ++i)
          for (int64_t j = 0; j < t.n; ++j)
            start[static_cast<size_t>(i * t.n + j)] = init[static_cast<size_t>(j)];
      const float alpha = mode == 0 ? 0.5f : 1.0f;
      kern.gemm(t.ta, t.tb, t.m, t.n, t.k, alpha, a.data(), lda, b.data(), ldb, c.data(), t.n,
                mode == 1, mode == 1 ? init.data() : nullptr);
      check_close(c.data(), reference_gemm(t.ta, t.tb, t.m, t.n, t.k, alpha, a, lda, b, ldb, start),
                  t.k,
                  std::string(name) + (t.ta ? " A^T" : " A") + (t.tb ? " B^T " : " B ") +
                      std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k) +
                      (mode ? " set" : " accumulate"));
    }
  }
}

// A bf16 graph's linear: y = b + x W (or x W^T), then L = sum(y * R).
struct LinearRun {
  std::vector<float> y, dx, dw, db;
};
LinearRun run_linear(Precision prec, const std::vector<float>& xv, const std::vector<float>& wv,
                     const std::vector<float>& bv, const std::vector<float>& rv, int64_t N,
                     int64_t K, int64_t M, bool tw) {
  ParamStore store;
  Parameter& x = store.add("x", N, K, Role::kCustom);
  Parameter& w = store.add("w", tw ? M : K, tw ? K : M, Role::kHidden);
  Parameter& b = store.add("b", 1, M, Role::kBias);
  std::copy(xv.begin(), xv.end(), x.value.data);
  std::copy(wv.begin(), wv.end(), w.value.data);
  std::copy(bv.begin(), bv.end(), b.value.data);
  Graph g;
  g.precision = prec;
  Var y = linear(g, g.param(x), g.param(w), g.param(b), tw);
  Var loss = sum(g, mul(g, y, g.constant(rv.data(), N, M)));
  g.backward(loss);
  const Tensor yt = g.value(y);
  return {std::vector<float>(yt.data, yt.data + yt.numel()),
          std::vector<float>(x.grad.data, x.grad.data + x.grad.numel()),
          std::vector<float>(w.grad.data, w.grad.data + w.grad.numel()),
          std::vector<float>(b.grad.data, b.grad.data + b.grad.numel())};
}

std::vector<uint16_t> to_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = reference_bf16(v[i]);
  return b;
}

double rel_norm_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(d / std::max(n, 1e-300));
}

// Attention over parameters q, k and v (or one fused qkv parameter holding them side by
// side), L = sum(y * R) + the sums of the parameters: y and the gradients of q, k and v. The
// sums' backward runs first, so attention's adds its gradients to theirs (ones).
struct AttentionRun {
  std::vector<float> y, dq, dk, dv;
};
AttentionRun run_attention(Precision prec, const std::vector<float>& qv,
                           const std::vector<float>& kv, const std::vector<float>& vv,
                           const std::vector<float>& rv, AttentionSpec spec, bool fused) {
  const int64_t N = spec.batch * spec.time, C = spec.n_heads * spec.head_size,
                KC = spec.n_kv_heads * spec.head_size;
  ParamStore store;
  Graph g;
  g.precision = prec;
  AttentionRun r;
  auto grads = [&](const Parameter& p, int64_t col, int64_t width) {
    std::vector<float> out;
    for (int64_t i = 0; i < N; ++i)
      out.insert(out.end(), p.grad.row(i) + col, p.grad.row(i) + col + width);
    return out;
  };
  auto finish = [&](Var y, std::initializer_list<Var> params) {
    Var loss = sum(g, mul(g, y, g.constant(rv.data(), N, C)));
    for (const Var p : params) loss = add(g, loss, sum(g, p));
    g.backward(loss);
    const Tensor yt = g.value(y);
    r.y.assign(yt.data, yt.data + yt.numel());
  };
  if (fused) {
    Parameter& qkv = store.add("qkv", N, C + 2 * KC, Role::kCustom);
    for (int64_t i = 0; i < N; ++i) {
      std::copy_n(qv.data() + i * C, C, qkv.value.row(i));
      std::copy_n(kv.data() + i * KC, KC, qkv.value.row(i) + C);
      std::copy_n(vv.data() + i * KC, KC, qkv.value.row(i) + C + KC);
    }
    spec.q_col = 0, spec.k_col = C, spec.v_col = C + KC;
    const Var p = g.param(qkv);
    finish(attention(g, p, p, p, spec), {p});
    r.dq = grads(qkv, 0, C), r.dk = grads(qkv, C, KC), r.dv = grads(qkv, C + KC, KC);
  } else {
    Parameter& q = store.add("q", N, C, Role::kCustom);
    Parameter& k = store.add("k", N, KC, Role::kCustom);
    Parameter& v = store.add("v", N, KC, Role::kCustom);
    std::copy(qv.begin(), qv.end(), q.value.data);
    std::copy(kv.begin(), kv.end(), k.value.data);
    std::copy(vv.begin(), vv.end(), v.value.data);
    const Var pq = g.param(q), pk = g.param(k), pv = g.param(v);
    finish(attention(g, pq, pk, pv, spec), {pq, pk, pv});
    r.dq = grads(q, 0, C), r.dk = grads(k, 0, KC), r.dv = grads(v, 0, KC);
  }
  return r;
}
std::vector<float> bf16_values(std::vector<float> v) {
  for (float& x : v) x = kernels::bf16_to_float(reference_bf16(x));
  return v;
}

// (N, K, M): a few rows (decoding's matrix-vector products), an odd reduction, blocks of
// rows, blocks of columns, and weight gradients over two halves of a long reduction.
const int64_t kLinearShapes[][3] = {
    {3, 17, 9}, {37, 33, 29}, {300, 96, 384}, {1100, 40, 24}, {2048, 64, 32}};

}  // namespace

TEST_CASE(
    "ops/bf16: rounding to bf16 is to nearest even, keeps NaN and infinities, flushes denormals, "
    "on every path") {
  const kernels::Bf16Kernels& k = kernels::isa_kernels().bf16;
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          1.00390625f /* tie, even below */,
                          1.01171875f /* tie, even above */,
                          3.4028235e38f,
                          -3.4028235e38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          float_of(0x7F800001u) /* signalling NaN */,
                          float_of(0x00400000u) /* denormal */,
                          -float_of(0x00000001u),
                          std::numeric_limits<float>::min(),
                          65504.0f,
                          1e-30f,
                          3.14159265f};
  Rng rng(3);
  for (int i = 0; i < 4000; ++i) v.push_back(float_of(static_cast<uint32_t>(rng.next_u64())));
  for (int i = 0; i < 4000; ++i)
    v.push_back(rng.normal() * std::ldexp(1.0f, static_cast<int>(rng.below(60)) - 30));
  std::vector<uint16_t> got(v.size()), par(v.size());
  k.to_bf16(v.data(), static_cast<int64_t>(v.size()), got.data());
  kernels::to_bf16_parallel(v.data(), static_cast<int64_t>(v.size()), par.data());
  // The same values as float32, bit for bit (NaN: a quiet NaN of the same sign).
  std::vector<float> rounded(v.size());
  kernels::round_to_bf16_parallel(v.data(), static_cast<int64_t>(v.size()), rounded.data());
  for (size_t i = 0; i < v.size(); ++i)
    if (bits_of(rounded[i]) != static_cast<uint32_t>(got[i]) << 16) {
      FAIL_CHECK("x = " << v[i] << ": rounded to float32 bits " << bits_of(rounded[i])
                        << ", as bf16 " << got[i]);
      break;
    }
  size_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t want = reference_bf16(v[i]);
    const bool same = std::isnan(v[i])
                          ? (got[i] & 0x7FC0) == 0x7FC0 && (got[i] >> 15) == (bits_of(v[i]) >> 31)
                          : got[i] == want;
    if (!same && bad++ < 5)
      MESSAGE("x = " << v[i] << " (bits " << bits_of(v[i]) << "): got " << got[i] << ", want "
                     << want);
    CHECK(got[i] == par[i]);
  }
  CHECK(bad == 0);
  CHECK(got[4] == 0x3F80);  // 1 + 2^-8 ties to 1 (even)
  CHECK(got[5] == 0x3F82);  // 1 + 3 2^-8 ties up to the even 1 + 2^-6
  CHECK(got[6] == 0x7F80);  // float32's largest rounds up to infinity
  CHECK(got[12] == 0x0000);
  CHECK(got[13] == 0x8000);
}

TEST_CASE(
    "ops/bf16: the process's bf16 GEMM, where it has one, equals the exact product of its bf16 "
    "inputs") {
  const kernels::Bf16Kernels& k = kernels::isa_kernels().bf16;
  if (!k.gemm) {
    MESSAGE(
        "the " << std::string(kernel_path())
               << " path has no bf16 GEMM: its bf16 products run the float32 GEMM on bf16 values, "
                  "rounding B as it packs it (the tests below)");
    return;
  }
  check_kernel(k, bf16_kernel());
}

TEST_CASE(
    "ops/bf16: the AVX512_BF16 dot-product GEMM equals the exact product of its bf16 inputs, every "
    "layout") {
  if (!kernels::cpu_has_avx512_bf16()) {
    MESSAGE("skipped: this CPU has no AVX512_BF16");
    return;
  }
  std::string env = std::getenv("ABLATE_ISA") ? std::getenv("ABLATE_ISA") : "";
  if (!env.empty() && env != "avx512_bf16" && env != "avx512") {
    MESSAGE("skipped: ABLATE_ISA=" << env << " keeps this process below the avx512 path");
    return;
  }
#if defined(__x86_64__)
  check_kernel(kernels::avx512_bf16::kBf16, "avx512_bf16");
#endif
}

TEST_CASE(
    "ops/bf16: the float32 GEMM that rounds B as it packs it equals the float32 GEMM of B's "
    "rounding bitwise, and the exact product, every layout and split") {
  const kernels::IsaKernels& isa = kernels::isa_kernels();
  REQUIRE(static_cast<bool>(isa.bf16.gemm_round_b));
  Rng rng(6);
  // op(A) bf16 values (as the rounded activations it multiplies) or not; B never.
  auto operands = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t pad,
                      bool a_rounded) {
    const int64_t ar = ta ? k : m, ac = (ta ? m : k) + pad, br = tb ? n : k,
                  bc = (tb ? k : n) + pad;
    std::vector<float> a = random_values(static_cast<size_t>(ar * ac), rng),
                       b = random_values(static_cast<size_t>(br * bc), rng);
    if (a_rounded) a = bf16_values(a);
    return std::tuple{a, ac, b, bc};
  };
  for (const GemmCase& t : kGemmCases)
    for (int mode = 0; mode < 2; ++mode) {  // C += 0.5 op(A) op(B); C = init + op(A) op(B)
      CAPTURE(t.ta);
      CAPTURE(t.tb);
      CAPTURE(t.m);
      CAPTURE(t.n);
      CAPTURE(t.k);
      CAPTURE(mode);
      const auto [a, lda, b, ldb] = operands(t.ta, t.tb, t.m, t.n, t.k, t.pad, false);
      const std::vector<float> br = bf16_values(b),
                               init = random_values(static_cast<size_t>(t.n), rng),
                               c0 = random_values(static_cast<size_t>(t.m * t.n), rng);
      std::vector<float> want = c0, got = c0;
      const float alpha = mode == 0 ? 0.5f : 1.0f;
      const float* bias = mode == 1 ? init.data() : nullptr;
      isa.gemm(t.ta, t.tb, t.m, t.n, t.k, alpha, a.data(), lda, br.data(), ldb, want.data(), t.n,
               mode == 1, bias);
      isa.bf16.gemm_round_b(t.ta, t.tb, t.m, t.n, t.k, alpha, a.data(), lda, b.data(), ldb,
                            got.data(), t.n, mode == 1, bias);
      CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
    }
  // gemm_acc_parallel's splits: rows with a last block of 4 rows, columns with a last block of
  // one column, a few rows over two halves of the reduction, and one block.
  struct Case {
    bool tb;
    int64_t m, n, k;
  };
  const Case cases[] = {{false, 36, 32, 1024}, {true, 36, 32, 1024}, {false, 8, 33, 4096},
                        {true, 8, 33, 4096},   {false, 3, 512, 64},  {false, 13, 33, 7}};
  for (const Case& t : cases) {
    CAPTURE(t.tb);
    CAPTURE(t.m);
    CAPTURE(t.n);
    CAPTURE(t.k);
    const auto [a, lda, b, ldb] = operands(false, t.tb, t.m, t.n, t.k, 1, true);
    std::vector<float> init = random_values(static_cast<size_t>(t.n), rng);
    std::vector<float> runs[2];
    for (int threads : {1, 2}) {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                static_cast<size_t>(threads));
      std::vector<float>& c = runs[threads - 1];
      c.assign(static_cast<size_t>(t.m * t.n), std::numeric_limits<float>::quiet_NaN());
      kernels::gemm_acc_parallel(false, t.tb, t.m, t.n, t.k, 1.0f, a.data(), lda, b.data(), ldb,
                                 c.data(), t.n, /*overwrite=*/true, init.data(), /*round_b=*/true);
    }
    CHECK(runs[0] == runs[1]);
    std::vector<float> start(static_cast<size_t>(t.m * t.n));
    for (int64_t i = 0; i < t.m; ++i) std::copy(init.begin(), init.end(), start.begin() + i * t.n);
    check_close(
        runs[0].data(),
        reference_gemm(false, t.tb, t.m, t.n, t.k, 1.0, to_bits(a), lda, to_bits(b), ldb, start),
        t.k, "gemm_acc_parallel with round_b");
  }
}

// The CPU flags Linux lists in /proc/cpuinfo (empty elsewhere).
std::vector<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::vector<std::string> flags;
      for (std::string w; words >> w;) flags.push_back(w);
      return flags;
    }
  return {};
}

TEST_CASE(
    "ops/bf16: the bf16 GEMM taken unforced follows /proc/cpuinfo: oneDNN's with AMX-BF16, the "
    "dot product with AVX512_BF16 off Intel, else float32") {
  const std::vector<std::string> flags = cpu_flags();
  if (flags.empty()) {
    MESSAGE("skipped: no flags in /proc/cpuinfo");
    return;
  }
  auto has = [&](const char* f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
  const bool avx512 = has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl");
  const bool amx = avx512 && has("amx_bf16") && has("amx_tile");
  std::ifstream in("/proc/cpuinfo");
  const bool intel =
      std::string(std::istreambuf_iterator<char>(in), {}).find("GenuineIntel") != std::string::npos;
  // Linux grants the tiles wherever the CPU lists them from 5.16 on (ARCH_REQ_XCOMP_PERM);
  // earlier kernels list the flags but cannot grant them.
  utsname u{};
  uname(&u);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  const bool grants = major > 5 || (major == 5 && minor >= 16);
  if (amx && !grants) MESSAGE("Linux " << u.release << " lists AMX but cannot grant its tiles");
  CHECK(kernels::onednn::amx_usable() == (amx && grants && kernels::onednn::kernels() != nullptr));
  const char* env = std::getenv("ABLATE_ISA");
  if (env && *env) {
    MESSAGE("the choice itself is skipped: ABLATE_ISA=" << env << " forces the path");
    return;
  }
  const std::string want = amx && grants && kernels::onednn::kernels() ? "onednn_bf16"
                           : avx512 && has("avx512_bf16") && !intel    ? "avx512_bf16"
                                                                       : kernel_path();
  CHECK(std::string(bf16_kernel()) == want);
}

TEST_CASE(
    "ops/bf16: oneDNN's bf16 matmul equals the exact product of its bf16 inputs, every layout") {
  const kernels::Bf16Kernels* k = kernels::onednn::kernels();
  if (!k) {
    MESSAGE("skipped: this build has no oneDNN (libdnnl-dev)");
    return;
  }
  if (kernels::cpu_isa() != kernels::Isa::avx512) {
    MESSAGE("skipped: this CPU has no AVX-512");
    return;
  }
  MESSAGE("oneDNN runs " << kernels::onednn::isa() << " here");
  check_kernel(*k, "onednn_bf16");
}

TEST_CASE(
    "ops/bf16: linear forward and backward equal float64 products of the bf16-rounded operands") {
  Rng rng(11);
  for (const auto& s : kLinearShapes)
    for (bool tw : {false, true}) {
      const int64_t N = s[0], K = s[1], M = s[2];
      auto xv = random_values(static_cast<size_t>(N * K), rng),
           wv = random_values(static_cast<size_t>(K * M), rng, 0.2f);
      auto bv = random_values(static_cast<size_t>(M), rng),
           rv = random_values(static_cast<size_t>(N * M), rng);
      INFO("N " << N << " K " << K << " M " << M << (tw ? " w transposed" : ""));
      const LinearRun r = run_linear(Precision::bf16, xv, wv, bv, rv, N, K, M, tw);
      const auto xb = to_bits(xv), wb = to_bits(wv), rb = to_bits(rv);
      // y = b + x op(W).
      std::vector<float> bias_rows(static_cast<size_t>(N * M));
      for (int64_t i = 0; i < N; ++i) std::copy(bv.begin(), bv.end(), bias_rows.begin() + i * M);
      check_close(r.y.data(),
                  reference_gemm(false, tw, N, M, K, 1.0, xb, K, wb, tw ? K : M, bias_rows), K,
                  "forward");
      // dx = R op(W)^T, dW = x^T R (or R^T x), all of bf16 values; db = the column sums of R.
      check_close(r.dx.data(),
                  reference_gemm(false, !tw, N, K, M, 1.0, rb, M, wb, tw ? K : M,
                                 std::vector<float>(static_cast<size_t>(N * K))),
                  M, "dx");
      if (!tw)
        check_close(r.dw.data(),
                    reference_gemm(true, false, K, M, N, 1.0, xb, K, rb, M,
                                   std::vector<float>(static_cast<size_t>(K * M))),
                    N, "dW");
      else
        check_close(r.dw.data(),
                    reference_gemm(true, false, M, K, N, 1.0, rb, M, xb, K,
                                   std::vector<float>(static_cast<size_t>(K * M))),
                    N, "dW (transposed)");
      for (int64_t j = 0; j < M; ++j) {
        double s2 = 0;
        for (int64_t i = 0; i < N; ++i) s2 += rv[static_cast<size_t>(i * M + j)];
        CHECK(r.db[static_cast<size_t>(j)] == doctest::Approx(s2).epsilon(1e-4));
      }
    }
}

TEST_CASE("ops/bf16: linear in bf16 is within bf16's tolerance of float32, and not equal to it") {
  // Each rounded input is within 2^-9 of its value relatively (8 significant bits, to
  // nearest), so each product is within about 2^-8 = 0.4% and a sum of many products with
  // random signs, measured as a norm over all outputs, within about 2^-9 sqrt(2) = 0.3% of
  // float32's: 1e-2 leaves three times that. Element by element the relative error is
  // unbounded (a sum near 0 by cancellation), so the comparison is of norms.
  Rng rng(12);
  for (const auto& s : kLinearShapes) {
    const int64_t N = s[0], K = s[1], M = s[2];
    auto xv = random_values(static_cast<size_t>(N * K), rng),
         wv = random_values(static_cast<size_t>(K * M), rng, 0.2f);
    auto bv = random_values(static_cast<size_t>(M), rng),
         rv = random_values(static_cast<size_t>(N * M), rng);
    const LinearRun lo = run_linear(Precision::bf16, xv, wv, bv, rv, N, K, M, false);
    const LinearRun hi = run_linear(Precision::float32, xv, wv, bv, rv, N, K, M, false);
    INFO("N " << N << " K " << K << " M " << M);
    for (const auto& [label, a, b] :
         {std::tuple{"y", &lo.y, &hi.y}, std::tuple{"dx", &lo.dx, &hi.dx},
          std::tuple{"dW", &lo.dw, &hi.dw}}) {
      const char* name = label;
      const double d = rel_norm_diff(*a, *b);
      INFO(name << ": relative difference " << d);
      CHECK(d < 1e-2);
      CHECK(d > 1e-5);  // the products did read rounded values
    }
    CHECK(lo.db == hi.db);  // the bias gradient is float32's sum of dy
  }
}

TEST_CASE(
    "ops/bf16: in a bf16 graph an activation's backward takes the derivative at the bf16 rounding "
    "of "
    "what it reads, which a step following its plan keeps as bits") {
  Rng rng(17);
  const int64_t N = 40, C = 48;
  auto xv = random_values(static_cast<size_t>(N * C), rng),
       rv = random_values(static_cast<size_t>(N * C), rng);
  std::vector<float> xr(xv.size());
  kernels::round_to_bf16_parallel(xv.data(), static_cast<int64_t>(xv.size()), xr.data());
  using Act = Var (*)(Graph&, Var);
  for (Act act : {Act{&gelu}, Act{&gelu_exact}, Act{&silu}, Act{&relu}, Act{&ablate::tanh}}) {
    // d/dx sum(act(1 x) * r): 1 x is an op's value, which a planned step keeps as bits.
    auto grad = [&](Graph& g, const std::vector<float>& x) {
      g.reset();
      ParamStore store(1);
      Parameter& p = store.add("x", N, C, Role::kCustom);
      std::copy(x.begin(), x.end(), p.value.data);
      Var loss = sum(g, mul(g, act(g, scale(g, g.param(p), 1.0f)), g.constant(rv.data(), N, C)));
      g.backward(loss);
      return std::vector<float>(p.grad.data, p.grad.data + N * C);
    };
    Graph lo, hi;
    lo.precision = Precision::bf16;
    const std::vector<float> want = grad(hi, xr);
    CHECK(grad(lo, xv) == want);
    CHECK(grad(lo, xv) == want);                         // the same once the step follows its plan
    if (act != Act{&relu}) CHECK(grad(hi, xv) != want);  // float32 takes it at x
  }
}

TEST_CASE(
    "ops/bf16: in a bf16 graph mul's backward reads ops' values rounded to bf16, as bits once the "
    "step follows its plan (a gated FFN's gate and up projections), and leaves as they are") {
  Rng rng(19);
  const int64_t N = 24, C = 40;
  const auto av = random_values(static_cast<size_t>(N * C), rng),
             bv = random_values(static_cast<size_t>(N * C), rng),
             rv = random_values(static_cast<size_t>(N * C), rng);
  for (const bool row : {false, true})       // b (N,C), or a broadcast row (1,C)
    for (const bool leaf : {false, true}) {  // b an op's value (1 b), or the parameter itself
      CAPTURE(row);
      CAPTURE(leaf);
      const int64_t BR = row ? 1 : N;
      // d/da and d/db of sum((1 a) * (1 b) * r).
      auto grads = [&](Graph& g, const std::vector<float>& a, const std::vector<float>& b) {
        g.reset();
        ParamStore store(1);
        Parameter& pa = store.add("a", N, C, Role::kCustom);
        Parameter& pb = store.add("b", BR, C, Role::kCustom);
        std::copy(a.begin(), a.end(), pa.value.data);
        std::copy(b.begin(), b.begin() + BR * C, pb.value.data);
        const Var y =
            mul(g, scale(g, g.param(pa), 1.0f), leaf ? g.param(pb) : scale(g, g.param(pb), 1.0f));
        g.backward(sum(g, mul(g, scale(g, y, 1.0f), g.constant(rv.data(), N, C))));
        std::vector<float> out(pa.grad.data, pa.grad.data + N * C);
        out.insert(out.end(), pb.grad.data, pb.grad.data + BR * C);
        return out;
      };
      Graph lo, hi;
      lo.precision = Precision::bf16;
      const std::vector<float> want = grads(hi, bf16_values(av), leaf ? bv : bf16_values(bv));
      CHECK(grads(lo, av, bv) == want);
      CHECK(grads(lo, av, bv) == want);  // the same once the step follows its plan
      CHECK(grads(hi, av, bv) != want);  // float32 reads a and b
    }
}

TEST_CASE(
    "ops/bf16: in a bf16 graph layernorm's and rmsnorm's backward read x rounded to bf16, with "
    "the float32 statistics of the forward pass") {
  const int64_t N = 12, C = 40;
  Rng rng(23);
  const auto xv = random_values(static_cast<size_t>(N * C), rng),
             gv = random_values(static_cast<size_t>(C), rng),
             rv = random_values(static_cast<size_t>(N * C), rng);
  const std::vector<float> xr = bf16_values(xv);
  for (const bool centred : {true, false}) {
    CAPTURE(centred);
    // d/dx and d/dgain of sum(norm(1 x) * r), x given as a parameter.
    auto grads = [&](Precision p) {
      Graph g;
      g.precision = p;
      ParamStore store(1);
      Parameter& x = store.add("x", N, C, Role::kCustom);
      Parameter& gain = store.add("gain", 1, C, Role::kCustom);
      std::copy(xv.begin(), xv.end(), x.value.data);
      std::copy(gv.begin(), gv.end(), gain.value.data);
      const Var h = scale(g, g.param(x), 1.0f);
      const Var y = centred ? layernorm(g, h, g.param(gain), Var{}) : rmsnorm(g, h, g.param(gain));
      g.backward(sum(g, mul(g, y, g.constant(rv.data(), N, C))));
      std::vector<float> out(x.grad.data, x.grad.data + N * C);
      out.insert(out.end(), gain.grad.data, gain.grad.data + C);
      return out;
    };
    // The same in double: statistics of x, xhat of x's bf16 rounding.
    std::vector<double> want(static_cast<size_t>(N * C + C), 0.0);
    for (int64_t r = 0; r < N; ++r) {
      const float* x = xv.data() + r * C;
      double m = 0.0, var = 0.0;
      if (centred) {
        for (int64_t c = 0; c < C; ++c) m += x[c];
        m /= static_cast<double>(C);
      }
      for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
      const double s = 1.0 / std::sqrt(var / static_cast<double>(C) + 1e-5);
      double m1 = 0.0, m2 = 0.0;
      std::vector<double> xhat(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) {
        xhat[static_cast<size_t>(c)] = (xr[static_cast<size_t>(r * C + c)] - m) * s;
        const double dn = double{rv[static_cast<size_t>(r * C + c)]} * gv[static_cast<size_t>(c)];
        m1 += dn;
        m2 += dn * xhat[static_cast<size_t>(c)];
        want[static_cast<size_t>(N * C + c)] +=
            rv[static_cast<size_t>(r * C + c)] * xhat[static_cast<size_t>(c)];
      }
      m1 = centred ? m1 / static_cast<double>(C) : 0.0;
      m2 /= static_cast<double>(C);
      for (int64_t c = 0; c < C; ++c) {
        const double dn = double{rv[static_cast<size_t>(r * C + c)]} * gv[static_cast<size_t>(c)];
        want[static_cast<size_t>(r * C + c)] = s * (dn - m1 - xhat[static_cast<size_t>(c)] * m2);
      }
    }
    const std::vector<float> lo = grads(Precision::bf16), hi = grads(Precision::float32);
    std::vector<float> wantf(want.begin(), want.end());
    INFO("bf16 to the double reference " << rel_norm_diff(lo, wantf) << ", float32 to it "
                                         << rel_norm_diff(hi, wantf));
    CHECK(rel_norm_diff(lo, wantf) < 1e-5);
    CHECK(rel_norm_diff(hi, wantf) > 1e-4);  // float32 reads x itself
    CHECK(rel_norm_diff(lo, hi) < 1e-2);
  }
}

TEST_CASE("ops/bf16: finite differences of a bf16 linear on inputs that bf16 represents exactly") {
  // With every input a multiple of 1/64 in [-2, 2] (at most 8 significant bits) and steps of
  // 1/64, x +- h is exact in bf16 too, so the bf16 loss is float32 arithmetic on exact
  // values and its central difference is exact up to float32's rounding of the sums. The
  // analytic gradient multiplies by R rounded to bf16 (dy's rounding), within 2^-9 of R:
  // hence the 1e-2 relative tolerance (a norm over all elements).
  Rng rng(13);
  const int64_t N = 24, K = 20, M = 18;
  auto grid = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(static_cast<int64_t>(rng.below(257)) - 128) / 64.0f;
    return v;
  };
  for (bool tw : {false, true}) {
    auto xv = grid(static_cast<size_t>(N * K)), wv = grid(static_cast<size_t>(K * M)),
         bv = grid(static_cast<size_t>(M));
    auto rv = random_values(static_cast<size_t>(N * M), rng);
    const LinearRun r = run_linear(Precision::bf16, xv, wv, bv, rv, N, K, M, tw);
    auto loss = [&](const std::vector<float>& x, const std::vector<float>& w) {
      const LinearRun o = run_linear(Precision::bf16, x, w, bv, rv, N, K, M, tw);
      double l = 0;
      for (size_t i = 0; i < o.y.size(); ++i) l += static_cast<double>(o.y[i]) * rv[i];
      return l;
    };
    const float h = 1.0f / 64;
    std::vector<float> fx(xv.size()), fw(wv.size()), ax, aw;
    for (size_t i = 0; i < xv.size(); i += 7) {
      auto p = xv, m = xv;
      p[i] += h;
      m[i] -= h;
      fx[i] = static_cast<float>((loss(p, wv) - loss(m, wv)) / (2 * h));
    }
    for (size_t i = 0; i < wv.size(); i += 7) {
      auto p = wv, m = wv;
      p[i] += h;
      m[i] -= h;
      fw[i] = static_cast<float>((loss(xv, p) - loss(xv, m)) / (2 * h));
    }
    std::vector<float> gx, gw;
    for (size_t i = 0; i < xv.size(); i += 7) ax.push_back(r.dx[i]), gx.push_back(fx[i]);
    for (size_t i = 0; i < wv.size(); i += 7) aw.push_back(r.dw[i]), gw.push_back(fw[i]);
    INFO((tw ? "w transposed" : "w plain")
         << ": dx off by " << rel_norm_diff(ax, gx) << ", dW by " << rel_norm_diff(aw, gw));
    CHECK(rel_norm_diff(ax, gx) < 1e-2);
    CHECK(rel_norm_diff(aw, gw) < 1e-2);
  }
}

TEST_CASE(
    "ops/bf16: a parameter's bf16 bits are made again after reset() unless param_epoch holds them, "
    "and without a bf16 GEMM training's products keep no copy") {
  ParamStore store;
  Parameter& w = store.add("w", 8, 16, Role::kHidden);
  Rng rng(2);
  for (int64_t i = 0; i < w.value.numel(); ++i) w.value.data[i] = rng.normal();
  std::vector<float> x(static_cast<size_t>(16 * 8));
  for (float& v : x) v = rng.normal();
  const size_t bits_bytes = static_cast<size_t>(w.value.numel()) * sizeof(uint16_t);
  Graph g;
  g.precision = Precision::bf16;
  // x (rows, 8) w: 16 rows with gradients, a training product; 2 without, decoding's, which
  // reads w's bits on every path. With w_rounded, w's rounding as a constant instead.
  auto forward = [&](int64_t rows, const std::vector<float>* w_rounded = nullptr) {
    g.reset();
    g.grad_enabled = rows > 4;
    Var wv = w_rounded ? g.constant(w_rounded->data(), 8, 16) : g.param(w);
    const Tensor t = g.value(linear(g, g.constant(x.data(), rows, 8), wv));
    return std::vector<float>(t.data, t.data + t.numel());
  };
  const auto t1 = forward(16);
  // bf16 bits for a bf16 GEMM; the float32 GEMM rounds w as it packs it
  CHECK(param_copy_bytes(g) == (kernels::isa_kernels().bf16.gemm ? bits_bytes : 0));
  const auto w_rounded = bf16_values(std::vector<float>(w.value.data, w.value.data + 8 * 16));
  CHECK(w_rounded != std::vector<float>(w.value.data, w.value.data + 8 * 16));
  CHECK(t1 == forward(16, &w_rounded));  // the product of w's rounding
  const auto y1 = forward(2);
  CHECK(param_copy_bytes(g) == bits_bytes);
  for (int64_t i = 0; i < w.value.numel(); ++i) w.value.data[i] *= 2.0f;  // exact in bf16 too
  const auto y2 = forward(2);  // param_epoch 0: fresh bits
  for (size_t i = 0; i < y1.size(); ++i) CHECK(y2[i] == 2.0f * y1[i]);
  g.param_epoch = new_param_epoch();
  const auto y3 = forward(2);
  for (int64_t i = 0; i < w.value.numel(); ++i) w.value.data[i] *= 2.0f;
  const auto y4 = forward(2);  // the same epoch: the bits made for y3 serve
  CHECK(y4 == y3);
  g.param_epoch = new_param_epoch();
  const auto y5 = forward(2);
  for (size_t i = 0; i < y1.size(); ++i) CHECK(y5[i] == 4.0f * y1[i]);
}

TEST_CASE(
    "ops/bf16: decoding's matrix-vector products on bf16 bits equal the float32 ones on their "
    "values bitwise, every split") {
  Rng rng(21);
  struct Case {
    bool tb;
    int64_t m, n, k;
  };
  // One block; two halves of the reduction (B row-major, 8K floats and more); two column
  // blocks (B transposed); odd sizes for the vector tails.
  const Case cases[] = {{false, 1, 24, 40},    {true, 2, 31, 17},    {false, 1, 384, 1536},
                        {false, 3, 1152, 384}, {true, 1, 1536, 384}, {true, 4, 65, 385},
                        {false, 4, 97, 333}};
  for (int threads : {1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                              static_cast<size_t>(threads));
    for (const Case& t : cases)
      for (int mode = 0; mode < 3; ++mode) {  // accumulate; set; set with a bias row
        CAPTURE(threads);
        CAPTURE(t.tb);
        CAPTURE(t.m);
        CAPTURE(t.n);
        CAPTURE(t.k);
        CAPTURE(mode);
        const int64_t lda = t.k + 1, ldb = (t.tb ? t.k : t.n) + 3, ldc = t.n + 2;
        std::vector<float> a = random_values(static_cast<size_t>(t.m * lda), rng),
                           init = random_values(static_cast<size_t>(t.n), rng),
                           c0 = random_values(static_cast<size_t>(t.m * ldc), rng);
        std::vector<uint16_t> bits(static_cast<size_t>((t.tb ? t.n : t.k) * ldb));
        for (auto& x : bits) x = reference_bf16(rng.normal());
        std::vector<float> values(bits.size());
        for (size_t i = 0; i < bits.size(); ++i) values[i] = kernels::bf16_to_float(bits[i]);
        std::vector<float> want = c0, got = c0;
        const bool set = mode > 0;
        const float* bias = mode == 2 ? init.data() : nullptr;
        kernels::gemm_acc_parallel(false, t.tb, t.m, t.n, t.k, 1.0f, a.data(), lda, values.data(),
                                   ldb, want.data(), ldc, set, bias);
        kernels::gemv_bf16_parallel(t.tb, t.m, t.n, t.k, a.data(), lda, bits.data(), ldb,
                                    got.data(), ldc, set, bias);
        CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
        CHECK(want != c0);
      }
  }
}

TEST_CASE("ops/determinism: bf16 linear is bitwise identical with 1 and 2 threads") {
  Rng rng(21);
  const int64_t N = 1100, K = 96, M = 384;
  auto xv = random_values(static_cast<size_t>(N * K), rng),
       wv = random_values(static_cast<size_t>(K * M), rng, 0.2f);
  auto bv = random_values(static_cast<size_t>(M), rng),
       rv = random_values(static_cast<size_t>(N * M), rng);
  LinearRun one, two;
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
    one = run_linear(Precision::bf16, xv, wv, bv, rv, N, K, M, false);
  }
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
    two = run_linear(Precision::bf16, xv, wv, bv, rv, N, K, M, false);
  }
  CHECK(one.y == two.y);
  CHECK(one.dx == two.dx);
  CHECK(one.dw == two.dw);
}

TEST_CASE(
    "ops/bf16: attention in a bf16 graph reads q, k, v and the output gradient rounded to bf16, "
    "with its saved probabilities and output read back as bf16") {
  // The bf16 graph rounds q, k and v forward and the output gradient backward. On a path
  // without bf16 attention kernels it runs the float32 kernels on the roundings: a float32
  // graph given the rounded values (and R rounded, which is then its output gradient) computes
  // the same output, bit for bit, and the same gradients where backward recomputes the
  // probabilities. Where the forward pass saves them (heads up to 64 wide), a bf16 graph saves
  // them as bf16, and wider heads take D_i from the output rounded to bf16: gradients within
  // bf16's rounding of the float32 ones. The dot product's path (Bf16Kernels::attention_*)
  // multiplies the probabilities and their gradient rounded to bf16 too: every result within
  // bf16's rounding of that float32 graph's, and not equal to it.
  struct Case {
    int64_t B, T, NH, NKV, HS;
    bool causal, fused;
  };
  const Case cases[] = {
      {2, 9, 4, 2, 8, true, true},     // grouped heads, one fused qkv
      {1, 33, 2, 2, 16, true, false},  // separate q, k, v
      {2, 7, 3, 1, 24, false, false},  // bidirectional, one kv head
      {1, 12, 2, 2, 80, true, true},   // heads wider than the lanes kernels (no saved probs)
  };
  const bool dot = kernels::isa_kernels().bf16.attention_forward_lanes != nullptr;
  Rng rng(31);
  int64_t& limit = kernels::attention_saved_probs_limit();
  const int64_t saved_limit = limit;
  for (const Case& c : cases) {
    AttentionSpec spec;
    spec.batch = c.B, spec.time = c.T, spec.n_heads = c.NH, spec.n_kv_heads = c.NKV;
    spec.head_size = c.HS, spec.causal = c.causal;
    const auto N = static_cast<size_t>(c.B * c.T);
    const auto qv = random_values(N * static_cast<size_t>(c.NH * c.HS), rng),
               kv = random_values(N * static_cast<size_t>(c.NKV * c.HS), rng),
               vv = random_values(N * static_cast<size_t>(c.NKV * c.HS), rng),
               rv = random_values(N * static_cast<size_t>(c.NH * c.HS), rng);
    const bool lanes = c.HS <= 64, bf16_products = lanes && dot;
    for (const bool saved : {true, false}) {
      limit = saved ? saved_limit : 0;  // 0: backward recomputes the probabilities
      const AttentionRun lo = run_attention(Precision::bf16, qv, kv, vv, rv, spec, c.fused);
      const AttentionRun ref = run_attention(Precision::float32, bf16_values(qv), bf16_values(kv),
                                             bf16_values(vv), bf16_values(rv), spec, c.fused);
      const AttentionRun hi = run_attention(Precision::float32, qv, kv, vv, rv, spec, c.fused);
      INFO("B " << c.B << " T " << c.T << " NH " << c.NH << " NKV " << c.NKV << " HS " << c.HS
                << (c.causal ? " causal" : " bidirectional") << (c.fused ? " fused" : "")
                << (saved ? " saved probabilities" : " recomputed")
                << (bf16_products ? ", bf16 kernels" : ""));
      if (bf16_products) CHECK(lo.y != ref.y);
      else CHECK(lo.y == ref.y);
      for (const auto& [name, a, b, f] :
           {std::tuple{"y", &lo.y, &ref.y, &hi.y}, std::tuple{"dq", &lo.dq, &ref.dq, &hi.dq},
            std::tuple{"dk", &lo.dk, &ref.dk, &hi.dk}, std::tuple{"dv", &lo.dv, &ref.dv, &hi.dv}}) {
        const std::string what = std::string(name) + ": relative difference to float32 " +
                                 std::to_string(rel_norm_diff(*a, *f)) +
                                 ", to float32 of the rounded inputs " +
                                 std::to_string(rel_norm_diff(*a, *b));
        INFO(what);
        if (lanes && !saved && !bf16_products) CHECK(*a == *b);
        CHECK(rel_norm_diff(*a, *b) < 1e-2);
        CHECK(rel_norm_diff(*a, *f) < 2e-2);
        CHECK(rel_norm_diff(*a, *f) > 1e-5);  // it did read rounded values
      }
      // bf16 probabilities (or output) read back: not the float32 graph's gradients.
      if (saved || !lanes || bf16_products) CHECK(lo.dq != ref.dq);
    }
  }
  limit = saved_limit;
}

TEST_CASE(
    "ops/bf16: attention's variants in a bf16 graph are within bf16's rounding of float32 "
    "attention of the rounded inputs") {
  // Masks, slopes, prefix LMs, grouped heads, odd head sizes and several query blocks, with the
  // probabilities saved and recomputed: on the dot product's path these run its bf16 attention
  // kernels, elsewhere the float32 ones on the roundings. A wrong mask, block or head in either
  // moves whole rows, far more than bf16's rounding.
  struct Case {
    const char* name;
    int64_t B, T, NH, NKV, HS;
    bool causal, slopes, mask, prefix;
  };
  const Case cases[] = {
      {"prefix LM, grouped heads, slopes, key mask", 2, 5, 4, 2, 4, true, true, true, true},
      {"key mask (a row with every key masked)", 2, 5, 2, 2, 6, true, false, true, false},
      {"key mask bidirectional, slopes", 2, 5, 2, 1, 6, false, true, true, false},
      {"multi-query, head size 17, 20 steps", 1, 20, 4, 1, 17, true, true, false, false},
      {"head size 13, two query blocks", 2, 37, 2, 2, 13, true, false, false, false},
      {"two query blocks, head size 40, a prompt across both", 2, 45, 2, 2, 40, true, true, false,
       true},
      {"head size 64, two query blocks", 1, 40, 2, 1, 64, true, false, false, false},
  };
  const float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
  int64_t& limit = kernels::attention_saved_probs_limit();
  const int64_t saved_limit = limit;
  Rng rng(47);
  for (const Case& c : cases) {
    AttentionSpec spec;
    spec.batch = c.B, spec.time = c.T, spec.n_heads = c.NH, spec.n_kv_heads = c.NKV;
    spec.head_size = c.HS, spec.causal = c.causal;
    std::vector<uint8_t> mask(static_cast<size_t>(c.B * c.T), 1);
    mask[0] = 0;  // batch 0's key 0: its query 0 sees no key when causal
    if (c.B > 1) mask[static_cast<size_t>(c.T + 2)] = 0;
    const int32_t prompts[2] = {static_cast<int32_t>(c.T - 5), 1};
    if (c.slopes) spec.slopes = slopes;
    if (c.mask) spec.key_mask = mask.data();
    if (c.prefix) spec.prefix = prompts;
    const auto N = static_cast<size_t>(c.B * c.T);
    const auto qv = random_values(N * static_cast<size_t>(c.NH * c.HS), rng),
               kv = random_values(N * static_cast<size_t>(c.NKV * c.HS), rng),
               vv = random_values(N * static_cast<size_t>(c.NKV * c.HS), rng),
               rv = random_values(N * static_cast<size_t>(c.NH * c.HS), rng);
    for (const bool saved : {true, false}) {
      limit = saved ? saved_limit : 0;
      const AttentionRun lo = run_attention(Precision::bf16, qv, kv, vv, rv, spec, false);
      const AttentionRun ref = run_attention(Precision::float32, bf16_values(qv), bf16_values(kv),
                                             bf16_values(vv), bf16_values(rv), spec, false);
      INFO(c.name << (saved ? ", saved probabilities" : ", recomputed"));
      for (const auto& [name, a, b] :
           {std::tuple{"y", &lo.y, &ref.y}, std::tuple{"dq", &lo.dq, &ref.dq},
            std::tuple{"dk", &lo.dk, &ref.dk}, std::tuple{"dv", &lo.dv, &ref.dv}}) {
        // (a string first: clang 14's lambdas, which INFO makes, cannot capture bindings)
        const std::string what =
            std::string(name) + ": relative difference " + std::to_string(rel_norm_diff(*a, *b));
        INFO(what);
        CHECK(rel_norm_diff(*a, *b) < 1e-2);
      }
    }
  }
  limit = saved_limit;
  // A prefill of 9 queries into a KV cache (the lanes kernels reading the cache's transposed
  // keys, which keep their roundings) gives the full pass's output, bit for bit.
  const int64_t B = 2, T = 9, NH = 4, NKV = 2, HS = 12;
  const auto qv = random_values(static_cast<size_t>(B * T * NH * HS), rng),
             kv = random_values(static_cast<size_t>(B * T * NKV * HS), rng),
             vv = random_values(static_cast<size_t>(B * T * NKV * HS), rng);
  AttentionSpec spec;
  spec.batch = B, spec.time = T, spec.n_heads = NH, spec.n_kv_heads = NKV, spec.head_size = HS;
  spec.slopes = slopes;
  std::vector<float> full, cached;
  for (const bool use_cache : {false, true}) {
    KVCache cache;
    cache.init(B, 16, NKV * HS);
    if (use_cache) spec.cache = &cache;
    Graph g;
    g.precision = Precision::bf16;
    const Tensor y = g.value(attention(g, g.constant(qv.data(), B * T, NH * HS),
                                       g.constant(kv.data(), B * T, NKV * HS),
                                       g.constant(vv.data(), B * T, NKV * HS), spec));
    (use_cache ? cached : full).assign(y.data, y.data + y.numel());
  }
  CHECK(cached == full);
}
