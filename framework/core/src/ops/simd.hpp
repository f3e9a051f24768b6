// Vectors of the dispatched kernels (dispatch.hpp), included by each isa_<path>.cpp after
// it defines ABLATE_ISA_NS (its namespace) and ABLATE_VEC_WIDTH (floats per register: 16
// for AVX-512, 8 for AVX2, 4 for SSE2). Everything here lives in that namespace, so the
// three compilations of it never share a symbol.
#pragma once
#include <cstdint>
#include <cstring>
#include <utility>

#include "dispatch.hpp"
#if ABLATE_VEC_WIDTH == 16 && defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ablate::kernels::ABLATE_ISA_NS {

constexpr int kW = ABLATE_VEC_WIDTH;
using vf = float __attribute__((vector_size(4 * kW)));
using vi = int32_t __attribute__((vector_size(4 * kW)));

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{} + x; }
// kW bf16 values (their bits) as the float32 values they are: each the upper half of a float.
inline vf load(const uint16_t* p) {
  using vh = uint16_t __attribute__((vector_size(2 * kW)));
  using vu = uint32_t __attribute__((vector_size(4 * kW)));
  vh h;
  std::memcpy(&h, p, sizeof h);
  const vu w = __builtin_convertvector(h, vu) << 16;
  vf v;
  std::memcpy(&v, &w, sizeof v);
  return v;
}
inline float scalar(float x) { return x; }
inline float scalar(uint16_t h) {
  const uint32_t w = uint32_t{h} << 16;
  float x;
  std::memcpy(&x, &w, sizeof x);
  return x;
}

// Transposes a kW x kW block in registers: at b = kW/2, ..., 2, 1 the off-diagonal b x b
// blocks of every 2b x 2b block swap (two-source shuffles: lane c of the upper row takes
// lane c - b of the lower where bit b of c is set, the lower row lane c + b of the upper
// where it is clear). __builtin_shufflevector: GCC 12 and clang.
template <int B, size_t... C>
inline void swap_rows(vf& x, vf& y, std::index_sequence<C...>) {
  const vf lo = __builtin_shufflevector(x, y, ((C & B) ? kW + C - B : C)...);
  y = __builtin_shufflevector(x, y, ((C & B) ? kW + C : C + B)...);
  x = lo;
}
template <int B>
inline void swap_blocks(vf* r) {
  if constexpr (B >= 1) {
    for (int i = 0; i < kW; ++i)
      if ((i & B) == 0) swap_rows<B>(r[i], r[i + B], std::make_index_sequence<kW>{});
    swap_blocks<B / 2>(r);
  }
}
// dst row c (kW floats, row stride ldd) = column c of the kW x kW block at src (row
// stride lds) times mul[c].
inline void transpose_block(const float* src, int64_t lds, vf mul, float* dst, int64_t ldd) {
  vf r[kW];
  for (int i = 0; i < kW; ++i) r[i] = load(src + i * lds) * mul;
  swap_blocks<kW / 2>(r);
  for (int i = 0; i < kW; ++i) store(dst + i * ldd, r[i]);
}

// dst (cols, rows) = src (rows, cols) transposed, column c of src times mul (and times
// colmul[c] if given): whole kW x kW blocks in registers, the edges element by element.
inline void transpose(const float* src, int64_t lds, int64_t rows, int64_t cols, float mul,
                      const float* colmul, float* dst, int64_t ldd) {
  const int64_t rw = rows / kW * kW, cw = cols / kW * kW;
  for (int64_t c0 = 0; c0 < cw; c0 += kW) {
    const vf m = colmul ? load(colmul + c0) * mul : splat(mul);
    for (int64_t r0 = 0; r0 < rw; r0 += kW)
      transpose_block(src + r0 * lds + c0, lds, m, dst + c0 * ldd + r0, ldd);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < rw ? cw : 0; c < cols; ++c)
      dst[c * ldd + r] = src[r * lds + c] * (colmul ? colmul[c] * mul : mul);
}

