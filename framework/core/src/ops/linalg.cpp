// Matrix products: matmul and linear (x W + b), forward and backward.
// The GEMMs run on the kernel path's GEMM (kernels.hpp), parallel over output rows or
// columns with shape-fixed blocks (and weight gradients over two fixed halves of the
// reduction). In a bf16 graph (Graph::precision) the products read bf16 roundings of their
// inputs: x and the weights forward, the output gradient and the same roundings of x and
// the weights backward. With a bf16 GEMM (Bf16Kernels::gemm: AVX512_BF16's dot product, or
// oneDNN's) the roundings are bf16 bits, the weights' kept per graph (Bf16State) and made once
// per Graph::param_epoch. Without one, x and dy are rounded to float32 values, which the float32
// GEMM multiplies exactly (a product of two 8-bit significands fits float32's 24), and the
// weights are rounded as the GEMM packs them (Bf16Kernels::gemm_round_b): no copy of them.
// Decoding's few rows without gradients read the weights' bf16 bits in the matrix-vector
// products (half the bytes of float32, the same sums: gemv_bf16_parallel) on every path. x and
// dy are rounded into two buffers of the graph that every product reuses (x again for the
// backward pass, from the x the graph keeps anyway), so that a bf16 step holds no more
// activations than a float32 one.
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/ops.hpp"
#include "dispatch.hpp"
#include "../node.hpp"
#include "kernels.hpp"

