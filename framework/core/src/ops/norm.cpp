// Row normalisations: layernorm (Ba et al. 2016), rmsnorm (Zhang & Sennrich 2019) and
// softmax, on x (N,C) with optional gain/bias (1,C); the per-head forms normalise each group
// of G consecutive columns, which in row-major memory are the rows of x seen as (N*C/G, G).
// Statistics per row in float; the variance is computed from centred values (no E[x^2]-E[x]^2
// cancellation).
#include <cmath>

#include "ablate/ops.hpp"
#include "../node.hpp"
#include "kernels.hpp"

namespace ablate {
namespace {
using namespace kernels;

using Row = Eigen::Map<const Eigen::Array<float, 1, Eigen::Dynamic>>;
using RowMut = Eigen::Map<Eigen::Array<float, 1, Eigen::Dynamic>>;

// group == x.cols for the plain ops (whose messages say x.cols).
void check_row_param(const char* op, const char* name, Graph& g, Var p, const Tensor& x,
                     int64_t group) {
  if (!p.valid()) return;
  check_var(op, name, g, p);
  const Tensor& P = g.value(p);
  if (P.rows != 1 || P.cols != group)
    shape_error(op,
                std::string(name) + (group == x.cols
                                         ? " must be (1, x.cols)"
                                         : " must be (1, group), group = " + std::to_string(group)),
                name, P, "x", x);
}

// Throws unless group divides x's columns.
void check_group(const char* op, const Tensor& x, int64_t group) {
  if (group <= 0 || x.cols % group != 0)
    throw Error(std::string(op) + ": group " + std::to_string(group) +
                " does not divide the columns of x " + shape_str(x) +
                "; give the head size, a divisor of " + std::to_string(x.cols));
}

// A (1,C) row of ones or zeros from the arena, standing in for a missing gain or bias.
const float* filled_row(Graph& g, int64_t C, float v) {
  float* r = g.alloc(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) r[c] = v;
  return r;
}

// t (R, K) seen as rows of `cols` columns (cols divides K): the same memory.
Tensor as_rows(const Tensor& t, int64_t cols) { return Tensor{t.data, t.numel() / cols, cols}; }

// ---- layernorm and rmsnorm backward ---------------------------------------------------

// Backward of a row normalisation y = xhat * gain (+ bias), xhat = (x - mean) * rstd, for
// layernorm (mean given) and rmsnorm (mean null: xhat = x * rstd). One pass over the rows:
// dx, and per fixed chunk of rows the partial sums of dgain (dy * xhat) and dbias (dy),
// added in chunk order after (chunks depend only on N: the same sums on any thread count).
// node: in = {x, gain|-1, bias|-1 (layernorm)}; p[0] = mean (N) or null, p[1] = rstd (N),
// p[2] = gain values or a row of ones (C); i[0] = C, the group size (x.cols unless grouped):
// rows are the N = numel / C groups.
void row_norm_backward(Graph& g, int id) {
  Node& n = node(g, id);
  const int64_t C = n.i[0];
  const Tensor x = as_rows(node(g, n.in[0]).value, C);  // (N,C)
  const Tensor dy = as_rows(n.grad, C);                 // (N,C)
  const float* mean = static_cast<const float*>(n.p[0]);
  const float* rstd = static_cast<const float*>(n.p[1]);
  const Row gain(static_cast<const float*>(n.p[2]), C);
  const int64_t N = x.rows;
  bool fresh = false;  // dx not yet written this backward: set it rather than add to zeros
  float* dx = g.requires_grad(n.in[0]) ? g.grad_unzeroed(n.in[0], fresh).data : nullptr;
  float* dgain = g.requires_grad(n.in[1]) ? g.grad(n.in[1]).data : nullptr;
  float* dbias = g.requires_grad(n.in[2]) ? g.grad(n.in[2]).data : nullptr;
  if (!dx && !dgain && !dbias) return;
  const int64_t chunk = items_per_task(8 * C), nchunks = ceil_div(N, chunk);
  float* partial = (dgain || dbias) ? g.alloc(static_cast<size_t>(2 * nchunks * C)) : nullptr;
  // A bf16 graph reads x rounded to bf16 (kept as bf16 bits after the forward pass).
  const RoundedReader xv = rounded_reader(g, n.in[0]);
  parallel_chunks(N, chunk, [&](int64_t r0, int64_t r1) {
    float* rounded = thread_scratch(kSlotMisc, static_cast<size_t>(C));
    RowMut pg(partial ? partial + 2 * (r0 / chunk) * C : nullptr, partial ? C : 0);
    RowMut pb(partial ? partial + (2 * (r0 / chunk) + 1) * C : nullptr, partial ? C : 0);
    if (partial) {
      pg.setZero();
      pb.setZero();
    }
    for (int64_t r = r0; r < r1; ++r) {
      const Row xr(xv.at(r * C, C, rounded), C), dyr(dy.row(r), C);
      const float m = mean ? mean[r] : 0.0f, s = rstd[r];
      const auto xhat = (xr - m) * s;
      if (partial) {
        pg += dyr * xhat;
        pb += dyr;
      }
      if (dx) {
        // dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dy*gain;
        // without centring (rmsnorm) the mean(dnorm) term is absent.
        const float m1 = mean ? (dyr * gain).sum() / static_cast<float>(C) : 0.0f;
        const float m2 = (dyr * gain * xhat).sum() / static_cast<float>(C);
        if (fresh) RowMut(dx + r * C, C) = s * (dyr * gain - m1 - xhat * m2);
        else RowMut(dx + r * C, C) += s * (dyr * gain - m1 - xhat * m2);
      }
    }
  });
  for (int64_t c = 0; c < nchunks && partial; ++c) {
    if (dgain) RowMut(dgain, C) += Row(partial + 2 * c * C, C);
    if (dbias) RowMut(dbias, C) += Row(partial + (2 * c + 1) * C, C);
  }
}

// ---- softmax ------------------------------------------------------------------------

// node: in = {x}; the output y is the node's own value.
void softmax_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  const Tensor dy = n.grad, y = n.value;  // (N,C)
  Tensor dx = g.grad(n.in[0]);
  const int64_t C = y.cols;
  parallel_chunks(y.rows, items_per_task(4 * C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const Row yr(y.row(r), C), dyr(dy.row(r), C);
      const float d = (dyr * yr).sum();
      RowMut(dx.row(r), C) += yr * (dyr - d);
    }
  });
}
}  // namespace

