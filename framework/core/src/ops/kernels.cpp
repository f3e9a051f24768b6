// Shared kernels of the ops: shape errors, per-thread scratch, the parallel loops, the
// accumulating SGEMM (on the kernel path's, dispatch.hpp), column sums.
#include "kernels.hpp"

#include "dispatch.hpp"

#include "ablate/ops.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <pthread.h>
#include <thread>
#include <utility>
#include <vector>

namespace ablate::kernels {

std::string shape_str(const Tensor& t) {
  return "(" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + ")";
}

void shape_error(const char* op, const std::string& what, const char* a_name, const Tensor& a,
                 const char* b_name, const Tensor& b) {
  throw Error(std::string(op) + ": " + what + ": " + a_name + " is " + shape_str(a) + " but " +
              b_name + " is " + shape_str(b));
}

void check_var(const char* op, const char* name, Graph& g, Var v) {
  if (!v.valid() || static_cast<size_t>(v.id) >= g.num_nodes())
    throw Error(std::string(op) + ": input '" + name + "' (node " + std::to_string(v.id) +
                ") is not a node of this graph; create it after the last Graph::reset()");
}

namespace {
struct Scratch {
  float* data = nullptr;
  size_t size = 0;
  ~Scratch() { std::free(data); }
};
thread_local Scratch tls_scratch[kNumSlots];
// The largest size of each slot on any thread. Which thread runs which chunk of a loop
// varies, so a thread grows its buffers to these sizes as soon as it safely can
// (sync_scratch: pool workers after each job, the caller in Graph::reset) rather than when a chunk
// first needs more: once the first steps have run every op, no thread allocates again.
std::atomic<size_t> g_scratch_max[kNumSlots];

// Grows s to at least n_floats, and at least the largest size on any thread. A demand
// (thread_scratch) at least doubles s, so that a slowly growing demand allocates rarely;
// a sync (n_floats = 0) takes exactly the largest size: doubling there too let two threads
// ratchet each other up (each sync doubling past the other's size) until allocation failed.
void grow(Scratch& s, size_t n_floats, int slot) {
  const size_t largest = g_scratch_max[slot].load(std::memory_order_relaxed);
  size_t n = n_floats == 0 ? largest : std::max({n_floats, 2 * s.size, largest});
  n = (n + 15) / 16 * 16;
  void* p = std::aligned_alloc(64, n * sizeof(float));
  if (!p) throw std::bad_alloc();
  std::free(s.data);
  s.data = static_cast<float*>(p);
  s.size = n;
  size_t seen = g_scratch_max[slot].load(std::memory_order_relaxed);
  while (seen < n &&
         !g_scratch_max[slot].compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
}

}  // namespace

void sync_scratch() {
  for (int slot = 0; slot < kNumSlots; ++slot)
    if (tls_scratch[slot].size < g_scratch_max[slot].load(std::memory_order_relaxed))
      grow(tls_scratch[slot], 0, slot);
}

size_t thread_scratch_size(ScratchSlot slot) { return tls_scratch[slot].size; }

float* thread_scratch(ScratchSlot slot, size_t n_floats) {
  Scratch& s = tls_scratch[slot];
  if (n_floats > s.size) grow(s, n_floats, slot);
  return s.data;
}

namespace {
thread_local int tls_region_depth = 0;

// The persistent threads behind run_pinned (see kernels.hpp). One job at a time: the
// caller publishes it by bumping `epoch_`; worker w runs part w+1 if there is one.
class PinnedPool {
 public:
  explicit PinnedPool(int64_t workers) : remaining_(0) {
    for (int64_t w = 0; w < workers; ++w) threads_.emplace_back([this, w] { loop(w); });
  }
  int64_t workers() const { return static_cast<int64_t>(threads_.size()); }

