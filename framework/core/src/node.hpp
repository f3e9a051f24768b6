// The tape's record of one op, private to the core: ops (src/ops) and custom ops
// (custom_op.cpp) keep their inputs and saved state here; plugins see a node through
// OpContext (custom_op.hpp) and Graph::node's read-only NodeInfo.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ablate/graph.hpp"

namespace ablate {

struct Node {
  Tensor value;
  Tensor grad;                    // data is null until first needed
  BackwardFn backward = nullptr;  // null for leaves
  Parameter* param = nullptr;     // leaves bound to a parameter accumulate into it
  bool requires_grad = false;
  int in[4] = {-1, -1, -1, -1};                                // input node ids
  float f[4] = {0, 0, 0, 0};                                   // saved float attributes
  int64_t i[8] = {0, 0, 0, 0, 0, 0, 0, 0};                     // saved integer attributes
  void* p[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};  // saved buffers (arena) or pointers
  void* state = nullptr;       // a custom op's typed saved state (OpContext::save<T>), arena
  size_t state_bytes = 0;      // its size, checked by OpContext::saved<T>
  const char* op = "input";    // op family, for profiles ("linear", "attention", ...)
  size_t grad_floats = 0;      // floats of the arena that grad holds (0: none, or a parameter's)
  bool grad_released = false;  // backward() has passed this node and given grad's floats back
  // What backward reads (Graph's "Values' lifetimes"): bit k the value of input k, kReadsOwn
  // the node's own value; of those (kReadsOwn too), the ones it reads only through bf16
  // roundings in a bf16 graph (a bf16 copy serves it bitwise). Every value unless the op
  // declares less (backward_reads below): custom ops read all.
  uint8_t reads = 0x1f;
  uint8_t reads_rounded = 0;
  // Of reads_rounded, the values backward takes as the bf16 bits they wait in (Held::bits)
  // where they do, with no float32 copy: Graph::backward does not widen them for it.
  uint8_t reads_bits = 0;
  enum class Held : uint8_t { value, gone, bits };
  Held held = Held::value;  // the value's floats; given back; kept as bf16 bits in `bits`
  size_t value_floats = 0;  // floats of the arena the value holds (0: a leaf's, not planned)
  uint16_t* bits = nullptr;
  // The value's floats are bf16 values: widened from `bits` (Graph::restore). A backward reads
  // them as they are where it would read their bf16 rounding (kernels.hpp: rounding_of).
  bool bf16_exact = false;
  // Held::value with `bits` already made: a product rounded the value into the bits the plan
  // keeps it in (Graph::bits_now), which its giving back then keeps without converting again.
  bool bits_made = false;
};

constexpr uint8_t kReadsOwn = 0x10;
// Declares what node n's backward reads: `inputs` (bit k: input k's value), its own value,
// `rounded` (of those, bit k or kReadsOwn: the ones read only through bf16 roundings in a
// bf16 graph), and `bits` (of those, the ones it reads as their bits where they wait as bits).
inline void backward_reads(Node& n, uint8_t inputs, bool own, uint8_t rounded = 0,
                           uint8_t bits = 0) {
  n.reads = static_cast<uint8_t>(inputs | (own ? kReadsOwn : 0));
  n.reads_rounded = rounded;
  n.reads_bits = bits;
}

// The core's access to Graph's tape (a friend of Graph).
struct TapeAccess {
  static Node& at(const Graph& g, int id) {
    return g.chunks_[static_cast<size_t>(id) >> Graph::kChunkBits]
                    [static_cast<size_t>(id) & Graph::kChunkMask];
  }
  static const uint16_t* bits_now(Graph& g, int id) { return g.bits_now(id); }
};

// Node `id` of g's tape (valid until g.reset(); nodes never move).
inline Node& node(Graph& g, int id) { return TapeAccess::at(g, id); }
inline const Node& node(const Graph& g, int id) { return TapeAccess::at(g, id); }
inline Node& node(Graph& g, Var v) { return node(g, v.id); }

}  // namespace ablate
