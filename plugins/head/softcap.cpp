// The linear LM head with soft-capped logits (Gemma 2, modded-nanogpt):
// logits = cap * tanh(z / cap), z = x W + b as the linear head computes it (tied or not).
// Logits stay in (-cap, cap) and near z where |z| << cap. One custom op, whose backward
// reads the output: d logits / dz = 1 - (logits / cap)^2.
#include <cmath>

#include "ablate/custom_op.hpp"
#include "ablate/head_common.hpp"

namespace {

// y = cap * tanh(z / cap); attribute 0 is cap.
struct Softcap {
  static constexpr const char* kName = "softcap";
  static constexpr int64_t kChunk = 16384;  // elements per parallel task, fixed by the shapes
  static void forward(ablate::OpContext& op) {
    const ablate::Tensor& z = op.in(0);
    const float cap = op.attr(0), inv = 1.0f / cap;
    const float* zp = z.data;
    float* y = op.out().data;
    ablate::parallel_for(z.numel(), kChunk, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = cap * std::tanh(zp[i] * inv);
    });
  }
  static void backward(ablate::OpContext& op) {
    if (!op.needs_grad(0)) return;
    const float inv = 1.0f / op.attr(0);
    const float* y = op.out().data;
    const float* dy = op.grad_out().data;
    float* dz = op.grad_in(0).data;
    ablate::parallel_for(op.out().numel(), kChunk, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float t = y[i] * inv;  // tanh(z / cap)
        dz[i] += dy[i] * (1.0f - t * t);
      }
    });
  }
};

class SoftcapHead final : public ablate::LinearHead {
 public:
  SoftcapHead(const ablate::Options& o, const ablate::BuildContext& c)
      : LinearHead(o, c),
        cap_(o.get_in<float>(
            "cap", 30.0f, 1e-3f, 1e6f,
            "logits = cap * tanh(z / cap): their bound; near z where |z| << cap")) {}

  ablate::Var forward(ablate::Graph& g, ablate::Var x) override {
    ablate::Var z = project(g, x);  // (B*T, V)
    const ablate::Tensor& t = g.value(z);
    return ablate::custom_op<Softcap>(g, {z}, t.rows, t.cols, {cap_});
  }

 private:
  float cap_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Head, softcap, SoftcapHead,
              "linear LM head with soft-capped logits, cap * tanh(z / cap) (Gemma 2)")
