// The bf16 GEMM of the avx512_bf16 kernel path (dispatch.hpp): AVX512_BF16's dot product
// VDPBF16PS, which multiplies pairs of bf16 values and adds both products to a float32 sum
// (32 products an instruction). Compiled with its target flags (framework/CMakeLists.txt),
// chosen only where the CPU has AVX512_BF16; that path's float32 kernels are the avx512 ones.
//
// The reduction runs in pairs of steps: a packed B panel holds, for each pair q and column
// j, the 32-bit word (B[2q][j], B[2q+1][j]); A's word for row r and pair q is (A[r][2q],
// A[r][2q+1]), read in place from a row-major A (k even) or packed. A 6 x 64 tile of C
// lives in 24 registers over a kc-long block of the reduction. An odd k's last pair has a
// zero second half.
//
// The tile is wide rather than tall (gemm_avx512.inc's float32 tiles are 12 x 32) because
// each row of a tile costs a broadcast of A's word per step, and on AMD Zen 4 a 512-bit
// broadcast takes a vector pipe from the dot products: 12 broadcasts per 24 VDPBF16PS ran
// the nanogpt-baby products at 83% of the instruction's rate, 6 per 24 at 91-94%, the rate
// of oneDNN's matmul at those products (docs/BENCHMARKS.md, gemm_bf16_bench). Folding the
// broadcast into the instruction (its {1to16} memory operand) is worse there: one broadcast
// per instruction, half the rate.
#define ABLATE_ISA_NS avx512_bf16
#define ABLATE_VEC_WIDTH 16
#include "simd.hpp"
// (after simd.hpp)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels.hpp"

namespace ablate::kernels::avx512_bf16 {
namespace {
constexpr int kNV = 4;             // vectors of 16 columns in a B panel
constexpr int64_t kNR = 16 * kNV;  // columns of a B panel
constexpr int64_t kMR = 6;         // rows of a C tile
constexpr int64_t kKC = 384;       // reduction block (an even number of steps)
constexpr int64_t kMC = 120;       // rows of A walked per B panel (a multiple of kMR)
constexpr int64_t kNC = 512;       // columns of B packed at a time

inline __mmask16 lanes_mask(int64_t n) {
  return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1);
}
inline uint32_t pair(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
}
inline uint32_t load_u32(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// C (MR, nr) (+)= alpha * A . Bp over kq pairs; A's word (r, q) at a[r * ars + q * aps]
// (32-bit words). set: C = init + alpha * A . Bp without reading C.
template <int MR, int NV>
void micro(int64_t kq, const uint32_t* __restrict a, int64_t ars, int64_t aps,
           const uint32_t* __restrict bp, float alpha, float* c, int64_t ldc, int64_t nr, bool set,
           const float* init) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  // The tile of C that the end adds to, on its way while the dot products run: a product
  // of many rows or a long reduction walks C once per block of the reduction, more than
  // the caches hold.
  if (!set)
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16 * v), _MM_HINT_T0);
  for (int64_t q = 0; q < kq; ++q) {
    __m512bh b[NV];
    for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(bp + q * kNR + 16 * v);
    const uint32_t* aq = a + q * aps;
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(aq[r * ars]));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, b[v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
  __mmask16 m[NV];
  __m512 c0[NV];
  for (int v = 0; v < NV; ++v) {
    m[v] = lanes_mask(nr - 16 * v);
    c0[v] = set && init ? _mm512_maskz_loadu_ps(m[v], init + 16 * v) : _mm512_setzero_ps();
  }
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(
          cr + 16 * v, m[v],
          _mm512_fmadd_ps(al, acc[r][v], set ? c0[v] : _mm512_maskz_loadu_ps(m[v], cr + 16 * v)));
  }
}

using MicroFn = void (*)(int64_t, const uint32_t*, int64_t, int64_t, const uint32_t*, float, float*,
                         int64_t, int64_t, bool, const float*);
