// Primitive ops with hand-written backward (each has a finite-difference test in
// tests/core/test_ops.cpp or test_ops_rows.cpp). Shapes use llm.c's letters: B batch, T time, C
// channels, NH heads, HS head size, V vocab. Every tensor is 2-D row-major (see tensor.hpp).
// Backward accumulates (+=) into input gradients. Results do not depend on the
// number of threads: parallel loops split work into chunks fixed by the shapes.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ablate/graph.hpp"

namespace ablate {

// The kernel path the ops run on: "avx512", "avx2" or "portable", the best this CPU has,
// or a lower one forced with the environment variable ABLATE_ISA (docs/BENCHMARKS.md), or
// avx512 with another bf16 GEMM forced the same way: "avx512_bf16", "onednn_bf16".
// Chosen at the first call; throws Error if ABLATE_ISA names an unknown path or one
// above the CPU's.
const char* kernel_path();
// The GEMM of bf16 matrix products (Graph::precision): "avx512_bf16" (AVX512_BF16's dot
// product), "onednn_bf16" (oneDNN's matmul: AMX-BF16 tiles where the CPU has them), or the
// kernel path's name where its float32 GEMM multiplies the bf16 values as float32.
const char* bf16_kernel();
// A one-line notice for the start of a bf16 run where its products are not the fast
// dot-product kernel (and why), else empty.
std::string bf16_notice();
// This CPU's model from /proc/cpuinfo, e.g. "Intel(R) Xeon(R) ... (family 6 model 167)".
std::string cpu_model();

// Runs f(begin, end) over [0, n) in chunks of `chunk` on ablate's threads (the calling
// thread and its pinned workers; nested calls run serially). Chunk boundaries depend only
// on n and chunk, so per-chunk arithmetic is the same for any thread count. For plugins'
// own loops, e.g. an optimizer's elementwise update.
// f is called as f(begin, end); nothing is allocated.
void parallel_for_raw(int64_t n, int64_t chunk, void (*fn)(void* ctx, int64_t begin, int64_t end),
                      void* ctx);
template <class F>
void parallel_for(int64_t n, int64_t chunk, const F& f) {
  parallel_for_raw(
      n, chunk, [](void* c, int64_t b, int64_t e) { (*static_cast<const F*>(c))(b, e); },
      const_cast<F*>(&f));
}

// Runs f(i, begin, end) over elements [begin, end) of every parameter i in one parallel
// loop, in spans of at most `chunk` elements that depend only on the sizes: a model's
// many small tensors (a d = 32 model's biases and norms) share the cores, where a loop per
// parameter ran each of them on one thread. For an optimizer's elementwise update.
void parallel_for_params_raw(const std::vector<Parameter*>& params, int64_t chunk,
                             void (*fn)(void* ctx, size_t i, int64_t begin, int64_t end),
                             void* ctx);
template <class F>
void parallel_for_params(const std::vector<Parameter*>& params, int64_t chunk, const F& f) {
  parallel_for_params_raw(
      params, chunk,
      [](void* c, size_t i, int64_t b, int64_t e) { (*static_cast<const F*>(c))(i, b, e); },
      const_cast<F*>(&f));
}

// ---- linear algebra -------------------------------------------------------------
// (N,K) x (K,M) -> (N,M); with transpose_b, b is (M,K) and the product is a b^T.
Var matmul(Graph& g, Var a, Var b, bool transpose_b = false);
// x (N,K) times w (K,M) [or w (M,K) with transpose_w], plus bias (1,M) if given.
Var linear(Graph& g, Var x, Var w, Var bias = {}, bool transpose_w = false);
// Outside any graph (no backward), for plugins' own arithmetic such as an optimizer's:
// c = alpha * op(a) op(b), plus c's old values with accumulate; op(x) = x^T when
// transposed. Mismatched shapes are an Error naming them. Parallel over blocks of c fixed
// by the shapes: the same bits for any thread count.
void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
          float alpha = 1.0f, bool accumulate = false);

// Bytes of the bf16 copies of parameters that g's products keep (Graph::precision bf16),
// and of the buffers its products and attention round their inputs and output gradients
// into (the largest call's: they grow with the batch).
size_t param_copy_bytes(const Graph& g);
size_t product_buffer_bytes(const Graph& g);