namespace {
Var layernorm_impl(const char* op, Graph& g, Var x, int64_t group, Var gain, Var bias, float eps) {
  check_var(op, "x", g, x);
  const Tensor XN = g.value(x);  // (rows, H*C)
  check_group(op, XN, group);
  check_row_param(op, "gain", g, gain, XN, group);
  check_row_param(op, "bias", g, bias, XN, group);
  const Tensor X = as_rows(XN, group);  // (N,C)
  const int64_t N = X.rows, C = X.cols;
  Var out = g.make(XN.rows, XN.cols, &row_norm_backward, {x, gain, bias}, op);
  Node& n = node(g, out);
  backward_reads(n, 3, false, 1, 1);  // x (rounded in a bf16 graph) and the gain (p[2])
  const bool save = n.requires_grad;
  const float* gp = gain.valid() ? g.value(gain).data : filled_row(g, C, 1.0f);
  const float* bp = bias.valid() ? g.value(bias).data : filled_row(g, C, 0.0f);
  float* mean = save ? g.alloc(static_cast<size_t>(N)) : nullptr;
  float* rstd = save ? g.alloc(static_cast<size_t>(N)) : nullptr;
  n.f[0] = eps;
  n.i[0] = C;
  n.p[0] = mean;
  n.p[1] = rstd;
  n.p[2] = const_cast<float*>(gp);
  const Tensor Y = as_rows(n.value, C);
  const Row gr(gp, C), br(bp, C);
  parallel_chunks(N, items_per_task(6 * C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const Row xr(X.row(r), C);
      const float m = xr.sum() / static_cast<float>(C);
      const float var = (xr - m).square().sum() / static_cast<float>(C);
      const float s = 1.0f / std::sqrt(var + eps);
      if (save) {
        mean[r] = m;
        rstd[r] = s;
      }
      RowMut(Y.row(r), C) = (xr - m) * s * gr + br;
    }
  });
  return out;
}

