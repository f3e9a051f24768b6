// Matrix products: matmul and linear (x W + b), forward and backward.
// The GEMMs run on the kernel path's GEMM (kernels.hpp), parallel over output rows or
// columns with shape-fixed blocks (and weight gradients over two fixed halves of the
// reduction). In a bf16 graph (Graph::precision) the products read bf16 roundings of their
// inputs: x and the weights forward, the output gradient and the same roundings of x and
// the weights backward. With a bf16 GEMM (AVX512_BF16's dot product: Bf16Kernels::gemm) the
// roundings are bf16 bits; without one they are float32 copies holding the bf16 values, which
// the float32 GEMM multiplies exactly (a product of two 8-bit significands fits float32's 24)
// and reads in place like any float32 operand. The copies of parameters are kept per graph
// (ParamCopies) and made once per Graph::param_epoch.
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/ops.hpp"
#include "dispatch.hpp"
#include "kernels.hpp"

namespace ablate {
namespace {
using namespace kernels;

// The rounded copies of a graph's parameters (Graph::op_state): bf16 bits for a bf16 GEMM,
// float32 values for the float32 kernels (and for matrix-vector products). A copy is current
// when it was made since the graph's last reset(), or under the graph's nonzero param_epoch.
struct ParamCopies {
  template <class T>
  struct Copy {
    const float* src = nullptr;
    uint64_t epoch = 0, resets = 0;
    std::vector<T> data;
  };
  struct Both {
    Copy<uint16_t> bits;
    Copy<float> rounded;
  };
  std::unordered_map<const Parameter*, Both> copies;
};

template <class T>
bool current(const Graph& g, const ParamCopies::Copy<T>& c, const Tensor& w) {
  return c.src == w.data && c.data.size() == static_cast<size_t>(w.numel()) &&
         ((g.param_epoch != 0 && c.epoch == g.param_epoch) || c.resets == g.resets());
}

void round_into(const Tensor& w, uint16_t* dst) { to_bf16_parallel(w.data, w.numel(), dst); }
void round_into(const Tensor& w, float* dst) { round_to_bf16_parallel(w.data, w.numel(), dst); }

// w's values rounded to bf16, as T (uint16_t: bits; float: values): the graph's copy of a
// parameter, else a copy in the arena.
template <class T>
const T* rounded_copy(Graph& g, Var w) {
  const Tensor W = g.value(w);
  const Parameter* p = g.node(w).param;
  if (!p) {
    T* t = g.alloc_as<T>(static_cast<size_t>(W.numel()));
    round_into(W, t);
    return t;
  }
  if (!g.op_state) g.op_state = std::make_shared<ParamCopies>();
  ParamCopies::Both& both = static_cast<ParamCopies*>(g.op_state.get())->copies[p];
  ParamCopies::Copy<T>& c = [&]() -> ParamCopies::Copy<T>& {
    if constexpr (std::is_same_v<T, uint16_t>) return both.bits;
    else return both.rounded;
  }();
  if (!current(g, c, W)) {
    c.data.resize(static_cast<size_t>(W.numel()));
    round_into(W, c.data.data());
    c.src = W.data;
    c.epoch = g.param_epoch;
    c.resets = g.resets();
  }
  return c.data.data();
}

// node: in = {x, w, bias or -1}; i[0] = transpose_w; i[1] = 1 for a product of bf16 bits,
// 2 for one of float32 copies of bf16 values; p[0] and p[1] hold x's and w's roundings.
void linear_backward_bf16(Graph& g, Node& n, const Tensor& dy, int64_t N, int64_t K, int64_t M, bool tw) {
  const bool dx_wanted = g.requires_grad(n.in[0]), dw_wanted = g.requires_grad(n.in[1]);
  if (n.i[1] == 1) {
    const auto* xb = static_cast<const uint16_t*>(n.p[0]);
    const auto* wb = static_cast<const uint16_t*>(n.p[1]);
    uint16_t* dyb = g.alloc_as<uint16_t>(static_cast<size_t>(N * M));
    to_bf16_parallel(dy.data, N * M, dyb);
    if (dx_wanted) {
      bool fresh;
      float* dx = g.grad_unzeroed(n.in[0], fresh).data;  // (N,K) += dy (N,M) . op(w)^T (M,K)
      gemm_bf16_parallel(false, !tw, N, K, M, 1.0f, dyb, M, wb, tw ? K : M, dx, K, fresh);
    }
    if (dw_wanted) {
      float* dw = g.grad(n.in[1]).data;
      if (!tw) gemm_bf16_parallel(true, false, K, M, N, 1.0f, xb, K, dyb, M, dw, M);
      else gemm_bf16_parallel(true, false, M, K, N, 1.0f, dyb, M, xb, K, dw, K);
    }
    return;
  }
  const auto* xr = static_cast<const float*>(n.p[0]);
  const auto* wr = static_cast<const float*>(n.p[1]);
  float* dyr = g.alloc(static_cast<size_t>(N * M));
  round_to_bf16_parallel(dy.data, N * M, dyr);
  if (dx_wanted) {
    bool fresh;
    float* dx = g.grad_unzeroed(n.in[0], fresh).data;
    gemm_acc_parallel(false, !tw, N, K, M, 1.0f, dyr, M, wr, tw ? K : M, dx, K, fresh);
  }
  if (dw_wanted) {
    float* dw = g.grad(n.in[1]).data;
    if (!tw) gemm_acc_parallel(true, false, K, M, N, 1.0f, xr, K, dyr, M, dw, M);
    else gemm_acc_parallel(true, false, M, K, N, 1.0f, dyr, M, xr, K, dw, K);
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
    // A few rows (decoding) run the float32 kernels' matrix-vector products (and a decoding
    // team's split) on float32 copies, whatever the GEMM.
    const bool bits = isa_kernels().bf16.gemm != nullptr && N > 4;
    const int64_t ldw = tw ? K : M;
    if (bits) {
      uint16_t* xb = g.alloc_as<uint16_t>(static_cast<size_t>(N * K));
      to_bf16_parallel(X.data, N * K, xb);
      const uint16_t* wb = rounded_copy<uint16_t>(g, w);
      gemm_bf16_parallel(false, tw, N, M, K, 1.0f, xb, K, wb, ldw, n.value.data, M, /*overwrite=*/true, b);
      n.i[1] = 1;
      n.p[0] = xb;
      n.p[1] = const_cast<uint16_t*>(wb);
    } else {
      float* xr = g.alloc(static_cast<size_t>(N * K));
      round_to_bf16_parallel(X.data, N * K, xr);
      const float* wr = rounded_copy<float>(g, w);
      gemm_acc_parallel(false, tw, N, M, K, 1.0f, xr, K, wr, ldw, n.value.data, M, /*overwrite=*/true, b);
      n.i[1] = 2;
      n.p[0] = xr;
      n.p[1] = const_cast<float*>(wr);
    }
    return out;
  }
  // y (N,M) = b + x (N,K) . op(w) (K,M)
  gemm_acc_parallel(false, tw, N, M, K, 1.0f, X.data, K, W.data, tw ? K : M, n.value.data, M,
                    /*overwrite=*/true, b);
  return out;
}
}  // namespace

const float* kernels::bf16_rounded(Graph& g, Var w) { return rounded_copy<float>(g, w); }

size_t param_copy_bytes(const Graph& g) {
  if (!g.op_state) return 0;
  size_t n = 0;
  for (const auto& [p, c] : static_cast<const ParamCopies*>(g.op_state.get())->copies)
    n += c.bits.data.size() * sizeof(uint16_t) + c.rounded.data.size() * sizeof(float);
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