template <int NV, int... I>
constexpr std::array<MicroFn, sizeof...(I)> micro_table(std::integer_sequence<int, I...>) {
  return {&micro<I + 1, NV>...};
}
template <int... V>
constexpr std::array<std::array<MicroFn, kMR>, sizeof...(V)> micro_tables(
    std::integer_sequence<int, V...>) {
  return {micro_table<V + 1>(std::make_integer_sequence<int, kMR>{})...};
}
// kMicro[nv - 1][mr - 1]: a tile of mr rows and nv vectors of columns.
constexpr auto kMicro = micro_tables(std::make_integer_sequence<int, kNV>{});

// Words (lo[i], hi[i]) for i < n: hi null for a zero second half.
inline void interleave(const uint16_t* lo, const uint16_t* hi, int64_t n, uint32_t* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i l = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + i)));
    if (hi)
      l = _mm512_or_si512(l, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                                   reinterpret_cast<const __m256i*>(hi + i))),
                                               16));
    _mm512_storeu_si512(dst + i, l);
  }
  for (; i < n; ++i) dst[i] = pair(lo[i], hi ? hi[i] : 0);
}

// op(B)[p0 .. p0+kc, j0 .. j0+nc) as word panels (kq pairs x 32 columns), zero-padded past nc.
void pack_b(bool trans, const uint16_t* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
            int64_t nc, uint32_t* bp) {
  const int64_t kq = (kc + 1) / 2, full = kc / 2;
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int64_t nr = std::min(kNR, nc - jr);
    uint32_t* dst = bp + jr * kq;
    if (!trans) {
      for (int64_t q = 0; q < kq; ++q) {
        const uint16_t* s0 = b + (p0 + 2 * q) * ldb + j0 + jr;
        uint32_t* d = dst + q * kNR;
        interleave(s0, q < full ? s0 + ldb : nullptr, nr, d);
        for (int64_t j = nr; j < kNR; ++j) d[j] = 0;
      }
      continue;
    }
    // B stored (n, k): the words of column j are consecutive in row j of the storage, so
    // the panel is a 32-bit transpose (16 x 16 blocks in registers).
    const int64_t qw = full / 16 * 16;
    for (int64_t r0 = 0; r0 < kNR; r0 += 16) {
      for (int64_t q0 = 0; q0 < qw; q0 += 16) {
        __m512i v[16];
        for (int64_t i = 0; i < 16; ++i)
          v[i] = r0 + i < nr ? _mm512_loadu_si512(b + (j0 + jr + r0 + i) * ldb + p0 + 2 * q0)
                             : _mm512_setzero_si512();
        vf f[16];
        std::memcpy(f, v, sizeof f);
        swap_blocks<8>(f);
        for (int64_t i = 0; i < 16; ++i) std::memcpy(dst + (q0 + i) * kNR + r0, &f[i], sizeof f[i]);
      }
      for (int64_t q = qw; q < kq; ++q)
        for (int64_t i = 0; i < 16; ++i) {
          const int64_t j = r0 + i;
          const uint16_t* s = b + (j0 + jr + j) * ldb + p0 + 2 * q;
          dst[q * kNR + j] = j >= nr ? 0 : q < full ? load_u32(s) : pair(s[0], 0);
        }
    }
  }
}

