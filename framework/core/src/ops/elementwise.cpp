// Elementwise ops: add and mul (with (1,C) row and (1,1) scalar broadcast), scale, the
// activations relu / gelu (tanh) / gelu_exact (erf) / silu / tanh, and inverted dropout.
// Activations evaluate through Eigen arrays, whose exp/tanh/erf/logistic are vectorised.
#include <unsupported/Eigen/SpecialFunctions>

#include <algorithm>
#include <type_traits>

#include "ablate/ops.hpp"
#include "../node.hpp"
#include "kernels.hpp"

namespace ablate {
namespace {
using namespace kernels;

// Rows per task for a row-wise loop over (N,C).
int64_t rows_chunk(int64_t cols, int64_t cost_per_elem) {
  return items_per_task(std::max<int64_t>(1, cols) * cost_per_elem);
}

// The gradient of node `input` (numel elements) gets v[i] (v an array) or v(i) (v a
// function of i) at each i: set when nothing has written it yet this backward (no zeroing
// pass first), added to otherwise. (A plain copy stays std::copy: as a loop of element
// assignments, seed000's residual adds took 0.17 ms of backward a step instead of 0.13.)
template <class V>
void set_or_add_grad(Graph& g, int input, int64_t numel, const V& v) {
  bool fresh;
  float* d = g.grad_unzeroed(input, fresh).data;
  parallel_chunks(numel, items_per_task(1), [&](int64_t i0, int64_t i1) {
    float* __restrict out = d;
    if constexpr (std::is_pointer_v<V>) {
      if (fresh) std::copy(v + i0, v + i1, out + i0);
      else
        for (int64_t i = i0; i < i1; ++i) out[i] += v[i];
    } else {
      if (fresh)
        for (int64_t i = i0; i < i1; ++i) out[i] = v(i);
      else
        for (int64_t i = i0; i < i1; ++i) out[i] += v(i);
    }
  });
}

constexpr int64_t kSpan = 256;  // elements per inner block (stack temporaries)

// Runs f(x, y, len) over [0,n) in parallel chunks of at most kSpan elements each call.
template <class F>
void for_spans(int64_t n, int64_t cost, const F& f) {
  parallel_chunks(n, round_up(items_per_task(cost), kSpan), [&](int64_t i0, int64_t i1) {
    for (int64_t s = i0; s < i1; s += kSpan) f(s, std::min(kSpan, i1 - s));
  });
}

// ---- add / mul --------------------------------------------------------------------

// Same shape, or b (1,C) broadcast over the rows of a (N,C). Returns true if broadcast.
bool check_binary(const char* op, Graph& g, Var a, Var b) {
  check_var(op, "a", g, a);
  check_var(op, "b", g, b);
  const Tensor& A = g.value(a);
  const Tensor& B = g.value(b);
  if (A.rows == B.rows && A.cols == B.cols) return false;
  if (B.rows == 1 && B.cols == A.cols) return true;
  shape_error(op, "shapes differ (b must have a's shape, or be (1, a.cols) to broadcast)", "a", A,
              "b", B);
}

// node: in = {a, b}; i[0] = broadcast.
void add_backward(Graph& g, int id) {
  Node& n = node(g, id);
  const Tensor dy = n.grad;  // (N,C)
  const int64_t N = dy.rows, C = dy.cols;
  const float* d = dy.data;
  if (g.requires_grad(n.in[0])) set_or_add_grad(g, n.in[0], N * C, d);
  if (g.requires_grad(n.in[1])) {
    if (n.i[0]) add_column_sums(d, N, C, C, g.grad(n.in[1]).data);  // (1,C)
    else set_or_add_grad(g, n.in[1], N * C, d);
  }
}

// node: in = {a, b}; i[0] = broadcast. A bf16 graph reads the inputs that are ops' values
// (activations: a gated FFN's gate and up projections) rounded to bf16, as a step keeps them
// (bits after the forward pass, read as they wait unless b is a broadcast row), and leaves
// (parameters, constants) as they are.
void mul_backward(Graph& g, int id) {
  Node& n = node(g, id);
  const Tensor dy = n.grad;  // (N,C)
  const int64_t N = dy.rows, C = dy.cols;
  auto leaf = [&](int k) { return node(g, n.in[k]).value_floats == 0; };
  if (!n.i[0]) {
    // d in[k] (+)= dy * the other input's value, a span at a time
    auto grad = [&](int k, const RoundedReader& other) {
      if (!g.requires_grad(n.in[k])) return;
      bool fresh;
      float* d = g.grad_unzeroed(n.in[k], fresh).data;
      for_spans(N * C, 1, [&](int64_t i, int64_t w) {
        float buf[kSpan];
        const float* __restrict o = other.at(i, w, buf);
        const float* __restrict dyi = dy.data + i;
        float* __restrict di = d + i;
        if (fresh)
          for (int64_t j = 0; j < w; ++j) di[j] = dyi[j] * o[j];
        else
          for (int64_t j = 0; j < w; ++j) di[j] += dyi[j] * o[j];
      });
    };
    auto reader = [&](int k) {
      return leaf(k) ? RoundedReader{node(g, n.in[k]).value.data} : rounded_reader(g, n.in[k]);
    };
    const RoundedReader a = reader(0), b = reader(1);
    grad(0, b);
    grad(1, a);
    return;
  }
  // b (1,C): da = dy * b row by row, db = dy's column sums weighted by a. The roundings go in
  // the product buffers x and dy, which no product holds while mul's backward runs.
  auto read = [&](int k, Bf16Buffer slot) {
    Tensor t = node(g, n.in[k]).value;
    if (g.precision == Precision::bf16 && !leaf(k))
      t.data = const_cast<float*>(bf16_rounded(g, slot, n.in[k]));
    return t;
  };
  const Tensor a = read(0, Bf16Buffer::x);   // (N,C)
  const Tensor b = read(1, Bf16Buffer::dy);  // (1,C)
  if (g.requires_grad(n.in[0])) {
    bool fresh;
    float* da = g.grad_unzeroed(n.in[0], fresh).data;
    parallel_chunks(N, rows_chunk(C, 1), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* dyr = dy.data + r * C;
        float* dar = da + r * C;
        if (fresh)
          for (int64_t c = 0; c < C; ++c) dar[c] = dyr[c] * b.data[c];
        else
          for (int64_t c = 0; c < C; ++c) dar[c] += dyr[c] * b.data[c];
      }
    });
  }
  if (g.requires_grad(n.in[1])) add_column_sums(dy.data, N, C, C, g.grad(n.in[1]).data, a.data);
}

