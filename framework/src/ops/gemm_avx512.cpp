// SGEMM for AVX-512, every product gemm_acc runs (Eigen's kernel elsewhere). It began
// with the shapes where Eigen is weakest: outputs at most 64 columns wide (the input
// gradients of a narrow model, dX (N, d) = dY W^T with d = 32) and weight gradients
// dW (K, M) = X^T dY with K <= 128 summed over thousands of rows, where Eigen reached
// 76-134 GFLOP/s on one core here and this kernel 125-192 (2048 x 32 x 128: 134 -> 192;
// 128 x 32 x 2048, X^T dY: 76 -> 163). On wider products it is at least as fast (1024
// rows, one core: x W 32 -> 71 112 -> 126, 1536 -> 384 148 -> 170; dY W^T 512 -> 128
// 155 -> 169; X^T dY 1536 x 384 154 -> 167 with A packed), and it writes C = bias + A B
// in one pass (seed000 +7%, nanogpt-baby +6% a step over Eigen with C set first).
//
// B is packed, in panels of kc x 32 (zero-padded); A is read in place, one broadcast per
// element, whether it is stored row-major or transposed, except A^T with more than 128
// rows, whose 12-row tiles are packed. A 12 x 32 tile of C lives in 24 AVX-512 registers
// over a kc-long block of the reduction.
#include "kernels.hpp"
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>

#include <array>
#include <utility>
#endif

namespace ablate::kernels {

#if defined(__AVX512F__)
namespace {
constexpr int64_t kNR = 32;   // columns of a B panel: two vectors
constexpr int64_t kMR = 12;   // rows of a C tile
constexpr int64_t kKC = 384;  // reduction block
constexpr int64_t kMC = 120;  // rows of A walked per B panel (a multiple of kMR)
constexpr int64_t kNC = 512;  // columns of B packed at a time

inline __mmask16 lanes_mask(int64_t n) { return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1); }

// C (MR, nr) += alpha * A (MR, kc) . Bp (kc, 32), A element (r, p) at a[r*ars + p*aps].
// With set, C = init + alpha * A . Bp instead (init: a row of nr floats, or null for 0),
// without reading C. NV = 2: the panel's full 32 columns; NV = 1: only its first 16.
template <int MR, int NV>
void micro(int64_t kc, const float* __restrict a, int64_t ars, int64_t aps, const float* __restrict bp, float alpha,
           float* c, int64_t ldc, int64_t nr, bool set, const float* init) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  if (!set)
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16 * v), _MM_HINT_T0);
  for (int64_t p = 0; p < kc; ++p) {
    __m512 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(bp + p * kNR + 16 * v);
    const float* ap = a + p * aps;
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(ap[r * ars]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
  const __mmask16 m0 = lanes_mask(nr), m1 = lanes_mask(nr > 16 ? nr - 16 : 0);
  if (set) {
    __m512 c0[NV];
    c0[0] = init ? _mm512_maskz_loadu_ps(m0, init) : _mm512_setzero_ps();
    if constexpr (NV == 2) c0[1] = init ? _mm512_maskz_loadu_ps(m1, init + 16) : _mm512_setzero_ps();
    for (int r = 0; r < MR; ++r) {
      float* cr = c + r * ldc;
      _mm512_mask_storeu_ps(cr, m0, _mm512_fmadd_ps(al, acc[r][0], c0[0]));
      if constexpr (NV == 2) _mm512_mask_storeu_ps(cr + 16, m1, _mm512_fmadd_ps(al, acc[r][1], c0[1]));
    }
    return;
  }
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    if (nr == 16 * NV) {
      for (int v = 0; v < NV; ++v)
        _mm512_storeu_ps(cr + 16 * v, _mm512_fmadd_ps(al, acc[r][v], _mm512_loadu_ps(cr + 16 * v)));
    } else {
      _mm512_mask_storeu_ps(cr, m0, _mm512_fmadd_ps(al, acc[r][0], _mm512_maskz_loadu_ps(m0, cr)));
      if constexpr (NV == 2)
        _mm512_mask_storeu_ps(cr + 16, m1, _mm512_fmadd_ps(al, acc[r][1], _mm512_maskz_loadu_ps(m1, cr + 16)));
    }
  }
}

using MicroFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, float, float*, int64_t, int64_t, bool,
                        const float*);
