// Reverse-mode autodiff on a tape that is rebuilt every step but reuses its memory:
// values, gradients and saved state live in an arena that is sized during the first
// step and then recycled, so a steady-state training step allocates nothing.
// Ops (ops.hpp) append nodes; backward() walks the tape in reverse. A composite op
// written from built-in ops needs no backward of its own; an op with a hand-written
// backward is defined with ablate/custom_op.hpp (which uses make() below), and sees its
// node through OpContext. References to values and gradients stay valid until reset():
// nodes are stored in fixed chunks that never move.
#pragma once
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ablate/tensor.hpp"

namespace ablate {

class Graph;

// The inputs of the matrix products of linear and matmul (ops.hpp), forward and backward:
// float32, or bfloat16 (bf16: float32's sign, exponent and top 7 mantissa bits), to which
// activations, gradients and weights are rounded (to nearest even) for the product, the
// products then summed in float32. The forward pass otherwise computes in float32 (norms and
// their statistics, activation functions, softmax, the loss); what backward reads of
// activations is their bf16 rounding, kept as bf16 bits (see "Values' lifetimes" below). The
// weights themselves, gradients and optimizer states stay float32: mixed precision.
enum class Precision { float32 = 0, bf16 = 1 };
const char* precision_name(Precision p);  // "float32", "bf16"
// The precision named `name`; an Error naming `what` (e.g. "--precision") and the choices
// otherwise.
Precision parse_precision(const std::string& name, const std::string& what);
// The precision of every Graph constructed from now on (Graph::precision's initial value):
// float32 unless set. The CLI sets it from --precision, a training run from train.precision.
Precision default_precision();
void set_default_precision(Precision p);
// A value for Graph::param_epoch that no other call returns (never 0).
uint64_t new_param_epoch();

// A handle to a node of the current tape (valid until Graph::reset()).
struct Var {
  int id = -1;
  bool valid() const { return id >= 0; }
};

using BackwardFn = void (*)(Graph& g, int node);

// The tape's record of an op: private to the core (framework/core/src/node.hpp).
struct Node;

// An auxiliary loss or metric a model plugin adds during its forward pass (a mixture of
// experts' load-balancing loss, a router's entropy): see Graph::add_aux.
struct AuxTerm {
  std::string name;    // [a-z0-9_]+, begun with the plugin's name: "moe_balance"
  Var value;           // a (1, 1) node of this tape
  float weight = 0;    // in the training loss: loss + weight * value; 0: logged only
  int64_t layer = -1;  // the block it comes from (BuildContext::dims.layer), -1: none
};

// Wall time per op family, forward and backward, summed over the steps a Graph was
// profiled (Graph::profile). Forward time of a node is the time from its creation to the
// creation of the next node (ops compute their value right after Graph::make), so code
// between ops is charged to the op before it; leaves are charged to "input". In a bf16
// graph the passes over kept values (to bf16 bits after their last forward read, widened
// back for a backward that reads floats) have their own entry, kBf16BitsOp, rather than
// being charged to the op whose creation or backward runs them.
struct OpProfile {
  struct Entry {
    double forward_s = 0, backward_s = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Entry> ops;
};
inline constexpr const char* kBf16BitsOp = "bf16 bits (kept values)";

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Forgets the tape; keeps (and after the first steps, consolidates) the memory.
  void reset();

  // Leaves.
  Var param(Parameter& p);                                      // grad goes to p.grad
  Var constant(const float* data, int64_t rows, int64_t cols);  // copied, no grad
  Var input(int64_t rows, int64_t cols);                        // zeroed, no grad; fill value()

  // Node creation for ops: value is allocated (uninitialised) in the arena; the node
  // requires grad if any input does and grad is enabled.
  // `op` names the op family in profiles (a string literal).
  Var make(int64_t rows, int64_t cols, BackwardFn backward, std::initializer_list<Var> inputs,
           const char* op = "op");

  // What may be read of node `id` (tests, checks, gradient sync): its op family ("input"
  // for leaves, "linear", a custom op's kName), its value, and the parameter a leaf is
  // bound to (or null). An Error for an id that is not a node of this tape.
  struct NodeInfo {
    const char* op;
    const Tensor& value;
    const Parameter* param;
  };
  NodeInfo node(int id) const;
  NodeInfo node(Var v) const { return node(v.id); }

