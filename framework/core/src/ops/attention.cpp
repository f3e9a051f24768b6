// Fused scaled-dot-product attention (Vaswani et al. 2017), one task per (batch, head):
// per block of 32 query rows, scores q k^T, mask (causal / key padding), ALiBi-style
// slopes (Press et al. 2022), softmax and the weighted sum of values, all in per-thread
// scratch that stays in cache. Three kernels: heads up to 64 wide put the 32 queries
// along vector lanes and a few queries against a KV cache (decoding) have their own, both
// per kernel path (attention_lanes.inc, chosen at run time: dispatch.hpp); wider heads run
// the two products as small GEMMs (gemm_acc) here. Grouped-query heads
// (Ainslie et al. 2023). q (B*T, NH*HS), k v (B*T, NKV*HS) -> (B*T, NH*HS). The
// log-sum-exp of every score row (B,NH,T) is kept, and, for the lanes kernels where they
// fit in 64 MB, the probabilities; otherwise backward recomputes them (as FlashAttention).
#include <cmath>
#include <cstring>
#include <limits>

#include "ablate/ops.hpp"
#include "dispatch.hpp"
#include "../node.hpp"
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

// Score rows are padded to a multiple of 16 floats and start 64-byte aligned, so that
// the row passes (max, exp, sum) run on whole vectors without scalar heads or tails.
using AlignedRow = Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64>;
inline int64_t padded(int64_t n) { return round_up(n, 16); }

// Logits of the query rows [i0, i1) of head h against keys [0, jm), jm = visible(b, i1-1):
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
    const int64_t jn = a.visible(b, i);
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
void add_kv_grads(const Attn& a, int64_t b, int64_t kh, const float* dkt, const float* dvt,
                  int64_t Tkp, float* dk, float* dv) {
  const int64_t HS = a.HS;
  for (int64_t j = 0; j < a.Tk; ++j) {
    const int64_t r = b * a.kv_bstride + j * a.kv_rstride + kh * HS;
    if (dk)
      for (int64_t d = 0; d < HS; ++d) dk[r + d] += dkt[d * Tkp + j];
    if (dv)
      for (int64_t d = 0; d < HS; ++d) dv[r + d] += dvt[d * Tkp + j];
  }
}

// Heads up to 64 wide run the lanes kernels of the kernel path (attention_lanes.inc,
// dispatch.hpp): 32 queries along vector lanes; a few queries against a KV cache its
// decoding kernel.
constexpr int64_t kLanes = 32;  // queries per block of the lanes kernels
constexpr int64_t kMaxLanesHS = 64;
bool lanes_kernel(const Attn& a) { return a.HS <= kMaxLanesHS; }
bool decode_kernel(const Attn& a) { return a.k_rstride == 1 && a.T <= 4; }

// Saved probabilities. Backward needs P again; recomputing it (the scores and their exp)
// would be about a third of the lanes backward pass, so where they fit the forward pass keeps
// each block's P^T (jm, 32), block after block, per (batch, head): 32 x (sum of the
// blocks' jm) floats (probs_at, dispatch.hpp), for the row with the longest prefix.
int64_t probs_per_head(const Attn& a) {
  int64_t widest = 0;
  for (int64_t b = 1; a.prefix && b < a.B; ++b)
    widest = a.prefix[b] > a.prefix[widest] ? b : widest;
  int64_t rows = 0;
  for (int64_t i0 = 0; i0 < a.T; i0 += kLanes)
    rows += a.visible(widest, std::min(a.T, i0 + kLanes) - 1);
  return rows * kLanes;
}

