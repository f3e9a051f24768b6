// Sinusoidal position encoding (Vaswani et al. 2017): PE[pos, 2i] = sin(pos / base^(2i/C)),
// PE[pos, 2i+1] = cos(same), added to x (B*T, C). A constant, no parameters, no length limit.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"
#include "ablate/positional.hpp"

namespace {

class Sinusoidal final : public ablate::PositionalEncoding {
 public:
  bool rotates() const override { return false; }
  Sinusoidal(const ablate::Options& o, const ablate::BuildContext& c)
      : base_(o.get_in<double>("base", 10000.0, 2.0, 1e12, "wavelength base")) {}

  ablate::Var embed(ablate::Graph& g, ablate::Var x, const ablate::Batch& in) override {
    const int64_t B = in.batch, T = in.time, C = g.value(x).cols;
    if (in.pos0 < 0)
      throw ablate::Error("sinusoidal positions: negative start position " +
                          std::to_string(in.pos0));
    ablate::Var pe = g.input(B * T, C);  // (B*T, C)
    float* out = g.value(pe).data;
    grow(in.pos0 + T, C);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const float* src = table_.data() + (in.pos0 + t) * C;
        std::copy(src, src + C, out + (b * T + t) * C);
      }
    return ablate::add(g, x, pe);
  }

 private:
  // Extends the cached table to n positions (computed in double: pos up to ~1e6).
  void grow(int64_t n, int64_t C) {
    if (C != C_) table_.clear(), rows_ = 0, C_ = C;
    if (n <= rows_) return;
    table_.resize(static_cast<size_t>(n * C));
    for (int64_t pos = rows_; pos < n; ++pos)
      for (int64_t j = 0; j < C; ++j) {
        const double angle =
            static_cast<double>(pos) /
            std::pow(base_, static_cast<double>(j - j % 2) / static_cast<double>(C));
        table_[static_cast<size_t>(pos * C + j)] =
            static_cast<float>(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    rows_ = n;
  }

  double base_;
  std::vector<float> table_;  // (rows_, C_)
  int64_t rows_ = 0, C_ = 0;
};

}  // namespace
ABLATE_PLUGIN(ablate::PositionalEncoding, sinusoidal, Sinusoidal,
              "fixed sinusoidal position encoding (Vaswani et al. 2017)")