  // A node's value, valid until reset(). Reading it through value() tells the graph when it is
  // last used: see "Values' lifetimes" below.
  Tensor& value(Var v);
  // The gradient buffer of a node, allocated and zeroed on first use. backward() gives a
  // node's gradient back to the arena once the node's own backward has carried it to the
  // node's inputs (no op reads it later), and later gradients reuse those floats, so a step
  // holds the gradients of a few layers at a time rather than all of them; reading it after
  // that is an Error. Parameters' gradients (Parameter::grad) are kept.
  Tensor& grad(Var v) { return grad(v.id); }
  Tensor& grad(int id);
  // The same for an op that writes every element of it: on the first contribution the
  // buffer is not zeroed and `fresh` is set, and the op overwrites (or zeroes each block
  // as it goes, in cache) instead of accumulating.
  Tensor& grad_unzeroed(int id, bool& fresh);
  bool requires_grad(Var v) const { return requires_grad(v.id); }
  bool requires_grad(int id) const;

  // Scratch memory from the arena, valid until reset(). Aligned to 64 bytes.
  float* alloc(size_t n_floats);
  template <class T>
  T* alloc_as(size_t n) {
    return reinterpret_cast<T*>(alloc((n * sizeof(T) + sizeof(float) - 1) / sizeof(float)));
  }

  // Seeds the loss gradient with 1 and runs every node's backward in reverse order.
  void backward(Var loss);

  // Training mode enables dropout; grad mode records what backward needs.
  bool training = false;
  bool grad_enabled = true;
  // Dropout and other stochastic ops derive their randomness from (seed, step, node).
  uint64_t seed = 0;
  uint64_t step = 0;

  // When set, forward and backward time per op family is added to *profile (costs a
  // clock read per node). Call profile_flush() after the forward pass of a step when no
  // backward follows (backward() does it itself).
  OpProfile* profile = nullptr;
  void profile_flush();

  size_t arena_bytes() const;
  // Bytes of the arena this step has used so far (forward and backward values, gradients).
  size_t step_bytes() const { return current_ * sizeof(float); }
  size_t num_nodes() const { return n_nodes_; }

 private:
  struct Block {
    std::unique_ptr<float[], void (*)(float*)> data{nullptr, nullptr};
    size_t size = 0;
    size_t used = 0;
  };
  // The tape: node id -> chunks_[id >> kChunkBits][id & kChunkMask]. Chunks are kept
  // across reset(), so a steady-state step allocates none.
  static constexpr size_t kChunkBits = 9, kChunkMask = (size_t{1} << kChunkBits) - 1;
  std::vector<std::unique_ptr<Node[]>> chunks_;
  friend struct TapeAccess;  // the core's ops read and write nodes (node.hpp)
  size_t n_nodes_ = 0;
  Var push(const Node& n);
  std::vector<Block> blocks_;
  void profile_tick(const char* next_op);
  // Runs f, a pass over kept values (to bf16 bits, or widened back), its time in a profile
  // going to kBf16BitsOp's entry, forward or backward, and not to the open op.
  template <class F>
  void bits_pass(bool backward, const F& f);
  const char* open_op_ = nullptr;  // op whose forward time is being measured
  std::chrono::steady_clock::time_point open_since_;
  size_t peak_ = 0;     // floats used in the largest step so far
  size_t current_ = 0;  // floats used in this step

 public:
  // Data-parallel training: this graph computes sequences [batch_offset, batch_offset +
  // batch_rows) of a larger batch, and stochastic ops draw what those sequences would draw
  // in the whole batch. 0 rows: the batch is whole. (Last, so that older plugins' view of
  // the members above is unchanged.)
  int64_t batch_rows = 0;
  int64_t batch_offset = 0;
  // Called by backward() after it visits each node, with the node's id (gradient
  // transfers start from here while backward goes on; grad_sync.hpp). Null: nothing.
  void (*after_backward_node)(void* ctx, int id) = nullptr;
  void* after_backward_ctx = nullptr;

