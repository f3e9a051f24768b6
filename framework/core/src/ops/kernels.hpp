// Internal helpers shared by the op files (framework/core/src/ops/*.cpp): shape errors,
// fixed-partition parallel loops, per-thread scratch, and an accumulating SGEMM on the
// kernel path chosen at run time (dispatch.hpp). Not installed; ops.hpp is the public
// interface.
#pragma once
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/graph.hpp"

namespace ablate::kernels {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMat>;
using ConstMatMap = Eigen::Map<const RowMat>;
using ArrMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrMap = Eigen::Map<const Eigen::ArrayXf>;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// "(2048, 96)"
std::string shape_str(const Tensor& t);
// Throws "<op>: <what>: <a_name> is (r, c) but <b_name> is (r, c)".
[[noreturn]] void shape_error(const char* op, const std::string& what, const char* a_name,
                              const Tensor& a, const char* b_name, const Tensor& b);
// Throws unless v is a valid node of g.
void check_var(const char* op, const char* name, Graph& g, Var v);

// Threads available to this loop: the arena's, capped by any global_control.
inline int64_t concurrency() {
  return std::min<int64_t>(tbb::this_task_arena::max_concurrency(),
                           static_cast<int64_t>(tbb::global_control::active_value(
                               tbb::global_control::max_allowed_parallelism)));
}

// Runs fn(ctx, p) for p in [0, parts) with part 0 on the calling thread and part p on
// persistent worker p-1, always the same one, so that each part's data stays in that
// core's cache from one call to the next (batch-1 decoding reads the same weights for
// every token: split this way, seed002's halves live in the two L2 caches, 17 us a token
// instead of 116 from L3). Workers spin briefly between calls (a dispatch costs well
// under a microsecond; TBB's costs 1.5-2) and then sleep. Returns false, doing nothing,
// when the pool is already in use (a nested or concurrent call): run serially then.
bool run_pinned(int64_t parts, void (*fn)(void*, int64_t), void* ctx);

// True while this thread runs a part of a parallel_chunks loop, which marks each part
// with a ParallelRegion.
bool in_parallel_region();
struct ParallelRegion {
  ParallelRegion();
  ~ParallelRegion();
  ParallelRegion(const ParallelRegion&) = delete;
  ParallelRegion& operator=(const ParallelRegion&) = delete;
};

constexpr int64_t kMaxParts = 64;  // threads one parallel_chunks loop uses at most

// Runs f(begin, end) over [0, n) in chunks of `chunk` whose boundaries depend only on
// n and chunk, never on the number of threads, so any per-chunk arithmetic (GEMM
// blocking, partial sums) is the same whatever the scheduling. One chunk or one
// thread, or inside another parallel loop: a plain loop. Otherwise the threads of
// run_pinned share the chunks (see below). This is OpenMP's static schedule plus
// helping, not TBB's work stealing: for the small, regular loops of these models, TBB's
// dispatch (microseconds, as long as a small product) and its choice of thread per chunk
// cost more than they balance, batch-1 decoding most of all.
template <class F>
void parallel_chunks(int64_t n, int64_t chunk, const F& f) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  const int64_t nchunks = ceil_div(n, chunk);
  auto serial = [&] {
    for (int64_t c = 0; c < nchunks; ++c) f(c * chunk, std::min(n, (c + 1) * chunk));
  };
  if (nchunks == 1 || in_parallel_region()) return serial();
  const int64_t threads = concurrency();
  if (threads == 1) return serial();
  // No more chunks than threads: chunk c on thread c, always the same one.
  if (nchunks <= threads) {
    struct Ctx {
      const F* f;
      int64_t n, chunk;
    } ctx{&f, n, chunk};
    auto part = [](void* ptr, int64_t c) {
      auto* x = static_cast<const Ctx*>(ptr);
      (*x->f)(c * x->chunk, std::min(x->n, (c + 1) * x->chunk));
    };
    if (!run_pinned(nchunks, part, &ctx)) serial();
    return;
  }
  // More: thread p owns the p-th contiguous run of chunks (neighbouring chunks often write
  // neighbouring cache lines) and takes them in order; when its run is done it helps
  // with the others'.
  const int64_t parts = std::min(threads, kMaxParts);
  struct alignas(64) Run {
    std::atomic<int64_t> next;
    int64_t end;
  };
  struct Ctx {
    const F* f;
    int64_t n, chunk, parts;
    Run runs[kMaxParts];  // the first `parts` are set
  };
  Ctx ctx;
  ctx.f = &f;
  ctx.n = n;
  ctx.chunk = chunk;
  ctx.parts = parts;
  for (int64_t p = 0; p < parts; ++p) {
    ctx.runs[p].next.store(nchunks * p / parts, std::memory_order_relaxed);
    ctx.runs[p].end = nchunks * (p + 1) / parts;
  }
  auto part = [](void* ptr, int64_t p) {
    auto* x = static_cast<Ctx*>(ptr);
    for (int64_t i = 0; i < x->parts; ++i) {
      Run& r = x->runs[(p + i) % x->parts];
      for (int64_t c; (c = r.next.fetch_add(1, std::memory_order_relaxed)) < r.end;)
        (*x->f)(c * x->chunk, std::min(x->n, (c + 1) * x->chunk));
    }
  };
  if (!run_pinned(parts, part, &ctx)) serial();
}