// ---- elementwise ----------------------------------------------------------------
// Same shapes, or b of shape (1, cols) broadcast over the rows of a, or b of shape (1, 1)
// (a scalar, e.g. a learned one) broadcast over every element of a.
Var add(Graph& g, Var a, Var b);
Var mul(Graph& g, Var a, Var b);
Var scale(Graph& g, Var a, float s);
Var relu(Graph& g, Var x);
Var gelu(Graph& g, Var x);        // tanh approximation (GPT-2)
Var gelu_exact(Graph& g, Var x);  // x * Phi(x) with erf
Var silu(Graph& g, Var x);        // x * sigmoid(x)
Var tanh(Graph& g, Var x);
// Inverted dropout: identity unless g.training and p > 0. The mask is a hash of
// (g.seed, g.step, node id, element): independent of threads, reproducible on resume.
Var dropout(Graph& g, Var x, float p);

// ---- structure ------------------------------------------------------------------
// Columns [start, start+width) of x.
Var slice_cols(Graph& g, Var x, int64_t start, int64_t width);
// Rows ids[0..n) of table (R, C) -> (n, C). ids outside [0,R) are an Error. The ids
// are copied into the graph.
Var embedding(Graph& g, Var table, const int32_t* ids, int64_t n);

// ---- rows (a sparse mixture of experts' dispatch and combine) --------------------
// Index arrays have int32 entries (like embedding's ids), are checked against the rows
// they name (an Error names the op, the position, the value and the allowed range) and
// are copied into the graph, so the caller's buffer may go after the call.
// Rows idx[0..m) of x (N, D) -> (m, D), in any order, repeats allowed (a token sent to
// several experts); m may be 0. Backward adds each row's gradient into the row it came
// from, repeats summed in index order.
Var gather_rows(Graph& g, Var x, const int32_t* idx, int64_t m);
// The transpose: y (M, D) -> (n_rows, D), row i the sum, in order, of the rows r of y with
// idx[r] == i (0 where none); idx has M = y.rows entries in [0, n_rows). Backward gathers.
Var scatter_add_rows(Graph& g, Var y, const int32_t* idx, int64_t n_rows);
// x (N, D) times a per-row scale s (N, 1): row r is s[r] * x[r] (an expert's outputs
// times their routing weights). Gradients to both.
Var scale_rows(Graph& g, Var x, Var s);
// The values of x (R, C) as (rows, cols), rows * cols = R * C, in the same row-major order
// (a copy): e.g. routing weights (N, k) as (N * k, 1) for gather_rows.
Var reshape(Graph& g, Var x, int64_t rows, int64_t cols);

// The k largest values of each row of x (N, E), largest first, ties to the lower column
// (deterministic). A router needs two things from the choice: the chosen experts as
// integers, to dispatch tokens with gather_rows and combine them with scatter_add_rows
// (no gradient: the choice is piecewise constant), and the chosen values as a Var, whose
// gradient flows back into x at the chosen positions only. One op returns both from one
// selection, so they cannot disagree, and the router needs no division op: the
// renormalised weights p_i / sum_{j in top k} p_j of p = softmax(logits) are the softmax
// of the chosen logits, so
//   TopK t = top_k(g, logits, k);  Var w = softmax(g, t.values);    // Mixtral
//   TopK t = top_k(g, softmax(g, logits), k);  Var w = t.values;    // Switch, unnormalised
// Rows with a NaN are an Error (their order is undefined), as is k outside [1, E].
struct TopK {
  Var values;                        // (N, k): values(r, j) = x(r, indices[r * k + j])
  const int32_t* indices = nullptr;  // N * k columns of x, row-major; in g's arena until reset
  int64_t k = 0;
};
TopK top_k(Graph& g, Var x, int64_t k);

// ---- normalisation --------------------------------------------------------------
// Over each row: (x - mean) / sqrt(var + eps) * gain + bias; gain/bias may be invalid Vars.
Var layernorm(Graph& g, Var x, Var gain, Var bias, float eps = 1e-5f);
// x / sqrt(mean(x^2) + eps) * gain; gain may be invalid.
Var rmsnorm(Graph& g, Var x, Var gain, float eps = 1e-5f);
// Per-head forms: each group of `group` consecutive columns of x (N, H * group) is
// normalised on its own (a head's q or k in QK-norm); gain and bias (1, group) or invalid,
// shared by the groups. group must divide x.cols; group = x.cols is layernorm / rmsnorm,
// bitwise.
Var layernorm_groups(Graph& g, Var x, int64_t group, Var gain, Var bias, float eps = 1e-5f);
Var rmsnorm_groups(Graph& g, Var x, int64_t group, Var gain, float eps = 1e-5f);
// Row-wise softmax.
Var softmax(Graph& g, Var x);

