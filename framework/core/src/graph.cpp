// Tape and arena of the autodiff graph (see graph.hpp).
#include "ablate/graph.hpp"

#include "ablate/sanitizer.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#if ABLATE_ASAN
#include <sanitizer/asan_interface.h>
#define ABLATE_POISON(p, bytes) ASAN_POISON_MEMORY_REGION(p, bytes)
#define ABLATE_UNPOISON(p, bytes) ASAN_UNPOISON_MEMORY_REGION(p, bytes)
#else
#define ABLATE_POISON(p, bytes) ((void)(p), (void)(bytes))
#define ABLATE_UNPOISON(p, bytes) ((void)(p), (void)(bytes))
#endif

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
#if ABLATE_ASAN
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
#if ABLATE_ASAN
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
// The floats the arena takes for the bf16 bits of n values.
size_t bits_floats(int64_t n) { return rounded_floats((static_cast<size_t>(n) + 1) / 2); }
}  // namespace

// What a step's values' lifetimes need (graph.hpp, "Values' lifetimes").
struct Graph::Lifetimes {
  // A node as a plan knows it: a later step follows the plan while its nodes are the same.
  struct Sig {
    BackwardFn backward;
    const char* op;
    const Parameter* param;
    int in[4];
    bool requires_grad;
    bool operator==(const Sig& o) const {
      return backward == o.backward && op == o.op && param == o.param && in[0] == o.in[0] &&
             in[1] == o.in[1] && in[2] == o.in[2] && in[3] == o.in[3] &&
             requires_grad == o.requires_grad;
    }
  };
  struct Plan {
    bool ready = false;
    Precision precision = Precision::float32;
    size_t horizon = SIZE_MAX;  // nodes from here on depend on the data: not followed
    std::vector<Sig> sig;
    // Made when node j is about to be made: act[start[j], start[j + 1]), each a node id * 2
    // + 1 to keep its value as bf16 bits, + 0 to give it back.
    std::vector<uint32_t> start;
    std::vector<int> act;
    // Read after the tape was made (the loss, metrics' logits): kept through backward, which
    // gives every other value back once its node's backward has run.
    std::vector<uint8_t> after;
    std::vector<uint8_t> bits;  // per node: kept as bf16 bits after its last forward read
  };
  Plan plan[2];  // [grad_enabled]
  // This step: per node, the first node whose making may give its value back (reads so far).
  std::vector<int> until;
  std::vector<Sig> sig;  // this step's nodes
  int mode = -1;         // this step's grad mode, set at its first node
  bool following = false;
  bool started = false;       // this step began following its plan
  bool broken = false;        // and departed from it before the plan's horizon
  size_t horizon = SIZE_MAX;  // tape_depends_on_data() was first called with this many nodes
  // Ranges given back, (floats, address) in address order, touching ones merged: later values,
  // gradients and widened bits take the smallest that holds them.
  std::vector<std::pair<size_t, float*>> free;
  std::vector<int> widened;  // bf16 values widened for the node whose backward runs
  bool keep_all = [] {
    const char* e = std::getenv("ABLATE_KEEP_ACTIVATIONS");
    return e && *e && std::string(e) != "0";
  }();
};

Graph::Graph() : life_(std::make_unique<Lifetimes>()) { chunks_.reserve(64); }
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