// One (batch, query head): out rows and lse (T) [and weights (T, Tk)], in blocks of
// query rows: S = q k^T (GEMM), masked softmax per row, out^T = v^T P^T (GEMM).
void forward_head(const Attn& a, int64_t b, int64_t h, float* out, float* lse, float* weights) {
  if (!weights && decode_kernel(a)) return isa_kernels().attention_decode(a, b, h, out, lse);
  if (!weights && lanes_kernel(a)) {
    const IsaKernels& k = isa_kernels();
    if (a.bf16 && k.bf16.attention_forward_lanes)
      return k.bf16.attention_forward_lanes(a, b, h, out, lse);
    return k.attention_forward_lanes(a, b, h, out, lse);
  }
  const int64_t kh = h / a.group(), C = a.NH * a.HS, HS = a.HS;
  const int64_t block = kBlockQ * padded(a.Tk);
  float* s = thread_scratch(kSlotAttention, static_cast<size_t>(block + HS * kBlockQ));
  float* ot = s + block;  // (HS, nq)
  for (int64_t i0 = 0; i0 < a.T; i0 += kBlockQ) {
    const int64_t i1 = std::min(a.T, i0 + kBlockQ), nq = i1 - i0;
    const int64_t jm = a.visible(b, i1 - 1), ld = padded(jm);
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
        clear_invisible(a, b, a.visible(b, i), ld, sr);
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

// Whether a bf16 graph's lanes kernels (heads up to 64 wide) are the path's bf16 ones
// (Bf16Kernels::attention_*_lanes), which round q, k, v and the output gradient themselves as
// they convert them to bf16.
bool bf16_lanes(const Graph& g, int64_t HS) {
  return g.precision == Precision::bf16 && HS <= kMaxLanesHS &&
         isa_kernels().bf16.attention_forward_lanes;
}

// The values of nodes q, k and v as attention's products read them: in a bf16 graph rounded
// to bf16 (float32 copies in the graph's buffers; once for nodes that are the same, a fused
// qkv) unless the kernels round them (own_rounding), else the nodes' own.
struct Inputs {
  Tensor q, k, v;
};
Inputs product_inputs(Graph& g, int q, int k, int v, bool own_rounding) {
  Inputs in{node(g, q).value, node(g, k).value, node(g, v).value};
  if (g.precision != Precision::bf16 || own_rounding) return in;
  auto rounded = [&](Bf16Buffer slot, int id) {
    const Tensor& t = node(g, id).value;
    return Tensor{const_cast<float*>(bf16_rounded(g, slot, id)), t.rows, t.cols};
  };
  const Tensor Q = rounded(Bf16Buffer::x, q);
  const Tensor K = k == q ? Q : rounded(Bf16Buffer::k, k);
  const Tensor V = v == q ? Q : v == k ? K : rounded(Bf16Buffer::v, v);
  return {Q, K, V};
}

// One (batch, kv head) and every query head of its group: dq for those heads, dk and dv
// of the kv head (so no two tasks write the same gradient rows). Probabilities are
// recomputed from the saved log-sum-exp.
void backward_group(const Attn& a, int64_t b, int64_t kh, const RoundedReader& out,
                    const float* dout, const float* lse, float* dq, float* dk, float* dv) {
  if (lanes_kernel(a)) {
    const IsaKernels& k = isa_kernels();
    if (a.bf16 && k.bf16.attention_backward_lanes)
      return k.bf16.attention_backward_lanes(a, b, kh, dout, lse, dq, dk, dv);
    return k.attention_backward_lanes(a, b, kh, dout, lse, dq, dk, dv);
  }
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
      const int64_t jm = a.visible(b, i1 - 1), ld = padded(jm);
      score_block(a, b, h, i0, i1, jm, ld, p);
      for (int64_t i = i0; i < i1; ++i) {
        float* pr = p + (i - i0) * ld;
        const float l = lse[(b * a.NH + h) * a.T + i];
        AlignedRow row(pr, ld);
        if (l == kInf) {
          row.setZero();
        } else {
          row = (row - l).exp();
          clear_invisible(a, b, a.visible(b, i), ld, pr);
        }
      }
      const float* do_blk = dout + (b * a.T + i0) * C + h * HS;  // (nq, HS), ld C
      // dP (nq, jm) = dO (nq, HS) . v^T (HS, jm)
      std::memset(ds, 0, sizeof(float) * static_cast<size_t>(nq * ld));
      gemm_acc(false, true, nq, jm, HS, 1.0f, do_blk, C, a.v_at(b, kh), kvC, ds, ld);
      // dS = P * (dP - D_i), D_i = dO_i . O_i (= sum_j P_ij dP_ij)
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t o = (b * a.T + i) * C + h * HS;
        const float* g = do_blk + (i - i0) * C;
        float di = 0.0f, orow[kBlockQ];
        for (int64_t d0 = 0; d0 < HS; d0 += kBlockQ) {  // o as a bf16 graph reads it, rounded
          const int64_t w = std::min(kBlockQ, HS - d0);
          const float* od = out.at(o + d0, w, orow);
          for (int64_t d = 0; d < w; ++d) di += g[d0 + d] * od[d];
        }
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
      if (dk)
        gemm_acc(true, false, HS, jm, nq, a.scale, a.q_at(b, h, i0), a.q_rstride, ds, ld, dkt, Tkp);
      if (dv) gemm_acc(true, false, HS, jm, nq, 1.0f, do_blk, C, p, ld, dvt, Tkp);
    }
  }
  add_kv_grads(a, b, kh, dkt, dvt, Tkp, dk, dv);
}

