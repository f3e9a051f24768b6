// my_positional: a positional encoding for ablate (family "positional"), from
// `ablate plugin new positional my_positional`. Positions act at three points (ablate/positional.hpp):
// embed (added to token embeddings), rotate (queries and keys), attention_slopes (logit
// biases); override the ones you need. As generated: learned absolute positions, a table
// P (context, C) added to x (B*T, C) at positions pos0 + t.
#include <string>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"
#include "ablate/positional.hpp"

namespace {

class MyPositional final : public ablate::PositionalEncoding {
 public:
  MyPositional(const ablate::Options& o, const ablate::BuildContext& c) : context_(c.dims.context) {
    if (c.dims.context <= 0 || c.dims.d_model <= 0)
      o.fail("", "needs positive context and d_model, got context = " + std::to_string(c.dims.context) +
                     ", d_model = " + std::to_string(c.dims.d_model));
    ablate::ParamScope ps = c.params;
    table_ = &ps.add("weight", c.dims.context, c.dims.d_model, ablate::Role::kPosition);
  }

  ablate::Var embed(ablate::Graph& g, ablate::Var x, const ablate::Batch& in) override {
    const int64_t B = in.batch, T = in.time;
    // Errors are thrown (never exit()): the CLI prints them.
    if (in.pos0 < 0 || in.pos0 + T > context_)
      throw ablate::Error("my_positional: positions " + std::to_string(in.pos0) + ".." + std::to_string(in.pos0 + T - 1) +
                          " exceed the table of " + std::to_string(context_) + " (model.context)");
    // embed() may run on several threads at once (decoding): no member is written here.
    thread_local std::vector<int32_t> rows;
    rows.resize(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) rows[static_cast<size_t>(b * T + t)] = static_cast<int32_t>(in.pos0 + t);
    return ablate::add(g, x, ablate::embedding(g, g.param(*table_), rows.data(), B * T));  // (B*T, C)
  }

  int64_t max_positions() const override { return context_; }
  // This variant leaves rotate() alone, so attention may skip it and read q, k and v
  // straight from the fused projection. Return true (the default) if you override rotate().
  bool rotates() const override { return false; }

 private:
  int64_t context_;
  ablate::Parameter* table_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::PositionalEncoding, my_positional, MyPositional, "learned absolute position embeddings")
