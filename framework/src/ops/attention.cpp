// Fused scaled-dot-product attention (Vaswani et al. 2017), one task per (batch, head):
// per block of 32 query rows, scores q k^T, mask (causal / key padding), ALiBi-style
// slopes (Press et al. 2022), softmax and the weighted sum of values, all in per-thread
// scratch that stays in cache. Three kernels: heads up to 64 wide put the 32 queries
// along vector lanes; wider heads run the two products as small GEMMs on Eigen's kernel;
// a few queries against a KV cache (decoding) have their own. Grouped-query heads
// (Ainslie et al. 2023). q (B*T, NH*HS), k v (B*T, NKV*HS) -> (B*T, NH*HS). The
// log-sum-exp of every score row (B,NH,T) is kept, and, for the lanes kernels where they
// fit in 64 MB, the probabilities; otherwise backward recomputes them (as FlashAttention).
#include <cmath>
#include <cstring>
#include <limits>

#include "ablate/ops.hpp"
#include "kernels.hpp"

namespace ablate {

int64_t& kernels::attention_saved_probs_limit() {
  static int64_t limit = int64_t{1} << 24;  // floats: 64 MB per attention node
  return limit;
}

void KVCache::init(int64_t batch_, int64_t capacity_, int64_t width_) {
  if (batch_ <= 0 || capacity_ <= 0 || width_ <= 0)
    throw Error("KVCache::init: batch, capacity and width must be positive; got " +
                std::to_string(batch_) + ", " + std::to_string(capacity_) + ", " +
                std::to_string(width_));
  batch = batch_;
  capacity = capacity_;
  width = width_;
  length = 0;
  const size_t n = static_cast<size_t>(batch * capacity * width);
  // 16 floats of slack: the decoding kernel reads whole 16-float vectors of a head's
  // values and of a key row's positions.
  k.assign(n + 16, 0.0f);
  v.assign(n + 16, 0.0f);
}

namespace {
using namespace kernels;

constexpr int64_t kBlockQ = 32;  // query rows per block: bounds the causal waste
constexpr float kInf = std::numeric_limits<float>::infinity();

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
  const float* q;           // (B*T, NH*HS) with row stride q_rstride
  int64_t q_rstride;        // NH*HS, or wider when q is a column range of a fused qkv
  const float* k;           // element (b, j, c) at k[b*kv_bstride + j*k_rstride + c*k_cstride]
  const float* v;           // element (b, j, c) at v[b*kv_bstride + j*kv_rstride + c]
  int64_t kv_bstride, kv_rstride;
  int64_t k_rstride, k_cstride;  // (kv_rstride, 1), or (1, capacity) for a KVCache's keys
  float* probs = nullptr;         // saved P^T blocks of the lanes kernels, or null (see probs_at)
  int64_t probs_head = 0;         // floats of them per (batch, head): probs_per_head
  int64_t group() const { return NH / NKV; }
  // Keys [0, visible(i)) are visible to query i.
  int64_t visible(int64_t i) const { return causal ? std::min(Tk, offset + i + 1) : Tk; }
  const float* q_at(int64_t b, int64_t h, int64_t i) const {
    return q + (b * T + i) * q_rstride + h * HS;
  }
  const float* k_at(int64_t b, int64_t kh) const { return k + b * kv_bstride + kh * HS * k_cstride; }
  const float* v_at(int64_t b, int64_t kh) const { return v + b * kv_bstride + kh * HS; }
};

// Score rows are padded to a multiple of 16 floats and start 64-byte aligned, so that
// the row passes (max, exp, sum) run on whole vectors without scalar heads or tails.
using AlignedRow = Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64>;
inline int64_t padded(int64_t n) { return round_up(n, 16); }

// Logits of the query rows [i0, i1) of head h against keys [0, jm), jm = visible(i1-1):
// s (i1-i0, ld) = q k^T / sqrt(HS), minus m_h |pos_i - j| with slopes; keys that are not
// visible (causal, padding columns up to ld) or padded (key_mask) get -inf.
void score_block(const Attn& a, int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t jm,
                 int64_t ld, float* s) {
  const int64_t kh = h / a.group(), nq = i1 - i0;
  std::memset(s, 0, sizeof(float) * static_cast<size_t>(nq * ld));
  const bool k_rows = a.k_cstride == 1;
  gemm_acc(false, k_rows, nq, jm, a.HS, a.scale, a.q_at(b, h, i0), a.q_rstride, a.k_at(b, kh),
           k_rows ? a.k_rstride : a.k_cstride, s, ld);
  const uint8_t* km = a.key_mask ? a.key_mask + b * a.Tk : nullptr;
  for (int64_t i = i0; i < i1; ++i) {
    float* sr = s + (i - i0) * ld;
    const int64_t jn = a.visible(i);
    if (a.slopes) {
      const float m = a.slopes[h];
      const float pos = static_cast<float>(a.offset + i);
      // |i - j|: the same as i - j under a causal mask, symmetric for bidirectional attention.
      for (int64_t j = 0; j < jn; ++j) sr[j] -= m * std::fabs(pos - static_cast<float>(j));
    }
    if (km)
      for (int64_t j = 0; j < jn; ++j) sr[j] = km[j] ? sr[j] : -kInf;
    for (int64_t j = jn; j < ld; ++j) sr[j] = -kInf;
  }
}

// After exp: zero what must be exactly zero. Eigen's vectorised exp maps -inf to a tiny
// positive number, so invisible and padded keys are cleared explicitly.
inline void clear_invisible(const Attn& a, int64_t b, int64_t jn, int64_t ld, float* pr) {
  if (a.key_mask) {
    const uint8_t* km = a.key_mask + b * a.Tk;
    for (int64_t j = 0; j < jn; ++j) pr[j] = km[j] ? pr[j] : 0.0f;
  }
  for (int64_t j = jn; j < ld; ++j) pr[j] = 0.0f;
}

// The GEMMs below are arranged so that their output rows are long (keys or query rows)
// rather than HS wide: Eigen vectorises along output rows, and HS is often 8-16. Outputs
// with HS columns are therefore computed transposed, (HS, n), in scratch.

// dk, dv rows of kv head kh += the transposed sums dkt, dvt (HS, Tkp) of its group.
void add_kv_grads(const Attn& a, int64_t b, int64_t kh, const float* dkt, const float* dvt, int64_t Tkp, float* dk,
                  float* dv) {
  const int64_t HS = a.HS;
  for (int64_t j = 0; j < a.Tk; ++j) {
    const int64_t r = b * a.kv_bstride + j * a.kv_rstride + kh * HS;
    if (dk)
      for (int64_t d = 0; d < HS; ++d) dk[r + d] += dkt[d * Tkp + j];
    if (dv)
      for (int64_t d = 0; d < HS; ++d) dv[r + d] += dvt[d * Tkp + j];
  }
}

// ---- heads up to 64 wide: queries along the vector lanes -----------------------------
// GEMMs with an inner or outer dimension of HS spend much of their time packing when HS
// is small, and re-pack the keys for every block of queries. These kernels put a block
// of 32 queries in two 16-float vectors instead: a score row S^T[j] (32 queries) is HS
// broadcast-multiply-adds of key j's values against q^T's rows, the softmax runs down
// the columns (elementwise across rows), and out^T[d] accumulates value j's element d
// times P^T[j]. The products that sum over queries or keys into HS-wide rows (dq, dk,
// dv) are GEMMs on gemm_avx512's kernel, reading P^T and dS^T in place. Against the
// GEMM-per-block kernels below (forward + backward of one layer, 2 threads): head size
// 32 (B 16, T 128, 3 heads) 1.67 -> 1.05 ms; 64 (nanogpt-baby) 106 -> 81 ms. Vectors are
// GCC's generic ones: AVX-512 registers here, pairs of AVX2 registers elsewhere.
constexpr int64_t kLanes = 32;  // queries per block: two v16 (kernels.hpp)

inline v16 vmax(v16 a, v16 b) { return a > b ? a : b; }

constexpr int64_t kMaxLanesHS = 64;
bool lanes_kernel(const Attn& a) { return a.HS <= kMaxLanesHS; }

// Saved probabilities. Backward needs P again; recomputing it (the scores and their exp)
// was about a third of the lanes backward pass, so where they fit the forward pass keeps
// each block's P^T (jm, 32), block after block, per (batch, head): 32 x (sum of the
// blocks' jm) floats.
int64_t probs_per_head(const Attn& a) {
  int64_t rows = 0;
  for (int64_t i0 = 0; i0 < a.T; i0 += kLanes) rows += a.visible(std::min(a.T, i0 + kLanes) - 1);
  return rows * kLanes;
}
float* probs_at(const Attn& a, int64_t b, int64_t h) {
  return a.probs ? a.probs + (b * a.NH + h) * a.probs_head : nullptr;
}

// xt (HS, 32) = rows [i0, i0+nq) of x's head columns (row stride ld) transposed, times
// mul; lanes past nq are 0.
void transpose_block(const float* x, int64_t ld, int64_t nq, int64_t HS, float mul, float* xt) {
  std::memset(xt, 0, sizeof(float) * static_cast<size_t>(HS * kLanes));
  transpose(x, ld, nq, HS, mul, nullptr, xt, kLanes);
}

// st[j] (32 lanes) = sum_d x(j, d) * xt[d] for j in [0, jm), x(j, d) = rows[j*rs + d*cs]
// (rows of k or v, or a KVCache's transposed keys): four rows at a time share each load
// of xt's rows.
void lanes_dot(const float* rows, int64_t rs, int64_t cs, int64_t jm, int64_t HS, const float* xt, float* st) {
  int64_t j = 0;
  for (; j + 4 <= jm; j += 4) {
    v16 c[8] = {};
    const float* r = rows + j * rs;
    for (int64_t d = 0; d < HS; ++d) {
      const v16 x0 = load16(xt + d * kLanes), x1 = load16(xt + d * kLanes + 16);
      for (int u = 0; u < 4; ++u) {
        const float k = r[u * rs + d * cs];
        c[2 * u] += k * x0;
        c[2 * u + 1] += k * x1;
      }
    }
    for (int u = 0; u < 4; ++u) {
      store16(st + (j + u) * kLanes, c[2 * u]);
      store16(st + (j + u) * kLanes + 16, c[2 * u + 1]);
    }
  }
  for (; j < jm; ++j) {
    v16 c0 = {}, c1 = {};
    for (int64_t d = 0; d < HS; ++d) {
      const float k = rows[j * rs + d * cs];
      c0 += k * load16(xt + d * kLanes);
      c1 += k * load16(xt + d * kLanes + 16);
    }
    store16(st + j * kLanes, c0);
    store16(st + j * kLanes + 16, c1);
  }
}

// acc rows [d0, d0+ND) (32 lanes each) = sum over j in [0, jm) of rows[j*ld + d] * pt[j];
// ND fixed, so that the 2*ND accumulators stay in registers.
template <int ND>
void lanes_accumulate_rows(const float* rows, int64_t ld, int64_t jm, int64_t d0, const float* pt, float* acc) {
  v16 c[2 * ND] = {};
  for (int64_t j = 0; j < jm; ++j) {
    const v16 p0 = load16(pt + j * kLanes), p1 = load16(pt + j * kLanes + 16);
    const float* r = rows + j * ld + d0;
    for (int u = 0; u < ND; ++u) {
      c[2 * u] += r[u] * p0;
      c[2 * u + 1] += r[u] * p1;
    }
  }
  for (int u = 0; u < ND; ++u) {
    store16(acc + (d0 + u) * kLanes, c[2 * u]);
    store16(acc + (d0 + u) * kLanes + 16, c[2 * u + 1]);
  }
}

// acc (HS, 32) = sum over j in [0, jm) of rows[j*ld + d] * pt[j], four elements d at a time.
void lanes_accumulate(const float* rows, int64_t ld, int64_t jm, int64_t HS, const float* pt, float* acc) {
  int64_t d0 = 0;
  for (; d0 + 4 <= HS; d0 += 4) lanes_accumulate_rows<4>(rows, ld, jm, d0, pt, acc);
  switch (HS - d0) {
    case 3: lanes_accumulate_rows<3>(rows, ld, jm, d0, pt, acc); break;
    case 2: lanes_accumulate_rows<2>(rows, ld, jm, d0, pt, acc); break;
    case 1: lanes_accumulate_rows<1>(rows, ld, jm, d0, pt, acc); break;
    default: break;
  }
}

// Lane i of a block starting at query i0 sees key j iff j < visible(i0 + i); for a causal
// mask (j < offset + i0 + i + 1, as keys never run past Tk) that is lane index > lim,
// lim = j - offset - i0 - 1: the hidden lanes of row j are a prefix.
const v16 kIota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
inline float causal_lim(const Attn& a, int64_t i0, int64_t j) {
  return static_cast<float>(j - a.offset - i0 - 1);
}

// Scores of queries [i0, i0+nq) of head h against keys [0, jm) into st (jm, 32), masked
// (causal, key padding) to -inf and biased by the head's slope.
void lanes_scores(const Attn& a, int64_t b, int64_t h, int64_t i0, int64_t jm, const float* qt, float* st) {
  const int64_t kh = h / a.group();
  lanes_dot(a.k_at(b, kh), a.k_rstride, a.k_cstride, jm, a.HS, qt, st);
  const uint8_t* km = a.key_mask ? a.key_mask + b * a.Tk : nullptr;
  const v16 ninf = v16{} - kInf;
  const v16 pos0 = kIota + static_cast<float>(a.offset + i0), pos1 = pos0 + 16.0f;
  for (int64_t j = 0; j < jm; ++j) {
    float* r = st + j * kLanes;
    if (km && !km[j]) {
      store16(r, ninf);
      store16(r + 16, ninf);
      continue;
    }
    v16 r0 = load16(r), r1 = load16(r + 16);
    if (a.slopes) {
      const float slope = a.slopes[h], fj = static_cast<float>(j);
      const v16 d0 = pos0 - fj, d1 = pos1 - fj;
      r0 -= slope * (d0 < 0.0f ? -d0 : d0);
      r1 -= slope * (d1 < 0.0f ? -d1 : d1);
    }
    if (a.causal) {
      const float lim = causal_lim(a, i0, j);
      if (lim >= 0.0f) {
        r0 = kIota <= lim ? ninf : r0;
        r1 = kIota + 16.0f <= lim ? ninf : r1;
      }
    }
    store16(r, r0);
    store16(r + 16, r1);
  }
}

// P^T in place of st: exp(st - m) with m the per-query max (mx) or the saved log-sum-exp
// (lse_in); hidden entries exactly 0 (Eigen's exp of -inf is not).
void lanes_exp(const Attn& a, int64_t b, int64_t i0, int64_t nq, int64_t jm, const float* m, float* st) {
  const v16 m0 = load16(m), m1 = load16(m + 16);
  for (int64_t j = 0; j < jm; ++j) {
    float* r = st + j * kLanes;
    store16(r, load16(r) - m0);
    store16(r + 16, load16(r + 16) - m1);
  }
  ArrMap all(st, jm * kLanes);
  all = all.exp();
  // Lanes that are queries with visible keys keep their values; the rest become 0.
  alignas(64) float live[kLanes];
  for (int64_t i = 0; i < kLanes; ++i) live[i] = i < nq && std::isfinite(m[i]) ? 1.0f : 0.0f;
  const auto keep0 = load16(live) > 0.0f, keep1 = load16(live + 16) > 0.0f;
  const v16 zero = {};
  const uint8_t* km = a.key_mask ? a.key_mask + b * a.Tk : nullptr;
  for (int64_t j = 0; j < jm; ++j) {
    float* r = st + j * kLanes;
    if (km && !km[j]) {
      std::memset(r, 0, sizeof(float) * kLanes);
      continue;
    }
    auto k0 = keep0, k1 = keep1;
    if (a.causal) {
      const float lim = causal_lim(a, i0, j);
      k0 = k0 && kIota > lim;
      k1 = k1 && kIota + 16.0f > lim;
    }
    store16(r, k0 ? load16(r) : zero);
    store16(r + 16, k1 ? load16(r + 16) : zero);
  }
}

void forward_head_lanes(const Attn& a, int64_t b, int64_t h, float* out, float* lse) {
  const int64_t kh = h / a.group(), C = a.NH * a.HS, HS = a.HS;
  float* qt = thread_scratch(kSlotAttention, static_cast<size_t>((2 * HS + a.Tk) * kLanes));
  float* acc = qt + HS * kLanes;   // out^T (HS, 32)
  float* st = acc + HS * kLanes;   // S^T, then P^T (jm, 32)
  float* saved = probs_at(a, b, h);
  for (int64_t i0 = 0; i0 < a.T; i0 += kLanes) {
    const int64_t nq = std::min(kLanes, a.T - i0), jm = a.visible(i0 + nq - 1);
    transpose_block(a.q_at(b, h, i0), a.q_rstride, nq, HS, a.scale, qt);
    lanes_scores(a, b, h, i0, jm, qt, st);
    alignas(64) float mx[kLanes], sum[kLanes];
    v16 m0 = -kInf - v16{}, m1 = m0;
    for (int64_t j = 0; j < jm; ++j) {
      m0 = vmax(m0, load16(st + j * kLanes));
      m1 = vmax(m1, load16(st + j * kLanes + 16));
    }
    store16(mx, m0);
    store16(mx + 16, m1);
    lanes_exp(a, b, i0, nq, jm, mx, st);
    v16 s0 = {}, s1 = {};
    for (int64_t j = 0; j < jm; ++j) {
      s0 += load16(st + j * kLanes);
      s1 += load16(st + j * kLanes + 16);
    }
    store16(sum, s0);
    store16(sum + 16, s1);
    lanes_accumulate(a.v_at(b, kh), a.kv_rstride, jm, HS, st, acc);
    // 1/sum and lse = max + log(sum) for the 32 lanes at once; a query without a visible
    // key gets output 0 and lse +inf (backward skips it).
    alignas(64) float inv[kLanes], lg[kLanes];
    const auto none0 = m0 == -kInf, none1 = m1 == -kInf;
    // (sum is at least 1 with a visible key, 0 without one and in lanes past nq)
    const v16 inv0 = s0 > 0.0f ? 1.0f / s0 : v16{}, inv1 = s1 > 0.0f ? 1.0f / s1 : v16{};
    store16(inv, inv0);
    store16(inv + 16, inv1);
    if (saved) {
      for (int64_t j = 0; j < jm; ++j) {
        store16(saved + j * kLanes, load16(st + j * kLanes) * inv0);
        store16(saved + j * kLanes + 16, load16(st + j * kLanes + 16) * inv1);
      }
      saved += jm * kLanes;
    }
    // out rows (nq, HS) = acc^T, each query's row times its inv
    transpose(acc, kLanes, HS, nq, 1.0f, inv, out + (b * a.T + i0) * C + h * HS, C);
    if (lse) {
      ArrMap(lg, kLanes) = ArrMap(sum, kLanes).log();
      store16(lg, none0 ? v16{} + kInf : m0 + load16(lg));
      store16(lg + 16, none1 ? v16{} + kInf : m1 + load16(lg + 16));
      std::memcpy(lse + (b * a.NH + h) * a.T + i0, lg, sizeof(float) * static_cast<size_t>(nq));
    }
  }
}

// backward_group for heads up to 64 wide (see there).
void backward_group_lanes(const Attn& a, int64_t b, int64_t kh, const float* dout, const float* lse, float* dq,
                          float* dk, float* dv) {
  const int64_t C = a.NH * a.HS, HS = a.HS, kvC = a.kv_rstride;
  float* qs = thread_scratch(kSlotAttention, static_cast<size_t>(2 * HS * kLanes + 2 * a.Tk * kLanes));
  float* dot = qs + HS * kLanes;   // dO^T (HS, 32)
  float* pt = dot + HS * kLanes;   // P^T (jm, 32), when recomputed
  float* dst = pt + a.Tk * kLanes; // dP^T, then dS^T (jm, 32)
  // This task's rows of dk and dv (keys of batch b, columns of kv head kh): no other task
  // writes them, so the products below accumulate into them directly.
  float* dk_rows = dk ? dk + b * a.kv_bstride + kh * HS : nullptr;
  float* dv_rows = dv ? dv + b * a.kv_bstride + kh * HS : nullptr;
  for (int64_t h = kh * a.group(); h < (kh + 1) * a.group(); ++h) {
    const float* saved = probs_at(a, b, h);
    for (int64_t i0 = 0; i0 < a.T; i0 += kLanes) {
      const int64_t nq = std::min(kLanes, a.T - i0), jm = a.visible(i0 + nq - 1);
      const float* p = saved;  // P^T (jm, 32): saved by the forward pass, or recomputed
      if (saved) {
        saved += jm * kLanes;
      } else {
        transpose_block(a.q_at(b, h, i0), a.q_rstride, nq, HS, a.scale, qs);  // scaled q^T
        alignas(64) float l[kLanes];
        for (int64_t i = 0; i < kLanes; ++i) l[i] = i < nq ? lse[(b * a.NH + h) * a.T + i0 + i] : kInf;
        lanes_scores(a, b, h, i0, jm, qs, pt);
        lanes_exp(a, b, i0, nq, jm, l, pt);
        p = pt;
      }
      // dP^T = v dO^T
      const float* do_rows = dout + (b * a.T + i0) * C + h * HS;  // (nq, HS), row stride C
      transpose_block(do_rows, C, nq, HS, 1.0f, dot);
      lanes_dot(a.v_at(b, kh), kvC, 1, jm, HS, dot, dst);
      // D_i = sum_j P_ij dP_ij (which equals dO_i . O_i), then dS^T = P^T * (dP^T - D)
      v16 d0 = {}, d1 = {};
      for (int64_t j = 0; j < jm; ++j) {
        d0 += load16(p + j * kLanes) * load16(dst + j * kLanes);
        d1 += load16(p + j * kLanes + 16) * load16(dst + j * kLanes + 16);
      }
      for (int64_t j = 0; j < jm; ++j) {
        float* r = dst + j * kLanes;
        const float* pj = p + j * kLanes;
        store16(r, load16(pj) * (load16(r) - d0));
        store16(r + 16, load16(pj + 16) * (load16(r + 16) - d1));
      }
      // dq rows (nq, HS) += scale dS (nq, jm) . k (jm, HS); dk (jm, HS) += scale dS^T (jm, nq) . q (nq, HS);
      // dv (jm, HS) += P^T (jm, nq) . dO (nq, HS): dS and P read from their transposes, q, k
      // and dO in place (row-major, HS wide: gemm_avx512's kernel)
      if (dq)
        gemm_acc(true, false, nq, HS, jm, a.scale, dst, kLanes, a.k_at(b, kh), a.k_rstride,
                 dq + (b * a.T + i0) * a.q_rstride + h * HS, a.q_rstride);
      if (dk) gemm_acc(false, false, jm, HS, nq, a.scale, dst, kLanes, a.q_at(b, h, i0), a.q_rstride, dk_rows, kvC);
      if (dv) gemm_acc(false, false, jm, HS, nq, 1.0f, p, kLanes, do_rows, C, dv_rows, kvC);
    }
  }
}

// ---- decoding: a few queries against a KV cache ----------------------------------------
// Per query: scores along the cache's contiguous keys (16 keys per register, four
// registers at once), softmax, then out += p_j v_j over 16-float vectors of the head's
// values (four chains). Both read up to 15 floats past what they use: the cache's k and v
// have 16 of slack.
bool decode_kernel(const Attn& a) { return a.k_rstride == 1 && a.T <= 4; }

void forward_head_decode(const Attn& a, int64_t b, int64_t h, float* out, float* lse) {
  const int64_t kh = h / a.group(), C = a.NH * a.HS, HS = a.HS;
  float* s = thread_scratch(kSlotAttention, static_cast<size_t>(padded(a.Tk) + HS));
  float* qs = s + padded(a.Tk);     // the query, scaled (HS)
  const float* kt = a.k_at(b, kh);  // (HS, capacity)
  const float* v = a.v_at(b, kh);
  for (int64_t i = 0; i < a.T; ++i) {
    const int64_t jn = a.visible(i), ld = padded(jn);
    const float* q = a.q_at(b, h, i);
    // Scores 16 keys at a time in registers, four such blocks at once (independent chains),
    // reading up to 15 positions past jn (cleared below).
    for (int64_t d = 0; d < HS; ++d) qs[d] = a.scale * q[d];
    int64_t j0 = 0;
    for (; j0 + 64 <= ld; j0 += 64) {
      v16 acc[4] = {};
      for (int64_t d = 0; d < HS; ++d) {
        const float* kr = kt + d * a.k_cstride + j0;
        for (int u = 0; u < 4; ++u) acc[u] += qs[d] * load16(kr + 16 * u);
      }
      for (int u = 0; u < 4; ++u) store16(s + j0 + 16 * u, acc[u]);
    }
    for (; j0 < ld; j0 += 16) {
      v16 acc = {};
      for (int64_t d = 0; d < HS; ++d) acc += qs[d] * load16(kt + d * a.k_cstride + j0);
      store16(s + j0, acc);
    }
    if (a.slopes) {
      const float m = a.slopes[h], pos = static_cast<float>(a.offset + i);
      for (int64_t j = 0; j < jn; ++j) s[j] -= m * std::fabs(pos - static_cast<float>(j));
    }
    for (int64_t j = jn; j < ld; ++j) s[j] = -kInf;
    AlignedRow row(s, ld);
    const float mx = row.maxCoeff();
    row = (row - mx).exp();
    for (int64_t j = jn; j < ld; ++j) s[j] = 0.0f;
    const float sum = row.sum(), inv = 1.0f / sum;
    float* o = out + (b * a.T + i) * C + h * HS;
    for (int64_t d0 = 0; d0 < HS; d0 += 16) {
      v16 c[4] = {};
      int64_t j = 0;
      for (; j + 4 <= jn; j += 4)
        for (int u = 0; u < 4; ++u) c[u] += s[j + u] * load16(v + (j + u) * a.kv_rstride + d0);
      for (; j < jn; ++j) c[0] += s[j] * load16(v + j * a.kv_rstride + d0);
      alignas(64) float r[16];
      store16(r, (c[0] + c[1] + c[2] + c[3]) * inv);
      for (int64_t d = d0; d < std::min(HS, d0 + 16); ++d) o[d] = r[d - d0];
    }
    if (lse) lse[(b * a.NH + h) * a.T + i] = mx + std::log(sum);
  }
}

// One (batch, query head): out rows and lse (T) [and weights (T, Tk)], in blocks of
// query rows: S = q k^T (GEMM), masked softmax per row, out^T = v^T P^T (GEMM).
void forward_head(const Attn& a, int64_t b, int64_t h, float* out, float* lse, float* weights) {
  if (!weights && decode_kernel(a)) return forward_head_decode(a, b, h, out, lse);
  if (!weights && lanes_kernel(a)) return forward_head_lanes(a, b, h, out, lse);
  const int64_t kh = h / a.group(), C = a.NH * a.HS, HS = a.HS;
  const int64_t block = kBlockQ * padded(a.Tk);
  float* s = thread_scratch(kSlotAttention, static_cast<size_t>(block + HS * kBlockQ));
  float* ot = s + block;  // (HS, nq)
  for (int64_t i0 = 0; i0 < a.T; i0 += kBlockQ) {
    const int64_t i1 = std::min(a.T, i0 + kBlockQ), nq = i1 - i0;
    const int64_t jm = a.visible(i1 - 1), ld = padded(jm);
    score_block(a, b, h, i0, i1, jm, ld, s);
    float mx[kBlockQ], sum[kBlockQ];
    for (int64_t i = i0; i < i1; ++i) {
      float* sr = s + (i - i0) * ld;
      AlignedRow row(sr, ld);
      const float m = row.maxCoeff();
      mx[i - i0] = m;
      sum[i - i0] = 1.0f;
      if (m == -kInf) {
        row.setZero();  // every key padded: probabilities and output 0
      } else {
        row = (row - m).exp();
        clear_invisible(a, b, a.visible(i), ld, sr);
        sum[i - i0] = row.sum();
        row *= 1.0f / sum[i - i0];
      }
    }
    if (lse) {
      // lse = max + log(sum), +inf for a row without keys (backward skips it)
      float* l = lse + (b * a.NH + h) * a.T + i0;
      ArrMap(l, nq) = ArrMap(mx, nq) + ArrMap(sum, nq).log();
      for (int64_t r = 0; r < nq; ++r) l[r] = mx[r] == -kInf ? kInf : l[r];
    }
    if (weights) {
      for (int64_t i = i0; i < i1; ++i) {
        float* w = weights + ((b * a.NH + h) * a.T + i) * a.Tk;
        std::memcpy(w, s + (i - i0) * ld, sizeof(float) * static_cast<size_t>(jm));
        for (int64_t j = jm; j < a.Tk; ++j) w[j] = 0.0f;
      }
    }
    // out^T (HS, nq) = v^T (HS, jm) . P^T (jm, nq)
    std::memset(ot, 0, sizeof(float) * static_cast<size_t>(HS * nq));
    gemm_acc(true, true, HS, nq, jm, 1.0f, a.v_at(b, kh), a.kv_rstride, s, ld, ot, nq);
    for (int64_t i = i0; i < i1; ++i) {
      float* o = out + (b * a.T + i) * C + h * HS;
      for (int64_t d = 0; d < HS; ++d) o[d] = ot[d * nq + (i - i0)];
    }
  }
}

// One (batch, kv head) and every query head of its group: dq for those heads, dk and dv
// of the kv head (so no two tasks write the same gradient rows). Probabilities are
// recomputed from the saved log-sum-exp.
void backward_group(const Attn& a, int64_t b, int64_t kh, const float* out, const float* dout,
                    const float* lse, float* dq, float* dk, float* dv) {
  if (lanes_kernel(a)) return backward_group_lanes(a, b, kh, dout, lse, dq, dk, dv);
  const int64_t C = a.NH * a.HS, HS = a.HS, kvC = a.kv_rstride;
  const int64_t Tkp = padded(a.Tk), block = kBlockQ * Tkp;
  float* p =
      thread_scratch(kSlotAttention, static_cast<size_t>(2 * block + 2 * HS * Tkp + HS * kBlockQ));
  float* ds = p + block;        // (nq, ld)
  float* dkt = ds + block;      // (HS, Tkp): dk^T of this kv head, summed over the group
  float* dvt = dkt + HS * Tkp;  // (HS, Tkp)
  float* dqt = dvt + HS * Tkp;  // (HS, nq)
  std::memset(dkt, 0, sizeof(float) * static_cast<size_t>(2 * HS * Tkp));
  for (int64_t h = kh * a.group(); h < (kh + 1) * a.group(); ++h) {
    for (int64_t i0 = 0; i0 < a.T; i0 += kBlockQ) {
      const int64_t i1 = std::min(a.T, i0 + kBlockQ), nq = i1 - i0;
      const int64_t jm = a.visible(i1 - 1), ld = padded(jm);
      score_block(a, b, h, i0, i1, jm, ld, p);
      for (int64_t i = i0; i < i1; ++i) {
        float* pr = p + (i - i0) * ld;
        const float l = lse[(b * a.NH + h) * a.T + i];
        AlignedRow row(pr, ld);
        if (l == kInf) {
          row.setZero();
        } else {
          row = (row - l).exp();
          clear_invisible(a, b, a.visible(i), ld, pr);
        }
      }
      const float* do_blk = dout + (b * a.T + i0) * C + h * HS;  // (nq, HS), ld C
      // dP (nq, jm) = dO (nq, HS) . v^T (HS, jm)
      std::memset(ds, 0, sizeof(float) * static_cast<size_t>(nq * ld));
      gemm_acc(false, true, nq, jm, HS, 1.0f, do_blk, C, a.v_at(b, kh), kvC, ds, ld);
      // dS = P * (dP - D_i), D_i = dO_i . O_i (= sum_j P_ij dP_ij)
      for (int64_t i = i0; i < i1; ++i) {
        const float* o = out + (b * a.T + i) * C + h * HS;
        const float* g = do_blk + (i - i0) * C;
        float di = 0.0f;
        for (int64_t d = 0; d < HS; ++d) di += g[d] * o[d];
        AlignedRow dsr(ds + (i - i0) * ld, ld);
        dsr = AlignedRow(p + (i - i0) * ld, ld) * (dsr - di);
      }
      if (dq) {
        // dq^T (HS, nq) = scale k^T (HS, jm) . dS^T (jm, nq)
        std::memset(dqt, 0, sizeof(float) * static_cast<size_t>(HS * nq));
        gemm_acc(true, true, HS, nq, jm, a.scale, a.k_at(b, kh), kvC, ds, ld, dqt, nq);
        for (int64_t i = i0; i < i1; ++i) {
          float* r = dq + (b * a.T + i) * a.q_rstride + h * HS;
          for (int64_t d = 0; d < HS; ++d) r[d] += dqt[d * nq + (i - i0)];
        }
      }
      // dk^T (HS, jm) += scale q^T (HS, nq) . dS (nq, jm); dv^T += dO^T (HS, nq) . P (nq, jm)
      if (dk) gemm_acc(true, false, HS, jm, nq, a.scale, a.q_at(b, h, i0), a.q_rstride, ds, ld, dkt, Tkp);
      if (dv) gemm_acc(true, false, HS, jm, nq, 1.0f, do_blk, C, p, ld, dvt, Tkp);
    }
  }
  add_kv_grads(a, b, kh, dkt, dvt, Tkp, dk, dv);
}

// node: in = {q, k, v}; i[0..5] = B, T, NH, NKV, HS, causal; i[6] = q's first column,
// i[7] = k's and v's first columns (k + v * 2^32); p[0] = lse (B,NH,T), p[1] = key mask
// (B*T) or null, p[2] = slopes (NH) or null, p[3] = saved probabilities or null.
void attention_backward(Graph& g, int id) {
  Node& n = g.node(id);
  Attn a{};
  a.B = n.i[0];
  a.T = n.i[1];
  a.NH = n.i[2];
  a.NKV = n.i[3];
  a.HS = n.i[4];
  a.causal = n.i[5] != 0;
  a.Tk = a.T;
  a.offset = 0;
  a.scale = 1.0f / std::sqrt(static_cast<float>(a.HS));
  a.key_mask = static_cast<const uint8_t*>(n.p[1]);
  a.slopes = static_cast<const float*>(n.p[2]);
  a.probs = static_cast<float*>(n.p[3]);
  a.probs_head = probs_per_head(a);  // (a.T, a.Tk, offset and causal are set above)
  const int64_t q_col = n.i[6], k_col = n.i[7] & 0xffffffff, v_col = n.i[7] >> 32;
  const Tensor Q = g.node(n.in[0]).value, K = g.node(n.in[1]).value;
  a.q = Q.data + q_col;
  a.q_rstride = Q.cols;
  a.k = K.data + k_col;
  a.v = g.node(n.in[2]).value.data + v_col;
  a.kv_rstride = a.k_rstride = K.cols;
  a.k_cstride = 1;
  a.kv_bstride = a.T * a.kv_rstride;
  const float* lse = static_cast<const float*>(n.p[0]);
  const float* out = n.value.data;
  const float* dout = n.grad.data;
  // q, k and v may be column ranges of one node (a fused qkv): one gradient buffer then,
  // zeroed once by the first grad() call.
  float* dq = g.requires_grad(n.in[0]) ? g.grad(n.in[0]).data + q_col : nullptr;
  float* dk = g.requires_grad(n.in[1]) ? g.grad(n.in[1]).data + k_col : nullptr;
  float* dv = g.requires_grad(n.in[2]) ? g.grad(n.in[2]).data + v_col : nullptr;
  const int64_t cost = a.group() * a.T * a.Tk * a.HS * 5;
  parallel_chunks(a.B * a.NKV, items_per_task(cost), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      backward_group(a, t / a.NKV, t % a.NKV, out, dout, lse, dq, dk, dv);
  });
}
}  // namespace

