// Fused scaled-dot-product attention (Vaswani et al. 2017) per (batch, head): scores,
// mask (causal / key padding), ALiBi-style slopes (Press et al. 2022), softmax and the
// weighted sum of values in one pass over cache-resident copies of K and V; grouped-query
// heads (Ainslie et al. 2023); an optional KV cache for incremental decoding.
// q (B*T, NH*HS), k v (B*T, NKV*HS) -> (B*T, NH*HS). Only the log-sum-exp of every
// score row (B,NH,T) is kept; backward recomputes the probabilities (as FlashAttention).
#include <cmath>
#include <cstring>
#include <limits>

#include "ablate/ops.hpp"
#include "kernels.hpp"

namespace ablate {

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
  k.assign(n, 0.0f);
  v.assign(n, 0.0f);
}

namespace {
using namespace kernels;

constexpr int64_t kLanes = 16;  // score columns per vector block
constexpr float kInf = std::numeric_limits<float>::infinity();

// Everything a (batch, head) kernel needs; keys/values are read through strides so
// that the same code serves the graph's k, v and a KVCache.
struct Attn {
  int64_t B, T, NH, NKV, HS;
  int64_t Tk;        // keys visible to the last query
  int64_t offset;    // absolute position of query 0 (cache length before this call)
  bool causal;
  float scale;       // 1/sqrt(HS)
  const float* slopes;      // (NH) or null
  const uint8_t* key_mask;  // (B*Tk) or null
  const float* q;           // (B*T, NH*HS)
  const float* k;           // element (b, j, c) at k[b*kv_bstride + j*kv_rstride + c]
  const float* v;
  int64_t kv_bstride, kv_rstride;
  int64_t Tkp() const { return round_up(Tk, kLanes); }
  int64_t HSP() const { return round_up(HS, 8); }
  int64_t group() const { return NH / NKV; }
  // Keys [0, jn) are visible to query i.
  int64_t visible(int64_t i) const { return causal ? std::min(Tk, offset + i + 1) : Tk; }
};

// K of (b, kv head) transposed into kt (HS, Tkp), zero-padded; the same source row-major
// into rows (Tk, HSP) when rows is given.
void gather_kt(const Attn& a, const float* src, int64_t b, int64_t kh, float* kt, float* rows) {
  const int64_t Tkp = a.Tkp(), HSP = a.HSP();
  const float* base = src + b * a.kv_bstride + kh * a.HS;
  for (int64_t d = 0; d < a.HS; ++d)
    for (int64_t j = a.Tk; j < Tkp; ++j) kt[d * Tkp + j] = 0.0f;
  for (int64_t j = 0; j < a.Tk; ++j) {
    const float* r = base + j * a.kv_rstride;
    for (int64_t d = 0; d < a.HS; ++d) kt[d * Tkp + j] = r[d];
    if (rows) {
      for (int64_t d = 0; d < a.HS; ++d) rows[j * HSP + d] = r[d];
      for (int64_t d = a.HS; d < HSP; ++d) rows[j * HSP + d] = 0.0f;
    }
  }
}

// out[j] = sum_d x[d] kt[d, j] for j in [0, round_up(jn, 16)): vectorised over j.
inline void row_times_kt(const float* x, const float* kt, int64_t HS, int64_t Tkp, int64_t jn,
                         float* out) {
  for (int64_t jc = 0; jc < jn; jc += kLanes) {
    float acc[kLanes] = {};
    for (int64_t d = 0; d < HS; ++d) {
      const float xd = x[d];
      const float* kr = kt + d * Tkp + jc;
      for (int64_t l = 0; l < kLanes; ++l) acc[l] += xd * kr[l];
    }
    for (int64_t l = 0; l < kLanes; ++l) out[jc + l] = acc[l];
  }
}

// Logits of query row i of head h in batch b against keys [0, jn): s[j] = q.k_j / sqrt(HS)
// - m_h (pos_i - j), -inf for padded keys. qs receives the scaled query (HS).
inline void score_row(const Attn& a, int64_t b, int64_t h, int64_t i, const float* kt,
                      int64_t jn, float* qs, float* s) {
  const float* qr = a.q + (b * a.T + i) * a.NH * a.HS + h * a.HS;
  for (int64_t d = 0; d < a.HS; ++d) qs[d] = qr[d] * a.scale;
  row_times_kt(qs, kt, a.HS, a.Tkp(), jn, s);
  if (a.slopes) {
    const float m = a.slopes[h];
    const int64_t pos = a.offset + i;
    for (int64_t j = 0; j < jn; ++j) s[j] -= m * static_cast<float>(pos - j);
  }
  if (a.key_mask) {
    const uint8_t* km = a.key_mask + b * a.Tk;
    for (int64_t j = 0; j < jn; ++j) s[j] = km[j] ? s[j] : -kInf;
  }
}

// Softmax of s[0,jn) in place; zero for masked keys. Returns the log-sum-exp, or +inf
// when every key is masked (then p is all zero).
inline float softmax_row(const Attn& a, int64_t b, int64_t jn, float* s) {
  ArrMap p(s, jn);
  const float mx = p.maxCoeff();
  if (mx == -kInf) {
    p.setZero();
    return kInf;
  }
  p = (p - mx).exp();
  if (a.key_mask) {
    // exp(-inf) in Eigen's vectorised exp is tiny but not zero: make padding exact.
    const uint8_t* km = a.key_mask + b * a.Tk;
    for (int64_t j = 0; j < jn; ++j) s[j] = km[j] ? s[j] : 0.0f;
  }
  const float sum = p.sum();
  p *= 1.0f / sum;
  return mx + std::log(sum);
}

// One (batch, query head): out rows and lse (T) [and weights (T, Tk)].
void forward_head(const Attn& a, int64_t b, int64_t h, float* out, float* lse, float* weights) {
  const int64_t Tkp = a.Tkp(), HSP = a.HSP(), HS = a.HS;
  const int64_t kh = h / a.group();
  float* kt = thread_scratch(kSlotAttention, static_cast<size_t>(HS * Tkp + a.Tk * HSP + Tkp + 2 * HSP));
  float* vr = kt + HS * Tkp;     // (Tk, HSP)
  float* s = vr + a.Tk * HSP;    // (Tkp)
  float* qs = s + Tkp;           // (HSP)
  float* acc = qs + HSP;         // (HSP)
  gather_kt(a, a.k, b, kh, kt, nullptr);
  const float* vbase = a.v + b * a.kv_bstride + kh * HS;
  for (int64_t j = 0; j < a.Tk; ++j) {
    for (int64_t d = 0; d < HS; ++d) vr[j * HSP + d] = vbase[j * a.kv_rstride + d];
    for (int64_t d = HS; d < HSP; ++d) vr[j * HSP + d] = 0.0f;
  }
  for (int64_t i = 0; i < a.T; ++i) {
    const int64_t jn = a.visible(i);
    score_row(a, b, h, i, kt, jn, qs, s);
    const float l = softmax_row(a, b, jn, s);
    if (lse) lse[(b * a.NH + h) * a.T + i] = l;
    if (weights) {
      float* w = weights + ((b * a.NH + h) * a.T + i) * a.Tk;
      std::memcpy(w, s, sizeof(float) * static_cast<size_t>(jn));
      for (int64_t j = jn; j < a.Tk; ++j) w[j] = 0.0f;
    }
    // out_i = sum_j p_j v_j, vectorised over the head dimension.
    for (int64_t d = 0; d < HSP; ++d) acc[d] = 0.0f;
    for (int64_t j = 0; j < jn; ++j) {
      const float pj = s[j];
      const float* vj = vr + j * HSP;
      for (int64_t d = 0; d < HSP; ++d) acc[d] += pj * vj[d];
    }
    float* o = out + (b * a.T + i) * a.NH * HS + h * HS;
    for (int64_t d = 0; d < HS; ++d) o[d] = acc[d];
  }
}

// One (batch, kv head) and every query head of its group: dq for those heads, dk and dv
// of the kv head (so no two tasks write the same gradient rows).
void backward_group(const Attn& a, int64_t b, int64_t kh, const float* out, const float* dout,
                    const float* lse, float* dq, float* dk, float* dv) {
  const int64_t Tkp = a.Tkp(), HSP = a.HSP(), HS = a.HS, Tk = a.Tk;
  float* kt = thread_scratch(kSlotAttention,
                             static_cast<size_t>(4 * HS * Tkp + Tk * HSP + 2 * Tkp + 2 * HSP));
  float* vt = kt + HS * Tkp;    // (HS, Tkp)
  float* dkt = vt + HS * Tkp;   // (HS, Tkp)
  float* dvt = dkt + HS * Tkp;  // (HS, Tkp)
  float* kr = dvt + HS * Tkp;   // (Tk, HSP)
  float* p = kr + Tk * HSP;     // (Tkp)
  float* ds = p + Tkp;          // (Tkp)
  float* qs = ds + Tkp;         // (HSP)
  float* acc = qs + HSP;        // (HSP)
  gather_kt(a, a.k, b, kh, kt, kr);
  gather_kt(a, a.v, b, kh, vt, nullptr);
  std::memset(dkt, 0, sizeof(float) * static_cast<size_t>(2 * HS * Tkp));
  const int64_t C = a.NH * HS;
  for (int64_t h = kh * a.group(); h < (kh + 1) * a.group(); ++h) {
    for (int64_t i = 0; i < a.T; ++i) {
      const float l = lse[(b * a.NH + h) * a.T + i];
      if (l == kInf) continue;  // every key masked: output 0, no gradient
      const int64_t jn = a.visible(i);
      const int64_t jnp = round_up(jn, kLanes);
      score_row(a, b, h, i, kt, jn, qs, p);
      ArrMap pm(p, jn);
      pm = (pm - l).exp();
      if (a.key_mask) {
        const uint8_t* km = a.key_mask + b * Tk;
        for (int64_t j = 0; j < jn; ++j) p[j] = km[j] ? p[j] : 0.0f;
      }
      const float* dor = dout + (b * a.T + i) * C + h * HS;  // (HS)
      const float* orow = out + (b * a.T + i) * C + h * HS;  // (HS)
      float di = 0.0f;  // sum_j p_j dp_j = dO_i . O_i
      for (int64_t d = 0; d < HS; ++d) di += dor[d] * orow[d];
      // dp_j = dO_i . v_j; ds_j = p_j (dp_j - D_i)
      row_times_kt(dor, vt, HS, Tkp, jn, ds);
      for (int64_t j = 0; j < jn; ++j) ds[j] = p[j] * (ds[j] - di);
      for (int64_t j = jn; j < jnp; ++j) ds[j] = p[j] = 0.0f;
      // dq_i = scale * sum_j ds_j k_j
      for (int64_t d = 0; d < HSP; ++d) acc[d] = 0.0f;
      for (int64_t j = 0; j < jn; ++j) {
        const float c = ds[j];
        const float* kj = kr + j * HSP;
        for (int64_t d = 0; d < HSP; ++d) acc[d] += c * kj[d];
      }
      float* dqr = dq ? dq + (b * a.T + i) * C + h * HS : nullptr;
      if (dqr)
        for (int64_t d = 0; d < HS; ++d) dqr[d] += a.scale * acc[d];
      // dk_j += ds_j * (scale q_i); dv_j += p_j dO_i   (transposed, over j)
      for (int64_t d = 0; d < HS; ++d) {
        const float qd = qs[d], gd = dor[d];
        float* dkr = dkt + d * Tkp;
        float* dvr = dvt + d * Tkp;
        for (int64_t j = 0; j < jnp; ++j) {
          dkr[j] += ds[j] * qd;
          dvr[j] += p[j] * gd;
        }
      }
    }
  }
  const int64_t kvC = a.NKV * HS;
  for (int64_t j = 0; j < Tk; ++j) {
    const int64_t r = (b * a.T + j) * kvC + kh * HS;
    if (dk)
      for (int64_t d = 0; d < HS; ++d) dk[r + d] += dkt[d * Tkp + j];
    if (dv)
      for (int64_t d = 0; d < HS; ++d) dv[r + d] += dvt[d * Tkp + j];
  }
}

// node: in = {q, k, v}; i[0..5] = B, T, NH, NKV, HS, causal; p[0] = lse (B,NH,T),
// p[1] = key mask (B*T) or null, p[2] = slopes (NH) or null.
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
  a.q = g.node(n.in[0]).value.data;
  a.k = g.node(n.in[1]).value.data;
  a.v = g.node(n.in[2]).value.data;
  a.kv_rstride = a.NKV * a.HS;
  a.kv_bstride = a.T * a.kv_rstride;
  const float* lse = static_cast<const float*>(n.p[0]);
  const float* out = n.value.data;
  const float* dout = n.grad.data;
  float* dq = g.requires_grad(n.in[0]) ? g.grad(n.in[0]).data : nullptr;
  float* dk = g.requires_grad(n.in[1]) ? g.grad(n.in[1]).data : nullptr;
  float* dv = g.requires_grad(n.in[2]) ? g.grad(n.in[2]).data : nullptr;
  const int64_t cost = a.group() * a.T * a.Tk * a.HS * 5;
  parallel_chunks(a.B * a.NKV, chunk_for(1, cost), [&](int64_t t0, int64_t t1) {
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
    throw Error("attention: need positive batch, time, heads and head size with n_kv_heads "
                "dividing n_heads; got B=" + std::to_string(B) + " T=" + std::to_string(T) +
                " NH=" + std::to_string(NH) + " NKV=" + std::to_string(NKV) +
                " HS=" + std::to_string(HS));
  const Tensor Q = g.value(q), K = g.value(k), V = g.value(v);
  const Tensor want_q{nullptr, B * T, NH * HS}, want_kv{nullptr, B * T, NKV * HS};
  if (Q.rows != want_q.rows || Q.cols != want_q.cols)
    shape_error("attention", "q must be (B*T, NH*HS)", "q", Q, "(B*T, NH*HS)", want_q);
  if (K.rows != want_kv.rows || K.cols != want_kv.cols)
    shape_error("attention", "k must be (B*T, NKV*HS)", "k", K, "(B*T, NKV*HS)", want_kv);
  if (V.rows != K.rows || V.cols != K.cols)
    shape_error("attention", "v must have k's shape", "v", V, "k", K);

  Attn a{};
  a.B = B;
  a.T = T;
  a.NH = NH;
  a.NKV = NKV;
  a.HS = HS;
  a.causal = spec.causal;
  a.scale = 1.0f / std::sqrt(static_cast<float>(HS));
  a.q = Q.data;
  KVCache* cache = spec.cache;
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
    const int64_t W = cache->width;
    for (int64_t b = 0; b < B; ++b) {
      const size_t dst = static_cast<size_t>((b * cache->capacity + cache->length) * W);
      const size_t bytes = sizeof(float) * static_cast<size_t>(T * W);
      std::memcpy(cache->k.data() + dst, K.data + b * T * W, bytes);
      std::memcpy(cache->v.data() + dst, V.data + b * T * W, bytes);
    }
    a.Tk = cache->length + T;
    a.offset = cache->length;
    a.k = cache->k.data();
    a.v = cache->v.data();
    a.kv_bstride = cache->capacity * W;
    a.kv_rstride = W;
    a.key_mask = nullptr;
  } else {
    a.Tk = T;
    a.offset = 0;
    a.k = K.data;
    a.v = V.data;
    a.kv_rstride = NKV * HS;
    a.kv_bstride = T * a.kv_rstride;
    a.key_mask = spec.key_mask;
  }
  a.slopes = spec.slopes;

  Var out = g.make(B * T, NH * HS, cache ? nullptr : &attention_backward, {q, k, v});
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
    n.p[0] = lse;
    n.p[1] = const_cast<uint8_t*>(a.key_mask);
    n.p[2] = const_cast<float*>(a.slopes);
  }
  float* y = n.value.data;
  const int64_t cost = T * a.Tk * HS * 3;
  parallel_chunks(B * NH, chunk_for(1, cost), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) forward_head(a, t / NH, t % NH, y, lse, spec.weights_out);
  });
  if (cache) cache->length += T;
  return out;
}

}  // namespace ablate