namespace {
// The plan of a step whose tape had `n` nodes read as `until` records (see Lifetimes).
template <class Plan, class At>
void make_plan(Plan& plan, size_t n, const std::vector<int>& until, Precision precision, At at) {
  std::vector<uint8_t> any(n, 0), full(n, 0);  // read by a backward; as float32
  for (size_t r = 0; r < n; ++r) {
    const Node& R = at(r);
    if (!R.requires_grad || !R.backward) continue;
    auto read = [&](size_t v, unsigned bit) {
      any[v] = 1;
      if (precision != Precision::bf16 || !(R.reads_rounded & bit)) full[v] = 1;
    };
    if (R.reads & kReadsOwn) read(r, kReadsOwn);
    for (int k = 0; k < 4; ++k)
      if (R.in[k] >= 0 && (R.reads & (1u << k))) read(static_cast<size_t>(R.in[k]), 1u << k);
  }
  plan.start.assign(n + 1, 0);
  plan.act.clear();
  auto when = [&](size_t v) -> size_t {  // the node whose making acts on v, or n: never
    const Node& V = at(v);
    if (V.value_floats == 0 || full[v]) return n;
    return std::min(n, static_cast<size_t>(until[v]));
  };
  for (size_t v = 0; v < n; ++v)
    if (when(v) < n) ++plan.start[when(v) + 1];
  for (size_t j = 0; j < n; ++j) plan.start[j + 1] += plan.start[j];
  plan.act.resize(plan.start[n]);
  plan.bits.assign(n, 0);
  std::vector<uint32_t> fill(plan.start.begin(), plan.start.end() - 1);
  for (size_t v = 0; v < n; ++v) {
    const size_t j = when(v);
    if (j < n) plan.act[fill[j]++] = static_cast<int>(v) * 2 + (any[v] ? 1 : 0);
    plan.bits[v] = j < n && any[v];
  }
  plan.precision = precision;
  plan.ready = true;
}
}  // namespace

void Graph::tape_depends_on_data() {
  life_->horizon = std::min(life_->horizon, n_nodes_);
  life_->following = false;
}

bool Graph::planned() const {
  const Lifetimes::Plan& p = life_->plan[grad_enabled ? 1 : 0];
  return !life_->keep_all && p.ready && p.precision == precision;
}

void Graph::reset() {
  Lifetimes& L = *life_;
  if (n_nodes_ > 0 && L.mode >= 0 && !L.keep_all) {
    Lifetimes::Plan& p = L.plan[L.mode];
    // A step that followed its plan to the end (or to its horizon) plans the next as it was;
    // another plans anew.
    const bool same = L.started && !L.broken && L.horizon == p.horizon &&
                      (p.horizon != SIZE_MAX || p.sig.size() == n_nodes_);
    if (!same) {
      const size_t n = std::min(n_nodes_, L.horizon);
      make_plan(p, n, L.until, precision, [this](size_t id) -> const Node& {
        return ablate::node(*this, static_cast<int>(id));
      });
      p.sig.assign(L.sig.begin(), L.sig.begin() + static_cast<std::ptrdiff_t>(n));
      p.after.resize(n);
      for (size_t v = 0; v < n; ++v) p.after[v] = L.until[v] > static_cast<int>(n_nodes_);
      p.horizon = L.horizon;
    }
  }
  L.mode = -1;
  L.following = L.started = L.broken = false;
  L.horizon = SIZE_MAX;
  L.free.clear();
  L.widened.clear();
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
  for (auto& b : blocks_) {
    b.used = 0;
    ABLATE_UNPOISON(b.data.get(), b.size * sizeof(float));
  }
}

// `floats` (a multiple of 16) from the smallest given-back range that holds them; else from a
// range that ends where a block's used floats end, grown by the floats after it; else new.
float* Graph::take(size_t floats) {
  auto& free = life_->free;
  size_t best = free.size();
  for (size_t k = 0; k < free.size(); ++k)
    if (free[k].first >= floats && (best == free.size() || free[k].first < free[best].first))
      best = k;
  if (best == free.size()) {
    for (size_t k = 0; k < free.size() && best == free.size(); ++k)
      for (auto& b : blocks_)
        if (free[k].second + free[k].first == b.data.get() + b.used &&
            b.size - b.used >= floats - free[k].first) {
          b.used += floats - free[k].first;
          current_ += floats - free[k].first;
          free[k].first = floats;
          best = k;
          break;
        }
    if (best == free.size()) return alloc(floats);
  }
  float* p = free[best].second;
  ABLATE_UNPOISON(p, floats * sizeof(float));
  if (free[best].first > floats) {
    free[best].first -= floats;
    free[best].second += floats;
  } else {
    free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
  }
  return p;
}

// Gives [p, p + floats) back, merged with the given-back ranges it touches (the list is in
// address order).
void Graph::give(size_t floats, float* p) {
  ABLATE_POISON(p, floats * sizeof(float));
  auto& free = life_->free;
  auto it =
      std::lower_bound(free.begin(), free.end(), p,
                       [](const std::pair<size_t, float*>& r, float* q) { return r.second < q; });
  if (it != free.end() && p + floats == it->second) {  // joins the next
    it->second = p;
    it->first += floats;
  } else {
    it = free.emplace(it, floats, p);
  }
  if (it != free.begin()) {
    auto prev = std::prev(it);
    if (prev->second + prev->first == it->second) {  // and the previous
      prev->first += it->first;
      free.erase(it);
    }
  }
}