template <class F>
Var binary(const char* op, Graph& g, Var a, Var b, BackwardFn bw, F f) {
  const bool bc = check_binary(op, g, a, b);
  const Tensor A = g.value(a);  // (N,C)
  const Tensor B = g.value(b);  // (N,C) or (1,C)
  Var out = g.make(A.rows, A.cols, bw, {a, b}, op);
  Node& n = node(g, out);
  n.i[0] = bc ? 1 : 0;
  if (bw == &add_backward) backward_reads(n, 0, false);
  else backward_reads(n, 3, false, 3, bc ? 0 : 3);  // mul's reads both (their bits, unbroadcast)
  const int64_t C = A.cols;
  float* y = n.value.data;
  parallel_chunks(A.rows, rows_chunk(C, 1), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* ar = A.data + r * C;
      const float* br = B.data + (bc ? 0 : r * C);
      float* yr = y + r * C;
      for (int64_t c = 0; c < C; ++c) yr[c] = f(ar[c], br[c]);
    }
  });
  return out;
}

// ---- scalar broadcast: a (N,C) op s (1,1) ------------------------------------------

bool is_scalar_broadcast(Graph& g, Var a, Var b) {
  if (!a.valid() || !b.valid() || a.id >= static_cast<int>(g.num_nodes()) ||
      b.id >= static_cast<int>(g.num_nodes()))
    return false;
  const Tensor& A = g.value(a);
  const Tensor& B = g.value(b);
  return B.rows == 1 && B.cols == 1 && A.numel() > 1;
}

