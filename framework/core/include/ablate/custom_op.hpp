// Custom ops: an op with a hand-written forward and backward, defined in a plugin (or
// anywhere) without touching ablate. Compose built-in ops (ablate/ops.hpp) when you can:
// their backward comes for free. Write a custom op when a fused kernel is faster or the
// op is not expressible with them. docs/PLUGINS.md, "A custom op", is a tutorial.
//
//   struct Cube {                                       // y = a x^3, a an attribute
//     static constexpr const char* kName = "cube";      // the name in profiles and checks
//     static void forward(ablate::OpContext& op) {
//       const ablate::Tensor& x = op.in(0);
//       float* y = op.out().data;
//       for (int64_t i = 0; i < x.numel(); ++i) y[i] = op.attr(0) * x.data[i] * x.data[i] *
//       x.data[i];
//     }
//     static void backward(ablate::OpContext& op) {    // add dL/d in to each input's grad
//       if (!op.needs_grad(0)) return;
//       const ablate::Tensor& x = op.in(0);
//       const float* dy = op.grad_out().data;
//       float* dx = op.grad_in(0).data;
//       for (int64_t i = 0; i < x.numel(); ++i) dx[i] += 3 * op.attr(0) * x.data[i] * x.data[i] *
//       dy[i];
//     }
//   };
//   ablate::Var y = ablate::custom_op<Cube>(g, {x}, rows, cols, {2.0f});
//
// Integer arrays (row indices, expert ids) go in as IntArray after the attributes and are
// read with op.ints(k), in forward and backward:
//   ablate::custom_op<PickRows>(g, {x}, m, cols, {}, {ablate::IntArray{idx, m}});
//
// What forward computes for backward is saved in the graph's arena (freed at reset):
// buffers of floats with op.save(slot, n) / op.saved(slot), and one struct of the op's own
// (trivially copyable: the arena runs no destructors) with op.save<T>(fields...) /
// op.saved<T>():
//   struct Stats { float* inv_rms; int64_t rows; };
//   op.save<Stats>(op.save(0, n), n);        // forward: a buffer of n floats and a count
//   const Stats& st = op.saved<Stats>();     // backward
//
// Rules: up to 4 inputs, 4 float attributes and 4 integer arrays; forward writes every
// element of out(); backward adds (+=) to grad_in(k), which is zeroed before its first use,
// and only for inputs with needs_grad(k); results must not depend on the number of threads (use
// parallel_for with chunks fixed by the shapes). `ablate plugin check` and the test suite
// check a plugin's gradients, custom ops included, by finite differences.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/graph.hpp"

namespace ablate {

// An int32 array given to a custom op. custom_op copies it into the graph's arena, so the
// caller's buffer may go after the call; OpContext::ints returns the copy (valid until
// Graph::reset), the same in forward and backward.
struct IntArray {
  const int32_t* data = nullptr;
  int64_t size = 0;
  int32_t operator[](int64_t i) const { return data[i]; }
};

// What a custom op's forward and backward see of its node. References stay valid until
// the graph is reset. Errors name the op.
class OpContext {
 public:
  OpContext(Graph& g, int id) : g_(g), id_(id) {}
  int n_inputs() const;
  const Tensor& in(int k) const;
  Tensor& out() const;
  float attr(int k) const;
  // Integer array k (0..3) as given to custom_op.
  IntArray ints(int k) const;
  // Scratch memory saved from forward for backward (arena memory, freed at reset):
  // save(slot, n) in forward allocates n floats in slot 0..3, saved(slot) reads them back.
  float* save(int slot, size_t n) const;
  float* saved(int slot) const;
  // Typed state saved from forward for backward: save<T>(args...) constructs T{args...} in
  // the arena (once per node) and returns it; saved<T>() returns it in backward. An Error
  // for saved<T>() without a save, or with a T of another size than the one saved.
  template <class T, class... Args>
  T& save(Args&&... args) const {
    static_assert(std::is_trivially_copyable<T>::value && std::is_trivially_destructible<T>::value,
                  "OpContext::save<T>: T must be trivially copyable and destructible (the arena "
                  "is freed without running destructors): keep pointers to arena buffers, not "
                  "std::vector");
    static_assert(alignof(T) <= 64, "OpContext::save<T>: T may be aligned to at most 64 bytes");
    return *new (save_state(sizeof(T))) T{std::forward<Args>(args)...};
  }
  template <class T>
  T& saved() const {
    return *static_cast<T*>(saved_state(sizeof(T)));
  }
  bool training() const { return g_.training; }
  // Backward only.
  const Tensor& grad_out() const;
  bool needs_grad(int k) const { return g_.requires_grad(input_id(k)); }
  Tensor& grad_in(int k) const { return g_.grad(input_id(k)); }  // zeroed on first use; add to it
  Graph& graph() const { return g_; }

 private:
  Graph& g_;
  int id_;
  int input_id(int k) const;
  void* save_state(size_t bytes) const;   // bytes of arena for save<T>, 64-byte aligned
  void* saved_state(size_t bytes) const;  // what save_state gave, checked against `bytes`
};

// Records the name of a custom op, so that checks can say which custom ops they covered.
void register_custom_op(const char* name);
bool is_custom_op(const std::string& name);
std::vector<std::string> custom_op_names();

namespace detail {
template <class Op>
void custom_backward(Graph& g, int id) {
  OpContext c(g, id);
  Op::backward(c);
}

// A custom op's node as custom_op appends it.
struct CustomNode {
  const char* name;  // Op::kName
  BackwardFn backward;
  std::initializer_list<Var> inputs;
  int64_t rows, cols;
  std::initializer_list<float> attrs;
  std::initializer_list<IntArray> ints;
};
// Checks the node's inputs, shape, attributes and integer arrays, appends it to g with
// copies of the arrays, and returns it (custom_op.cpp).
Var append_custom_node(Graph& g, const CustomNode& n);
}  // namespace detail

// Appends an Op node (rows, cols) with the given inputs, attributes and integer arrays to
// the graph and runs Op::forward. The node gets a gradient if any input has one (and grad
// is enabled).
template <class Op>
Var custom_op(Graph& g, std::initializer_list<Var> inputs, int64_t rows, int64_t cols,
              std::initializer_list<float> attrs = {}, std::initializer_list<IntArray> ints = {}) {
  static const bool registered = (register_custom_op(Op::kName), true);
  (void)registered;
  Var out = detail::append_custom_node(
      g,
      detail::CustomNode{Op::kName, &detail::custom_backward<Op>, inputs, rows, cols, attrs, ints});
  OpContext c(g, out.id);
  Op::forward(c);
  return out;
}

}  // namespace ablate
