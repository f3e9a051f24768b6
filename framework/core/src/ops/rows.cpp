// Row ops of a sparse mixture of experts: gather_rows and its transpose scatter_add_rows
// (dispatch tokens to experts and combine them back), scale_rows (outputs times routing
// weights), reshape, and top_k (the router's choice). Sums over repeated indices run in
// index order on column blocks fixed by the shapes, so results do not depend on threads.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "ablate/ops.hpp"
#include "../node.hpp"
#include "kernels.hpp"

namespace ablate {
namespace {
using namespace kernels;

// Columns per task of a loop that visits every one of `count` rows for its columns (a
// scatter-add, which must add repeated indices in order): whole rows when small.
int64_t column_block(int64_t count, int64_t cols) {
  return count * cols >= (int64_t{1} << 16) ? 64 : cols;
}

// Throws unless idx[0..n) lie in [0, limit), naming the op, the first bad entry and what
// `limit` counts.
void check_indices(const char* op, const int32_t* idx, int64_t n, int64_t limit,
                   const std::string& what) {
  if (n < 0) throw Error(std::string(op) + ": " + std::to_string(n) + " indices; give n >= 0");
  if (n > 0 && !idx)
    throw Error(std::string(op) + ": " + std::to_string(n) +
                " indices without data; give their array (or n = 0)");
  for (int64_t r = 0; r < n; ++r)
    if (idx[r] < 0 || idx[r] >= limit)
      throw Error(std::string(op) + ": index " + std::to_string(idx[r]) + " at position " +
                  std::to_string(r) + " is outside " + what + "; indices must lie in [0, " +
                  std::to_string(limit) + ")");
}

int32_t* copy_indices(Graph& g, const int32_t* idx, int64_t n) {
  int32_t* saved = g.alloc_as<int32_t>(static_cast<size_t>(n));
  if (n > 0) std::memcpy(saved, idx, sizeof(int32_t) * static_cast<size_t>(n));
  return saved;
}

// dst (n_rows, D) row idx[r] += src row r for r in [0, count), in r order per column block.
// With `zero`, dst is first set to 0 (each block its own columns).
void scatter_add(const Tensor& src, const int32_t* idx, const Tensor& dst, bool zero) {
  const int64_t count = src.rows, D = dst.cols;
  parallel_chunks(D, column_block(count, D), [&](int64_t c0, int64_t c1) {
    if (zero)
      for (int64_t r = 0; r < dst.rows; ++r)
        std::memset(dst.row(r) + c0, 0, sizeof(float) * static_cast<size_t>(c1 - c0));
    for (int64_t r = 0; r < count; ++r) {
      const float* s = src.row(r);
      float* d = dst.row(idx[r]);
      for (int64_t c = c0; c < c1; ++c) d[c] += s[c];
    }
  });
}

// dst row r (+)= src row idx[r] for r in [0, dst.rows).
void gather(const Tensor& src, const int32_t* idx, const Tensor& dst, bool add) {
  const int64_t D = dst.cols;
  parallel_chunks(dst.rows, items_per_task(D), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* s = src.row(idx[r]);
      float* d = dst.row(r);
      if (add)
        for (int64_t c = 0; c < D; ++c) d[c] += s[c];
      else std::memcpy(d, s, sizeof(float) * static_cast<size_t>(D));
    }
  });
}

// node: in = {x}; p[0] = idx (int32, value.rows).
void gather_rows_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  scatter_add(n.grad, static_cast<const int32_t*>(n.p[0]), g.grad(n.in[0]), false);
}

// node: in = {y}; p[0] = idx (int32, y.rows).
void scatter_add_rows_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  gather(n.grad, static_cast<const int32_t*>(n.p[0]), g.grad(n.in[0]), true);
}

// node: in = {x, s}.
void scale_rows_backward(Graph& g, int id) {
  Node& n = node(g, id);
  const Tensor dy = n.grad;
  const Tensor x = node(g, n.in[0]).value;
  const float* s = node(g, n.in[1]).value.data;
  float* dx = g.requires_grad(n.in[0]) ? g.grad(n.in[0]).data : nullptr;
  float* ds = g.requires_grad(n.in[1]) ? g.grad(n.in[1]).data : nullptr;
  const int64_t D = x.cols;
  parallel_chunks(x.rows, items_per_task(3 * D), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* dyr = dy.row(r);
      if (dx) {
        float* d = dx + r * D;
        for (int64_t c = 0; c < D; ++c) d[c] += s[r] * dyr[c];
      }
      if (ds) {
        const float* xr = x.row(r);
        float acc = 0.0f;
        for (int64_t c = 0; c < D; ++c) acc += dyr[c] * xr[c];
        ds[r] += acc;
      }
    }
  });
}

// node: in = {x} (same numel).
void reshape_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  const float* dy = n.grad.data;
  float* dx = g.grad(n.in[0]).data;
  parallel_chunks(n.grad.numel(), items_per_task(1), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dx[i] += dy[i];
  });
}

// node: in = {x}; i[0] = k; p[0] = indices (int32, N*k). Indices of a row are distinct.
void top_k_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  const Tensor dy = n.grad;  // (N,k)
  Tensor dx = g.grad(n.in[0]);
  const int32_t* idx = static_cast<const int32_t*>(n.p[0]);
  const int64_t k = n.i[0];
  parallel_chunks(dy.rows, items_per_task(k), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < k; ++j) dx.row(r)[idx[r * k + j]] += dy.row(r)[j];
  });
}
}  // namespace