// sum_i dy[i] * (x ? x[i] : 1), in double over chunks fixed by n (thread-independent).
float fixed_chunk_sum(Graph& g, const float* dy, const float* x, int64_t n) {
  constexpr int64_t kChunk = 4096;
  const int64_t parts = (n + kChunk - 1) / kChunk;
  double* partial = g.alloc_as<double>(static_cast<size_t>(parts));
  parallel_chunks(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      double acc = 0;
      for (int64_t i = p * kChunk, e = std::min(n, (p + 1) * kChunk); i < e; ++i)
        acc += static_cast<double>(dy[i]) * (x ? x[i] : 1.0f);
      partial[p] = acc;
    }
  });
  double total = 0;
  for (int64_t p = 0; p < parts; ++p) total += partial[p];
  return static_cast<float>(total);
}

// node: in = {a, s}; i[0] = 1 for mul, 0 for add.
void scalar_backward(Graph& g, int id) {
  Node& n = node(g, id);
  const bool is_mul = n.i[0] != 0;
  const float* dy = n.grad.data;
  const int64_t N = n.grad.numel();
  const float* a = node(g, n.in[0]).value.data;
  const float s = node(g, n.in[1]).value.data[0];
  if (g.requires_grad(n.in[0])) {
    if (is_mul) set_or_add_grad(g, n.in[0], N, [s, dy](int64_t i) { return s * dy[i]; });
    else set_or_add_grad(g, n.in[0], N, dy);
  }
  if (g.requires_grad(n.in[1]))
    g.grad(n.in[1]).data[0] += fixed_chunk_sum(g, dy, is_mul ? a : nullptr, N);
}

Var scalar_binary(const char* op, Graph& g, Var a, Var b, bool is_mul) {
  const Tensor A = g.value(a);
  const float s = g.value(b).data[0];
  Var out = g.make(A.rows, A.cols, &scalar_backward, {a, b}, op);
  Node& n = node(g, out);
  n.i[0] = is_mul ? 1 : 0;
  float* y = n.value.data;
  parallel_chunks(A.numel(), items_per_task(1), [&](int64_t i0, int64_t i1) {
    if (is_mul)
      for (int64_t i = i0; i < i1; ++i) y[i] = A.data[i] * s;
    else
      for (int64_t i = i0; i < i1; ++i) y[i] = A.data[i] + s;
  });
  return out;
}

// ---- scale ------------------------------------------------------------------------

// node: in = {x}; f[0] = s.
void scale_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  const float s = n.f[0], *d = n.grad.data;
  set_or_add_grad(g, n.in[0], n.grad.numel(), [s, d](int64_t i) { return s * d[i]; });
}

// ---- activations ------------------------------------------------------------------
// Each is y = f(x) elementwise; backward dx += f'(x) dy, reading x from the input node (ReLU
// reads y, whose sign is x's: x need not be kept when y is). In a bf16 graph the derivative is
// taken at the bf16 rounding of what it reads, which a bf16 step keeps as bf16 bits after the
// forward pass (graph.hpp, "Values' lifetimes").

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

struct Relu {
  static constexpr bool kReadsOutput = true;  // bwd reads y: y > 0 exactly where x > 0
  static void fwd(const float* x, float* y, int64_t w) {
    for (int64_t i = 0; i < w; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
  static void bwd(const float* x, const float* dy, float* dx, int64_t w) {
    for (int64_t i = 0; i < w; ++i) dx[i] += x[i] > 0.0f ? dy[i] : 0.0f;
  }
  static constexpr int64_t kCost = 1;
};

struct Gelu {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  static constexpr bool kReadsOutput = false;
  static void fwd(const float* xp, float* yp, int64_t w) {
    ConstArrMap x(xp, w);
    ArrMap(yp, w) = 0.5f * x * (1.0f + (kGeluC * (x + kGeluA * x.cube())).tanh());
  }
  static void bwd(const float* xp, const float* dyp, float* dxp, int64_t w) {
    float tb[kSpan];
    ConstArrMap x(xp, w);
    ArrMap t(tb, w);
    t = (kGeluC * (x + kGeluA * x.cube())).tanh();
    ArrMap(dxp, w) +=
        ConstArrMap(dyp, w) * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t.square()) * kGeluC *
                                                       (1.0f + 3.0f * kGeluA * x.square()));
  }
  static constexpr int64_t kCost = 30;
};