// Node `id`'s value back as float32 for `reader` (a node being made, or -1: Graph::value):
// widened from its bf16 bits, or an Error if it was given back.
void Graph::restore(int id, int reader) {
  Node& n = ablate::node(*this, id);
  if (n.held == Node::Held::bits) {
    float* d = take(rounded_floats(static_cast<size_t>(n.value.numel())));
    const uint16_t* b = n.bits;
    // Split as an elementwise op over it is (items_per_task): each thread widens the part its
    // own ops wrote and read.
    kernels::parallel_chunks(n.value.numel(), kernels::items_per_task(1),
                             [&](int64_t i0, int64_t i1) {
                               for (int64_t i = i0; i < i1; ++i)
                                 d[i] = kernels::bf16_to_float(b[i]);
                             });
    n.value.data = d;
    n.held = Node::Held::value;
    n.bf16_exact = true;
    return;
  }
  throw Error("Graph: the value of node " + std::to_string(id) + " (" + n.op + ") is read " +
              (reader >= 0 ? "by node " + std::to_string(reader) + " (being made)"
                           : std::string("through Graph::value()")) +
              " after this step's plan gave it back: an earlier step of the same tape read it "
              "last before node " +
              std::to_string(life_->until[static_cast<size_t>(id)]) +
              " was made. A tape reads the same values at the same points every step (see "
              "\"Values' lifetimes\" in ablate/graph.hpp): call Graph::value() where the value is "
              "read, not earlier; ABLATE_KEEP_ACTIVATIONS=1 keeps every value");
}

template <class F>
void Graph::bits_pass(bool backward, const F& f) {
  if (!profile) return f();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const auto dt = std::chrono::steady_clock::now() - t0;
  auto& e = profile->ops[kBf16BitsOp];
  (backward ? e.backward_s : e.forward_s) += std::chrono::duration<double>(dt).count();
  e.calls += backward ? 0 : 1;
  if (!backward) open_since_ += dt;  // not the open op's time
}

void Graph::before_node(int id, BackwardFn backward, const char* op, const int* in,
                        bool requires_grad, const Parameter* param) {
  Lifetimes& L = *life_;
  const size_t j = static_cast<size_t>(id);
  if (j == 0) {
    L.mode = grad_enabled ? 1 : 0;
    L.following = L.started = planned();
  }
  Lifetimes::Sig sig{backward, op, param, {in[0], in[1], in[2], in[3]}, requires_grad};
  if (L.sig.size() <= j) {
    L.sig.resize(j + 1);
    L.until.resize(j + 1);
  }
  L.sig[j] = sig;
  L.until[j] = id + 1;
  if (L.following) {
    const Lifetimes::Plan& p = L.plan[L.mode];
    if (j >= p.horizon) {
      L.following = false;
    } else if (j >= p.sig.size() || !(p.sig[j] == sig)) {
      L.following = false;
      L.broken = true;
    } else {
      for (uint32_t a = p.start[j]; a < p.start[j + 1]; ++a) {
        Node& v = ablate::node(*this, p.act[a] / 2);
        if (v.held != Node::Held::value || v.value_floats == 0) continue;
        const size_t floats = v.value_floats;
        v.held = Node::Held::gone;
        if (p.act[a] & 1) {
          // The bits into the smallest given-back range that holds them, the value's floats
          // back whole: the next layer's value of the same size takes them (bits left in the
          // value's first half would leave half-sized holes that no such value fits). A
          // product may have made them already (bits_now).
          if (!v.bits_made) bits_pass(false, [&] { make_bits(v); });
          v.value_floats = bits_floats(v.value.numel());
          v.held = Node::Held::bits;
        }
        give(floats, v.value.data);
        v.value.data = nullptr;
      }
    }
  }
  for (int k = 0; k < 4; ++k) {
    if (in[k] < 0) continue;
    if (ablate::node(*this, in[k]).held != Node::Held::value)
      bits_pass(false, [&] { restore(in[k], id); });
    L.until[static_cast<size_t>(in[k])] = std::max(L.until[static_cast<size_t>(in[k])], id + 1);
  }
}

