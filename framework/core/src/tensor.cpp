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

const char* role_name(Role r) {
  switch (r) {
    case Role::kEmbedding: return "embedding";
    case Role::kPosition: return "position";
    case Role::kHidden: return "hidden";
    case Role::kResidualOut: return "residual_out";
    case Role::kHead: return "head";
    case Role::kGain: return "gain";
    case Role::kBias: return "bias";
    case Role::kCustom: return "custom";
  }
  return "?";
}

void fill(const Tensor& t, float v) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data[i] = v;
}

void fill_normal(const Tensor& t, Rng& rng, float std) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data[i] = std * rng.normal();
}

Parameter& ParamStore::add(const std::string& name, int64_t rows, int64_t cols, Role role) {
  if (rows <= 0 || cols <= 0)
    throw Error("parameter '" + name + "' has an empty shape (" + std::to_string(rows) + ", " +
                std::to_string(cols) + ")");
  // Guards rows * cols against overflow (a plugin given an absurd size must fail cleanly).
  if (rows > (int64_t{1} << 40) / cols)
    throw Error("parameter '" + name + "' of shape (" + std::to_string(rows) + ", " +
                std::to_string(cols) + ") is too large (more than 2^40 values)");
  if (find(name)) throw Error("parameter '" + name + "' is created twice");
  auto p = std::make_unique<Parameter>();
  p->name = name;
  p->role = role;
  size_t n = static_cast<size_t>(rows * cols);
  p->value_storage.assign(n, 0.0f);
  p->grad_storage.assign(n, 0.0f);
  p->value = Tensor{p->value_storage.data(), rows, cols};
  p->grad = Tensor{p->grad_storage.data(), rows, cols};
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
  for (Parameter* p : order_)
    std::memset(p->grad.data, 0, sizeof(float) * static_cast<size_t>(p->grad.numel()));
}

}  // namespace ablate