struct GeluExact {  // x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
  static constexpr bool kReadsOutput = false;
  static void fwd(const float* xp, float* yp, int64_t w) {
    ConstArrMap x(xp, w);
    ArrMap(yp, w) = 0.5f * x * (1.0f + (kInvSqrt2 * x).erf());
  }
  static void bwd(const float* xp, const float* dyp, float* dxp, int64_t w) {
    ConstArrMap x(xp, w);
    ArrMap(dxp, w) += ConstArrMap(dyp, w) * (0.5f * (1.0f + (kInvSqrt2 * x).erf()) +
                                             kInvSqrt2Pi * x * (-0.5f * x.square()).exp());
  }
  static constexpr int64_t kCost = 40;
};

struct Silu {  // x sigmoid(x)
  static constexpr bool kReadsOutput = false;
  static void fwd(const float* xp, float* yp, int64_t w) {
    ConstArrMap x(xp, w);
    ArrMap(yp, w) = x * x.logistic();
  }
  static void bwd(const float* xp, const float* dyp, float* dxp, int64_t w) {
    float sb[kSpan];
    ConstArrMap x(xp, w);
    ArrMap s(sb, w);
    s = x.logistic();
    ArrMap(dxp, w) += ConstArrMap(dyp, w) * s * (1.0f + x * (1.0f - s));
  }
  static constexpr int64_t kCost = 20;
};

struct Tanh {
  static constexpr bool kReadsOutput = false;
  static void fwd(const float* xp, float* yp, int64_t w) {
    ArrMap(yp, w) = ConstArrMap(xp, w).tanh();
  }
  static void bwd(const float* xp, const float* dyp, float* dxp, int64_t w) {
    float tb[kSpan];
    ArrMap t(tb, w);
    t = ConstArrMap(xp, w).tanh();
    ArrMap(dxp, w) += ConstArrMap(dyp, w) * (1.0f - t.square());
  }
  static constexpr int64_t kCost = 20;
};

template <class A>
void activation_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  const RoundedReader x = rounded_reader(g, A::kReadsOutput ? id : n.in[0]);
  const float* dy = n.grad.data;
  bool fresh;
  float* dx = g.grad_unzeroed(n.in[0], fresh).data;
  for_spans(n.grad.numel(), A::kCost, [&](int64_t i, int64_t w) {
    if (fresh) std::fill(dx + i, dx + i + w, 0.0f);
    float xr[kSpan];
    A::bwd(x.at(i, w, xr), dy + i, dx + i, w);
  });
}

template <class A>
Var activation(const char* op, Graph& g, Var x) {
  check_var(op, "x", g, x);
  const Tensor X = g.value(x);
  Var out = g.make(X.rows, X.cols, &activation_backward<A>, {x}, op);
  if (A::kReadsOutput) backward_reads(node(g, out), 0, true, kReadsOwn, kReadsOwn);
  else backward_reads(node(g, out), 1, false, 1, 1);
  float* y = g.value(out).data;
  for_spans(X.numel(), A::kCost, [&](int64_t i, int64_t w) { A::fwd(X.data + i, y + i, w); });
  return out;
}

// ---- dropout ----------------------------------------------------------------------

uint64_t dropout_seed(const Graph& g) {
  // Mix the step in so that every step draws a fresh mask from the same seed.
  return g.seed ^ (0x9E3779B97F4A7C15ull * (g.step + 1)) ^ 0xD1B54A32D192ED03ull;
}

// y = keep ? s x : 0 over [i0, i1), recording keep if asked. Plain locals and restrict
// pointers so that the hash vectorises (no aliasing through the mask bytes).
void dropout_span(const float* __restrict x, float* __restrict y, uint8_t* __restrict keep,
                  int64_t i0, int64_t i1, uint64_t seed, uint64_t node_id, uint64_t offset, float p,
                  float s) {
  if (keep) {
    for (int64_t i = i0; i < i1; ++i) {
      const bool k = hash_uniform_inline(seed, node_id, offset + static_cast<uint64_t>(i)) >= p;
      keep[i] = k ? 1 : 0;
      y[i] = k ? s * x[i] : 0.0f;
    }
  } else {
    for (int64_t i = i0; i < i1; ++i)
      y[i] = hash_uniform_inline(seed, node_id, offset + static_cast<uint64_t>(i)) >= p ? s * x[i]
                                                                                        : 0.0f;
  }
}