// node: in = {q, k, v}; i[0..5] = B, T, NH, NKV, HS, causal; i[6] = q's first column,
// i[7] = k's and v's first columns (k + v * 2^32); p[0] = lse (B,NH,T), p[1] = key mask
// (B*T) or null, p[2] = slopes (NH) or null, p[3] = saved probabilities or null, p[4] =
// prefix lengths (B) or null.
void attention_backward(Graph& g, int id) {
  Node& n = node(g, id);
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
  a.bf16 = a.probs_bf16 = g.precision == Precision::bf16;
  a.prefix = static_cast<const int32_t*>(n.p[4]);
  a.probs_head = probs_per_head(a);  // (a.T, a.Tk, offset, causal and prefix are set above)
  const int64_t q_col = n.i[6], k_col = n.i[7] & 0xffffffff, v_col = n.i[7] >> 32;
  const bool own_rounding = bf16_lanes(g, a.HS);
  const auto [Q, K, V] = product_inputs(g, n.in[0], n.in[1], n.in[2], own_rounding);
  // The bf16 kernels read values that wait as bf16 bits as them (backward_reads' bits).
  auto bits = [&](int id, int64_t col) -> const uint16_t* {
    const Node& v = node(g, id);
    return own_rounding && v.held == Node::Held::bits ? v.bits + col : nullptr;
  };
  a.q16 = bits(n.in[0], q_col);
  a.k16 = bits(n.in[1], k_col);
  a.v16 = bits(n.in[2], v_col);
  a.q = a.q16 ? nullptr : Q.data + q_col;
  a.q_rstride = Q.cols;
  a.k = a.k16 ? nullptr : K.data + k_col;
  a.v = a.v16 ? nullptr : V.data + v_col;
  a.kv_rstride = a.k_rstride = K.cols;
  a.k_cstride = 1;
  a.kv_bstride = a.T * a.kv_rstride;
  const float* lse = static_cast<const float*>(n.p[0]);
  // The output (wider heads' D_i; a bf16 graph reads it rounded, kept as bf16 bits).
  const RoundedReader out = lanes_kernel(a) ? RoundedReader{} : rounded_reader(g, id);
  const float* dout = g.precision == Precision::bf16 && !own_rounding
                          ? bf16_rounded(g, Bf16Buffer::dy, n.grad)
                          : n.grad.data;
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

// Throws for a spec or q, k, v shapes attention cannot read.
void check_attention_inputs(Graph& g, Var q, Var k, Var v, const AttentionSpec& spec) {
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
                std::to_string(q_col) + ", " + std::to_string(k_col) + ", " +
                std::to_string(v_col));
  const Tensor want_q{nullptr, B * T, q_col + NH * HS}, want_kv{nullptr, B * T, k_col + NKV * HS};
  if (Q.rows != want_q.rows || Q.cols < want_q.cols)
    shape_error("attention", "q must be (B*T, NH*HS), or wider by q_col", "q", Q,
                "(B*T, q_col + NH*HS)", want_q);
  if (K.rows != want_kv.rows || K.cols < want_kv.cols)
    shape_error("attention", "k must be (B*T, NKV*HS), or wider by k_col", "k", K,
                "(B*T, k_col + NKV*HS)", want_kv);
  if (V.rows != K.rows || V.cols != K.cols || V.cols < v_col + NKV * HS)
    shape_error("attention", "v must have k's shape, with NKV*HS columns from v_col", "v", V, "k",
                K);
}

