// Tensors and parameters. Every tensor in ablate is a row-major 2-D float view
// (rows, cols): activations are (B*T, C), weights (in, out), biases and gains (1, C).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace ablate {

// A tensor's data starts on a 64-byte boundary (the graph's arena, parameters and
// AlignedFloats all give such memory). Vectorised sums peel their first elements up to
// an aligned address, so the same numbers at another offset round differently: keeping
// every tensor aligned keeps results bitwise independent of where the heap put them.
constexpr size_t kTensorAlignment = 64;

struct Tensor {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t numel() const { return rows * cols; }
  float* row(int64_t r) const { return data + r * cols; }
};

// Storage for tensors outside a graph (parameters, optimizer scratch): a std::vector
// whose data is aligned to kTensorAlignment.
template <class T>
struct TensorAllocator {
  using value_type = T;
  TensorAllocator() = default;
  template <class U>
  TensorAllocator(const TensorAllocator<U>&) {}  // NOLINT: converting, as allocators are
  T* allocate(size_t n) {
    const size_t bytes =
        (n * sizeof(T) + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    void* p = std::aligned_alloc(kTensorAlignment, bytes == 0 ? kTensorAlignment : bytes);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <class U>
  bool operator==(const TensorAllocator<U>&) const {
    return true;
  }
  template <class U>
  bool operator!=(const TensorAllocator<U>&) const {
    return false;
  }
};
using AlignedFloats = std::vector<float, TensorAllocator<float>>;

// Deterministic, serialisable random numbers (splitmix64). One u64 of state, so every
// stream can be checkpointed and resumed bitwise.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 random bits.
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return next_u64() % n; }
  float normal();  // standard normal (Box-Muller, no cached second value)
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

// Stateless hash of (seed, a, b) to a uniform float in [0,1): used where a random
// number must not depend on thread scheduling (dropout masks).
float hash_uniform(uint64_t seed, uint64_t a, uint64_t b);

// What a parameter is for. Plugins create parameters with a role, never with values:
// the `init` family (plugins/init/) sets the values by role and shape, and optimizers
// may treat roles differently (Muon orthogonalises hidden matrices only).
enum class Role {
  kEmbedding,    // token embedding table (V, C)
  kPosition,     // learned position table (T, C)
  kHidden,       // a matrix inside a block that reads the residual stream (qkv, FFN up/gate)
  kResidualOut,  // a matrix whose output is added to the residual stream (attention proj, FFN down)
  kHead,         // the LM head (C, V)
  kGain,         // a multiplicative gain (norm weight), initially 1
  kBias,         // an additive bias, initially 0
  kCustom,       // values the plugin writes itself after creating it; no init variant touches it
};
const char* role_name(Role r);  // "embedding", "hidden", ...
// Whether decoupled weight decay / L2 applies by default: to matrices that mix features
// (hidden, residual output, head), not to embeddings, positions, gains, biases or custom values.
inline bool decays(Role r) {
  return r == Role::kHidden || r == Role::kResidualOut || r == Role::kHead;
}

// A trainable tensor with its gradient. Owned by a ParamStore; addresses are stable.
// Values are 0 until an init variant sets them (ablate::initialise, init.hpp).
struct Parameter {
  std::string name;  // hierarchical: "blocks.0.attn.qkv.weight"
  Tensor value;
  Tensor grad;
  Role role = Role::kCustom;
  bool weight_decay() const { return decays(role); }
  AlignedFloats value_storage;
  AlignedFloats grad_storage;
};

// Fills for init variants and tests: every value = v; N(0, std) drawn in order from rng.
void fill(const Tensor& t, float v);
void fill_normal(const Tensor& t, Rng& rng, float std);

// All parameters of a model, in creation order (which fixes the order of the
// optimizer state, the checkpoint and every gradient reduction).
class ParamStore {
 public:
  explicit ParamStore(uint64_t seed = 0) : rng_(seed) {}
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // Creates a parameter of this role, all zeros until an init variant sets it.
  Parameter& add(const std::string& name, int64_t rows, int64_t cols, Role role);
  Parameter* find(const std::string& name);
  const std::vector<Parameter*>& all() const { return order_; }
  int64_t count() const;  // number of scalars
  void zero_grad();
  Rng& rng() { return rng_; }  // the init variant draws from it, in creation order

 private:
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<Parameter*> order_;
  Rng rng_;
};

// Names a scope inside a ParamStore: plugins create their parameters through it so
// that names are hierarchical without the plugin knowing where it sits.
class ParamScope {
 public:
  ParamScope(ParamStore& store, std::string prefix) : store_(&store), prefix_(std::move(prefix)) {}
  Parameter& add(const std::string& name, int64_t rows, int64_t cols, Role role) {
    return store_->add(prefix_ + name, rows, cols, role);
  }
  ParamScope sub(const std::string& name) const {
    return ParamScope(*store_, prefix_ + name + ".");
  }
  ParamStore& store() const { return *store_; }
  const std::string& prefix() const { return prefix_; }

 private:
  ParamStore* store_;
  std::string prefix_;
};

}  // namespace ablate
