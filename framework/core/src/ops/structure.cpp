// Structural ops: slice_cols (N,C) -> (N,W), embedding row lookup, sum -> (1,1).
#include <cstring>

#include "ablate/ops.hpp"
#include "../node.hpp"
#include "kernels.hpp"

namespace ablate {
namespace {
using namespace kernels;

// node: in = {x}; i[0] = start.
void slice_cols_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  const Tensor dy = n.grad;     // (N,W)
  Tensor dx = g.grad(n.in[0]);  // (N,C)
  const int64_t start = n.i[0], W = dy.cols;
  parallel_chunks(dy.rows, items_per_task(W), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* s = dy.row(r);
      float* d = dx.row(r) + start;
      for (int64_t c = 0; c < W; ++c) d[c] += s[c];
    }
  });
}

// node: in = {table}; i[0] = n; p[0] = ids (int32, n).
void embedding_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  const Tensor dy = n.grad;     // (n,C)
  Tensor dt = g.grad(n.in[0]);  // (R,C)
  const int32_t* ids = static_cast<const int32_t*>(n.p[0]);
  const int64_t count = n.i[0], C = dy.cols;
  // Repeated ids add up in row order; parallel over column blocks only.
  const int64_t block = count * C >= (int64_t{1} << 16) ? 64 : C;
  parallel_chunks(C, block, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < count; ++r) {
      const float* s = dy.row(r);
      float* d = dt.row(ids[r]);
      for (int64_t c = c0; c < c1; ++c) d[c] += s[c];
    }
  });
}

// node: in = {x}.
void sum_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  const float d = n.grad.data[0];
  float* dx = g.grad(n.in[0]).data;
  parallel_chunks(node(g, n.in[0]).value.numel(), items_per_task(1), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dx[i] += d;
  });
}
}  // namespace

Var slice_cols(Graph& g, Var x, int64_t start, int64_t width) {
  check_var("slice_cols", "x", g, x);
  const Tensor X = g.value(x);  // (N,C)
  if (start < 0 || width <= 0 || start + width > X.cols)
    throw Error("slice_cols: columns [" + std::to_string(start) + ", " +
                std::to_string(start + width) + ") are not inside x " + shape_str(X) +
                "; need 0 <= start, 0 < width, start + width <= " + std::to_string(X.cols));
  Var out = g.make(X.rows, width, &slice_cols_backward, {x}, "slice_cols");
  backward_reads(node(g, out), 0, false);
  Node& n = node(g, out);
  n.i[0] = start;
  const Tensor Y = n.value;  // (N,W)
  parallel_chunks(X.rows, items_per_task(width), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      std::memcpy(Y.row(r), X.row(r) + start, sizeof(float) * static_cast<size_t>(width));
  });
  return out;
}

Var embedding(Graph& g, Var table, const int32_t* ids, int64_t n) {
  check_var("embedding", "table", g, table);
  const Tensor Tb = g.value(table);  // (R,C)
  if (n < 0 || (n > 0 && !ids))
    throw Error("embedding: no ids given (n = " + std::to_string(n) + ")");
  for (int64_t r = 0; r < n; ++r)
    if (ids[r] < 0 || ids[r] >= Tb.rows)
      throw Error("embedding: id " + std::to_string(ids[r]) + " at position " + std::to_string(r) +
                  " is outside the table of " + std::to_string(Tb.rows) +
                  " rows; ids must lie in [0, " + std::to_string(Tb.rows) +
                  ") (is the vocabulary size right?)");
  Var out = g.make(n, Tb.cols, &embedding_backward, {table}, "embedding");
  backward_reads(node(g, out), 0, false);
  Node& nd = node(g, out);
  nd.i[0] = n;
  if (nd.requires_grad) {
    int32_t* saved = g.alloc_as<int32_t>(static_cast<size_t>(n));
    std::memcpy(saved, ids, sizeof(int32_t) * static_cast<size_t>(n));
    nd.p[0] = saved;
  }
  const Tensor Y = nd.value;  // (n,C)
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(Tb.cols);
  parallel_chunks(n, items_per_task(Tb.cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::memcpy(Y.row(r), Tb.row(ids[r]), row_bytes);
  });
  return out;
}

Var sum(Graph& g, Var x) {
  check_var("sum", "x", g, x);
  const Tensor X = g.value(x);
  Var out = g.make(1, 1, &sum_backward, {x}, "sum");
  backward_reads(node(g, out), 0, false);
  g.value(out).data[0] = static_cast<float>(sum_fixed(g, X.data, X.numel()));
  return out;
}

}  // namespace ablate
