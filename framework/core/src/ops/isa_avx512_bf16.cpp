// The bf16 GEMM and attention of the avx512_bf16 kernel path (dispatch.hpp): AVX512_BF16's dot
// product VDPBF16PS, which multiplies pairs of bf16 values and adds both products to a float32
// sum (32 products an instruction). Compiled with its target flags (framework/CMakeLists.txt),
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
// The lanes kernels' masks and softmax (attention_lanes.inc), for this path's bf16 attention
// below; its float32 products are avx512's.
#define ABLATE_ATTENTION_SOFTMAX_ONLY
#include "attention_lanes.inc"

namespace ablate::kernels::avx512_bf16 {
namespace {
constexpr int kNV = 4;             // vectors of 16 columns in a B panel
constexpr int64_t kNR = 16 * kNV;  // columns of a B panel
constexpr int64_t kMR = 6;         // rows of a C tile
constexpr int64_t kKC = 384;       // reduction block (an even number of steps)
constexpr int64_t kMC = 120;       // rows of A walked per B panel (a multiple of kMR)
constexpr int64_t kNC = 512;       // columns of B packed at a time

// The first n of 16 lanes (none for n <= 0).
inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? 0xFFFF : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
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
    m[v] = tail_mask(nr - 16 * v);
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

// Attention of a bf16 graph, heads up to 64 wide: attention_lanes.inc's blocks of 32 queries,
// masks and float32 softmax, with its products on VDPBF16PS: bf16 operands (q, k, v and the
// output gradient as the graph rounded them; the probabilities P and their gradient dS
// rounded here) and float32 sums. Each product is one of the forms above: a row-major
// operand read in place as words of pairs along the reduction (k, q, v and dO rows of bf16
// bits, P^T and dS^T as the (keys, 32) blocks they are), or a B panel of pairs packed once
// per (batch, kv head) (k and v along the keys), or once per block (q^T, dO^T: 32 columns).
//   forward   S^T (jm, 32) = scale k q^T; P = softmax; out (nq, HS) = P v
//   backward  dP^T = v dO^T; dS = P (dP - D); dq += scale dS k; dk += scale dS^T q;
//             dv += P^T dO
// The saved probabilities are P^T's bf16 bits (jm, 32) per block, as the other paths save
// them in a bf16 graph.

// The scratch of one task, carved in 64-byte pieces.
class Carve {
 public:
  explicit Carve(size_t bytes)
      : p_(reinterpret_cast<char*>(thread_scratch(kSlotAttention, bytes / 4 + 16))) {}
  template <class T>
  T* take(int64_t n) {
    T* r = reinterpret_cast<T*>(p_);
    p_ += bytes_of<T>(n);
    return r;
  }
  template <class T>
  static size_t bytes_of(int64_t n) {
    return (static_cast<size_t>(n) * sizeof(T) + 63) / 64 * 64;
  }

