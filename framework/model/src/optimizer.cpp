// The optimizers' shared state and options (see optimizer.hpp).
#include "ablate/optimizer.hpp"

#include "ablate/error.hpp"

namespace ablate {

void SlotState::init(const std::vector<Parameter*>& params) {
  names_.clear(), sizes_.clear();
  for (const Parameter* p : params) {
    names_.push_back(p->name);
    sizes_.push_back(static_cast<size_t>(p->value.numel()));
  }
  buffers_.assign(slots_.size(), {});
  for (auto& slot : buffers_)
    for (size_t n : sizes_) slot.emplace_back(n, 0.0f);
}

void SlotState::check(const std::vector<Parameter*>& params, int64_t step) const {
  if (step < 1) throw Error(optimizer_ + ": step counts from 1, got " + std::to_string(step));
  if (params.size() != names_.size())
    throw Error(optimizer_ + ": got " + std::to_string(params.size()) +
                " parameters but init() got " + std::to_string(names_.size()) +
                "; call init() with the same parameters");
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i]->name != names_[i])
      throw Error(optimizer_ + ": parameter " + std::to_string(i) + " is '" + params[i]->name +
                  "' but init() got '" + names_[i] +
                  "'; call init() with the same parameters, in the same order");
    if (static_cast<size_t>(params[i]->value.numel()) != sizes_[i])
      throw Error(optimizer_ + ": parameter '" + params[i]->name + "' has " +
                  std::to_string(params[i]->value.numel()) + " values but had " +
                  std::to_string(sizes_[i]) + " at init()");
  }
}

std::vector<StateBuffer> SlotState::state() {
  std::vector<StateBuffer> s;
  for (size_t k = 0; k < slots_.size(); ++k)
    for (size_t i = 0; i < names_.size(); ++i)
      s.push_back({slots_[k] + "." + names_[i], &buffers_[k][i]});
  return s;
}

std::pair<float, float> read_betas(const Options& o, const std::string& key,
                                   std::pair<float, float> defaults, const std::string& help) {
  const std::vector<float> b =
      o.get<std::vector<float>>(key, {defaults.first, defaults.second}, help);
  if (b.size() != 2)
    o.fail(key, "expected two numbers [beta1, beta2], got " + std::to_string(b.size()));
  for (float x : b)
    if (!(x >= 0.0f && x < 1.0f))
      o.fail(key, std::to_string(x) + " is out of range; each beta must be in [0, 1)");
  return {b[0], b[1]};
}

}  // namespace ablate
