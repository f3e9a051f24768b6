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
// Rules: up to 4 inputs, 4 float attributes and 4 integer arrays; forward writes every
// element of out(); backward adds (+=) to grad_in(k), which is zeroed before its first use,
// and only for inputs with needs_grad(k); results must not depend on the number of threads (use
// parallel_for with chunks fixed by the shapes). `ablate plugin check` and the test suite
// check a plugin's gradients, custom ops included, by finite differences.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
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
// the graph is reset.
class OpContext {
 public:
  OpContext(Graph& g, int id) : g_(g), id_(id) {}
  int n_inputs() const {
    int k = 0;
    while (k < 4 && node().in[k] >= 0) ++k;
    return k;
  }
  const Tensor& in(int k) const { return g_.node(input_id(k)).value; }
  Tensor& out() const { return node().value; }
  float attr(int k) const { return node().f[k]; }
  // Integer array k (0..3) as given to custom_op.
  IntArray ints(int k) const {
    if (k < 0 || k >= node().i[kIntCount])
      throw Error(std::string(node().op) + ": integer array " + std::to_string(k) +
                  " does not exist; custom_op was given " + std::to_string(node().i[kIntCount]) +
                  " (pass them after the attributes)");
    return static_cast<const IntArray*>(node().p[kIntSlot])[k];
  }
  // Scratch memory saved from forward for backward (arena memory, freed at reset):
  // save(slot, n) in forward allocates n floats in slot 0..3, saved(slot) reads them back.
  float* save(int slot, size_t n) const {
    float* p = g_.alloc(n);
    node().p[slot] = p;
    return p;
  }
  float* saved(int slot) const { return static_cast<float*>(node().p[slot]); }
  bool training() const { return g_.training; }
  // Backward only.
  const Tensor& grad_out() const { return node().grad; }
  bool needs_grad(int k) const { return g_.requires_grad(input_id(k)); }
  Tensor& grad_in(int k) const { return g_.grad(input_id(k)); }  // zeroed on first use; add to it
  Graph& graph() const { return g_; }

  // Where a custom op node keeps its integer arrays: p[kIntSlot] points to an IntArray
  // table in the arena, i[kIntCount] counts them (save() uses p[0..3]).
  static constexpr int kIntSlot = 4, kIntCount = 0;

 private:
  Graph& g_;
  int id_;
  Node& node() const { return g_.node(id_); }
  int input_id(int k) const {
    if (k < 0 || k >= 4 || node().in[k] < 0)
      throw Error(std::string(node().op) + ": input " + std::to_string(k) + " does not exist");
    return node().in[k];
  }
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
}  // namespace detail

// Appends an Op node (rows, cols) with the given inputs, attributes and integer arrays to
// the graph and runs Op::forward. The node gets a gradient if any input has one (and grad
// is enabled).
template <class Op>
Var custom_op(Graph& g, std::initializer_list<Var> inputs, int64_t rows, int64_t cols,
              std::initializer_list<float> attrs = {}, std::initializer_list<IntArray> ints = {}) {
  static const bool registered = (register_custom_op(Op::kName), true);
  (void)registered;
  if (inputs.size() > 4 || attrs.size() > 4 || ints.size() > 4)
    throw Error(std::string(Op::kName) +
                ": a custom op takes at most 4 inputs, 4 attributes and 4 integer arrays");
  for (const IntArray& a : ints)
    if (a.size < 0 || (a.size > 0 && !a.data))
      throw Error(std::string(Op::kName) + ": an integer array has " + std::to_string(a.size) +
                  " entries" + (a.size > 0 ? " but no data" : "") +
                  "; give a size >= 0 and, unless 0, its data");
  for (Var v : inputs)
    if (!v.valid() || v.id >= static_cast<int>(g.num_nodes()))
      throw Error(std::string(Op::kName) + ": an input is not a node of this graph");
  if (rows <= 0 || cols <= 0)
    throw Error(std::string(Op::kName) + ": output shape (" + std::to_string(rows) + ", " +
                std::to_string(cols) + ") must be positive");
  Var out = g.make(rows, cols, &detail::custom_backward<Op>, inputs, Op::kName);
  int k = 0;
  for (float a : attrs) g.node(out).f[k++] = a;
  if (ints.size() > 0) {
    IntArray* table = g.alloc_as<IntArray>(ints.size());
    k = 0;
    for (const IntArray& a : ints) {
      int32_t* copy = g.alloc_as<int32_t>(static_cast<size_t>(a.size));
      if (a.size > 0) std::memcpy(copy, a.data, sizeof(int32_t) * static_cast<size_t>(a.size));
      table[k++] = IntArray{copy, a.size};
    }
    g.node(out).p[OpContext::kIntSlot] = table;
    g.node(out).i[OpContext::kIntCount] = static_cast<int64_t>(ints.size());
  }
  OpContext c(g, out.id);
  Op::forward(c);
  return out;
}

}  // namespace ablate