// Items per task for a loop whose items cost `cost` flops-ish each: about 32k units of
// work per task, so a loop smaller than that runs as one chunk without TBB.
inline int64_t items_per_task(int64_t cost) {
  constexpr int64_t kWorkPerTask = int64_t{1} << 15;
  return std::max<int64_t>(1, kWorkPerTask / std::max<int64_t>(1, cost));
}

// Per-thread scratch memory, grown on demand and then reused: a steady-state step does
// not allocate. Each slot is an independent buffer so that a kernel holding one slot
// may call another kernel using a different slot. Valid until the next call with the
// same slot on the same thread; never hold it across a TBB wait.
enum ScratchSlot {
  kSlotGemm = 0,
  kSlotAttention = 1,
  kSlotMisc = 2,
  kSlotReduce = 3,
  kSlotGemmA = 4,
  kNumSlots = 5
};
float* thread_scratch(ScratchSlot slot, size_t n_floats);
// Grows this thread's buffers to the largest size any thread has used, so that a steady
// state allocates nothing whichever thread runs which chunk. Frees the old buffers: call
// only where this thread holds none (between jobs, between steps).
void sync_scratch();
// Floats this thread's buffer of the slot holds now (for tests).
size_t thread_scratch_size(ScratchSlot slot);

// hash_uniform (tensor.cpp) inlined, so that mask loops vectorise; the two must agree
// bitwise (tests/core/test_ops.cpp checks it).
inline float hash_uniform_inline(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t z =
      (seed ^ (a * 0xD6E8FEB86659FD93ull) ^ (b * 0x9E3779B97F4A7C15ull)) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

// Sum of x[0..n) in double over fixed chunks (partials from the graph's arena), added
// in chunk order: the same bits for any thread count.
double sum_fixed(Graph& g, const float* x, int64_t n);

// C (m,n) += alpha * op(A) (m,k) * op(B) (k,n), all row-major with leading dimensions
// (op(A) = A^T when trans_a, where A is stored (k,m)). Single-threaded: the kernel path's
// GEMM (dispatch.hpp), or for a few rows or one column Eigen's matrix-vector product,
// packing buffers from thread_scratch (no heap allocation).
void gemm_acc(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc);

// Whether gemm_acc_parallel splits a matrix-vector product with B (k,n) between two
// cores: below 8K floats of B one core is faster than two and a hand-off (the threshold
// at which seed002's batch-1 decoding is fastest).
inline bool gemv_splits(int64_t n, int64_t k) { return n * k >= (int64_t{1} << 13); }

// Where gemm_acc_parallel splits the reduction of such a product, C (m<=4, n) = A (m,k)
// B (k,n): one part sums [0, split), the other [split, k); k when it does not split.
inline int64_t gemv_split_point(int64_t n, int64_t k) {
  const int64_t half = round_up(ceil_div(k, 2), 16);
  return gemv_splits(n, k) && n >= 32 && half < k ? half : k;
}

// The same, parallel over rows of C (if m >= n) or columns of C, never over k, with
// block boundaries fixed by the shape: bitwise identical for any thread count.
// With overwrite, each task first sets its block of C to the row `init` (1,n), or to 0
// when init is null, so that C = init + alpha op(A) op(B) in one pass over C. With round_b,
// C (+)= alpha op(A) op(B rounded to bf16), every block on Bf16Kernels::gemm_round_b (a
// weight's rounding read without a copy of it).
void gemm_acc_parallel(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                       int64_t ldc, bool overwrite = false, const float* init = nullptr,
                       bool round_b = false);

// gemm_acc_parallel's product (without its matrix-vector cases) with A and B in bfloat16
// (uint16 bits; graph.hpp: Precision) and float32 sums, on the kernel path's bf16 GEMM
// (dispatch.hpp: Bf16Kernels; an Error on a path without one): the same shape-fixed blocks,
// so the same bits for any thread count. Any m, n >= 1; k = 0 only sets C (with overwrite).
void gemm_bf16_parallel(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c,
                        int64_t ldc, bool overwrite = false, const float* init = nullptr);
// gemm_acc_parallel's matrix-vector cases (m <= 4, A row-major) with B's values bf16 bits
// (Bf16Kernels::gemv): the same splits and sums, so C is bitwise what gemm_acc_parallel gives
// on B's float32 values, reading half the bytes of B (batch-1 decoding in bf16).
void gemv_bf16_parallel(bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                        const uint16_t* b, int64_t ldb, float* c, int64_t ldc,
                        bool overwrite = false, const float* init = nullptr);
// dst[0, n) = src[0, n) rounded to nearest even bf16, in parallel chunks: as bits, and as
// the float32 values of those bits (dst may be src).
void to_bf16_parallel(const float* src, int64_t n, uint16_t* dst);
void round_to_bf16_parallel(const float* src, int64_t n, float* dst);
// The graph's buffers for bf16 roundings of activations and gradients (linalg.cpp): x and dy
// for linear and matmul; attention's q in x (no product's x is live then), k and v in their
// own, its output gradient in dy; mul's backward its two inputs in x and dy. Each is grown to
// its largest use and overwritten by the next.
enum class Bf16Buffer { x, dy, k, v };
// x's values rounded to bf16, as float32 copies in graph g's buffer `slot`.
const float* bf16_rounded(Graph& g, Bf16Buffer slot, const Tensor& x);
// Node v's value rounded to bf16: the value itself where its floats are bf16 values already
// (widened from the bits it waited in), else bf16_rounded's copy in `slot`.
const float* bf16_rounded(Graph& g, Bf16Buffer slot, int v);
// Rounds src[0, n) to bf16 into dst (Bf16Kernels::round).
using RoundFn = void (*)(const float* src, int64_t n, float* dst);
// The float32 value of bf16 bits.
inline float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
// How a backward reads node v's value where a bf16 graph reads its rounding: widened from the
// bf16 bits it waits in (which Graph::backward leaves as they are for a reader that declares
// them in backward_reads' `bits`), rounded from its float32 values by the kernel path, or as
// it is (a float32 graph, floats that are bf16 values already).
struct RoundedReader {
  const float* x = nullptr;
  const uint16_t* bits = nullptr;
  RoundFn round = nullptr;
  // Values [i, i + n): x + i itself, or buf (n floats) holding them.
  const float* at(int64_t i, int64_t n, float* buf) const {
    if (bits) {
      for (int64_t k = 0; k < n; ++k) buf[k] = bf16_to_float(bits[i + k]);
      return buf;
    }
    if (!round) return x + i;
    round(x + i, n, buf);
    return buf;
  }
};
RoundedReader rounded_reader(const Graph& g, int v);

// Floats of probabilities one attention node may keep for its backward pass (the lanes
// kernels, heads up to 64 wide; attention.cpp). Above it, backward recomputes them.
// Tests lower it.
int64_t& attention_saved_probs_limit();

// dst[c] += sum over rows r of src[r*ld + c] (times mul[r*ld + c] if mul is given), for
// c in [0, cols): per-column sums in row order, parallel over column blocks, or for at
// most 64 columns over fixed chunks of rows whose partial sums are added in chunk order.
void add_column_sums(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst,
                     const float* mul = nullptr);

}  // namespace ablate::kernels