// Appends this call's keys and values (kd, vd: (B*T) rows of stride S) to the cache and
// points `a` at the cache's keys and values, new ones included.
void append_to_cache(KVCache& cache, const float* kd, const float* vd, int64_t S, Attn& a) {
  const int64_t B = a.B, T = a.T, NKV = a.NKV, HS = a.HS;
  if (cache.batch != B || cache.width != NKV * HS)
    throw Error("attention: the KV cache holds batch " + std::to_string(cache.batch) + " x width " +
                std::to_string(cache.width) + " but this call has batch " + std::to_string(B) +
                " x NKV*HS " + std::to_string(NKV * HS) +
                "; call KVCache::init with matching sizes");
  if (cache.length + T > cache.capacity)
    throw Error("attention: the KV cache is full: " + std::to_string(cache.length) + " + " +
                std::to_string(T) + " positions exceed its capacity " +
                std::to_string(cache.capacity) + "; init it with a larger capacity");
  const int64_t W = cache.width, cap = cache.capacity, len = cache.length;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(cache.v.data() + (b * cap + len + t) * W, vd + (b * T + t) * S,
                  sizeof(float) * static_cast<size_t>(W));
    float* kt = cache.k.data() + b * cap * W;  // (W, cap)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < W; ++c) kt[c * cap + len + t] = kd[(b * T + t) * S + c];
  }
  a.Tk = cache.length + T;
  a.offset = cache.length;
  a.k = cache.k.data();
  a.v = cache.v.data();
  a.kv_bstride = cap * W;
  a.kv_rstride = W;
  a.k_rstride = 1;
  a.k_cstride = cap;
  a.key_mask = nullptr;
}

// The Attn of a forward call: q, k and v read in place (or k and v from the cache, after
// appending the new ones to it).
Attn forward_attn(Graph& g, Var q, Var k, Var v, const AttentionSpec& spec) {
  // (A KV cache keeps the roundings, for the decoding kernel.)
  const bool own_rounding = bf16_lanes(g, spec.head_size) && !spec.weights_out && !spec.cache;
  const auto [Q, K, V] = product_inputs(g, q.id, k.id, v.id, own_rounding);
  Attn a{};
  a.B = spec.batch;
  a.T = spec.time;
  a.NH = spec.n_heads;
  a.NKV = spec.n_kv_heads;
  a.HS = spec.head_size;
  a.causal = spec.causal;
  a.bf16 = g.precision == Precision::bf16;
  a.round_probs = bf16_lanes(g, a.HS);
  a.scale = 1.0f / std::sqrt(static_cast<float>(a.HS));
  a.q = Q.data + spec.q_col;
  a.q_rstride = Q.cols;
  const float* kd = K.data + spec.k_col;
  const float* vd = V.data + spec.v_col;
  const int64_t S = K.cols;  // row stride of k and v
  if (spec.cache) {
    append_to_cache(*spec.cache, kd, vd, S, a);
  } else {
    a.Tk = a.T;
    a.offset = 0;
    a.k = kd;
    a.v = vd;
    a.kv_rstride = a.k_rstride = S;
    a.k_cstride = 1;
    a.kv_bstride = a.T * a.kv_rstride;
    a.key_mask = spec.key_mask;
  }
  a.slopes = spec.slopes;
  a.prefix = spec.causal ? spec.prefix : nullptr;
  return a;
}

