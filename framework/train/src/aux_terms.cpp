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
  for (auto& [name, sn] : batch_) sn = {0.0, 0};  // kept nodes: no allocation after step 1
  for (const AuxTerm& t : g.aux()) {
    const double v = g.value(t.value).data[0];
    auto it = batch_.find(t.name);
    if (it == batch_.end()) {
      if (named_)
        throw Error("step " + std::to_string(step) + ": auxiliary term '" + t.name +
                    "' appeared after the first step; a plugin adds the same terms at every step");
      it = batch_.emplace(t.name, std::pair<double, int>{0.0, 0}).first;
      step_[t.name] = 0;
    }
    it->second.first += v;
    ++it->second.second;
    if (!std::isfinite(v) && !bad_) bad_ = Bad{t.name, t.layer, v};
  }
  named_ = true;
  for (auto& [name, sum] : step_) {
    const auto& [total, n] = batch_.at(name);
    if (n > 0) sum += weight * total / n;
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