void dropout_grad_span(const float* __restrict dy, const uint8_t* __restrict keep,
                       float* __restrict dx, int64_t i0, int64_t i1, float s) {
  for (int64_t i = i0; i < i1; ++i) dx[i] += keep[i] ? s * dy[i] : 0.0f;
}

// node: in = {x}; f[0] = 1/(1-p); p[0] = keep mask (uint8, N*C).
void dropout_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  const float* dy = n.grad.data;
  const uint8_t* keep = static_cast<const uint8_t*>(n.p[0]);
  const float s = n.f[0];
  float* dx = g.grad(n.in[0]).data;
  parallel_chunks(n.grad.numel(), items_per_task(1),
                  [&](int64_t i0, int64_t i1) { dropout_grad_span(dy, keep, dx, i0, i1, s); });
}
}  // namespace

Var add(Graph& g, Var a, Var b) {
  if (is_scalar_broadcast(g, a, b)) return scalar_binary("add", g, a, b, false);
  return binary("add", g, a, b, &add_backward, [](float x, float y) { return x + y; });
}

Var mul(Graph& g, Var a, Var b) {
  if (is_scalar_broadcast(g, a, b)) return scalar_binary("mul", g, a, b, true);
  return binary("mul", g, a, b, &mul_backward, [](float x, float y) { return x * y; });
}

Var scale(Graph& g, Var a, float s) {
  check_var("scale", "a", g, a);
  const Tensor A = g.value(a);
  Var out = g.make(A.rows, A.cols, &scale_backward, {a}, "scale");
  Node& n = node(g, out);
  backward_reads(n, 0, false);
  n.f[0] = s;
  float* y = n.value.data;
  parallel_chunks(A.numel(), items_per_task(1), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = s * A.data[i];
  });
  return out;
}

Var relu(Graph& g, Var x) { return activation<Relu>("relu", g, x); }
Var gelu(Graph& g, Var x) { return activation<Gelu>("gelu", g, x); }
Var gelu_exact(Graph& g, Var x) { return activation<GeluExact>("gelu_exact", g, x); }
Var silu(Graph& g, Var x) { return activation<Silu>("silu", g, x); }
Var tanh(Graph& g, Var x) { return activation<Tanh>("tanh", g, x); }

Var dropout(Graph& g, Var x, float p) {
  check_var("dropout", "x", g, x);
  if (!(p >= 0.0f && p < 1.0f))
    throw Error("dropout: probability " + std::to_string(p) + " is outside [0, 1)");
  if (!g.training || p == 0.0f) return x;
  const Tensor X = g.value(x);
  Var out = g.make(X.rows, X.cols, &dropout_backward, {x}, "dropout");
  Node& n = node(g, out);
  backward_reads(n, 0, false);  // the mask
  const float s = 1.0f / (1.0f - p);
  const uint64_t seed = dropout_seed(g);
  const uint64_t node_id = static_cast<uint64_t>(out.id);
  // A slice of a larger batch (data-parallel ranks) draws the mask its rows would get in
  // the whole batch: every row-major activation here holds numel / rows values per sequence.
  const uint64_t offset =
      g.batch_rows > 0 ? static_cast<uint64_t>(X.numel() / g.batch_rows * g.batch_offset) : 0;
  uint8_t* keep = n.requires_grad ? g.alloc_as<uint8_t>(static_cast<size_t>(X.numel())) : nullptr;
  n.f[0] = s;
  n.p[0] = keep;
  float* y = n.value.data;
  parallel_chunks(X.numel(), items_per_task(8), [&](int64_t i0, int64_t i1) {
    dropout_span(X.data, y, keep, i0, i1, seed, node_id, offset, p, s);
  });
  return out;
}

}  // namespace ablate
