// QK-norm: RMS normalisation of every head of the queries and the keys, before the positional
// rotation and the attention (Dehghani et al. 2023; OLMo 2, Gemma 3, Qwen 3, modded-nanogpt).
// q_h <- q_h / sqrt(mean(q_h^2) + eps) * g_q, the same for k, per head of each row; g_q and
// g_k (1, HS) are learned gains shared by the heads, initialised to 1 (gain: true, the
// default: OLMo 2 learns its gains; Gemma 3 and Qwen 3 have them per head dimension like
// here), or absent (gain: false: modded-nanogpt's parameter-free norm). Values are left alone.
// One custom op per tensor, with its backward.
#include <cmath>
#include <string>

#include "ablate/custom_op.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"
#include "ablate/qk_transform.hpp"

namespace {

// y = x / sqrt(mean(x^2) + eps) * gain over each run of HS columns (a head) of each row.
// Inputs: x (N, H*HS), optional gain (1, HS). Attributes: HS, eps. Saves 1/rms per head.
struct HeadRmsNorm {
  static constexpr const char* kName = "head_rmsnorm";
  static constexpr int64_t kRows = 32;  // rows per parallel task, fixed by the shapes

  static void forward(ablate::OpContext& op) {
    const ablate::Tensor& x = op.in(0);
    const int64_t N = x.rows, W = x.cols, HS = static_cast<int64_t>(op.attr(0)), H = W / HS;
    const float eps = op.attr(1);
    const float* gain = op.n_inputs() > 1 ? op.in(1).data : nullptr;
    float* inv = op.save(0, static_cast<size_t>(N * H));
    float* y = op.out().data;
    const float* xp = x.data;
    ablate::parallel_for(N, kRows, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        for (int64_t h = 0; h < H; ++h) {
          const float* xs = xp + i * W + h * HS;
          float* ys = y + i * W + h * HS;
          float ss = 0.0f;
          for (int64_t j = 0; j < HS; ++j) ss += xs[j] * xs[j];
          const float r = 1.0f / std::sqrt(ss / static_cast<float>(HS) + eps);
          inv[i * H + h] = r;
          for (int64_t j = 0; j < HS; ++j) ys[j] = xs[j] * r * (gain ? gain[j] : 1.0f);
        }
    });
  }

  // With xhat = x r and gy = dy * gain: dx = r (gy - xhat mean(gy xhat)), dgain = sum dy xhat.
  static void backward(ablate::OpContext& op) {
    const ablate::Tensor& x = op.in(0);
    const int64_t N = x.rows, W = x.cols, HS = static_cast<int64_t>(op.attr(0)), H = W / HS;
    const bool has_gain = op.n_inputs() > 1;
    const float* gain = has_gain ? op.in(1).data : nullptr;
    const float* inv = op.saved(0);
    const float* dy = op.grad_out().data;
    const float* xp = x.data;
    if (op.needs_grad(0)) {
      float* dx = op.grad_in(0).data;
      ablate::parallel_for(N, kRows, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          for (int64_t h = 0; h < H; ++h) {
            const int64_t at = i * W + h * HS;
            const float r = inv[i * H + h];
            float dot = 0.0f;
            for (int64_t j = 0; j < HS; ++j)
              dot += dy[at + j] * (gain ? gain[j] : 1.0f) * xp[at + j] * r;
            const float m = dot / static_cast<float>(HS);
            for (int64_t j = 0; j < HS; ++j)
              dx[at + j] += r * (dy[at + j] * (gain ? gain[j] : 1.0f) - xp[at + j] * r * m);
          }
      });
    }
    if (has_gain && op.needs_grad(1)) {
      // Summed in row order on one thread: the same bits for any thread count.
      float* dg = op.grad_in(1).data;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t at = i * W + h * HS;
          const float r = inv[i * H + h];
          for (int64_t j = 0; j < HS; ++j) dg[j] += dy[at + j] * xp[at + j] * r;
        }
    }
  }
};

class QkNorm final : public ablate::QkTransform {
 public:
  QkNorm(const ablate::Options& o, const ablate::BuildContext& c)
      : eps_(o.get_in<float>("eps", 1e-6f, 1e-12f, 1.0f, "added to the mean square of a head")) {
    const bool gain =
        o.get<bool>("gain", true,
                    "learned gains (1, head size) for q and for k, shared by the heads, from 1 "
                    "(OLMo 2 learns its gains); false: none (modded-nanogpt)");
    if (c.dims.d_model <= 0 || c.dims.n_heads <= 0 || c.dims.d_model % c.dims.n_heads != 0)
      o.fail("", "needs n_heads dividing d_model, got d_model = " + std::to_string(c.dims.d_model) +
                     ", n_heads = " + std::to_string(c.dims.n_heads));
    HS_ = c.dims.d_model / c.dims.n_heads;
    if (gain) {
      ablate::ParamScope ps = c.params;
      gq_ = &ps.add("q_norm.weight", 1, HS_, ablate::Role::kGain);
      gk_ = &ps.add("k_norm.weight", 1, HS_, ablate::Role::kGain);
    }
  }

  bool transforms() const override { return true; }

  void apply(ablate::Graph& g, ablate::Var& q, ablate::Var& k, ablate::Var&,
             const ablate::QkvHeads& h) override {
    if (h.head_size != HS_)
      throw ablate::Error("qk_norm: built for head size " + std::to_string(HS_) +
                          " (d_model / n_heads), given heads of " + std::to_string(h.head_size));
    q = norm(g, q, gq_);
    k = norm(g, k, gk_);
  }

 private:
  float eps_;
  int64_t HS_ = 0;
  ablate::Parameter *gq_ = nullptr, *gk_ = nullptr;

  ablate::Var norm(ablate::Graph& g, ablate::Var x, ablate::Parameter* gain) const {
    const ablate::Tensor& t = g.value(x);
    const float hs = static_cast<float>(HS_);
    if (gain)
      return ablate::custom_op<HeadRmsNorm>(g, {x, g.param(*gain)}, t.rows, t.cols, {hs, eps_});
    return ablate::custom_op<HeadRmsNorm>(g, {x}, t.rows, t.cols, {hs, eps_});
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::QkTransform, qk_norm, QkNorm,
              "QK-norm: RMS norm of each head of q and k, with learned gains (OLMo 2, Qwen 3)")
