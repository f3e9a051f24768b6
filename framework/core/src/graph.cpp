// Tape and arena of the autodiff graph (see graph.hpp).
#include "ablate/graph.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "ablate/error.hpp"
#include "node.hpp"
#include "ops/kernels.hpp"

namespace ablate {
namespace {
constexpr size_t kAlignFloats = 16;  // 64 bytes
constexpr size_t kMinBlock = size_t{1} << 20;

// Arena blocks are mapped from the kernel and unmapped when freed, so that their memory leaves
// the process with them. From the heap, glibc would keep a freed block resident when it is under
// its mmap threshold, which it raises to the size of each large block freed (up to 32 MB): the
// blocks of a run's first steps, replaced by one block after them (reset()), stayed in its peak
// RSS. A 64-byte header before the floats holds the mapping's length. Under AddressSanitizer
// they come from the heap, whose ends it checks.
float* aligned_floats(size_t n) {
  const size_t bytes = ((n * sizeof(float) + 63) / 64) * 64;
#if defined(__SANITIZE_ADDRESS__)
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  return static_cast<float*>(p);
#else
  const size_t length = 64 + bytes;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  std::memcpy(p, &length, sizeof length);
  return reinterpret_cast<float*>(static_cast<char*>(p) + 64);
#endif
}
void free_floats(float* p) {
#if defined(__SANITIZE_ADDRESS__)
  std::free(p);
#else
  char* base = reinterpret_cast<char*>(p) - 64;
  size_t length;
  std::memcpy(&length, base, sizeof length);
  munmap(base, length);
#endif
}
// The floats the arena takes for n: a whole number of 64-byte lines, at least one.
size_t rounded_floats(size_t n) {
  return n == 0 ? kAlignFloats : (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}
}  // namespace

Graph::Graph() { chunks_.reserve(64); }
Graph::~Graph() = default;

namespace {
std::atomic<int> g_default_precision{static_cast<int>(Precision::float32)};
}
const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "float32"; }
Precision parse_precision(const std::string& name, const std::string& what) {
  if (name == "float32") return Precision::float32;
  if (name == "bf16") return Precision::bf16;
  throw Error(what + ": '" + name +
              "' is not a precision; use float32 or bf16 (bf16: matrix products of bf16-rounded "
              "inputs with float32 sums)");
}
Precision default_precision() {
  return static_cast<Precision>(g_default_precision.load(std::memory_order_relaxed));
}
void set_default_precision(Precision p) {
  g_default_precision.store(static_cast<int>(p), std::memory_order_relaxed);
}
uint64_t new_param_epoch() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void Graph::reset() {
  ++resets_;
  aux_.clear();
  kernels::sync_scratch();  // no kernel is running: this thread's scratch may move
  open_op_ = nullptr;
  n_nodes_ = 0;
  peak_ = std::max(peak_, current_);
  current_ = 0;
  // After a step that needed several blocks, replace them by one block of the peak
  // size: from then on the same step fits without allocating.
  if (blocks_.size() > 1) {
    blocks_.clear();
    Block b;
    b.data = {aligned_floats(peak_), free_floats};
    b.size = peak_;
    blocks_.push_back(std::move(b));
  }
  for (auto& b : blocks_) b.used = 0;
  free_grads_.clear();
}

float* Graph::alloc(size_t n) {
  n = rounded_floats(n);
  current_ += n;
  for (auto& b : blocks_) {
    if (b.size - b.used >= n) {
      float* p = b.data.get() + b.used;
      b.used += n;
      return p;
    }
  }
  Block b;
  b.size = std::max(n, std::max(kMinBlock, peak_ / 4));
  b.data = {aligned_floats(b.size), free_floats};
  b.used = n;
  float* p = b.data.get();
  blocks_.push_back(std::move(b));
  return p;
}

size_t Graph::arena_bytes() const {
  size_t s = 0;
  for (auto& b : blocks_) s += b.size * sizeof(float);
  return s;
}

void Graph::profile_tick(const char* next_op) {
  auto now = std::chrono::steady_clock::now();
  if (open_op_) {
    auto& e = profile->ops[open_op_];
    e.forward_s += std::chrono::duration<double>(now - open_since_).count();
    e.calls += 1;
  }
  open_op_ = next_op;
  open_since_ = now;
}

Var Graph::push(const Node& n) {
  if (n_nodes_ >> kChunkBits >= chunks_.size())
    chunks_.push_back(std::make_unique<Node[]>(kChunkMask + 1));
  const int id = static_cast<int>(n_nodes_++);
  ablate::node(*this, id) = n;
  return Var{id};
}

void Graph::profile_flush() {
  if (profile) profile_tick(nullptr);
}

Var Graph::param(Parameter& p) {
  if (profile) profile_tick("input");
  Node n;
  n.value = p.value;
  n.grad = p.grad;
  n.param = &p;
  n.requires_grad = grad_enabled;
  return push(n);
}

Var Graph::constant(const float* data, int64_t rows, int64_t cols) {
  Var v = input(rows, cols);
  std::memcpy(value(v).data, data, sizeof(float) * static_cast<size_t>(rows * cols));
  return v;
}

Var Graph::input(int64_t rows, int64_t cols) {
  if (profile) profile_tick("input");
  Node n;
  n.value = Tensor{alloc(static_cast<size_t>(rows * cols)), rows, cols};
  std::memset(n.value.data, 0, sizeof(float) * static_cast<size_t>(rows * cols));
  return push(n);
}

Var Graph::make(int64_t rows, int64_t cols, BackwardFn backward, std::initializer_list<Var> inputs,
                const char* op) {
  if (inputs.size() > 4) throw Error("Graph::make: at most 4 inputs");
  if (profile) profile_tick(op);
  Node n;
  n.op = op;
  n.value = Tensor{alloc(static_cast<size_t>(rows * cols)), rows, cols};
  n.backward = backward;
  int k = 0;
  bool any = false;
  for (Var v : inputs) {
    n.in[k++] = v.id;
    any = any || requires_grad(v);
  }
  n.requires_grad = grad_enabled && any && backward != nullptr;
  return push(n);
}

Tensor& Graph::grad(int id) {
  bool fresh = false;
  Tensor& t = grad_unzeroed(id, fresh);
  if (fresh) {
    // Activations' gradients (a fused qkv's is 2048 x 96 floats at seed000) are zeroed by
    // both cores: one would leave the other idle (0.8% of a seed000 step's samples).
    constexpr int64_t kChunk = int64_t{1} << 15;
    kernels::parallel_chunks(t.numel(), kChunk, [&](int64_t i0, int64_t i1) {
      std::memset(t.data + i0, 0, sizeof(float) * static_cast<size_t>(i1 - i0));
    });
  }
  return t;
}

Graph::NodeInfo Graph::node(int id) const {
  if (id < 0 || static_cast<size_t>(id) >= n_nodes_)
    throw Error("Graph::node: " + std::to_string(id) + " is not a node of this tape (it has " +
                std::to_string(n_nodes_) + ")");
  const Node& n = ablate::node(*this, id);
  return NodeInfo{n.op, n.value, n.param};
}

Tensor& Graph::value(Var v) { return ablate::node(*this, v.id).value; }

bool Graph::requires_grad(int id) const { return id >= 0 && ablate::node(*this, id).requires_grad; }

Tensor& Graph::grad_unzeroed(int id, bool& fresh) {
  Node& n = ablate::node(*this, id);
  fresh = !n.grad.data;
  if (!fresh) return n.grad;
  if (n.grad_released)
    throw Error("Graph::grad: the gradient of node " + std::to_string(id) + " (" + n.op +
                ") is gone: backward() releases each node's gradient once the node's backward has "
                "carried it to its inputs, and a tape is run backward once. Read the gradients of "
                "parameters (Parameter::grad), or build the tape again (reset()) to run it again");
  const size_t want = rounded_floats(static_cast<size_t>(n.value.numel()));
  // The smallest released buffer that holds it; the arena's next floats if none does.
  size_t best = free_grads_.size();
  for (size_t k = 0; k < free_grads_.size(); ++k)
    if (free_grads_[k].first >= want &&
        (best == free_grads_.size() || free_grads_[k].first < free_grads_[best].first))
      best = k;
  float* data;
  if (best < free_grads_.size()) {
    n.grad_floats = free_grads_[best].first;
    data = free_grads_[best].second;
    free_grads_[best] = free_grads_.back();
    free_grads_.pop_back();
  } else {
    n.grad_floats = want;
    data = alloc(want);
  }
  n.grad = Tensor{data, n.value.rows, n.value.cols};
  return n.grad;
}

void Graph::backward(Var loss) {
  if (!requires_grad(loss))
    throw Error("Graph::backward: the loss does not depend on any parameter");
  Tensor& g = grad(loss);
  for (int64_t i = 0; i < g.numel(); ++i) g.data[i] = 1.0f;
  profile_flush();
  for (int id = loss.id; id >= 0; --id) {
    Node& n = ablate::node(*this, id);
    if (n.requires_grad && n.backward && n.grad.data) {
      if (!profile) {
        n.backward(*this, id);
      } else {
        auto t0 = std::chrono::steady_clock::now();
        n.backward(*this, id);
        profile->ops[n.op].backward_s +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
    if (after_backward_node) after_backward_node(after_backward_ctx, id);
    // Every reader of this gradient has run: the node's consumers (later ids) before it,
    // its own backward now.
    if (n.grad_floats > 0) {
      free_grads_.emplace_back(n.grad_floats, n.grad.data);
      n.grad = Tensor{};
      n.grad_floats = 0;
      n.grad_released = true;
    }
  }
}

void Graph::add_aux(const std::string& name, Var value, float weight, int64_t layer) {
  const std::string where = "auxiliary term '" + name + "'" +
                            (layer >= 0 ? " (layer " + std::to_string(layer) + ")" : "");
  if (name.empty() ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
    throw Error(where +
                ": a name is lowercase letters, digits and '_', begun with the plugin's "
                "name (e.g. 'moe_balance')");
  if (!value.valid() || value.id >= static_cast<int>(n_nodes_))
    throw Error(where + ": the value is not a node of this graph");
  const Tensor& t = ablate::node(*this, value).value;
  if (t.rows != 1 || t.cols != 1)
    throw Error(where + ": the value is (" + std::to_string(t.rows) + ", " +
                std::to_string(t.cols) + "), expected a (1, 1) scalar (reduce it with sum())");
  if (!std::isfinite(weight) || weight < 0)
    throw Error(where + ": weight " + std::to_string(weight) +
                " is not a finite number >= 0 (0 logs the term without training on it)");
  aux_.push_back(AuxTerm{name, value, weight, layer});
}

}  // namespace ablate
