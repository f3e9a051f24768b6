// Matrix products: matmul and linear (x W + b), forward and backward.
// The GEMMs run on the kernel path's GEMM (kernels.hpp), parallel over output rows or
// columns with shape-fixed blocks (and weight gradients over two fixed halves of the
// reduction). In a bf16 graph (Graph::precision) the products read bf16 roundings of their
// inputs: x and the weights forward, the output gradient and the same roundings backward;
// the bf16 copies of parameters are kept per graph (ParamCopies) and made once per
// Graph::param_epoch.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/ops.hpp"
#include "kernels.hpp"

namespace ablate {
namespace {
using namespace kernels;

// The bf16 copies of a graph's parameters (Graph::op_state), with, for matrix-vector
// products, the same values as float32. A copy is current when it was made since the
// graph's last reset(), or under the graph's nonzero param_epoch.
struct ParamCopies {
  struct Copy {
    const float* src = nullptr;
    uint64_t epoch = 0, resets = 0;
    std::vector<uint16_t> bits;
    uint64_t rounded_epoch = 0, rounded_resets = 0;
    std::vector<float> rounded;  // bits as float32 (empty until asked for)
  };
  std::unordered_map<const Parameter*, Copy> copies;
};

bool current(const Graph& g, uint64_t epoch, uint64_t resets, bool made) {
  return made && ((g.param_epoch != 0 && epoch == g.param_epoch) || resets == g.resets());
}

ParamCopies::Copy* param_copy(Graph& g, Var w) {
  const Parameter* p = g.node(w).param;
  if (!p) return nullptr;
  if (!g.op_state) g.op_state = std::make_shared<ParamCopies>();
  ParamCopies::Copy& c = static_cast<ParamCopies*>(g.op_state.get())->copies[p];
  const Tensor W = g.value(w);
  if (!current(g, c.epoch, c.resets, c.src == W.data && c.bits.size() == static_cast<size_t>(W.numel()))) {
    c.bits.resize(static_cast<size_t>(W.numel()));
    to_bf16_parallel(W.data, W.numel(), c.bits.data());
    c.src = W.data;
    c.epoch = g.param_epoch;
    c.resets = g.resets();
    c.rounded_resets = ~uint64_t{0};  // stale
    c.rounded_epoch = 0;
  }
  return &c;
}

// w's values rounded to bf16: the graph's copy of a parameter, else a copy in the arena.
const uint16_t* bf16_of(Graph& g, Var w) {
  if (ParamCopies::Copy* c = param_copy(g, w)) return c->bits.data();
  const Tensor W = g.value(w);
  uint16_t* bits = g.alloc_as<uint16_t>(static_cast<size_t>(W.numel()));
  to_bf16_parallel(W.data, W.numel(), bits);
  return bits;
}

// n bf16 values as float32 into dst.
void widen(const uint16_t* bits, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(bits[i]);
}

// node: in = {x, w, bias or -1}; i[0] = transpose_w; i[1] = 1 for a bf16 product, whose
// rounded x and w are p[0] and p[1].
void linear_backward_bf16(Graph& g, Node& n, const Tensor& dy, int64_t N, int64_t K, int64_t M, bool tw) {
  const auto* xb = static_cast<const uint16_t*>(n.p[0]);
  const auto* wb = static_cast<const uint16_t*>(n.p[1]);
  uint16_t* dyb = g.alloc_as<uint16_t>(static_cast<size_t>(N * M));
  to_bf16_parallel(dy.data, N * M, dyb);
  if (g.requires_grad(n.in[0])) {
    bool fresh;
    float* dx = g.grad_unzeroed(n.in[0], fresh).data;  // (N,K) += dy (N,M) . op(w)^T (M,K)
    gemm_bf16_parallel(false, !tw, N, K, M, 1.0f, dyb, M, wb, tw ? K : M, dx, K, fresh);
  }
  if (g.requires_grad(n.in[1])) {
    float* dw = g.grad(n.in[1]).data;
    if (!tw)  // dw (K,M) += x^T (K,N) . dy (N,M)
      gemm_bf16_parallel(true, false, K, M, N, 1.0f, xb, K, dyb, M, dw, M);
    else  // dw (M,K) += dy^T (M,N) . x (N,K)
      gemm_bf16_parallel(true, false, M, K, N, 1.0f, dyb, M, xb, K, dw, K);
  }
}

void linear_backward(Graph& g, int id) {
  Node& n = g.node(id);
  const Tensor dy = n.grad;                // (N,M)
  const Tensor x = g.node(n.in[0]).value;  // (N,K)
  const Tensor w = g.node(n.in[1]).value;  // (K,M), or (M,K) when transposed
  const bool tw = n.i[0] != 0;
  const int64_t N = x.rows, K = x.cols, M = dy.cols;
  if (n.i[1] != 0) {
    linear_backward_bf16(g, n, dy, N, K, M, tw);
    if (g.requires_grad(n.in[2])) add_column_sums(dy.data, N, M, M, g.grad(n.in[2]).data);  // (1,M)
    return;
  }
  if (g.requires_grad(n.in[0])) {
    bool fresh;
    float* dx = g.grad_unzeroed(n.in[0], fresh).data;  // (N,K) += dy (N,M) . op(w)^T (M,K)
    gemm_acc_parallel(false, !tw, N, K, M, 1.0f, dy.data, M, w.data, tw ? K : M, dx, K, fresh);
  }
  if (g.requires_grad(n.in[1])) {
    float* dw = g.grad(n.in[1]).data;
    if (!tw)  // dw (K,M) += x^T (K,N) . dy (N,M)
      gemm_acc_parallel(true, false, K, M, N, 1.0f, x.data, K, dy.data, M, dw, M);
    else  // dw (M,K) += dy^T (M,N) . x (N,K)
      gemm_acc_parallel(true, false, M, K, N, 1.0f, dy.data, M, x.data, K, dw, K);
  }
  if (g.requires_grad(n.in[2])) add_column_sums(dy.data, N, M, M, g.grad(n.in[2]).data);  // (1,M)
}

Var linear_impl(const char* op, const char* xn, const char* wn, Graph& g, Var x, Var w, Var bias,
                bool tw) {
  check_var(op, xn, g, x);
  check_var(op, wn, g, w);
  const Tensor X = g.value(x);  // (N,K)
  const Tensor W = g.value(w);  // (K,M) or (M,K)
  const int64_t N = X.rows, K = X.cols;
  if ((tw ? W.cols : W.rows) != K)
    shape_error(op,
                std::string("inner dimensions differ (") + xn + ".cols must equal " + wn +
                    (tw ? ".cols, as it is transposed)" : ".rows)"),
                xn, X, wn, W);
  const int64_t M = tw ? W.rows : W.cols;
  const float* b = nullptr;
  if (bias.valid()) {
    check_var(op, "bias", g, bias);
    const Tensor Bt = g.value(bias);
    if (Bt.rows != 1 || Bt.cols != M) shape_error(op, "bias must be (1, out)", "bias", Bt, wn, W);
    b = Bt.data;
  }
  Var out = g.make(N, M, &linear_backward, {x, w, bias}, op);
  Node& n = g.node(out);
  n.i[0] = tw ? 1 : 0;
  if (g.precision == Precision::bf16) {
    uint16_t* xb = g.alloc_as<uint16_t>(static_cast<size_t>(N * K));
    to_bf16_parallel(X.data, N * K, xb);
    if (N <= 4) {
      // A few rows (decoding): matrix-vector products on the float32 kernels (and a
      // decoding team's split), reading the bf16 values as float32.
      float* xr = g.alloc(static_cast<size_t>(N * K));
      widen(xb, N * K, xr);
      gemm_acc_parallel(false, tw, N, M, K, 1.0f, xr, K, bf16_rounded(g, w), tw ? K : M, n.value.data, M,
                        /*overwrite=*/true, b);
      if (!g.requires_grad(out)) return out;
    }
    const uint16_t* wb = bf16_of(g, w);
    if (N > 4)
      gemm_bf16_parallel(false, tw, N, M, K, 1.0f, xb, K, wb, tw ? K : M, n.value.data, M, /*overwrite=*/true, b);
    n.i[1] = 1;
    n.p[0] = xb;
    n.p[1] = const_cast<uint16_t*>(wb);
    return out;
  }
  // y (N,M) = b + x (N,K) . op(w) (K,M)
  gemm_acc_parallel(false, tw, N, M, K, 1.0f, X.data, K, W.data, tw ? K : M, n.value.data, M,
                    /*overwrite=*/true, b);
  return out;
}
}  // namespace

const float* kernels::bf16_rounded(Graph& g, Var w) {
  ParamCopies::Copy* c = param_copy(g, w);
  const Tensor W = g.value(w);
  if (!c) {
    float* r = g.alloc(static_cast<size_t>(W.numel()));
    const uint16_t* bits = bf16_of(g, w);
    widen(bits, W.numel(), r);
    return r;
  }
  if (!current(g, c->rounded_epoch, c->rounded_resets, c->rounded.size() == c->bits.size())) {
    c->rounded.resize(c->bits.size());
    widen(c->bits.data(), W.numel(), c->rounded.data());
    c->rounded_epoch = g.param_epoch;
    c->rounded_resets = g.resets();
  }
  return c->rounded.data();
}

size_t param_copy_bytes(const Graph& g) {
  if (!g.op_state) return 0;
  size_t n = 0;
  for (const auto& [p, c] : static_cast<const ParamCopies*>(g.op_state.get())->copies)
    n += c.bits.size() * sizeof(uint16_t) + c.rounded.size() * sizeof(float);
  return n;
}

Var matmul(Graph& g, Var a, Var b, bool transpose_b) {
  return linear_impl("matmul", "a", "b", g, a, b, Var{}, transpose_b);
}

Var linear(Graph& g, Var x, Var w, Var bias, bool transpose_w) {
  return linear_impl("linear", "x", "w", g, x, w, bias, transpose_w);
}

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c, float alpha,
          bool accumulate) {
  const int64_t m = transpose_a ? a.cols : a.rows, k = transpose_a ? a.rows : a.cols;
  const int64_t kb = transpose_b ? b.cols : b.rows, n = transpose_b ? b.rows : b.cols;
  auto shape = [](const Tensor& t, bool tr) {
    return "(" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + ")" + (tr ? "^T" : "");
  };
  if (k != kb || c.rows != m || c.cols != n || k <= 0)
    throw Error("gemm: shapes do not match: a " + shape(a, transpose_a) + " times b " + shape(b, transpose_b) +
                " into c " + shape(c, false));
  gemm_acc_parallel(transpose_a, transpose_b, m, n, k, alpha, a.data, a.cols, b.data, b.cols, c.data, c.cols,
                    /*overwrite=*/!accumulate);
}

}  // namespace ablate