const uint16_t* Graph::bits_now(int id) {
  Lifetimes& L = *life_;
  Node& v = ablate::node(*this, id);
  if (v.bits_made) return v.bits;
  if (!L.following || v.held != Node::Held::value || v.value_floats == 0) return nullptr;
  const std::vector<uint8_t>& kept = L.plan[L.mode].bits;
  if (static_cast<size_t>(id) >= kept.size() || !kept[static_cast<size_t>(id)]) return nullptr;
  make_bits(v);
  return v.bits;
}

void Graph::make_bits(Node& v) {
  v.bits = reinterpret_cast<uint16_t*>(take(bits_floats(v.value.numel())));
  kernels::to_bf16_parallel(v.value.data, v.value.numel(), v.bits);
  v.bits_made = true;
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
  const int none[4] = {-1, -1, -1, -1};
  before_node(static_cast<int>(n_nodes_), nullptr, "input", none, grad_enabled, &p);
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
  const int none[4] = {-1, -1, -1, -1};
  before_node(static_cast<int>(n_nodes_), nullptr, "input", none, false, nullptr);
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
  n.backward = backward;
  int k = 0;
  bool any = false;
  for (Var v : inputs) {
    n.in[k++] = v.id;
    any = any || requires_grad(v);
  }
  n.requires_grad = grad_enabled && any && backward != nullptr;
  before_node(static_cast<int>(n_nodes_), backward, op, n.in, n.requires_grad, nullptr);
  n.value_floats = rounded_floats(static_cast<size_t>(rows * cols));
  n.value = Tensor{take(n.value_floats), rows, cols};
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

Tensor& Graph::value(Var v) {
  Node& n = ablate::node(*this, v.id);
  if (n.held != Node::Held::value) restore(v.id, -1);
  int& until = life_->until[static_cast<size_t>(v.id)];
  until = std::max(until, static_cast<int>(n_nodes_) + 1);
  return n.value;
}

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
  n.grad_floats = rounded_floats(static_cast<size_t>(n.value.numel()));
  n.grad = Tensor{take(n.grad_floats), n.value.rows, n.value.cols};
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
      // Values this backward reads that wait as bf16 bits, widened for it (unless it reads
      // the bits).
      for (int k = 0; k < 5; ++k) {
        const int v = k < 4 ? n.in[k] : id;  // k == 4: its own value (kReadsOwn)
        if (v >= 0 && (n.reads & (1u << k)) && !(n.reads_bits & (1u << k)) &&
            ablate::node(*this, v).held == Node::Held::bits) {
          bits_pass(true, [&] { restore(v, id); });
          life_->widened.push_back(v);
        }
      }
      if (!profile) {
        n.backward(*this, id);
      } else {
        auto t0 = std::chrono::steady_clock::now();
        n.backward(*this, id);
        profile->ops[n.op].backward_s +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
    for (int w : life_->widened) {
      Node& v = ablate::node(*this, w);
      if (v.held != Node::Held::value) continue;  // (an input twice)
      give(rounded_floats(static_cast<size_t>(v.value.numel())), v.value.data);
      v.value.data = nullptr;
      v.held = Node::Held::bits;
    }
    life_->widened.clear();
    // Its readers' backward (later ids) and its own have run: a step that follows its plan gives
    // the value back, unless the plan's step read it after the tape.
    const Lifetimes::Plan& plan = life_->plan[1];
    if (life_->started && !life_->broken && life_->mode == 1 &&
        static_cast<size_t>(id) < plan.after.size() && !plan.after[static_cast<size_t>(id)] &&
        n.value_floats > 0 && n.held != Node::Held::gone) {
      give(n.value_floats,
           n.held == Node::Held::bits ? reinterpret_cast<float*>(n.bits) : n.value.data);
      n.value.data = nullptr;
      n.held = Node::Held::gone;
    }
    if (after_backward_node) after_backward_node(after_backward_ctx, id);
    // Every reader of this gradient has run: the node's consumers (later ids) before it,
    // its own backward now.
    if (n.grad_floats > 0) {
      give(n.grad_floats, n.grad.data);
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