 private:
  char* p_;
};

// dst (rows, ld) = bf16 bits of x's rows [0, n) (element (j, d) at x[j rs + d cs], d < HS),
// rounded by VCVTNE2PS2BF16 (to_bf16's bits); columns from HS to ld and rows from n to `rows`
// zero.
void bf16_rows(const float* x, int64_t rs, int64_t cs, int64_t n, int64_t rows, int64_t HS,
               int64_t ld, uint16_t* dst) {
  for (int64_t j = 0; j < n; ++j) {
    uint16_t* d = dst + j * ld;
    if (cs != 1) {
      for (int64_t c = 0; c < HS; ++c) d[c] = to_bf16_scalar(x[j * rs + c * cs]);
      for (int64_t c = HS; c < ld; ++c) d[c] = 0;
      continue;
    }
    const float* r = x + j * rs;
    // rows some way ahead, on their way from memory (rows of q, k, v or dO are a few cache
    // lines of a much wider row, which the hardware's prefetchers do not run ahead on)
    if (j + 8 < n)
      for (int64_t c = 0; c < HS; c += 16)
        _mm_prefetch(reinterpret_cast<const char*>(r + 8 * rs + c), _MM_HINT_T0);
    for (int64_t c = 0; c < ld; c += 32) {
      const int64_t w = std::min<int64_t>(32, HS - c), out = std::min<int64_t>(32, ld - c);
      const __m512 lo = _mm512_maskz_loadu_ps(tail_mask(w), r + c);
      const __m512 hi = _mm512_maskz_loadu_ps(tail_mask(w - 16), r + c + 16);
      const __mmask32 m = out >= 32 ? ~__mmask32{0} : (__mmask32{1} << out) - 1;
      _mm512_mask_storeu_epi16(d + c, m, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
  std::memset(dst + n * ld, 0, sizeof(uint16_t) * static_cast<size_t>((rows - n) * ld));
}

// The same from bf16 bits x (element (j, d) at x[j rs + d]): a copy.
void bf16_rows(const uint16_t* x, int64_t rs, int64_t n, int64_t rows, int64_t HS, int64_t ld,
               uint16_t* dst) {
  for (int64_t j = 0; j < n; ++j) {
    std::memcpy(dst + j * ld, x + j * rs, sizeof(uint16_t) * static_cast<size_t>(HS));
    for (int64_t c = HS; c < ld; ++c) dst[j * ld + c] = 0;
  }
  std::memset(dst + n * ld, 0, sizeof(uint16_t) * static_cast<size_t>((rows - n) * ld));
}

// bf16 rows (Tk, ld) of kv head kh's keys or values (as bf16_rows), from float32 values or the
// bits they wait in.
void key_rows(const Attn& a, int64_t b, int64_t kh, bool keys, int64_t Tk, int64_t ld,
              uint16_t* dst) {
  const uint16_t* bits = keys ? a.k16 : a.v16;
  if (bits)
    return bf16_rows(keys ? a.k_at<uint16_t>(b, kh) : a.v_at<uint16_t>(b, kh), a.kv_rstride, Tk, Tk,
                     a.HS, ld, dst);
  if (keys) return bf16_rows(a.k_at(b, kh), a.k_rstride, a.k_cstride, Tk, Tk, a.HS, ld, dst);
  bf16_rows(a.v_at(b, kh), a.kv_rstride, 1, Tk, Tk, a.HS, ld, dst);
}
// bf16 rows (32, ld) of head h's queries [i0, i0 + nq), rows past nq zero.
void query_rows(const Attn& a, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t ld,
                uint16_t* dst) {
  if (a.q16) return bf16_rows(a.q_at<uint16_t>(b, h, i0), a.q_rstride, nq, kLanes, a.HS, ld, dst);
  bf16_rows(a.q_at(b, h, i0), a.q_rstride, 1, nq, kLanes, a.HS, ld, dst);
}

// rows (jm, 32) of bf16 bits of x (jm, 32) times mul (per lane), and the same values as words
// of pairs along the rows, (ceil(jm/2), 32), the second half of an odd jm's last word 0 (words
// null: only the rows).
void bf16_blocks(const float* x, int64_t jm, const __m512* mul, uint16_t* rows, uint32_t* words) {
  // word lane l of a pair of rows: element l of the first row, then of the second
  alignas(64) static constexpr uint16_t kPairs[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                      21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                      11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i pairs = _mm512_load_si512(kPairs);
  for (int64_t j = 0; j < jm; j += 2) {
    for (int v = 0; v < kV; ++v) {
      const __m256i lo = (__m256i)_mm512_cvtneps_pbh(
          _mm512_mul_ps(_mm512_loadu_ps(x + j * kLanes + v * kW), mul[v]));
      const __m256i hi = j + 1 < jm ? (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(
                                          _mm512_loadu_ps(x + (j + 1) * kLanes + v * kW), mul[v]))
                                    : _mm256_setzero_si256();
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(rows + j * kLanes + v * kW), lo);
      if (j + 1 < jm)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(rows + (j + 1) * kLanes + v * kW), hi);
      if (words)
        _mm512_storeu_si512(
            words + j / 2 * kLanes + v * kW,
            _mm512_permutexvar_epi16(pairs, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)));
    }
  }
}

// C (m, nr) (+)= alpha A B over kq pairs: A's word (r, q) at a[r ars + q aps], B a packed panel
// (pack_b), in tiles of kMR rows; set: C = alpha A B.
void tiles(int64_t m, int64_t nr, int64_t kq, const uint32_t* a, int64_t ars, int64_t aps,
           const uint32_t* bp, float alpha, float* c, int64_t ldc, bool set) {
  for (int64_t i0 = 0; i0 < m; i0 += kMR) {
    const int64_t mr = std::min(kMR, m - i0);
    kMicro[(nr + 15) / 16 - 1][mr - 1](kq, a + i0 * ars, ars, aps, bp, alpha, c + i0 * ldc, ldc, nr,
                                       set, nullptr);
  }
}

void attention_forward_lanes(const Attn& a, int64_t b, int64_t h, float* out, float* lse) {
  const int64_t kh = h / a.group(), C = a.NH * a.HS, HS = a.HS, HSe = HS + HS % 2;
  const int64_t Tk = a.visible(b, a.T - 1), Tq = (Tk + 1) / 2;  // keys any query sees
  Carve scratch(Carve::bytes_of<float>(Tk * kLanes) + 2 * Carve::bytes_of<uint16_t>(Tk * HSe) +
                Carve::bytes_of<uint32_t>(Tq * kNR) + Carve::bytes_of<uint16_t>(kLanes * HSe) +
                Carve::bytes_of<uint32_t>(Tq * kLanes) + Carve::bytes_of<uint16_t>(Tk * kLanes));
  float* st = scratch.take<float>(Tk * kLanes);           // S^T, then P^T (jm, 32)
  uint16_t* kb = scratch.take<uint16_t>(Tk * HSe);        // k rows
  uint16_t* vb = scratch.take<uint16_t>(Tk * HSe);        // v rows
  uint32_t* vp = scratch.take<uint32_t>(Tq * kNR);        // v as a B panel
  uint16_t* qb = scratch.take<uint16_t>(kLanes * HSe);    // q rows of the block
  uint32_t* pw = scratch.take<uint32_t>(Tq * kLanes);     // P^T's words along the keys
  uint16_t* pbits = scratch.take<uint16_t>(Tk * kLanes);  // P^T, where not saved
  key_rows(a, b, kh, true, Tk, HSe, kb);
  key_rows(a, b, kh, false, Tk, HSe, vb);
  pack_b(false, vb, HSe, 0, Tk, 0, HS, vp);
  uint16_t* saved = probs_bits_at(a, b, h);
  for (int64_t i0 = 0; i0 < a.T; i0 += kLanes) {
    const int64_t nq = std::min(kLanes, a.T - i0), jm = a.visible(b, i0 + nq - 1);
    query_rows(a, b, h, i0, nq, HSe, qb);
    gemm_bf16(false, true, jm, kLanes, HSe, a.scale, kb, HSe, qb, HSe, st, kLanes, true, nullptr);
    alignas(64) float mx[kLanes], sum[kLanes];
    lanes_mask(a, b, h, i0, jm, st, mx);
    lanes_exp(a, b, i0, nq, jm, mx, st, sum);
    // P = exp / sum, 0 for a query without a visible key (sum 0; its lse is +inf)
    __m512 inv[kV];
    for (int v = 0; v < kV; ++v) {
      const vf s = load(sum + v * kW);
      const vf r = s > 0.0f ? 1.0f / s : vf{};
      std::memcpy(&inv[v], &r, sizeof r);
    }
    uint16_t* p = saved ? saved : pbits;
    bf16_blocks(st, jm, inv, p, pw);
    if (saved) saved += jm * kLanes;
    // out rows (nq, HS) = P (nq, jm) v (jm, HS): P's word (i, q) at pw[q 32 + i]
    tiles(nq, HS, (jm + 1) / 2, pw, 1, kLanes, vp, 1.0f, out + (b * a.T + i0) * C + h * HS, C,
          true);
    if (lse) {
      float* l = lse + (b * a.NH + h) * a.T + i0;
      for (int64_t i = 0; i < nq; ++i) l[i] = mx[i] == -kInf ? kInf : mx[i] + std::log(sum[i]);
    }
  }
}

void attention_backward_lanes(const Attn& a, int64_t b, int64_t kh, const float* dout,
                              const float* lse, float* dq, float* dk, float* dv) {
  const int64_t C = a.NH * a.HS, HS = a.HS, HSe = HS + HS % 2, kvC = a.kv_rstride;
  const int64_t Tk = a.visible(b, a.T - 1), Tq = (Tk + 1) / 2;
  Carve scratch(
      2 * Carve::bytes_of<uint16_t>(Tk * HSe) + Carve::bytes_of<uint32_t>(Tq * kNR) +
      2 * Carve::bytes_of<uint16_t>(kLanes * HSe) + 2 * Carve::bytes_of<float>(Tk * kLanes) +
      2 * Carve::bytes_of<uint16_t>(Tk * kLanes) + Carve::bytes_of<uint32_t>(Tq * kLanes));
  uint16_t* kcopy = scratch.take<uint16_t>(Tk * HSe);      // k rows, where copied
  uint16_t* vcopy = scratch.take<uint16_t>(Tk * HSe);      // v rows, where copied
  uint32_t* kp = scratch.take<uint32_t>(Tq * kNR);         // k as a B panel
  uint16_t* qcopy = scratch.take<uint16_t>(kLanes * HSe);  // q rows of the block, where copied
  uint16_t* dob = scratch.take<uint16_t>(kLanes * HSe);    // dO rows of the block
  float* pt = scratch.take<float>(Tk * kLanes);            // P^T (jm, 32)
  float* dst = scratch.take<float>(Tk * kLanes);           // dP^T, then dS^T
  uint16_t* pbits = scratch.take<uint16_t>(Tk * kLanes);   // P^T, where not saved
  uint16_t* dsb = scratch.take<uint16_t>(Tk * kLanes);     // dS^T
  uint32_t* dsw = scratch.take<uint32_t>(Tq * kLanes);     // dS^T's words along the keys
  // k, v and q rows: the bits they wait in, read in place where whole pairs (an even head
  // size and row strides; a block of 32 queries for q), else copies.
  const bool pairs = HS % 2 == 0 && a.kv_rstride % 2 == 0 && a.kv_bstride % 2 == 0;
  const bool kv_in_place = pairs && a.k16 && a.v16 && a.k_cstride == 1;
  const bool q_in_place = pairs && a.q16 && a.q_rstride % 2 == 0;
  const uint16_t* kb = kv_in_place ? a.k_at<uint16_t>(b, kh) : kcopy;
  const uint16_t* vb = kv_in_place ? a.v_at<uint16_t>(b, kh) : vcopy;
  const int64_t kvld = kv_in_place ? a.kv_rstride : HSe;
  if (!kv_in_place) {
    key_rows(a, b, kh, true, Tk, HSe, kcopy);
    key_rows(a, b, kh, false, Tk, HSe, vcopy);
  }
  pack_b(false, kb, kvld, 0, Tk, 0, HS, kp);
  // This task's rows of dk and dv (keys of batch b, columns of kv head kh): no other task
  // writes them, so the products below accumulate into them directly.
  float* dk_rows = dk ? dk + b * a.kv_bstride + kh * HS : nullptr;
  float* dv_rows = dv ? dv + b * a.kv_bstride + kh * HS : nullptr;
  __m512 one[kV];
  for (__m512& x : one) x = _mm512_set1_ps(1.0f);
  for (int64_t h = kh * a.group(); h < (kh + 1) * a.group(); ++h) {
    const uint16_t* saved = probs_bits_at(a, b, h);
    for (int64_t i0 = 0; i0 < a.T; i0 += kLanes) {
      const int64_t nq = std::min(kLanes, a.T - i0), jm = a.visible(b, i0 + nq - 1);
      const bool q_here = q_in_place && nq == kLanes;
      const uint16_t* qb = q_here ? a.q_at<uint16_t>(b, h, i0) : qcopy;
      const int64_t qld = q_here ? a.q_rstride : HSe;
      if (!q_here) query_rows(a, b, h, i0, nq, HSe, qcopy);
      const uint16_t* p = saved;  // P^T's bits (jm, 32), saved by the forward pass or recomputed
      if (saved) {
        for (int64_t j = 0; j < jm * kLanes; j += kW) store(pt + j, from_bf16(load_h(saved + j)));
        saved += jm * kLanes;
      } else {
        gemm_bf16(false, true, jm, kLanes, HSe, a.scale, kb, kvld, qb, qld, pt, kLanes, true,
                  nullptr);
        alignas(64) float l[kLanes];
        for (int64_t i = 0; i < kLanes; ++i)
          l[i] = i < nq ? lse[(b * a.NH + h) * a.T + i0 + i] : kInf;
        lanes_mask(a, b, h, i0, jm, pt);
        lanes_exp(a, b, i0, nq, jm, l, pt);
        bf16_blocks(pt, jm, one, pbits, nullptr);
        for (int64_t j = 0; j < jm * kLanes; j += kW) store(pt + j, from_bf16(load_h(pbits + j)));
        p = pbits;
      }
      // dP^T (jm, 32) = v dO^T
      const float* do_rows = dout + (b * a.T + i0) * C + h * HS;  // (nq, HS), row stride C
      bf16_rows(do_rows, C, 1, nq, kLanes, HS, HSe, dob);
      gemm_bf16(false, true, jm, kLanes, HSe, 1.0f, vb, kvld, dob, HSe, dst, kLanes, true, nullptr);
      // D_i = sum_j P_ij dP_ij (which equals dO_i . O_i), then dS^T = P^T * (dP^T - D)
      Row dd = rsplat(0.0f);
      for (int64_t j = 0; j < jm; ++j)
        for (int v = 0; v < kV; ++v)
          dd.v[v] += load(pt + j * kLanes + v * kW) * load(dst + j * kLanes + v * kW);
      for (int64_t j = 0; j < jm; ++j)
        for (int v = 0; v < kV; ++v) {
          float* r = dst + j * kLanes + v * kW;
          store(r, load(pt + j * kLanes + v * kW) * (load(r) - dd.v[v]));
        }
      bf16_blocks(dst, jm, one, dsb, dsw);
      // dq rows (nq, HS) += scale dS (nq, jm) k (jm, HS): dS's word (i, q) at dsw[q 32 + i]
      if (dq)
        tiles(nq, HS, (jm + 1) / 2, dsw, 1, kLanes, kp, a.scale,
              dq + (b * a.T + i0) * a.q_rstride + h * HS, a.q_rstride, false);
      // dk (jm, HS) += scale dS^T (jm, 32) q (32, HS); dv (jm, HS) += P^T (jm, 32) dO (32, HS)
      if (dk)
        gemm_bf16(false, false, jm, HS, kLanes, a.scale, dsb, kLanes, qb, qld, dk_rows, kvC, false,
                  nullptr);
      if (dv)
        gemm_bf16(false, false, jm, HS, kLanes, 1.0f, p, kLanes, dob, HSe, dv_rows, kvC, false,
                  nullptr);
    }
  }
}

// simd.hpp's to_bf16 and round_bf16 (the same bits: VCVTNE2PS2BF16 rounds to nearest even,
// quiets NaN and flushes denormals to signed zeros as they do) on 32 floats an instruction.
void to_bf16_native(const float* src, int64_t n, uint16_t* dst) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16),
                                                              _mm512_loadu_ps(src + i)));
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m,
                             (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i)));
  }
}
void round_native(const float* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
    _mm512_mask_storeu_ps(dst + i, m,
                          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
}

}  // namespace

// gemm_round_b and gemv: the avx512 path's (isa.cpp).
const Bf16Kernels kBf16 = {&gemm_bf16,
                           nullptr,
                           &to_bf16_native,
                           &round_native,
                           nullptr,
                           &attention_forward_lanes,
                           &attention_backward_lanes};
}  // namespace ablate::kernels::avx512_bf16
