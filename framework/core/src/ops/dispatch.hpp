// The kernels chosen at run time from what the CPU has (isa.cpp): one table of
// function pointers per kernel path, each compiled in its own translation unit with its
// target flags (isa_avx512.cpp, isa_avx2.cpp, isa_portable.cpp; framework/CMakeLists.txt),
// so that a build made without -march=native still runs AVX-512 or AVX2 code where the CPU
// has it, and one made on an AVX-512 machine runs on an AVX2 one. ABLATE_ISA forces a
// lower path (every path is tested on one machine). Internal; no Eigen here: the
// per-path units must not instantiate inline code that other units share (the linker
// keeps one copy of it, which could then be the AVX-512 one).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

namespace ablate::kernels {

// avx512_bf16: the avx512 path whose bf16 GEMM uses AVX512_BF16's dot product (its float32
// kernels are avx512's), as forced by ABLATE_ISA. Unforced, the avx512 path takes that GEMM
// where it is the faster one (dot_by_default) and is still named avx512. onednn_bf16: the
// avx512 path whose bf16 GEMM is oneDNN's matmul (bf16_onednn.cpp), forced by ABLATE_ISA; the
// avx512 path takes it unforced where the CPU has AMX-BF16 (oneDNN's AMX kernels).
enum class Isa { portable = 0, avx2 = 1, avx512 = 2, avx512_bf16 = 3, onednn_bf16 = 4 };
const char* isa_name(Isa isa);

// Everything a (batch, head) kernel needs; keys/values are read through strides so
// that the same code serves the graph's k, v and a KVCache.
struct Attn {
  int64_t B, T, NH, NKV, HS;
  int64_t Tk;      // keys visible to the last query
  int64_t offset;  // absolute position of query 0 (cache length before this call)
  bool causal;
  float scale;              // 1/sqrt(HS)
  const float* slopes;      // (NH) or null
  const uint8_t* key_mask;  // (B*Tk) or null
  const int32_t*
      prefix;      // (B) or null: with causal, row b's queries before prefix[b] see keys before it
  const float* q;  // (B*T, NH*HS) with row stride q_rstride
  int64_t q_rstride;  // NH*HS, or wider when q is a column range of a fused qkv
  const float* k;     // element (b, j, c) at k[b*kv_bstride + j*k_rstride + c*k_cstride]
  const float* v;     // element (b, j, c) at v[b*kv_bstride + j*kv_rstride + c]
  int64_t kv_bstride, kv_rstride;
  int64_t k_rstride, k_cstride;  // (kv_rstride, 1), or (1, capacity) for a KVCache's keys
  float* probs = nullptr;        // saved P^T blocks of the lanes kernels, or null (see probs_at)
  int64_t probs_head = 0;        // values of them per (batch, head): probs_per_head
  bool probs_bf16 = false;       // saved as bf16 bits (a bf16 graph), half the bytes
  bool bf16 = false;             // a bf16 graph's: Bf16Kernels' attention where the path has it
  bool round_probs = false;      // and then the decoding kernel's P rounded to bf16 as theirs
  int64_t group() const { return NH / NKV; }
  // Keys [0, visible(b, i)) are visible to query i of row b.
  int64_t visible(int64_t b, int64_t i) const {
    if (!causal) return Tk;
    const int64_t own = offset + i + 1;
    return std::min(Tk, prefix && prefix[b] > own ? int64_t{prefix[b]} : own);
  }
  // Backward of a bf16 graph on Bf16Kernels' attention: q, k or v as the bf16 bits their values
  // wait in (Graph's "Values' lifetimes"), or null where they are float32 (q, k, v). The same
  // strides and offsets (the _at functions' template).
  const uint16_t* q16 = nullptr;
  const uint16_t* k16 = nullptr;
  const uint16_t* v16 = nullptr;
  template <class E = float>
  const E* q_at(int64_t b, int64_t h, int64_t i) const {
    return of<E>(q, q16) + (b * T + i) * q_rstride + h * HS;
  }
  template <class E = float>
  const E* k_at(int64_t b, int64_t kh) const {
    return of<E>(k, k16) + b * kv_bstride + kh * HS * k_cstride;
  }
  template <class E = float>
  const E* v_at(int64_t b, int64_t kh) const {
    return of<E>(v, v16) + b * kv_bstride + kh * HS;
  }
  template <class E>
  static const E* of(const float* f, const uint16_t* h) {
    if constexpr (sizeof(E) == 2) return h;
    else return f;
  }
};

// Saved probabilities of the lanes kernels (attention.cpp): P^T blocks (jm, 32) of each
// (batch, head), block after block.
inline float* probs_at(const Attn& a, int64_t b, int64_t h) {
  return a.probs && !a.probs_bf16 ? a.probs + (b * a.NH + h) * a.probs_head : nullptr;
}
// The same as bf16 bits (probs_bf16).
inline uint16_t* probs_bits_at(const Attn& a, int64_t b, int64_t h) {
  return a.probs && a.probs_bf16
             ? reinterpret_cast<uint16_t*>(a.probs) + (b * a.NH + h) * a.probs_head
             : nullptr;
}

// The bf16 kernels of a path (bfloat16: the upper 16 bits of a float32, stored as uint16).
struct Bf16Kernels {
  // C (m,n) (+)= alpha op(A) op(B) as gemm below, for any m, n, k > 0, with A and B bf16 and
  // float32 sums; null on a path without one, whose bf16 products run gemm_round_b on float32
  // bf16 values (exact products: linalg.cpp).
  void (*gemm)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c,
               int64_t ldc, bool overwrite, const float* init);
  // The float32 GEMM (IsaKernels::gemm, for any m, n, k > 0) with B's values rounded to bf16 as
  // it packs them: C (+)= alpha op(A) op(round(B)). A path without a bf16 GEMM multiplies the
  // weights' roundings this way, with no copy of them (the avx512 path's on the others).
  void (*gemm_round_b)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                       int64_t ldc, bool overwrite, const float* init);
  // dst[0, n) = src[0, n) rounded to nearest even bf16 (simd.hpp: to_bf16; the same bits on every
  // path).
  void (*to_bf16)(const float* src, int64_t n, uint16_t* dst);
  // The same values as float32 (dst may be src).
  void (*round)(const float* src, int64_t n, float* dst);
  // c (1,n) += alpha x (1,k) op(B) as IsaKernels::gemv, with B's values bf16 bits (the same sums
  // as gemv's on their float32 values): batch-1 decoding reads half the bytes of the weights.
  // The float32 kernels' (avx512's on the avx512_bf16 and onednn_bf16 paths).
  void (*gemv)(bool trans_b, int64_t n, int64_t k, float alpha, const float* x, int64_t incx,
               const uint16_t* b, int64_t ldb, float* c);
  // A bf16 graph's attention for heads up to 64 wide, as IsaKernels' lanes kernels with their
  // products on bf16 values (the probabilities and their gradient rounded too) and float32
  // sums, where the path multiplies bf16 values faster than float32 ones (the dot product's
  // path); null elsewhere, where a bf16 graph's attention runs the float32 kernels on the
  // rounded q, k, v and output gradient.
  void (*attention_forward_lanes)(const Attn& a, int64_t b, int64_t h, float* out, float* lse);
  void (*attention_backward_lanes)(const Attn& a, int64_t b, int64_t kh, const float* dout,
                                   const float* lse, float* dq, float* dk, float* dv);
};