  bool run(int64_t parts, void (*fn)(void*, int64_t), void* ctx) {
    if (busy_.test_and_set(std::memory_order_acquire)) return false;
    fn_ = fn;
    ctx_ = ctx;
    parts_ = parts;
    error_ = nullptr;
    remaining_.store(workers(), std::memory_order_relaxed);
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(mutex_); }
      wake_.notify_all();
    }
    std::exception_ptr mine;
    try {
      ParallelRegion region;
      fn(ctx, 0);
    } catch (...) {
      mine = std::current_exception();
    }
    while (remaining_.load(std::memory_order_acquire) != 0) pause();
    busy_.clear(std::memory_order_release);
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  [[noreturn]] void loop(int64_t w) {
    uint64_t seen = 0;
    for (;;) {
      // Spin about 2 ms (PAUSE takes about 10 ns here; decoding calls come every few us,
      // training steps' parallel loops every few hundred), then sleep.
      for (int i = 0; i < 200000 && epoch_.load(std::memory_order_acquire) == seen; ++i) pause();
      if (epoch_.load(std::memory_order_acquire) == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        wake_.wait(lock, [&] { return epoch_.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = epoch_.load(std::memory_order_acquire);
      if (w + 1 < parts_) {
        try {
          ParallelRegion region;
          fn_(ctx_, w + 1);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex_);
          error_ = std::current_exception();
        }
      }
      remaining_.fetch_sub(1, std::memory_order_release);
      sync_scratch();  // off the caller's critical path
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  std::exception_ptr error_;
  // The job and its epoch share a cache line, so a worker gets both in one transfer; the
  // count the caller waits on has a line of its own.
  alignas(64) std::atomic<uint64_t> epoch_{0};
  void (*fn_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  int64_t parts_ = 0;
  alignas(64) std::atomic<int64_t> remaining_;
  alignas(64) std::atomic<int64_t> sleepers_{0};
};
}  // namespace

bool in_parallel_region() { return tls_region_depth > 0; }
ParallelRegion::ParallelRegion() { ++tls_region_depth; }
ParallelRegion::~ParallelRegion() { --tls_region_depth; }

bool run_pinned(int64_t parts, void (*fn)(void*, int64_t), void* ctx) {
  // Sized once for the machine; never destroyed (its threads live as long as the process).
  // Sized for the CPUs this process may use (TBB reads the affinity mask), less the
  // caller. Never destroyed: its threads live as long as the process. A child of fork()
  // has none of them, so it starts a pool of its own.
  static std::atomic<PinnedPool*> current{nullptr};
  static std::atomic<bool> forked{false};
  static std::mutex create;
  PinnedPool* pool = current.load(std::memory_order_acquire);
  if (!pool || forked.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(create);
    pool = current.load(std::memory_order_acquire);
    if (!pool) pthread_atfork(nullptr, nullptr, [] { forked.store(true); });
    if (!pool || forked.exchange(false)) {
      pool = new PinnedPool(
          std::max<int64_t>(1, static_cast<int64_t>(tbb::info::default_concurrency()) - 1));
      current.store(pool, std::memory_order_release);
    }
  }
  if (parts - 1 > pool->workers()) return false;
  return pool->run(parts, fn, ctx);
}

namespace {
// A few rows (incremental decoding): matrix-vector products per row (the kernel path's
// gemv). Level-3 GEMM would pack the whole of B for each call, which costs more than the
// product itself.
void gemv_rows(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  const IsaKernels& isa = isa_kernels();
  // Row i of op(A): contiguous for row-major A, strided for its transpose.
  for (int64_t i = 0; i < m; ++i)
    isa.gemv(trans_b, n, k, alpha, trans_a ? a + i : a + i * lda, trans_a ? lda : 1, b, ldb,
             c + i * ldc);
}

// One column of C (m,1): a matrix-vector product, C += alpha op(A) b.
void gemv_col(bool trans_a, bool trans_b, int64_t m, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  using Strided = Eigen::Map<const Eigen::VectorXf, 0, Eigen::InnerStride<>>;
  Eigen::Map<const RowMat, 0, Eigen::OuterStride<>> A(a, trans_a ? k : m, trans_a ? m : k,
                                                      Eigen::OuterStride<>(lda));
  Strided bv(b, k, Eigen::InnerStride<>(trans_b ? 1 : ldb));
  Eigen::Map<Eigen::VectorXf, 0, Eigen::InnerStride<>> cv(c, m, Eigen::InnerStride<>(ldc));
  if (trans_a) cv.noalias() += alpha * (A.transpose() * bv);
  else cv.noalias() += alpha * (A * bv);
}

}  // namespace

void gemm_acc(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  if (m <= 4) return gemv_rows(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
  if (n == 1) return gemv_col(trans_a, trans_b, m, k, alpha, a, lda, b, ldb, c, ldc);
  isa_kernels().gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc, false, nullptr);
}

namespace {

// The shape-fixed blocks of a product C (m,n) (+)= op(A) op(B) and the threads they run on, for
// every element type: block(mb, nb, kb, a, b, c, ldc, set, init) computes C's block (mb, nb) =
// init (a row, or 0) + op(A) op(B) over kb with set, += without, A and B at those pointers
// with the product's lda and ldb. gemv: the product is a few rows against B (m <= 4), which is
// read once.
template <class TA, class TB, class Block>
void parallel_product(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const TA* a,
                      int64_t lda, const TB* b, int64_t ldb, float* c, int64_t ldc, bool overwrite,
                      const float* init, bool gemv, const Block& block) {
  // Every task packs the shared operand again, at a cost of about 1/block of its product
  // (blocks of 16 rows lost 30% at 2048x96x384; 256 rows are within a few % of one
  // GEMM), so blocks are about 256 wide: an even number of them (2 to 16) so that two
  // cores balance. Products under ~2 MFLOP run as one GEMM.
  // A few rows (decoding) are matrix-vector products that read B once: from 8K floats of
  // B on (gemv_splits), two halves of the reduction, below.
  constexpr int64_t kMinMacs = int64_t{1} << 20;
  constexpr int64_t kBlock = 256;
  const bool split_rows = !gemv && m >= n;
  const int64_t dim = split_rows ? m : n;
  int64_t nblocks = std::min<int64_t>(16, dim / kBlock);
  nblocks = gemv ? 2 : std::max<int64_t>(2, nblocks - nblocks % 2);
  if ((gemv ? !gemv_splits(n, k) : m * n * std::max<int64_t>(k, 1) < kMinMacs) || dim < 2 * 16) {
    block(m, n, k, a, b, c, ldc, overwrite, init);
    return;
  }
  // Two fixed halves of the reduction, the upper half's partial sums in scratch and added
  // after (the same arithmetic on any thread count), for two kinds of product:
  // - matrix-vector products with B (k,n) row-major: each half of k is one contiguous
  //   block of B, which stays in one core's cache from token to token (column halves
  //   interleave in memory, and the hardware prefetcher pulls the other core's half in
  //   too, nearly doubling a batch-1 token's time);
  // - weight gradients X^T dY summed over many rows (up to 1M floats of result): each
  //   core reads, and packs once, the half of X and dY that its row-parallel ops wrote,
  //   instead of all of both, and packs X^T once rather than once per column block.
  constexpr int64_t kMaxSplitK = int64_t{1} << 20;  // floats of C
  const bool split_k = !trans_b && (gemv || (trans_a && k >= 1024 && m * n <= kMaxSplitK));
  if (split_k) {
    const int64_t half = gemv ? gemv_split_point(n, k) : round_up(ceil_div(k, 2), 16);
    if (half < k) {
      float* upper = thread_scratch(kSlotReduce, static_cast<size_t>(m * n));
      parallel_chunks(k, half, [&](int64_t k0, int64_t k1) {
        const TA* a0 = trans_a ? a + k0 * lda : a + k0;
        const TB* b0 = b + k0 * ldb;
        if (k0 == 0) block(m, n, k1 - k0, a0, b0, c, ldc, overwrite, init);
        else block(m, n, k1 - k0, a0, b0, upper, n, true, nullptr);
      });
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) c[r * ldc + j] += upper[r * n + j];
      return;
    }
  }
  const int64_t size = round_up(ceil_div(dim, nblocks), 16);
  if (split_rows) {
    parallel_chunks(m, size, [&](int64_t r0, int64_t r1) {
      block(r1 - r0, n, k, trans_a ? a + r0 : a + r0 * lda, b, c + r0 * ldc, ldc, overwrite, init);
    });
  } else {
    parallel_chunks(n, size, [&](int64_t c0, int64_t c1) {
      block(m, c1 - c0, k, a, trans_b ? b + c0 * ldb : b + c0, c + c0, ldc, overwrite,
            init ? init + c0 : nullptr);
    });
  }
}

// C's block (mb, nb) of rows of C set to init (a row, or 0).
void set_rows(int64_t mb, int64_t nb, float* cb, int64_t ldcb, const float* initb) {
  for (int64_t r = 0; r < mb; ++r) {
    float* cr = cb + r * ldcb;
    if (initb) std::copy(initb, initb + nb, cr);
    else std::fill(cr, cr + nb, 0.0f);
  }
}

}  // namespace

void gemm_acc_parallel(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                       int64_t ldc, bool overwrite, const float* init, bool round_b) {
  if (m <= 0 || n <= 0) return;
  // The kernel path's GEMM writes C once; the matrix-vector products set the block first.
  // With round_b every block is the GEMM that rounds B as it packs it.
  auto block = [&](int64_t mb, int64_t nb, int64_t kb, const float* ab, const float* bb, float* cb,
                   int64_t ldcb, bool set, const float* initb) {
    if (round_b && kb > 0)
      return isa_kernels().bf16.gemm_round_b(trans_a, trans_b, mb, nb, kb, alpha, ab, lda, bb, ldb,
                                             cb, ldcb, set, initb);
    if (set && kb > 0 && mb > 4 && nb > 1)
      return isa_kernels().gemm(trans_a, trans_b, mb, nb, kb, alpha, ab, lda, bb, ldb, cb, ldcb,
                                true, initb);
    if (set) set_rows(mb, nb, cb, ldcb, initb);
    gemm_acc(trans_a, trans_b, mb, nb, kb, alpha, ab, lda, bb, ldb, cb, ldcb);
  };
  parallel_product(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, overwrite, init, m <= 4,
                   block);
}

void gemv_bf16_parallel(bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                        const uint16_t* b, int64_t ldb, float* c, int64_t ldc, bool overwrite,
                        const float* init) {
  if (m <= 0 || n <= 0) return;
  const auto gemv = isa_kernels().bf16.gemv;
  // Rows of A one by one, as gemm_acc_parallel's matrix-vector products.
  auto block = [&](int64_t mb, int64_t nb, int64_t kb, const float* ab, const uint16_t* bb,
                   float* cb, int64_t ldcb, bool set, const float* initb) {
    if (set) set_rows(mb, nb, cb, ldcb, initb);
    if (kb > 0)
      for (int64_t i = 0; i < mb; ++i)
        gemv(trans_b, nb, kb, 1.0f, ab + i * lda, 1, bb, ldb, cb + i * ldcb);
  };
  parallel_product(false, trans_b, m, n, k, a, lda, b, ldb, c, ldc, overwrite, init, true, block);
}

void gemm_bf16_parallel(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c,
                        int64_t ldc, bool overwrite, const float* init) {
  if (m <= 0 || n <= 0) return;
  const Bf16Kernels& bf = isa_kernels().bf16;
  if (!bf.gemm)
    throw Error(std::string("gemm_bf16_parallel: the ") + kernel_path() +
                " kernel path has no bf16 GEMM");
  // gemm_acc_parallel's blocks, without its matrix-vector products.
  auto block = [&](int64_t mb, int64_t nb, int64_t kb, const uint16_t* ab, const uint16_t* bb,
                   float* cb, int64_t ldcb, bool set, const float* initb) {
    if (kb > 0)
      return bf.gemm(trans_a, trans_b, mb, nb, kb, alpha, ab, lda, bb, ldb, cb, ldcb, set, initb);
    if (set) set_rows(mb, nb, cb, ldcb, initb);
  };
  parallel_product(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, overwrite, init, false,
                   block);
}

// The conversions split as an elementwise op over the same values does (items_per_task), so
// that each thread converts the part its own ops wrote and the products after it read.
void to_bf16_parallel(const float* src, int64_t n, uint16_t* dst) {
  const Bf16Kernels& bf = isa_kernels().bf16;
  parallel_chunks(n, items_per_task(1),
                  [&](int64_t i0, int64_t i1) { bf.to_bf16(src + i0, i1 - i0, dst + i0); });
}

void round_to_bf16_parallel(const float* src, int64_t n, float* dst) {
  const Bf16Kernels& bf = isa_kernels().bf16;
  parallel_chunks(n, items_per_task(1),
                  [&](int64_t i0, int64_t i1) { bf.round(src + i0, i1 - i0, dst + i0); });
}

void add_column_sums(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst,
                     const float* mul) {
  constexpr int64_t kBlock = 64;
  if (cols <= kBlock && rows * cols >= (int64_t{1} << 16)) {
    // Narrow and tall (a bias of a d = 32 model): too few columns to split, so fixed
    // chunks of rows sum into partials that are added in chunk order after.
    const int64_t chunk = items_per_task(cols), nchunks = ceil_div(rows, chunk);
    float* partial = thread_scratch(kSlotReduce, static_cast<size_t>(nchunks * cols));
    parallel_chunks(rows, chunk, [&](int64_t r0, int64_t r1) {
      float* acc = partial + (r0 / chunk) * cols;
      std::fill(acc, acc + cols, 0.0f);
      for (int64_t r = r0; r < r1; ++r) {
        const float* s = src + r * ld;
        if (mul)
          for (int64_t j = 0; j < cols; ++j) acc[j] += s[j] * mul[r * ld + j];
        else
          for (int64_t j = 0; j < cols; ++j) acc[j] += s[j];
      }
    });
    for (int64_t c = 0; c < nchunks; ++c)
      for (int64_t j = 0; j < cols; ++j) dst[j] += partial[c * cols + j];
    return;
  }
  const int64_t block = rows * cols >= (int64_t{1} << 16) ? kBlock : cols;
  parallel_chunks(cols, block, [&](int64_t c0, int64_t c1) {
    float acc[kBlock];
    for (int64_t c0b = c0; c0b < c1; c0b += kBlock) {
      const int64_t w = std::min(kBlock, c1 - c0b);
      for (int64_t j = 0; j < w; ++j) acc[j] = dst[c0b + j];
      if (mul) {
        for (int64_t r = 0; r < rows; ++r) {
          const float* s = src + r * ld + c0b;
          const float* m = mul + r * ld + c0b;
          for (int64_t j = 0; j < w; ++j) acc[j] += s[j] * m[j];
        }
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          const float* s = src + r * ld + c0b;
          for (int64_t j = 0; j < w; ++j) acc[j] += s[j];
        }
      }
      for (int64_t j = 0; j < w; ++j) dst[c0b + j] = acc[j];
    }
  });
}

double sum_fixed(Graph& g, const float* x, int64_t n) {
  constexpr int64_t kChunk = int64_t{1} << 14;
  constexpr int kLanes = 8;
  const int64_t nchunks = ceil_div(n, kChunk);
  if (nchunks == 0) return 0.0;
  double* partial = g.alloc_as<double>(static_cast<size_t>(nchunks));
  parallel_chunks(nchunks, nchunks > 4 ? 1 : nchunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
      double acc[kLanes] = {};  // independent lanes: vectorises without reassociation
      int64_t i = i0;
      for (; i + kLanes <= i1; i += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(x[i + l]);
      for (; i < i1; ++i) acc[0] += static_cast<double>(x[i]);
      double s = 0.0;
      for (int l = 0; l < kLanes; ++l) s += acc[l];
      partial[c] = s;
    }
  });
  double total = 0.0;
  for (int64_t c = 0; c < nchunks; ++c) total += partial[c];
  return total;
}

}  // namespace ablate::kernels

namespace ablate {
void parallel_for_raw(int64_t n, int64_t chunk, void (*fn)(void*, int64_t, int64_t), void* ctx) {
  kernels::parallel_chunks(n, chunk, [&](int64_t b, int64_t e) { fn(ctx, b, e); });
}
void parallel_for_params_raw(const std::vector<Parameter*>& params, int64_t chunk,
                             void (*fn)(void*, size_t, int64_t, int64_t), void* ctx) {
  chunk = std::max<int64_t>(1, chunk);
  // first[i]: parameter i's first span. The caller's thread_local buffer, reused from step
  // to step (no allocation), read by every thread of the loop through this reference.
  thread_local std::vector<int64_t> buffer;
  std::vector<int64_t>& first = buffer;
  first.assign(params.size() + 1, 0);
  for (size_t i = 0; i < params.size(); ++i)
    first[i + 1] = first[i] + kernels::ceil_div(params[i]->value.numel(), chunk);
  kernels::parallel_chunks(first.back(), 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const auto i =
          static_cast<size_t>(std::upper_bound(first.begin(), first.end(), s) - first.begin()) - 1;
      const int64_t b = (s - first[i]) * chunk;
      fn(ctx, i, b, std::min(params[i]->value.numel(), b + chunk));
    }
  });
}
}  // namespace ablate
