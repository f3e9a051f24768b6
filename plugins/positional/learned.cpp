// Learned absolute position embeddings (GPT-1/GPT-2): a table P (context, C), init N(0, 0.02);
// embed adds row pos0 + t to x (B*T, C) at every time step t. Limits sequences to `context`.
#include <string>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"
#include "ablate/positional.hpp"

namespace {

class Learned final : public ablate::PositionalEncoding {
 public:
  bool rotates() const override { return false; }
  Learned(const ablate::Options& o, const ablate::BuildContext& c) : context_(c.dims.context) {
    if (c.dims.context <= 0 || c.dims.d_model <= 0)
      o.fail("",
             "needs positive context and d_model, got context = " + std::to_string(c.dims.context) +
                 ", d_model = " + std::to_string(c.dims.d_model));
    // Not decayed, as the token embedding (minGPT's choice).
    ablate::ParamScope ps = c.params;
    table_ = &ps.add("weight", c.dims.context, c.dims.d_model, ablate::Role::kPosition);
  }

  ablate::Var embed(ablate::Graph& g, ablate::Var x, const ablate::Batch& in) override {
    const int64_t B = in.batch, T = in.time;
    if (in.pos0 < 0 || in.pos0 + T > context_)
      throw ablate::Error("learned positions: positions " + std::to_string(in.pos0) + ".." +
                          std::to_string(in.pos0 + T - 1) + " exceed the table of " +
                          std::to_string(context_) +
                          " (model.context); shorten the input or use a positional encoding "
                          "without a limit (e.g. rope)");
    // Per thread: decoding embeds on several threads at once (embedding() copies the rows).
    thread_local std::vector<int32_t> rows;
    rows.resize(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        rows[static_cast<size_t>(b * T + t)] = static_cast<int32_t>(in.pos0 + t);
    ablate::Var pe = ablate::embedding(g, g.param(*table_), rows.data(), B * T);  // (B*T, C)
    return ablate::add(g, x, pe);
  }

  int64_t max_positions() const override { return context_; }

 private:
  int64_t context_;
  ablate::Parameter* table_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::PositionalEncoding, learned, Learned,
              "learned absolute position embeddings (GPT-2)")
