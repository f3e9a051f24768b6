// Cross-entropy of logits (N,V) against integer targets, ignoring padding targets: their
// mean (cross_entropy) or their sum and count (cross_entropy_sum). Numerically stable:
// log-sum-exp with the row maximum subtracted; the per-row log-sum-exp is kept for the
// backward pass (softmax - onehot).
#include <cmath>
#include <cstring>

#include "ablate/ops.hpp"
#include "../node.hpp"
#include "kernels.hpp"

namespace ablate {
namespace {
using namespace kernels;

using Row = Eigen::Map<const Eigen::Array<float, 1, Eigen::Dynamic>>;
using RowMut = Eigen::Map<Eigen::Array<float, 1, Eigen::Dynamic>>;

// node: in = {logits}; f[0] = 1/count for the mean, 1 for the sum (0 if every target is
// ignored); i[0] = ignore;
// p[0] = lse (N), p[1] = targets (int32, N).
void cross_entropy_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0]) || n.f[0] == 0.0f) return;
  const Tensor L = node(g, n.in[0]).value;  // (N,V)
  Tensor dL = g.grad(n.in[0]);              // (N,V)
  const float* lse = static_cast<const float*>(n.p[0]);
  const int32_t* targets = static_cast<const int32_t*>(n.p[1]);
  const int32_t ignore = static_cast<int32_t>(n.i[0]);
  const float d = n.grad.data[0] * n.f[0];
  const int64_t V = L.cols;
  parallel_chunks(L.rows, items_per_task(8 * V), [&](int64_t r0, int64_t r1) {
    // softmax = exp(logits - lse), exponentiated over the whole chunk at once
    float* e = thread_scratch(kSlotMisc, static_cast<size_t>((r1 - r0) * V));
    for (int64_t r = r0; r < r1; ++r) {
      RowMut er(e + (r - r0) * V, V);
      if (targets[r] == ignore) er.setZero();
      else er = Row(L.row(r), V) - lse[r];
    }
    ArrMap chunk(e, (r1 - r0) * V);
    chunk = chunk.exp();
    for (int64_t r = r0; r < r1; ++r) {
      if (targets[r] == ignore) continue;
      // d loss / d logits = (softmax - onehot) x d: the gradient at the output times f[0]
      RowMut(dL.row(r), V) += d * Row(e + (r - r0) * V, V);
      dL.row(r)[targets[r]] -= d;
    }
  });
}

// The node of either reduction; `count` gets the scored rows.
Var cross_entropy_node(Graph& g, Var logits, const int32_t* targets, int64_t n, int32_t ignore,
                       bool mean, int64_t& count) {
  const char* op = mean ? "cross_entropy" : "cross_entropy_sum";
  check_var(op, "logits", g, logits);
  const Tensor L = g.value(logits);  // (N,V)
  const int64_t N = L.rows, V = L.cols;
  if (n != N)
    throw Error(std::string(op) + ": " + std::to_string(n) + " targets for logits " + shape_str(L) +
                "; need one target per row");
  if (n > 0 && !targets) throw Error(std::string(op) + ": targets is null");
  count = 0;
  for (int64_t r = 0; r < N; ++r) {
    const int32_t t = targets[r];
    if (t == ignore) continue;
    if (t < 0 || t >= V)
      throw Error(std::string(op) + ": target " + std::to_string(t) + " at row " +
                  std::to_string(r) + " is outside [0, " + std::to_string(V) +
                  ") and is not the ignore index " + std::to_string(ignore) +
                  " (is the vocabulary size right?)");
    ++count;
  }
  Var out = g.make(1, 1, &cross_entropy_backward, {logits}, op);
  Node& nd = node(g, out);
  backward_reads(nd, 1, false);
  const bool save = nd.requires_grad;
  float* row_loss = g.alloc(static_cast<size_t>(N));  // (N)
  float* lse = save ? g.alloc(static_cast<size_t>(N)) : nullptr;
  if (save) {
    int32_t* saved = g.alloc_as<int32_t>(static_cast<size_t>(N));
    std::memcpy(saved, targets, sizeof(int32_t) * static_cast<size_t>(N));
    nd.p[1] = saved;
  }
  nd.p[0] = lse;
  nd.i[0] = ignore;
  nd.f[0] = count == 0 ? 0.0f : mean ? 1.0f / static_cast<float>(count) : 1.0f;
  parallel_chunks(N, items_per_task(8 * V), [&](int64_t r0, int64_t r1) {
    // e = exp(logits - row max), exponentiated over the whole chunk at once; row_loss
    // holds the row max meanwhile.
    float* e = thread_scratch(kSlotMisc, static_cast<size_t>((r1 - r0) * V));
    for (int64_t r = r0; r < r1; ++r) {
      RowMut er(e + (r - r0) * V, V);
      if (targets[r] == ignore) {
        er.setZero();
        continue;
      }
      const Row x(L.row(r), V);
      row_loss[r] = x.maxCoeff();
      er = x - row_loss[r];
    }
    ArrMap chunk(e, (r1 - r0) * V);
    chunk = chunk.exp();
    for (int64_t r = r0; r < r1; ++r) {
      if (targets[r] == ignore) {
        row_loss[r] = 0.0f;
        continue;
      }
      const float l = row_loss[r] + std::log(Row(e + (r - r0) * V, V).sum());
      if (lse) lse[r] = l;
      row_loss[r] = l - L.row(r)[targets[r]];
    }
  });
  const double total = sum_fixed(g, row_loss, N);  // the same bits for any thread count
  nd.value.data[0] =
      count == 0 ? 0.0f : static_cast<float>(mean ? total / static_cast<double>(count) : total);
  return out;
}
}  // namespace

Var cross_entropy(Graph& g, Var logits, const int32_t* targets, int64_t n, int32_t ignore) {
  int64_t count = 0;
  return cross_entropy_node(g, logits, targets, n, ignore, true, count);
}

LossSum cross_entropy_sum(Graph& g, Var logits, const int32_t* targets, int64_t n, int32_t ignore) {
  LossSum r;
  r.sum = cross_entropy_node(g, logits, targets, n, ignore, false, r.count);
  return r;
}

}  // namespace ablate
