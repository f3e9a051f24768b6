// ALiBi (Press et al. 2022): no embedding; attention logits get -m_h * (i - j) with head
// slopes m_h = 2^(-8h/NH), h = 1..NH (for any NH; the paper interpolates when NH is not a
// power of two, this keeps the plain geometric sequence).
#include <cmath>
#include <string>
#include <vector>

#include "ablate/plugin.hpp"
#include "ablate/positional.hpp"

namespace {

class Alibi final : public ablate::PositionalEncoding {
 public:
  bool rotates() const override { return false; }
  Alibi(const ablate::Options& o, const ablate::BuildContext& c) {
    const int64_t H = c.dims.n_heads;
    if (H <= 0) o.fail("", "needs n_heads > 0 for its per-head slopes, got " + std::to_string(H));
    slopes_.resize(static_cast<size_t>(H));
    for (int64_t h = 1; h <= H; ++h)
      slopes_[static_cast<size_t>(h - 1)] =
          static_cast<float>(std::exp2(-8.0 * static_cast<double>(h) / static_cast<double>(H)));
  }

  const float* attention_slopes() const override { return slopes_.data(); }

 private:
  std::vector<float> slopes_;  // (NH)
};

}  // namespace
ABLATE_PLUGIN(ablate::PositionalEncoding, alibi, Alibi,
              "linear attention biases by distance (ALiBi)")