Var attention(Graph& g, Var q, Var k, Var v, const AttentionSpec& spec) {
  check_var("attention", "q", g, q);
  check_var("attention", "k", g, k);
  check_var("attention", "v", g, v);
  const int64_t B = spec.batch, T = spec.time, NH = spec.n_heads, NKV = spec.n_kv_heads,
                HS = spec.head_size;
  if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || HS <= 0 || NH % NKV != 0)
    throw Error(
        "attention: need positive batch, time, heads and head size with n_kv_heads "
        "dividing n_heads; got B=" +
        std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
        " NKV=" + std::to_string(NKV) + " HS=" + std::to_string(HS));
  const Tensor Q = g.value(q), K = g.value(k), V = g.value(v);
  const int64_t q_col = spec.q_col, k_col = spec.k_col, v_col = spec.v_col;
  if (q_col < 0 || k_col < 0 || v_col < 0 || k_col > 0xffffffff || v_col > 0xffffffff)
    throw Error("attention: q_col, k_col and v_col must be non-negative column offsets; got " +
                std::to_string(q_col) + ", " + std::to_string(k_col) + ", " + std::to_string(v_col));
  const Tensor want_q{nullptr, B * T, q_col + NH * HS}, want_kv{nullptr, B * T, k_col + NKV * HS};
  if (Q.rows != want_q.rows || Q.cols < want_q.cols)
    shape_error("attention", "q must be (B*T, NH*HS), or wider by q_col", "q", Q, "(B*T, q_col + NH*HS)", want_q);
  if (K.rows != want_kv.rows || K.cols < want_kv.cols)
    shape_error("attention", "k must be (B*T, NKV*HS), or wider by k_col", "k", K, "(B*T, k_col + NKV*HS)", want_kv);
  if (V.rows != K.rows || V.cols != K.cols || V.cols < v_col + NKV * HS)
    shape_error("attention", "v must have k's shape, with NKV*HS columns from v_col", "v", V, "k", K);

  Attn a{};
  a.B = B;
  a.T = T;
  a.NH = NH;
  a.NKV = NKV;
  a.HS = HS;
  a.causal = spec.causal;
  a.scale = 1.0f / std::sqrt(static_cast<float>(HS));
  a.q = Q.data + q_col;
  a.q_rstride = Q.cols;
  const float* Kd = K.data + k_col;
  const float* Vd = V.data + v_col;
  const int64_t S = K.cols;  // row stride of k and v
  KVCache* cache = spec.cache;
  // In a decoding team (kernels.hpp), this rank's share of the kv heads: it appends their
  // keys and values and attends with their query heads; the outputs are swapped after.
  const DecodeRank* team = cache && !spec.weights_out ? decode_rank() : nullptr;
  const int64_t kh0 = team ? DecodeTeam::first(NKV, team->rank) : 0;
  const int64_t kh1 = team ? DecodeTeam::first(NKV, team->rank + 1) : NKV;
  if (cache) {
    if (cache->batch != B || cache->width != NKV * HS)
      throw Error("attention: the KV cache holds batch " + std::to_string(cache->batch) +
                  " x width " + std::to_string(cache->width) + " but this call has batch " +
                  std::to_string(B) + " x NKV*HS " + std::to_string(NKV * HS) +
                  "; call KVCache::init with matching sizes");
    if (cache->length + T > cache->capacity)
      throw Error("attention: the KV cache is full: " + std::to_string(cache->length) + " + " +
                  std::to_string(T) + " positions exceed its capacity " +
                  std::to_string(cache->capacity) + "; init it with a larger capacity");
    const int64_t W = cache->width, cap = cache->capacity, len = cache->length;
    // Columns [c0, c1) of the new keys and values: all, or a decoding team rank's share.
    const int64_t c0 = kh0 * HS, c1 = kh1 * HS;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(cache->v.data() + (b * cap + len + t) * W + c0, Vd + (b * T + t) * S + c0,
                    sizeof(float) * static_cast<size_t>(c1 - c0));
      float* kt = cache->k.data() + b * cap * W;  // (W, cap)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = c0; c < c1; ++c) kt[c * cap + len + t] = Kd[(b * T + t) * S + c];
    }
    a.Tk = cache->length + T;
    a.offset = cache->length;
    a.k = cache->k.data();
    a.v = cache->v.data();
    a.kv_bstride = cap * W;
    a.kv_rstride = W;
    a.k_rstride = 1;
    a.k_cstride = cap;
    a.key_mask = nullptr;
  } else {
    a.Tk = T;
    a.offset = 0;
    a.k = Kd;
    a.v = Vd;
    a.kv_rstride = a.k_rstride = S;
    a.k_cstride = 1;
    a.kv_bstride = T * a.kv_rstride;
    a.key_mask = spec.key_mask;
  }
  a.slopes = spec.slopes;

  Var out = g.make(B * T, NH * HS, cache ? nullptr : &attention_backward, {q, k, v}, "attention");
  Node& n = g.node(out);
  float* lse = nullptr;
  if (n.requires_grad) {
    // Saved state: lse, and copies of the caller's mask and slopes (they need not outlive
    // this call).
    lse = g.alloc(static_cast<size_t>(B * NH * T));
    if (a.key_mask) {
      uint8_t* km = g.alloc_as<uint8_t>(static_cast<size_t>(B * T));
      std::memcpy(km, a.key_mask, static_cast<size_t>(B * T));
      a.key_mask = km;
    }
    if (a.slopes) {
      float* sl = g.alloc(static_cast<size_t>(NH));
      std::memcpy(sl, a.slopes, sizeof(float) * static_cast<size_t>(NH));
      a.slopes = sl;
    }
    n.i[0] = B;
    n.i[1] = T;
    n.i[2] = NH;
    n.i[3] = NKV;
    n.i[4] = HS;
    n.i[5] = a.causal ? 1 : 0;
    n.i[6] = q_col;
    n.i[7] = k_col | (v_col << 32);
    n.p[0] = lse;
    n.p[1] = const_cast<uint8_t*>(a.key_mask);
    n.p[2] = const_cast<float*>(a.slopes);
    a.probs_head = probs_per_head(a);
    if (lanes_kernel(a) && !spec.weights_out && B * NH * a.probs_head <= attention_saved_probs_limit()) {
      a.probs = g.alloc(static_cast<size_t>(B * NH * a.probs_head));
      n.p[3] = a.probs;
    }
  }
  float* y = n.value.data;
  if (team) {
    const int64_t group = NH / NKV, h0 = kh0 * group, h1 = kh1 * group, rows = B * T, C = NH * HS;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = h0; h < h1; ++h) forward_head(a, b, h, y, lse, nullptr);
    float* mine = team->team->slot(team->rank, static_cast<size_t>(rows * (h1 - h0) * HS));
    for (int64_t r = 0; r < rows; ++r)
      std::copy(y + r * C + h0 * HS, y + r * C + h1 * HS, mine + r * (h1 - h0) * HS);
    team->team->publish(team->rank);
    for (int64_t other = 0; other < DecodeTeam::kSize; ++other) {
      if (other == team->rank) continue;
      const int64_t o0 = DecodeTeam::first(NKV, other) * group, o1 = DecodeTeam::first(NKV, other + 1) * group;
      const float* theirs = team->team->slot_data(team->rank, other);
      for (int64_t r = 0; r < rows; ++r)
        std::copy(theirs + r * (o1 - o0) * HS, theirs + (r + 1) * (o1 - o0) * HS, y + r * C + o0 * HS);
    }
    // Every rank has read the length (above, before publishing): rank 0 advances it.
    if (team->rank == 0) cache->length += T;
    return out;
  }
  // Tasks of equal size (decoding 8 heads: 4 + 4, not 7 + 1).
  // Decoding with a cache reads B*Tk*NKV*HS keys and as many values: below 64K of them
  // (seed002: 12K) one thread does it faster than two with a dispatch.
  const int64_t cost = T * a.Tk * HS * 3;
  const int64_t tasks = cache && decode_kernel(a)
                            ? (B * a.Tk * NKV * HS >= (int64_t{1} << 16) ? std::min(B * NH, concurrency()) : 1)
                            : ceil_div(B * NH, items_per_task(cost));
  parallel_chunks(B * NH, ceil_div(B * NH, tasks), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) forward_head(a, t / NH, t % NH, y, lse, spec.weights_out);
  });
  if (cache) cache->length += T;
  return out;
}

}  // namespace ablate