  // Inputs of matrix products (see Precision): default_precision() when the graph is made.
  Precision precision = default_precision();
  // The bf16 copies of parameters that the products read are made once and reused after
  // reset() while param_epoch stays the same and nonzero: whoever sets it (the trainer, for
  // the micro-batches of one optimizer step; generation) changes it, or sets 0, whenever a
  // parameter's values change. 0 (the default): made again after every reset().
  uint64_t param_epoch = 0;
  // reset() calls so far.
  uint64_t resets() const { return resets_; }
  // The ops' own state kept across reset() (the bf16 copies of parameters; linalg.cpp).
  std::shared_ptr<void> op_state;

  // Auxiliary losses and metrics (AuxTerm): a model plugin adds one term per call of its
  // forward; reset() forgets them. Training adds weight * value of each to the objective's
  // loss (so the term's gradient reaches the plugin's parameters through backward), checks
  // that each is finite (an error names the term and its layer), and logs each name in
  // run.h5's train table as aux_<name>, the mean of that name's terms (over layers); the
  // evaluation losses (train_loss, val_loss) are the objective's alone, comparable across
  // variants. `plugin check` checks each term's gradient by finite differences
  // (docs/PLUGINS.md, "Auxiliary losses"). An Error for a value that is not (1, 1), a name outside
  // [a-z0-9_]+ or a weight that is negative or not finite.
  void add_aux(const std::string& name, Var value, float weight, int64_t layer = -1);
  const std::vector<AuxTerm>& aux() const { return aux_; }

 private:
  uint64_t resets_ = 0;
  std::vector<AuxTerm> aux_;
  // The released buffers, the plans and this step's record of reads (graph.cpp).
  struct Lifetimes;
  std::unique_ptr<Lifetimes> life_;
  void before_node(int id, BackwardFn backward, const char* op, const int* in, bool requires_grad,
                   const Parameter* param);
  float* take(size_t floats);
  void give(size_t floats, float* p);
  void restore(int id, int reader);
  // Node id's value as the bf16 bits a step following its plan will keep it in, made now
  // (ahead of its giving back, which then converts nothing), or null where the plan keeps no
  // bits of it: a bf16 product's input rounded once, into the bits backward reads.
  const uint16_t* bits_now(int id);
  void make_bits(Node& v);  // v's bits taken from the arena and made from its floats

 public:
  // Values' lifetimes. A step's tape is the same from step to step, so each step follows a
  // plan made from an earlier step of the same grad mode (with grad or under NoGrad): the value
  // of an op's node goes back to the arena once the last node that reads it in the forward pass
  // has been made (its forward done) unless a backward reads it, and in a bf16 graph a value
  // that backward reads only through bf16 roundings (the input of a matrix product, a norm, an
  // activation function or mul; ReLU's output) is kept as bf16 bits, half its floats, in the
  // smallest given-back range that holds them (its floats go back whole, for the next layer's
  // value of the same size; a bf16 product rounds its input into those bits as it reads it,
  // bits_now, so that they are not made twice); the backward that reads it takes the bits as
  // they are (products, norms, activation functions, attention, mul but for a broadcast row)
  // or has them widened again. A value is
  // read when a node takes it as an input or when Graph::value() returns it: code that keeps a
  // Tensor across the making of other nodes must call value() again where it reads it. A step
  // whose tape departs from its plan (another op, other inputs) stops following it there and
  // plans the next; reading a value the plan gave back is an Error that names it.
  // A plugin whose nodes depend on the data (a mixture of experts skips an expert no token
  // chose) calls tape_depends_on_data() before it makes them: values are then kept from that
  // point of the tape on, in this step and in those it plans.
  // ABLATE_KEEP_ACTIVATIONS=1 in the environment keeps every value (no plan is followed).
  // planned(): whether a plan for the current grad mode and precision is ready, so that the
  // next step frees as it goes (a step of one sequence plans a larger one: the trainer runs one
  // first, so that no step holds every value).
  bool planned() const;
  void tape_depends_on_data();
};

// Disables grad recording in a scope (evaluation, generation).
class NoGrad {
 public:
  explicit NoGrad(Graph& g) : g_(g), saved_(g.grad_enabled) { g.grad_enabled = false; }
  ~NoGrad() { g_.grad_enabled = saved_; }

 private:
  Graph& g_;
  bool saved_;
};

}  // namespace ablate