Var rmsnorm_impl(const char* op, Graph& g, Var x, int64_t group, Var gain, float eps) {
  check_var(op, "x", g, x);
  const Tensor XN = g.value(x);  // (rows, H*C)
  check_group(op, XN, group);
  check_row_param(op, "gain", g, gain, XN, group);
  const Tensor X = as_rows(XN, group);  // (N,C)
  const int64_t N = X.rows, C = X.cols;
  Var out = g.make(XN.rows, XN.cols, &row_norm_backward, {x, gain}, op);
  Node& n = node(g, out);
  backward_reads(n, 3, false, 1, 1);  // x (rounded in a bf16 graph) and the gain (p[2])
  const bool save = n.requires_grad;
  const float* gp = gain.valid() ? g.value(gain).data : filled_row(g, C, 1.0f);
  float* rstd = save ? g.alloc(static_cast<size_t>(N)) : nullptr;
  n.f[0] = eps;
  n.i[0] = C;
  n.p[1] = rstd;
  n.p[2] = const_cast<float*>(gp);
  const Tensor Y = as_rows(n.value, C);
  const Row gr(gp, C);
  parallel_chunks(N, items_per_task(4 * C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const Row xr(X.row(r), C);
      const float s = 1.0f / std::sqrt(xr.square().sum() / static_cast<float>(C) + eps);
      if (save) rstd[r] = s;
      RowMut(Y.row(r), C) = xr * s * gr;
    }
  });
  return out;
}

// x's columns, or 0 when x is not a node (its check then names it).
int64_t cols_of(Graph& g, Var x) {
  return x.valid() && static_cast<size_t>(x.id) < g.num_nodes() ? g.value(x).cols : 0;
}
}  // namespace

Var layernorm(Graph& g, Var x, Var gain, Var bias, float eps) {
  return layernorm_impl("layernorm", g, x, cols_of(g, x), gain, bias, eps);
}

Var rmsnorm(Graph& g, Var x, Var gain, float eps) {
  return rmsnorm_impl("rmsnorm", g, x, cols_of(g, x), gain, eps);
}

Var layernorm_groups(Graph& g, Var x, int64_t group, Var gain, Var bias, float eps) {
  return layernorm_impl("layernorm_groups", g, x, group, gain, bias, eps);
}

Var rmsnorm_groups(Graph& g, Var x, int64_t group, Var gain, float eps) {
  return rmsnorm_impl("rmsnorm_groups", g, x, group, gain, eps);
}

Var softmax(Graph& g, Var x) {
  check_var("softmax", "x", g, x);
  const Tensor X = g.value(x);  // (N,C)
  const int64_t C = X.cols;
  Var out = g.make(X.rows, C, &softmax_backward, {x}, "softmax");
  backward_reads(node(g, out), 0, true);
  const Tensor Y = g.value(out);
  parallel_chunks(X.rows, items_per_task(8 * C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const Row xr(X.row(r), C);
      RowMut(Y.row(r), C) = xr - xr.maxCoeff();
    }
    // One exp over the whole contiguous chunk: short rows would otherwise spend most of
    // their time in Eigen's scalar head and tail.
    ArrMap chunk(Y.row(r0), (r1 - r0) * C);
    chunk = chunk.exp();
    for (int64_t r = r0; r < r1; ++r) {
      RowMut yr(Y.row(r), C);
      yr *= 1.0f / yr.sum();
    }
  });
  return out;
}

}  // namespace ablate
