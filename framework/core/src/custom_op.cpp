// Custom ops' nodes (OpContext, the node custom_op appends) and the names of the custom
// ops seen so far (see custom_op.hpp).
#include "ablate/custom_op.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>

#include "node.hpp"

namespace ablate {

namespace {
// Where a custom op node keeps its integer arrays: p[kIntSlot] points to an IntArray table
// in the arena, i[kIntCount] counts them (save() uses p[0..3]).
constexpr int kIntSlot = 4, kIntCount = 0;
}  // namespace

int OpContext::n_inputs() const {
  const Node& n = node(g_, id_);
  int k = 0;
  while (k < 4 && n.in[k] >= 0) ++k;
  return k;
}

const Tensor& OpContext::in(int k) const { return node(g_, input_id(k)).value; }
Tensor& OpContext::out() const { return node(g_, id_).value; }
float OpContext::attr(int k) const { return node(g_, id_).f[k]; }
const Tensor& OpContext::grad_out() const { return node(g_, id_).grad; }

IntArray OpContext::ints(int k) const {
  const Node& n = node(g_, id_);
  if (k < 0 || k >= n.i[kIntCount])
    throw Error(std::string(n.op) + ": integer array " + std::to_string(k) +
                " does not exist; custom_op was given " + std::to_string(n.i[kIntCount]) +
                " (pass them after the attributes)");
  return static_cast<const IntArray*>(n.p[kIntSlot])[k];
}

float* OpContext::save(int slot, size_t n) const {
  float* p = g_.alloc(n);
  node(g_, id_).p[slot] = p;
  return p;
}

float* OpContext::saved(int slot) const { return static_cast<float*>(node(g_, id_).p[slot]); }

void* OpContext::save_state(size_t bytes) const {
  Node& n = node(g_, id_);
  if (n.state)
    throw Error(std::string(n.op) +
                ": save<T>() was called twice for one node; save one struct that holds "
                "everything backward needs");
  n.state = g_.alloc_as<unsigned char>(bytes);
  n.state_bytes = bytes;
  return n.state;
}

void* OpContext::saved_state(size_t bytes) const {
  const Node& n = node(g_, id_);
  if (!n.state)
    throw Error(std::string(n.op) +
                ": saved<T>() finds no saved state; call op.save<T>(...) in forward");
  if (n.state_bytes != bytes)
    throw Error(std::string(n.op) + ": saved<T>() asks for " + std::to_string(bytes) +
                " bytes but forward saved " + std::to_string(n.state_bytes) +
                "; read it back with the type forward saved");
  return n.state;
}

int OpContext::input_id(int k) const {
  const Node& n = node(g_, id_);
  if (k < 0 || k >= 4 || n.in[k] < 0)
    throw Error(std::string(n.op) + ": input " + std::to_string(k) + " does not exist");
  return n.in[k];
}

namespace detail {
Var append_custom_node(Graph& g, const CustomNode& c) {
  if (c.inputs.size() > 4 || c.attrs.size() > 4 || c.ints.size() > 4)
    throw Error(std::string(c.name) +
                ": a custom op takes at most 4 inputs, 4 attributes and 4 integer arrays");
  for (const IntArray& a : c.ints)
    if (a.size < 0 || (a.size > 0 && !a.data))
      throw Error(std::string(c.name) + ": an integer array has " + std::to_string(a.size) +
                  " entries" + (a.size > 0 ? " but no data" : "") +
                  "; give a size >= 0 and, unless 0, its data");
  for (Var v : c.inputs)
    if (!v.valid() || v.id >= static_cast<int>(g.num_nodes()))
      throw Error(std::string(c.name) + ": an input is not a node of this graph");
  if (c.rows <= 0 || c.cols <= 0)
    throw Error(std::string(c.name) + ": output shape (" + std::to_string(c.rows) + ", " +
                std::to_string(c.cols) + ") must be positive");
  Var out = g.make(c.rows, c.cols, c.backward, c.inputs, c.name);
  Node& n = node(g, out);
  int k = 0;
  for (float a : c.attrs) n.f[k++] = a;
  if (c.ints.size() > 0) {
    IntArray* table = g.alloc_as<IntArray>(c.ints.size());
    k = 0;
    for (const IntArray& a : c.ints) {
      int32_t* copy = g.alloc_as<int32_t>(static_cast<size_t>(a.size));
      if (a.size > 0) std::memcpy(copy, a.data, sizeof(int32_t) * static_cast<size_t>(a.size));
      table[k++] = IntArray{copy, a.size};
    }
    n.p[kIntSlot] = table;
    n.i[kIntCount] = static_cast<int64_t>(c.ints.size());
  }
  return out;
}
}  // namespace detail

namespace {
std::mutex& names_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& names() {
  static std::set<std::string> s;
  return s;
}
}  // namespace

void register_custom_op(const char* name) {
  std::lock_guard<std::mutex> lock(names_mutex());
  names().insert(name);
}

bool is_custom_op(const std::string& name) {
  std::lock_guard<std::mutex> lock(names_mutex());
  return names().count(name) > 0;
}

std::vector<std::string> custom_op_names() {
  std::lock_guard<std::mutex> lock(names_mutex());
  return std::vector<std::string>(names().begin(), names().end());
}

}  // namespace ablate
