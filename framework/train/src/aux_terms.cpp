#include "aux_terms.hpp"

#include <cmath>
#include <vector>

#include "ablate/error.hpp"

namespace ablate {

void AuxTerms::begin_step() {
  for (auto& [name, v] : step_) v = 0;
  bad_.reset();
}

void AuxTerms::add(Graph& g, int64_t step, float weight) {
  std::map<std::string, std::pair<double, int>> by_name;
  for (const AuxTerm& t : g.aux()) {
    const double v = g.value(t.value).data[0];
    auto& [sum, n] = by_name[t.name];
    sum += v;
    ++n;
    if (!std::isfinite(v) && !bad_) bad_ = Bad{t.name, t.layer, v};
  }
  if (!named_)
    for (const auto& [name, sn] : by_name) step_[name] = 0;
  named_ = true;
  for (const auto& [name, sn] : by_name) {
    auto it = step_.find(name);
    if (it == step_.end())
      throw Error("step " + std::to_string(step) + ": auxiliary term '" + name +
                  "' appeared after the first step; a plugin adds the same terms at every step");
    it->second += weight * sn.first / sn.second;
  }
}

void AuxTerms::allreduce(Communicator& comm) {
  if (step_.empty()) return;
  std::vector<double> v;
  for (const auto& [name, x] : step_) v.push_back(x);
  comm.allreduce_sum(v.data(), v.size());
  size_t k = 0;
  for (auto& [name, x] : step_) x = v[k++];
}

void AuxTerms::finish_step(int64_t step, std::map<std::string, double>& window) const {
  for (const auto& [name, v] : step_) {
    window[name] += v;
    if (std::isfinite(v)) continue;
    // This rank's first bad term names its layer; another rank's shows here by its sum.
    const std::string bad = bad_ ? bad_->name : name;
    const std::string layer =
        bad_ && bad_->layer >= 0 ? " of layer " + std::to_string(bad_->layer) : "";
    throw Error("step " + std::to_string(step) + ": auxiliary term '" + bad + "'" + layer + " is " +
                std::to_string(bad_ ? bad_->value : v) +
                "; the model plugin that adds it (named by the term) computed a value that is "
                "not finite: lower its weight or the learning rate, or check the plugin with "
                "`ablate plugin check`");
  }
}

}  // namespace ablate