// Rows i1 .. i1+mc of op(A), steps p0 .. p0+kc, as word tiles of kMR rows: tile t at
// ap + t kMR kq, its row q the tile's mr words of pair q.
void pack_a(bool trans, const uint16_t* a, int64_t lda, int64_t i1, int64_t mc, int64_t p0,
            int64_t kc, uint32_t* ap) {
  const int64_t kq = (kc + 1) / 2, full = kc / 2;
  if (trans) {
    alignas(64) uint32_t row[kMC];
    for (int64_t q = 0; q < kq; ++q) {
      const uint16_t* s0 = a + (p0 + 2 * q) * lda + i1;
      interleave(s0, q < full ? s0 + lda : nullptr, mc, row);
      for (int64_t i0 = 0; i0 < mc; i0 += kMR) {
        const int64_t mr = std::min(kMR, mc - i0);
        // A whole tile's row of words as one fixed-size copy (inlined, not a call).
        if (mr == kMR) std::memcpy(ap + i0 * kq + q * kMR, row + i0, sizeof(uint32_t) * kMR);
        else
          std::memcpy(ap + i0 * kq + q * mr, row + i0, sizeof(uint32_t) * static_cast<size_t>(mr));
      }
    }
    return;
  }
  for (int64_t i0 = 0; i0 < mc; i0 += kMR) {
    const int64_t mr = std::min(kMR, mc - i0);
    uint32_t* t = ap + i0 * kq;
    for (int64_t r = 0; r < mr; ++r) {
      const uint16_t* s = a + (i1 + i0 + r) * lda + p0;
      for (int64_t q = 0; q < kq; ++q)
        t[q * mr + r] = q < full ? load_u32(s + 2 * q) : pair(s[2 * q], 0);
    }
  }
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c,
               int64_t ldc, bool overwrite, const float* init) {
  // Equal reduction blocks of an even number of steps (only the last may be odd).
  const int64_t nblk = (k + kKC - 1) / kKC;
  const int64_t kc_max = ((k + nblk - 1) / nblk + 1) / 2 * 2;
  const int64_t kq_max = kc_max / 2;
  const int64_t nc_max = std::min(kNC, (n + kNR - 1) / kNR * kNR);
  // Words are two floats' worth of bf16 halves: scratch is counted in floats (4 bytes).
  auto* bp =
      reinterpret_cast<uint32_t*>(thread_scratch(kSlotGemm, static_cast<size_t>(kq_max * nc_max)));
  // Row-major A with whole pairs is read in place.
  const bool in_place =
      !trans_a && k % 2 == 0 && lda % 2 == 0 && reinterpret_cast<uintptr_t>(a) % 4 == 0;
  auto* ap = in_place ? nullptr
                      : reinterpret_cast<uint32_t*>(
                            thread_scratch(kSlotGemmA, static_cast<size_t>(kq_max * kMC)));
  for (int64_t j0 = 0; j0 < n; j0 += kNC) {
    const int64_t nc = std::min(kNC, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kc_max) {
      const int64_t kc = std::min(kc_max, k - p0), kq = (kc + 1) / 2;
      pack_b(trans_b, b, ldb, p0, kc, j0, nc, bp);
      for (int64_t i1 = 0; i1 < m; i1 += kMC) {
        const int64_t mc = std::min(kMC, m - i1);
        if (!in_place) pack_a(trans_a, a, lda, i1, mc, p0, kc, ap);
        for (int64_t i0 = i1; i0 < i1 + mc; i0 += kMR) {
          const int64_t mr = std::min(kMR, i1 + mc - i0);
          const uint32_t* at;
          int64_t ars, aps;
          if (in_place) {
            at = reinterpret_cast<const uint32_t*>(a + i0 * lda + p0);
            ars = lda / 2;
            aps = 1;
          } else {
            at = ap + (i0 - i1) * kq;
            ars = 1;
            aps = mr;
          }
          for (int64_t jr = 0; jr < nc; jr += kNR) {
            const int64_t nr = std::min(kNR, nc - jr);
            kMicro[(nr + 15) / 16 - 1][mr - 1](
                kq, at, ars, aps, bp + jr * kq, alpha, c + i0 * ldc + j0 + jr, ldc, nr,
                overwrite && p0 == 0, init ? init + j0 + jr : nullptr);
          }
        }
      }
    }
  }
}

}  // namespace

// gemm_round_b and gemv: the avx512 path's (isa.cpp).
const Bf16Kernels kBf16 = {&gemm_bf16, nullptr, &to_bf16, &round_bf16, nullptr};
}  // namespace ablate::kernels::avx512_bf16