namespace ablate {
namespace {
using namespace kernels;

// A graph's bf16 state (Graph::op_state): its parameters' bf16 bits (for a bf16 GEMM and for
// decoding's matrix-vector products), each current when it was made since the graph's last
// reset() or under the graph's nonzero param_epoch; and the buffers of the product being
// computed (grown to the largest product, then reused: a steady state allocates nothing).
struct Bf16State {
  struct Copy {
    const float* src = nullptr;
    uint64_t epoch = 0, resets = 0;
    std::vector<uint16_t, TensorAllocator<uint16_t>> data;  // on 64-byte boundaries
  };
  std::unordered_map<const Parameter*, Copy> copies;
  // Rounded x and dy, as T (bits or float32), and attention's rounded k and v (float32), on
  // 64-byte boundaries as every tensor (the sums' order does not depend on the heap).
  AlignedFloats x, dy, k, v;
};

Bf16State& bf16_state(Graph& g) {
  if (!g.op_state) g.op_state = std::make_shared<Bf16State>();
  return *static_cast<Bf16State*>(g.op_state.get());
}

// buf as n values of T, grown if need be.
template <class T>
T* buffer(AlignedFloats& buf, int64_t n) {
  const size_t floats = (static_cast<size_t>(n) * sizeof(T) + sizeof(float) - 1) / sizeof(float);
  if (buf.size() < floats) buf.resize(floats);
  return reinterpret_cast<T*>(buf.data());
}

bool current(const Graph& g, const Bf16State::Copy& c, const Tensor& w) {
  return c.src == w.data && c.data.size() == static_cast<size_t>(w.numel()) &&
         ((g.param_epoch != 0 && c.epoch == g.param_epoch) || c.resets == g.resets());
}

void round_into(const Tensor& w, uint16_t* dst) { to_bf16_parallel(w.data, w.numel(), dst); }
void round_into(const Tensor& w, float* dst) { round_to_bf16_parallel(w.data, w.numel(), dst); }

// x rounded into the graph's buffer `buf`, as T.
template <class T>
const T* rounded_into(Graph& g, AlignedFloats Bf16State::*buf, const Tensor& x) {
  T* t = buffer<T>(bf16_state(g).*buf, x.numel());
  round_into(x, t);
  return t;
}

// Node v's value rounded, as T: where it waits as bf16 bits, those (T uint16_t, a backward
// that reads them: backward_reads' `bits`); where its floats are bf16 values (widened from the
// bits it waited in, which are still there), those floats or bits themselves; as bits, where
// the plan keeps it as bits, those made now (Graph::bits_now); else rounded_into's.
template <class T>
const T* rounded_value(Graph& g, AlignedFloats Bf16State::*buf, int v) {
  const Node& n = node(g, v);
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (n.held == Node::Held::bits || n.bf16_exact) return n.bits;
    if (const uint16_t* b = TapeAccess::bits_now(g, v)) return b;
  } else if (n.bf16_exact) {
    return n.value.data;
  }
  return rounded_into<T>(g, buf, n.value);
}

// w's values as bf16 bits: the graph's copy of a parameter, else a copy in the arena.
const uint16_t* bf16_bits(Graph& g, Var w) {
  const Tensor W = g.value(w);
  const Parameter* p = node(g, w).param;
  if (!p) {
    uint16_t* t = g.alloc_as<uint16_t>(static_cast<size_t>(W.numel()));
    round_into(W, t);
    return t;
  }
  Bf16State::Copy& c = bf16_state(g).copies[p];
  if (!current(g, c, W)) {
    c.data.resize(static_cast<size_t>(W.numel()));
    round_into(W, c.data.data());
    c.src = W.data;
    c.epoch = g.param_epoch;
    c.resets = g.resets();
  }
  return c.data.data();
}

// node: in = {x, w, bias or -1}; i[0] = transpose_w; i[1] = 1 for a product of bf16 bits
// (p[1] holds w's), 2 for the float32 GEMM on bf16 values (w rounded as it is packed).
template <class T>
void linear_backward_bf16(Graph& g, Node& n, const Tensor& dy, int64_t N, int64_t K, int64_t M,
                          bool tw) {
  constexpr bool kBits = std::is_same_v<T, uint16_t>;
  const bool dx_wanted = g.requires_grad(n.in[0]), dw_wanted = g.requires_grad(n.in[1]);
  const T* dyr = rounded_into<T>(g, &Bf16State::dy, dy);
  // round_b: B is w's float32 value, rounded as it is packed.
  auto gemm = [](bool ta, bool tb, int64_t m, int64_t nn, int64_t k, const T* a, int64_t lda,
                 const T* b, int64_t ldb, float* c, int64_t ldc, bool overwrite, bool round_b) {
    if constexpr (kBits)
      gemm_bf16_parallel(ta, tb, m, nn, k, 1.0f, a, lda, b, ldb, c, ldc, overwrite);
    else
      gemm_acc_parallel(ta, tb, m, nn, k, 1.0f, a, lda, b, ldb, c, ldc, overwrite, nullptr,
                        round_b);
  };
  if (dx_wanted) {
    const T* w;
    if constexpr (kBits) w = static_cast<const T*>(n.p[1]);
    else w = node(g, n.in[1]).value.data;
    bool fresh;
    float* dx = g.grad_unzeroed(n.in[0], fresh).data;  // (N,K) += dy (N,M) . op(w)^T (M,K)
    gemm(false, !tw, N, K, M, dyr, M, w, tw ? K : M, dx, K, fresh, /*round_b=*/true);
  }
  if (dw_wanted) {
    // Again (the forward's went with its buffer), or x's own bits or values where it waited
    // as bits.
    const T* xr = rounded_value<T>(g, &Bf16State::x, n.in[0]);
    float* dw = g.grad(n.in[1]).data;
    if (!tw)
      gemm(true, false, K, M, N, xr, K, dyr, M, dw, M, false, false);     // dw (K,M) += x^T . dy
    else gemm(true, false, M, K, N, dyr, M, xr, K, dw, K, false, false);  // dw (M,K) += dy^T . x
  }
}

void linear_backward(Graph& g, int id) {
  Node& n = node(g, id);
  const Tensor dy = n.grad;                 // (N,M)
  const Tensor x = node(g, n.in[0]).value;  // (N,K)
  const Tensor w = node(g, n.in[1]).value;  // (K,M), or (M,K) when transposed
  const bool tw = n.i[0] != 0;
  const int64_t N = x.rows, K = x.cols, M = dy.cols;
  if (n.i[1] != 0) {
    if (n.i[1] == 1) linear_backward_bf16<uint16_t>(g, n, dy, N, K, M, tw);
    else linear_backward_bf16<float>(g, n, dy, N, K, M, tw);
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
  Node& n = node(g, out);
  n.i[0] = tw ? 1 : 0;
  // x and w; a bf16 product reads their roundings, or x's and the bits of w it keeps (p[1]).
  backward_reads(n, 3, false);
  if (g.precision == Precision::bf16) {
    const int64_t ldw = tw ? K : M;
    if (N <= 4 && !g.requires_grad(out)) {
      // Decoding: the matrix-vector products (and their split of the reduction) read the
      // weights' bf16 bits, half the bytes of float32, and sum as they would.
      const float* xr = rounded_value<float>(g, &Bf16State::x, x.id);
      gemv_bf16_parallel(tw, N, M, K, xr, K, bf16_bits(g, w), ldw, n.value.data, M,
                         /*overwrite=*/true, b);
      return out;
    }
    // A few rows with gradients take the float32 GEMM on bf16 values, whatever the path.
    const bool bits = isa_kernels().bf16.gemm != nullptr && N > 4;
    if (bits) {
      const uint16_t* xb = rounded_value<uint16_t>(g, &Bf16State::x, x.id);
      const uint16_t* wb = bf16_bits(g, w);
      gemm_bf16_parallel(false, tw, N, M, K, 1.0f, xb, K, wb, ldw, n.value.data, M,
                         /*overwrite=*/true, b);
      n.i[1] = 1;
      n.p[1] = const_cast<uint16_t*>(wb);
      backward_reads(n, 1, false, 1, 1);
    } else {
      const float* xr = rounded_value<float>(g, &Bf16State::x, x.id);
      gemm_acc_parallel(false, tw, N, M, K, 1.0f, xr, K, W.data, ldw, n.value.data, M,
                        /*overwrite=*/true, b, /*round_b=*/true);
      n.i[1] = 2;
      backward_reads(n, 3, false, 3);
    }
    return out;
  }
  // y (N,M) = b + x (N,K) . op(w) (K,M)
  gemm_acc_parallel(false, tw, N, M, K, 1.0f, X.data, K, W.data, tw ? K : M, n.value.data, M,
                    /*overwrite=*/true, b);
  return out;
}
}  // namespace

size_t param_copy_bytes(const Graph& g) {
  if (!g.op_state) return 0;
  size_t n = 0;
  for (const auto& [p, c] : static_cast<const Bf16State*>(g.op_state.get())->copies)
    n += c.data.size() * sizeof(uint16_t);
  return n;
}

size_t product_buffer_bytes(const Graph& g) {
  if (!g.op_state) return 0;
  const auto* s = static_cast<const Bf16State*>(g.op_state.get());
  return (s->x.size() + s->dy.size() + s->k.size() + s->v.size()) * sizeof(float);
}

namespace {
constexpr AlignedFloats Bf16State::*kSlots[] = {&Bf16State::x, &Bf16State::dy, &Bf16State::k,
                                                &Bf16State::v};
}

const float* kernels::bf16_rounded(Graph& g, Bf16Buffer slot, const Tensor& x) {
  return rounded_into<float>(g, kSlots[static_cast<int>(slot)], x);
}

const float* kernels::bf16_rounded(Graph& g, Bf16Buffer slot, int v) {
  return rounded_value<float>(g, kSlots[static_cast<int>(slot)], v);
}

kernels::RoundedReader kernels::rounded_reader(const Graph& g, int v) {
  const Node& n = node(g, v);
  if (n.held == Node::Held::bits) return {nullptr, n.bits, nullptr};
  if (g.precision != Precision::bf16 || n.bf16_exact) return {n.value.data, nullptr, nullptr};
  return {n.value.data, nullptr, isa_kernels().bf16.round};
}

Var matmul(Graph& g, Var a, Var b, bool transpose_b) {
  return linear_impl("matmul", "a", "b", g, a, b, Var{}, transpose_b);
}

Var linear(Graph& g, Var x, Var w, Var bias, bool transpose_w) {
  return linear_impl("linear", "x", "w", g, x, w, bias, transpose_w);
}

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
          float alpha, bool accumulate) {
  const int64_t m = transpose_a ? a.cols : a.rows, k = transpose_a ? a.rows : a.cols;
  const int64_t kb = transpose_b ? b.cols : b.rows, n = transpose_b ? b.rows : b.cols;
  auto shape = [](const Tensor& t, bool tr) {
    return "(" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + ")" + (tr ? "^T" : "");
  };
  if (k != kb || c.rows != m || c.cols != n || k <= 0)
    throw Error("gemm: shapes do not match: a " + shape(a, transpose_a) + " times b " +
                shape(b, transpose_b) + " into c " + shape(c, false));
  gemm_acc_parallel(transpose_a, transpose_b, m, n, k, alpha, a.data, a.cols, b.data, b.cols,
                    c.data, c.cols,
                    /*overwrite=*/!accumulate);
}

}  // namespace ablate
