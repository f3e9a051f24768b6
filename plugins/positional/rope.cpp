// Rotary position embedding (Su et al. 2021, RoFormer): rotates each (even, odd) pair of every
// query and key head by angle pos * base^(-2i/HS), so q.k depends on relative position only.
// q (B*T, NH*HS), k (B*T, NKV*HS); no parameters, no length limit.
#include <string>

#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"
#include "ablate/positional.hpp"

namespace {

class Rope final : public ablate::PositionalEncoding {
 public:
  Rope(const ablate::Options& o, const ablate::BuildContext& c)
      : base_(o.get_in<float>("base", 10000.0f, 2.0f, 1e9f, "frequency base (LLaMA: 10000)")) {
    if (c.dims.n_heads > 0 && c.dims.d_model % c.dims.n_heads == 0 &&
        (c.dims.d_model / c.dims.n_heads) % 2 != 0)
      o.fail("", "RoPE rotates pairs of channels, but the head size d_model / n_heads = " +
                     std::to_string(c.dims.d_model / c.dims.n_heads) +
                     " is odd; choose an even head size");
  }

  void rotate(ablate::Graph& g, ablate::Var& q, ablate::Var& k, const ablate::Batch& in,
              int64_t n_heads, int64_t n_kv_heads, int64_t head_size) override {
    if (head_size % 2 != 0)
      throw ablate::Error("rope: head size " + std::to_string(head_size) +
                          " is odd; RoPE needs an even head size");
    q = ablate::rope(g, q, in.batch, in.time, n_heads, head_size, in.pos0, base_);
    k = ablate::rope(g, k, in.batch, in.time, n_kv_heads, head_size, in.pos0, base_);
  }

 private:
  float base_;
};

}  // namespace
ABLATE_PLUGIN(ablate::PositionalEncoding, rope, Rope,
              "rotary position embedding on queries and keys (RoFormer, LLaMA)")