struct IsaKernels {
  Isa isa;
  // C (m,n) (+)= alpha op(A) op(B), row-major, single-threaded, m > 4, n > 1, k > 0; with
  // overwrite, C = init (a row (1,n), or 0 when null) + alpha op(A) op(B) without reading C.
  void (*gemm)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
               bool overwrite, const float* init);
  // c (1,n) += alpha x (1,k) op(B): B (k,n) row-major, with trans_b (n,k); x's elements
  // incx apart. Batch-1 decoding's products (gemv.inc).
  void (*gemv)(bool trans_b, int64_t n, int64_t k, float alpha, const float* x, int64_t incx,
               const float* b, int64_t ldb, float* c);
  // dst (cols, rows) = src (rows, cols) transposed, column c times mul (and colmul[c] if given).
  void (*transpose)(const float* src, int64_t lds, int64_t rows, int64_t cols, float mul,
                    const float* colmul, float* dst, int64_t ldd);
  // attention.cpp's kernels for heads up to 64 wide (queries along vector lanes), and
  // for a few queries against a KV cache.
  void (*attention_forward_lanes)(const Attn& a, int64_t b, int64_t h, float* out, float* lse);
  void (*attention_backward_lanes)(const Attn& a, int64_t b, int64_t kh, const float* dout,
                                   const float* lse, float* dq, float* dk, float* dv);
  void (*attention_decode)(const Attn& a, int64_t b, int64_t h, float* out, float* lse);
  Bf16Kernels bf16;
};

// The path of this process: the best the CPU has, or ABLATE_ISA's (which must not be
// above it). Chosen once; throws ablate::Error on a bad ABLATE_ISA.
const IsaKernels& isa_kernels();
// The best path this CPU (and OS) supports.
Isa cpu_isa();

namespace avx512 {
extern const IsaKernels kTable;
}
namespace avx512_bf16 {
extern const Bf16Kernels kBf16;
}
namespace onednn {
// oneDNN's bf16 GEMM, or null in a build without oneDNN (ABLATE_WITH_ONEDNN).
const Bf16Kernels* kernels();
// Whether the CPU has AMX-BF16 and the OS lets this process use its tiles (asked for here).
bool amx_usable();
// The instruction set oneDNN's kernels use on this CPU ("avx512_core_amx", ...); "" without it.
std::string isa();
}  // namespace onednn
// Whether the CPU has AVX512_BF16 (and the avx512 path).
bool cpu_has_avx512_bf16();
// Whether the CPU's best path takes the dot-product bf16 GEMM when ABLATE_ISA is unset (isa.cpp).
bool dot_by_default();
namespace avx2 {
extern const IsaKernels kTable;
}
namespace portable {
extern const IsaKernels kTable;
}

}  // namespace ablate::kernels
