// Rotary position embedding (Su et al. 2021, RoFormer): each pair (2i, 2i+1) of every
// head of x (B*T, NH*HS) is rotated by angle (pos0 + t) * base^(-2i/HS).
// Angles are computed in double so that large positions keep their phase accurate.
#include <cmath>

#include "ablate/ops.hpp"
#include "../node.hpp"
#include "kernels.hpp"

namespace ablate {
namespace {
using namespace kernels;

// Rotates every row of x by the table (cos, sin) of its time step; sign -1 rotates back.
void rotate(const float* x, float* y, bool accumulate, const float* cs, int64_t B, int64_t T,
            int64_t NH, int64_t HS, float sign) {
  const int64_t H2 = HS / 2, C = NH * HS;
  parallel_chunks(B * T, items_per_task(4 * C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T;
      const float* cosv = cs + t * 2 * H2;  // (H2)
      const float* sinv = cosv + H2;        // (H2)
      const float* xr = x + r * C;
      float* yr = y + r * C;
      for (int64_t h = 0; h < NH; ++h) {
        const float* xh = xr + h * HS;
        float* yh = yr + h * HS;
        for (int64_t i = 0; i < H2; ++i) {
          const float c = cosv[i], s = sign * sinv[i];
          const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
          const float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
          if (accumulate) {
            yh[2 * i] += y0;
            yh[2 * i + 1] += y1;
          } else {
            yh[2 * i] = y0;
            yh[2 * i + 1] = y1;
          }
        }
      }
    }
  });
}

// node: in = {x}; i[0..3] = B, T, NH, HS; p[0] = table (T, 2*HS/2): cos then sin per step.
void rope_backward(Graph& g, int id) {
  Node& n = node(g, id);
  if (!g.requires_grad(n.in[0])) return;
  // The transpose of a rotation is the rotation by the negative angle.
  rotate(n.grad.data, g.grad(n.in[0]).data, true, static_cast<const float*>(n.p[0]), n.i[0], n.i[1],
         n.i[2], n.i[3], -1.0f);
}
}  // namespace

Var rope(Graph& g, Var x, int64_t batch, int64_t time, int64_t n_heads, int64_t head_size,
         int64_t pos0, float base) {
  check_var("rope", "x", g, x);
  const Tensor X = g.value(x);  // (B*T, NH*HS)
  if (batch <= 0 || time <= 0 || n_heads <= 0 || head_size <= 0 || head_size % 2 != 0)
    throw Error("rope: need positive batch, time, n_heads and an even head_size; got B=" +
                std::to_string(batch) + " T=" + std::to_string(time) +
                " NH=" + std::to_string(n_heads) + " HS=" + std::to_string(head_size));
  if (X.rows != batch * time || X.cols != n_heads * head_size)
    throw Error("rope: x is " + shape_str(X) + " but B*T = " + std::to_string(batch * time) +
                " rows and NH*HS = " + std::to_string(n_heads * head_size) + " columns were given");
  if (!(base > 0.0f)) throw Error("rope: base must be positive, got " + std::to_string(base));
  const int64_t H2 = head_size / 2;
  float* table = g.alloc(static_cast<size_t>(time * 2 * H2));  // (T, 2*H2)
  parallel_chunks(time, items_per_task(100 * H2), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const double pos = static_cast<double>(pos0 + t);
      for (int64_t i = 0; i < H2; ++i) {
        const double ang =
            pos * std::pow(static_cast<double>(base),
                           -2.0 * static_cast<double>(i) / static_cast<double>(head_size));
        table[t * 2 * H2 + i] = static_cast<float>(std::cos(ang));
        table[t * 2 * H2 + H2 + i] = static_cast<float>(std::sin(ang));
      }
    }
  });
  Var out = g.make(X.rows, X.cols, &rope_backward, {x}, "rope");
  backward_reads(node(g, out), 0, false);
  Node& n = node(g, out);
  n.i[0] = batch;
  n.i[1] = time;
  n.i[2] = n_heads;
  n.i[3] = head_size;
  n.p[0] = table;
  rotate(X.data, n.value.data, false, table, batch, time, n_heads, head_size, 1.0f);
  return out;
}

}  // namespace ablate