// What attention_backward reads, in the node n (see there): the log-sum-exp buffer (which
// forward fills), copies of the caller's mask, slopes and prefix lengths (they need not
// outlive the call; `a` is pointed at the copies), and room for the probabilities where
// they fit. Returns the log-sum-exp buffer.
float* save_for_backward(Graph& g, Node& n, const AttentionSpec& spec, Attn& a) {
  const int64_t B = a.B, T = a.T, NH = a.NH;
  float* lse = g.alloc(static_cast<size_t>(B * NH * T));
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
  if (a.prefix) {
    int32_t* pf = g.alloc_as<int32_t>(static_cast<size_t>(B));
    std::memcpy(pf, a.prefix, sizeof(int32_t) * static_cast<size_t>(B));
    a.prefix = pf;
  }
  n.i[0] = B;
  n.i[1] = T;
  n.i[2] = NH;
  n.i[3] = a.NKV;
  n.i[4] = a.HS;
  n.i[5] = a.causal ? 1 : 0;
  n.i[6] = spec.q_col;
  n.i[7] = spec.k_col | (spec.v_col << 32);
  n.p[0] = lse;
  n.p[1] = const_cast<uint8_t*>(a.key_mask);
  n.p[2] = const_cast<float*>(a.slopes);
  n.p[4] = const_cast<int32_t*>(a.prefix);
  a.probs_head = probs_per_head(a);
  if (lanes_kernel(a) && !spec.weights_out &&
      B * NH * a.probs_head <= attention_saved_probs_limit()) {
    a.probs_bf16 = g.precision == Precision::bf16;
    const int64_t values = B * NH * a.probs_head;
    a.probs = g.alloc(static_cast<size_t>(a.probs_bf16 ? (values + 1) / 2 : values));
    n.p[3] = a.probs;
  }
  return lse;
}

// Every (batch, head) of the output y [and lse, weights], in tasks of equal size
// (decoding 8 heads: 4 + 4, not 7 + 1).
void forward_heads(const Attn& a, bool cached, float* y, float* lse, float* weights) {
  const int64_t B = a.B, NH = a.NH;
  // Decoding with a cache reads B*Tk*NKV*HS keys and as many values: below 64K of them
  // (seed002: 12K) one thread does it faster than two with a dispatch.
  const int64_t cost = a.T * a.Tk * a.HS * 3;
  const int64_t tasks =
      cached && decode_kernel(a)
          ? (B * a.Tk * a.NKV * a.HS >= (int64_t{1} << 16) ? std::min(B * NH, concurrency()) : 1)
          : ceil_div(B * NH, items_per_task(cost));
  parallel_chunks(B * NH, ceil_div(B * NH, tasks), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) forward_head(a, t / NH, t % NH, y, lse, weights);
  });
}
}  // namespace

Var attention(Graph& g, Var q, Var k, Var v, const AttentionSpec& spec) {
  check_attention_inputs(g, q, k, v, spec);
  Attn a = forward_attn(g, q, k, v, spec);
  KVCache* cache = spec.cache;
  Var out =
      g.make(a.B * a.T, a.NH * a.HS, cache ? nullptr : &attention_backward, {q, k, v}, "attention");
  Node& n = node(g, out);
  // q, k and v, and for wider heads the output (D_i; the lanes kernels take D_i from the
  // probabilities): in a bf16 graph through their bf16 roundings.
  backward_reads(n, 7, !lanes_kernel(a), g.precision == Precision::bf16 ? 7 | kReadsOwn : 0,
                 bf16_lanes(g, a.HS) ? 7 | kReadsOwn : kReadsOwn);
  float* lse = n.requires_grad ? save_for_backward(g, n, spec, a) : nullptr;
  forward_heads(a, cache != nullptr, n.value.data, lse, spec.weights_out);
  if (cache) cache->length += a.T;
  return out;
}

}  // namespace ablate
