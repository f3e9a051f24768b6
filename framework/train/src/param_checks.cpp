// Checks on a model's parameters (see param_checks.hpp).
#include "param_checks.hpp"

#include <cmath>
#include <cstdio>
#include <utility>

namespace ablate {
namespace {

// The first parameter (in creation order) whose gradient (grad = true) or value has a
// non-finite entry.
const Parameter* first_non_finite(const std::vector<Parameter*>& params, bool grad) {
  for (const Parameter* p : params) {
    const Tensor& t = grad ? p->grad : p->value;
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(t.data[i])) return p;
  }
  return nullptr;
}

// The parameter with the largest |value| and that value (what overflowed, when every
// value is still finite but the forward pass is not).
std::pair<const Parameter*, float> largest_value(const std::vector<Parameter*>& params) {
  std::pair<const Parameter*, float> best{nullptr, 0.0f};
  for (const Parameter* p : params)
    for (int64_t i = 0; i < p->value.numel(); ++i)
      if (std::fabs(p->value.data[i]) > best.second) best = {p, std::fabs(p->value.data[i])};
  return best;
}

}  // namespace

double global_grad_norm(const std::vector<Parameter*>& params) {
  double sq = 0;
  for (const Parameter* p : params)
    for (int64_t i = 0; i < p->grad.numel(); ++i)
      sq += static_cast<double>(p->grad.data[i]) * p->grad.data[i];
  return std::sqrt(sq);
}

std::string non_finite_error(const std::vector<Parameter*>& params, int64_t step, double loss,
                             double norm) {
  // A non-finite value (the previous update overflowed) is the cause; a non-finite
  // gradient with finite values is the symptom seen at this step.
  const Parameter* bad_value = first_non_finite(params, false);
  const Parameter* bad_grad = first_non_finite(params, true);
  auto [big, big_value] = largest_value(params);
  char value[32];
  std::snprintf(value, sizeof value, "%.3g", big_value);
  return "step " + std::to_string(step) + ": " + (std::isfinite(loss) ? "gradient" : "loss") +
         " is not finite (loss " + std::to_string(loss) + ", gradient norm " +
         std::to_string(norm) + ")" +
         (bad_value ? "; first parameter with non-finite values: '" + bad_value->name + "'" : "") +
         (bad_grad ? "; first parameter with a non-finite gradient: '" + bad_grad->name + "'"
                   : "") +
         (!bad_value && big
              ? "; largest parameter value: " + std::string(value) + " in '" + big->name + "'"
              : "") +
         ". Lower the learning rate, enable train.grad_clip, or check the data";
}

uint64_t weights_hash(const std::vector<Parameter*>& params) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const Parameter* p : params) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(p->value.data);
    for (size_t i = 0; i < static_cast<size_t>(p->value.numel()) * sizeof(float); ++i)
      h = (h ^ b[i]) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace ablate