template <int NV, int... I>
constexpr std::array<MicroFn, sizeof...(I)> micro_table(std::integer_sequence<int, I...>) {
  return {&micro<I + 1, NV>...};
}
// [NV-1][MR-1]
constexpr std::array<std::array<MicroFn, kMR>, 2> kMicro = {
    micro_table<1>(std::make_integer_sequence<int, kMR>{}), micro_table<2>(std::make_integer_sequence<int, kMR>{})};

// Bp: op(B)[p0 .. p0+kc, j0 .. j0+nc) in panels of kc x 32, zero-padded past nc.
void pack_b(bool trans, const float* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* bp) {
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int64_t nr = std::min(kNR, nc - jr);
    float* dst = bp + jr * kc;
    if (!trans) {
      const __mmask16 m0 = lanes_mask(nr), m1 = lanes_mask(nr > 16 ? nr - 16 : 0);
      for (int64_t p = 0; p < kc; ++p) {
        const float* s = b + (p0 + p) * ldb + j0 + jr;
        _mm512_storeu_ps(dst + p * kNR, _mm512_maskz_loadu_ps(m0, s));
        _mm512_storeu_ps(dst + p * kNR + 16, _mm512_maskz_loadu_ps(m1, s + 16));
      }
    } else {
      // B stored (n, k): column j of op(B) is a contiguous row, so the panel is a transpose
      // (in 16 x 16 register blocks: a query block's q k^T packs as many floats as it
      // multiplies per column of C), zero-padded past nr.
      if (nr < kNR)
        for (int64_t p = 0; p < kc; ++p) std::fill(dst + p * kNR + nr, dst + (p + 1) * kNR, 0.0f);
      transpose(b + (j0 + jr) * ldb + p0, ldb, nr, kc, 1.0f, nullptr, dst, kNR);
    }
  }
}
}  // namespace

void gemm_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, bool overwrite, const float* init) {
  const int64_t ars = trans_a ? 1 : lda, aps = trans_a ? lda : 1;
  // Equal reduction blocks (384 = 2 x 192, not 256 + 128).
  const int64_t kc_max = ceil_div(k, ceil_div(k, kKC));
  const int64_t nc_max = std::min(kNC, round_up(n, kNR));
  float* bp = thread_scratch(kSlotGemm, static_cast<size_t>(kc_max * nc_max));
  // A^T with more than 128 rows: its rows are far apart (a weight gradient's X is
  // thousands of floats wide) and alias in L1, so each 12-row tile of it is packed.
  const bool pack_a = trans_a && m > 128;
  float* ap = pack_a ? thread_scratch(kSlotGemmA, static_cast<size_t>(kc_max * kMC)) : nullptr;
  for (int64_t j0 = 0; j0 < n; j0 += kNC) {
    const int64_t nc = std::min(kNC, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kc_max) {
      const int64_t kc = std::min(kc_max, k - p0);
      pack_b(trans_b, b, ldb, p0, kc, j0, nc, bp);
      for (int64_t i1 = 0; i1 < m; i1 += kMC) {
        const int64_t mc = std::min(kMC, m - i1);
        if (pack_a)
          for (int64_t i0 = i1; i0 < i1 + mc; i0 += kMR) {
            const int64_t mr = std::min(kMR, i1 + mc - i0);
            float* t = ap + (i0 - i1) * kc;
            for (int64_t p = 0; p < kc; ++p) std::memcpy(t + p * mr, a + i0 + (p0 + p) * lda, sizeof(float) * mr);
          }
        // Each tile of A (in L1, used for every panel) against the panels of B in turn
        // (streamed from L2): nanogpt-baby 3,669-3,797 -> 3,785-4,064 tokens/s against the
        // panel-outer order.
        for (int64_t i0 = i1; i0 < i1 + mc; i0 += kMR) {
          const int64_t mr = std::min(kMR, i1 + mc - i0);
          const float* at = pack_a ? ap + (i0 - i1) * kc : a + i0 * ars + p0 * aps;
          for (int64_t jr = 0; jr < nc; jr += kNR) {
            const int64_t nr = std::min(kNR, nc - jr);
            kMicro[nr > 16 ? 1 : 0][mr - 1](kc, at, pack_a ? 1 : ars, pack_a ? mr : aps, bp + jr * kc, alpha,
                                            c + i0 * ldc + j0 + jr, ldc, nr, overwrite && p0 == 0,
                                            init ? init + j0 + jr : nullptr);
          }
        }
      }
    }
  }
}
#else
void gemm_avx512(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float*,
                 int64_t, bool, const float*) {
  throw Error("gemm_avx512: built without AVX-512");
}
#endif

}  // namespace ablate::kernels