// ---- attention ------------------------------------------------------------------
// Keys and values cached across calls for incremental decoding (forward only).
struct KVCache {
  int64_t batch = 0, capacity = 0, width = 0;  // width = NKV*HS
  int64_t length = 0;                          // positions filled
  // v (batch, capacity, width); k transposed, (batch, width, capacity), so that the
  // scores of one query are a product along contiguous keys.
  AlignedFloats k, v;  // on 64-byte boundaries, as every tensor (tensor.hpp)
  void init(int64_t batch_, int64_t capacity_, int64_t width_);
};

struct AttentionSpec {
  int64_t batch = 1, time = 1;                         // B, T of the query
  int64_t n_heads = 1, n_kv_heads = 1, head_size = 1;  // NH, NKV (divides NH), HS
  bool causal = true;                                  // false: bidirectional (encoder)
  const float* slopes = nullptr;      // per query head m_h: adds -m_h*|i-j| to logits (ALiBi-style)
  const uint8_t* key_mask = nullptr;  // (B*T) 1 = attend, 0 = padding (ignored with a cache)
  // (B) or null; with causal, a prefix LM (Raffel et al. 2020): the queries of row b before
  // absolute position prefix[b] also see every key before it (the prompt reads itself whole).
  const int32_t* prefix = nullptr;
  float* weights_out = nullptr;  // if set: (B, NH, Tq, Tk) attention probabilities
  KVCache* cache = nullptr;      // if set: k,v are appended; forward only
  // First columns of q, k and v in their nodes, which may be wider: attention(g, qkv, qkv,
  // qkv, spec) with q_col 0, k_col NH*HS, v_col NH*HS + NKV*HS reads a fused projection
  // without copying it apart (k and v must then be the same width).
  int64_t q_col = 0, k_col = 0, v_col = 0;
};
// Fused scaled-dot-product attention, parallel over B x NH.
// q (B*T, NH*HS), k and v (B*T, NKV*HS) -> (B*T, NH*HS), or column ranges of wider
// nodes (q_col, k_col, v_col). Scale 1/sqrt(HS). In a bf16 graph (Graph::precision) its
// products read q, k and v rounded to bf16 (a KV cache keeps the roundings), and backward
// the output gradient rounded too, with float32 sums; the scores and softmax are float32, and
// the probabilities saved for backward (heads up to 64 wide, where they fit) are kept as bf16.
// Where the kernel path multiplies bf16 values faster than float32 ones (AVX512_BF16's dot
// product: ablate::bf16_kernel() "avx512_bf16"), heads up to 64 wide multiply the
// probabilities and their gradient rounded to bf16 too, as PyTorch's bf16 attention does;
// elsewhere those are float32.
Var attention(Graph& g, Var q, Var k, Var v, const AttentionSpec& spec);

// Rotary embedding: rotates each (even, odd) pair of every head of x (B*T, NH*HS) at
// absolute position pos0 + t by angle pos * base^(-2i/HS).
Var rope(Graph& g, Var x, int64_t batch, int64_t time, int64_t n_heads, int64_t head_size,
         int64_t pos0, float base);

// ---- loss -----------------------------------------------------------------------
// Mean cross-entropy of logits (N, V) against targets[0..N); targets equal to
// `ignore` are left out of the mean (padding). Returns a (1,1) node.
Var cross_entropy(Graph& g, Var logits, const int32_t* targets, int64_t n, int32_t ignore = -1);

// A loss summed over scored positions: `sum`, a (1,1) node, adds up the positions' losses
// and `count` says how many positions were scored; their mean is sum / count. Summed losses
// of several batches (data-parallel slices, gradient-accumulation micro-batches) add up, so
// the caller divides once, by the count of them all (Objective::loss).
struct LossSum {
  Var sum;
  int64_t count = 0;
};

// The sum of the cross-entropies of logits (N, V) against targets[0..N), targets equal to
// `ignore` left out, and how many were not. Backward gives each scored row (softmax -
// onehot) times the gradient that reaches the sum: scale(g, sum, 1 / total) yields
// (softmax - onehot) / total in one product, as cross_entropy's mean does with its count.
LossSum cross_entropy_sum(Graph& g, Var logits, const int32_t* targets, int64_t n,
                          int32_t ignore = -1);

// Sum of all elements -> (1,1). Handy for tests and custom losses.
Var sum(Graph& g, Var x);

}  // namespace ablate
