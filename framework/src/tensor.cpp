// Parameters, their initialisation, and the random number streams.
#include "ablate/tensor.hpp"

#include <cmath>
#include <cstring>

#include "ablate/error.hpp"

namespace ablate {

float Rng::normal() {
  // Box-Muller; u1 in (0,1] so log() is finite.
  float u1 = 1.0f - uniform();
  float u2 = uniform();
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
}

float hash_uniform(uint64_t seed, uint64_t a, uint64_t b) {
  Rng r(seed ^ (a * 0xD6E8FEB86659FD93ull) ^ (b * 0x9E3779B97F4A7C15ull));
  return r.uniform();
}

Parameter& ParamStore::add(const std::string& name, int64_t rows, int64_t cols, Init init,
                           float scale, bool weight_decay) {
  if (rows <= 0 || cols <= 0)
    throw Error("parameter '" + name + "' has an empty shape (" + std::to_string(rows) + ", " +
                std::to_string(cols) + ")");
  // Guards rows * cols against overflow (a plugin given an absurd size must fail cleanly).
  if (rows > (int64_t{1} << 40) / cols)
    throw Error("parameter '" + name + "' of shape (" + std::to_string(rows) + ", " + std::to_string(cols) +
                ") is too large (more than 2^40 values)");
  if (find(name)) throw Error("parameter '" + name + "' is created twice");
  auto p = std::make_unique<Parameter>();
  p->name = name;
  p->weight_decay = weight_decay;
  size_t n = static_cast<size_t>(rows * cols);
  p->value_storage.assign(n, 0.0f);
  p->grad_storage.assign(n, 0.0f);
  p->value = Tensor{p->value_storage.data(), rows, cols};
  p->grad = Tensor{p->grad_storage.data(), rows, cols};
  float* v = p->value.data;
  switch (init) {
    case Init::kZeros: break;
    case Init::kOnes: for (size_t i = 0; i < n; ++i) v[i] = 1.0f; break;
    case Init::kNormal: for (size_t i = 0; i < n; ++i) v[i] = scale * rng_.normal(); break;
    case Init::kUniform: for (size_t i = 0; i < n; ++i) v[i] = scale * (2.0f * rng_.uniform() - 1.0f); break;
    case Init::kConstant: for (size_t i = 0; i < n; ++i) v[i] = scale; break;
  }
  order_.push_back(p.get());
  params_.push_back(std::move(p));
  return *order_.back();
}

Parameter* ParamStore::find(const std::string& name) {
  for (Parameter* p : order_)
    if (p->name == name) return p;
  return nullptr;
}

int64_t ParamStore::count() const {
  int64_t c = 0;
  for (const Parameter* p : order_) c += p->value.numel();
  return c;
}

void ParamStore::zero_grad() {
  for (Parameter* p : order_) std::memset(p->grad.data, 0, sizeof(float) * static_cast<size_t>(p->grad.numel()));
}

}  // namespace ablate
