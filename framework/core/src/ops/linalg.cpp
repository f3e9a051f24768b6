// Matrix products: matmul and linear (x W + b), forward and backward.
// The GEMMs run on Eigen's kernel (kernels.hpp), parallel over output rows or columns
// with shape-fixed blocks, never over the reduction dimension.
#include <string>

#include "ablate/error.hpp"
#include "ablate/ops.hpp"
#include "kernels.hpp"

namespace ablate {
namespace {
using namespace kernels;

// node: in = {x, w, bias or -1}; i[0] = transpose_w.
void linear_backward(Graph& g, int id) {
  Node& n = g.node(id);
  const Tensor dy = n.grad;                // (N,M)
  const Tensor x = g.node(n.in[0]).value;  // (N,K)
  const Tensor w = g.node(n.in[1]).value;  // (K,M), or (M,K) when transposed
  const bool tw = n.i[0] != 0;
  const int64_t N = x.rows, K = x.cols, M = dy.cols;
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
  // y (N,M) = b + x (N,K) . op(w) (K,M)
  gemm_acc_parallel(false, tw, N, M, K, 1.0f, X.data, K, W.data, tw ? K : M, n.value.data, M,
                    /*overwrite=*/true, b);
  return out;
}
}  // namespace

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