Var gather_rows(Graph& g, Var x, const int32_t* idx, int64_t m) {
  check_var("gather_rows", "x", g, x);
  const Tensor X = g.value(x);  // (N,D)
  check_indices("gather_rows", idx, m, X.rows,
                "the " + std::to_string(X.rows) + " rows of x " + shape_str(X));
  Var out = g.make(m, X.cols, &gather_rows_backward, {x}, "gather_rows");
  backward_reads(node(g, out), 0, false);
  Node& n = node(g, out);
  if (n.requires_grad) n.p[0] = copy_indices(g, idx, m);
  gather(X, idx, n.value, false);
  return out;
}

Var scatter_add_rows(Graph& g, Var y, const int32_t* idx, int64_t n_rows) {
  check_var("scatter_add_rows", "y", g, y);
  const Tensor Y = g.value(y);  // (M,D)
  if (n_rows <= 0)
    throw Error("scatter_add_rows: n_rows = " + std::to_string(n_rows) +
                "; the output needs at least 1 row");
  check_indices("scatter_add_rows", idx, Y.rows, n_rows,
                "the " + std::to_string(n_rows) + " rows of the output (n_rows)");
  Var out = g.make(n_rows, Y.cols, &scatter_add_rows_backward, {y}, "scatter_add_rows");
  backward_reads(node(g, out), 0, false);
  Node& n = node(g, out);
  if (n.requires_grad) n.p[0] = copy_indices(g, idx, Y.rows);
  scatter_add(Y, idx, n.value, true);
  return out;
}

Var scale_rows(Graph& g, Var x, Var s) {
  check_var("scale_rows", "x", g, x);
  check_var("scale_rows", "s", g, s);
  const Tensor X = g.value(x), S = g.value(s);
  if (S.rows != X.rows || S.cols != 1)
    shape_error("scale_rows", "s must be (x.rows, 1)", "s", S, "x", X);
  Var out = g.make(X.rows, X.cols, &scale_rows_backward, {x, s}, "scale_rows");
  backward_reads(node(g, out), 3, false);
  const Tensor Yt = g.value(out);
  const int64_t D = X.cols;
  parallel_chunks(X.rows, items_per_task(D), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = X.row(r);
      float* yr = Yt.row(r);
      const float sr = S.data[r];
      for (int64_t c = 0; c < D; ++c) yr[c] = sr * xr[c];
    }
  });
  return out;
}

Var reshape(Graph& g, Var x, int64_t rows, int64_t cols) {
  check_var("reshape", "x", g, x);
  const Tensor X = g.value(x);
  // rows * cols compared without overflow: cols divides numel and the quotient is rows.
  if (rows <= 0 || cols <= 0 || X.numel() % cols != 0 || X.numel() / cols != rows)
    throw Error("reshape: x " + shape_str(X) + " has " + std::to_string(X.numel()) +
                " values, which do not fill (" + std::to_string(rows) + ", " +
                std::to_string(cols) +
                "); give positive rows and cols with rows * cols = " + std::to_string(X.numel()));
  Var out = g.make(rows, cols, &reshape_backward, {x}, "reshape");
  backward_reads(node(g, out), 0, false);
  float* y = g.value(out).data;
  parallel_chunks(X.numel(), items_per_task(1), [&](int64_t i0, int64_t i1) {
    std::memcpy(y + i0, X.data + i0, sizeof(float) * static_cast<size_t>(i1 - i0));
  });
  return out;
}

TopK top_k(Graph& g, Var x, int64_t k) {
  check_var("top_k", "x", g, x);
  const Tensor X = g.value(x);  // (N,E)
  const int64_t N = X.rows, E = X.cols;
  if (k < 1 || k > E)
    throw Error("top_k: k = " + std::to_string(k) + " but x " + shape_str(X) + " has " +
                std::to_string(E) + " columns; k must lie in [1, " + std::to_string(E) + "]");
  if (E > INT32_MAX)
    throw Error("top_k: x " + shape_str(X) + " has more columns than int32 indices reach");
  for (int64_t i = 0; i < X.numel(); ++i)
    if (std::isnan(X.data[i]))
      throw Error("top_k: x " + shape_str(X) + " has a NaN at row " + std::to_string(i / E) +
                  ", column " + std::to_string(i % E) +
                  "; top_k orders numbers only (is the router's input finite?)");
  Var out = g.make(N, k, &top_k_backward, {x}, "top_k");
  backward_reads(node(g, out), 0, false);
  Node& n = node(g, out);
  int32_t* idx = g.alloc_as<int32_t>(static_cast<size_t>(N * k));
  n.i[0] = k;
  n.p[0] = idx;
  const Tensor V = n.value;
  parallel_chunks(N, items_per_task(E * k), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = X.row(r);
      float* v = V.row(r);
      int32_t* ir = idx + r * k;
      // Insertion into the sorted top list, columns in increasing order: an equal value
      // never displaces an earlier (lower) column.
      int64_t filled = 0;
      for (int64_t c = 0; c < E; ++c) {
        const float val = xr[c];
        if (filled == k && !(val > v[k - 1])) continue;
        int64_t p = filled < k ? filled++ : k - 1;
        for (; p > 0 && val > v[p - 1]; --p) {
          v[p] = v[p - 1];
          ir[p] = ir[p - 1];
        }
        v[p] = val;
        ir[p] = static_cast<int32_t>(c);
      }
    }
  });
  return TopK{out, idx, k};
}

}  // namespace ablate