// bfloat16: the upper 16 bits of a float. to_bf16 rounds to nearest even (ties to the even
// bf16), turns a NaN into a quiet NaN of the same sign and a denormal input into a zero of its
// sign (as VCVTNEPS2BF16 does), so that every kernel path converts to the same bits.
using vu = uint32_t __attribute__((vector_size(4 * kW)));
using vh = uint16_t __attribute__((vector_size(2 * kW)));
inline vh to_bf16(vf x) {
  vu u;
  std::memcpy(&u, &x, sizeof u);
  const vu mag = u & 0x7FFFFFFFu;
  vu r = (u + (0x7FFFu + ((u >> 16) & 1u))) >> 16;
  r = mag > 0x7F800000u ? (u >> 16) | 0x40u : r;
  r = (u & 0x7F800000u) == 0u ? (u >> 16) & 0x8000u : r;
  return __builtin_convertvector(r, vh);
}
// x rounded to bf16 (the bits to_bf16 gives, as float32).
inline vf round_bf16(vf x) {
  vu u;
  std::memcpy(&u, &x, sizeof u);
  const vu mag = u & 0x7FFFFFFFu;
  vu r = (u + (0x7FFFu + ((u >> 16) & 1u))) & 0xFFFF0000u;
  r = mag > 0x7F800000u ? (u & 0xFFFF0000u) | 0x00400000u : r;
  r = (u & 0x7F800000u) == 0u ? u & 0x80000000u : r;
  vf y;
  std::memcpy(&y, &r, sizeof y);
  return y;
}
inline vf from_bf16(vh h) {
  const vu u = __builtin_convertvector(h, vu) << 16;
  vf x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
inline vh load_h(const uint16_t* p) {
  vh v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_h(uint16_t* p, vh v) { std::memcpy(p, &v, sizeof v); }
inline uint16_t to_bf16_scalar(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  if ((u & 0x7F800000u) == 0u) return static_cast<uint16_t>((u >> 16) & 0x8000u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float from_bf16_scalar(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
// dst[0, n) = src[0, n) rounded to bf16, as float32 (dst may be src).
inline void round_bf16(const float* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) store(dst + i, round_bf16(load(src + i)));
  for (; i < n; ++i) dst[i] = from_bf16_scalar(to_bf16_scalar(src[i]));
}
// dst[0, n) = src[0, n) in bf16.
inline void to_bf16(const float* src, int64_t n, uint16_t* dst) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) store_h(dst + i, to_bf16(load(src + i)));
  for (; i < n; ++i) dst[i] = to_bf16_scalar(src[i]);
}

// e^x (Cephes' expf, as Eigen's: x = n ln 2 + r, n the nearest integer, a degree-5
// polynomial in r, times 2^n); below -87.33 (and for -inf) exactly 0, above 88 clamped
// (softmax passes x <= 0). AVX-512 makes 2^n p with VSCALEFPS and n with VRNDSCALEPS (ties
// to even: only an exact tie of x log2 e, where both n are as close, differs from the other
// paths' floor(x log2 e + 1/2)); elsewhere 2^n is built in the exponent bits.
inline vf vexp(vf x) {
  constexpr float kLo = -87.3365447505531f;  // ln of the smallest normal float
  x = x > 88.0f ? splat(88.0f) : x;
#if ABLATE_VEC_WIDTH == 16 && defined(__AVX512F__)
  __m512 v;
  std::memcpy(&v, &x, sizeof v);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_set1_ps(kLo), _CMP_NLT_UQ);  // NaN kept
  vf nf;
  std::memcpy(&nf, &n, sizeof nf);
#else
  const vf x0 = x;
  x = x < kLo ? splat(kLo) : x;
  const vf fx = x * 1.44269504088896341f + 0.5f;
  vf nf = __builtin_convertvector(__builtin_convertvector(fx, vi), vf);  // truncated
  nf = nf > fx ? nf - 1.0f : nf;                                         // floor
#endif
  vf r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const vf y = p * (r * r) + r + 1.0f;
#if ABLATE_VEC_WIDTH == 16 && defined(__AVX512F__)
  __m512 yv;
  std::memcpy(&yv, &y, sizeof yv);
  const __m512 e = _mm512_maskz_scalef_ps(keep, yv, n);
  vf out;
  std::memcpy(&out, &e, sizeof out);
  return out;
#else
  // 2^n, n in [-126, 128); at the lower clamp 0.
  const vi e = (__builtin_convertvector(nf, vi) + 127) << 23;
  vf scale;
  std::memcpy(&scale, &e, sizeof scale);
  return x0 < kLo ? vf{} : y * scale;  // NaN kept
#endif
}

}  // namespace ablate::kernels::ABLATE_ISA_NS
