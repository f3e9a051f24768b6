// The bf16 GEMM of the onednn_bf16 kernel path (dispatch.hpp): oneDNN's matmul primitive
// (Debian's libdnnl), which runs AMX-BF16 tiles on CPUs that have them (Intel Sapphire Rapids
// and later; the default there) and its AVX512_BF16 kernels elsewhere (forced with
// ABLATE_ISA=onednn_bf16). Built where oneDNN is found (ABLATE_WITH_ONEDNN); the path's float32
// kernels are avx512's.
//
// gemm_bf16_parallel calls it once per block from each worker thread, as any bf16 GEMM: each
// thread keeps its own primitives (one per shape, layout and mode, made at the shape's first
// product and reused every step), stream and scratchpad, and asks oneDNN's OpenMP runtime for
// one thread, so that blocks and their sums are those of the other paths and a run is bitwise
// the same with any number of threads.
#include "dispatch.hpp"

#if ABLATE_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
// The OpenMP runtime's (declared here: clang has no omp.h of its own without libomp-dev).
extern "C" void omp_set_num_threads(int n);
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/tensor.hpp"
#endif

namespace ablate::kernels::onednn {

#if ABLATE_WITH_ONEDNN
namespace {
using dnnl::memory;
using Dims = memory::dims;

// A product's shape, layout and mode: with set, C = alpha op(A) op(B) without reading C;
// without, C += alpha op(A) op(B) (a bias row is copied into C first).
struct Key {
  bool ta, tb, set;
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t alpha;  // its bits
  bool operator==(const Key& o) const {
    return ta == o.ta && tb == o.tb && set == o.set && m == o.m && n == o.n && k == o.k &&
           lda == o.lda && ldb == o.ldb && ldc == o.ldc && alpha == o.alpha;
  }
};
struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = static_cast<size_t>(key.ta) | static_cast<size_t>(key.tb) << 1 |
               static_cast<size_t>(key.set) << 2;
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc, int64_t{key.alpha}})
      h = h * 1000003u ^ static_cast<size_t>(v);
    return h;
  }
};
// A primitive and its four memory objects, whose data handles each call points at its own
// operands (so that a call makes no object of its own).
struct Primitive {
  dnnl::matmul matmul;
  memory a, b, c, scratch;
  size_t scratch_bytes = 0;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

struct ThreadState {
  dnnl::stream stream{engine()};
  std::unordered_map<Key, Primitive, KeyHash> primitives;
  AlignedFloats scratch;
};

ThreadState& thread_state() {
  thread_local ThreadState s = [] {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
    omp_set_num_threads(1);  // this thread's products stay on this thread
#endif
    return ThreadState{};
  }();
  return s;
}

std::string shape(const Key& key) {
  return std::to_string(key.m) + " x " + std::to_string(key.n) + " x " + std::to_string(key.k) +
         (key.ta ? ", A transposed" : "") + (key.tb ? ", B transposed" : "");
}

Primitive make(const Key& key, float alpha) {
  using dt = memory::data_type;
  const memory::desc a({key.m, key.k}, dt::bf16, key.ta ? Dims{1, key.lda} : Dims{key.lda, 1});
  const memory::desc b({key.k, key.n}, dt::bf16, key.tb ? Dims{1, key.ldb} : Dims{key.ldb, 1});
  const memory::desc c({key.m, key.n}, dt::f32, Dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});  // alpha (A B), before the sum
  if (!key.set) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);  // C += alpha A B
    attr.set_post_ops(sum);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
  const dnnl::engine& e = engine();
  Primitive p;
  p.matmul = dnnl::matmul(pd);
  p.a = memory(a, e, DNNL_MEMORY_NONE);
  p.b = memory(b, e, DNNL_MEMORY_NONE);
  p.c = memory(c, e, DNNL_MEMORY_NONE);
  p.scratch = memory(pd.scratchpad_desc(), e, DNNL_MEMORY_NONE);
  p.scratch_bytes = pd.scratchpad_desc().get_size();
  return p;
}

// C (m,n) (+)= alpha op(A) op(B), as Bf16Kernels::gemm.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c,
               int64_t ldc, bool overwrite, const float* init) {
  uint32_t alpha_bits;
  std::memcpy(&alpha_bits, &alpha, sizeof alpha_bits);
  // init: C holds it, then the product is added.
  const bool set = overwrite && !init;
  if (overwrite && init)
    for (int64_t r = 0; r < m; ++r) std::copy(init, init + n, c + r * ldc);
  const Key key{trans_a, trans_b, set, m, n, k, lda, ldb, ldc, alpha_bits};
  ThreadState& s = thread_state();
  try {
    auto it = s.primitives.find(key);
    if (it == s.primitives.end()) {
      if (s.primitives.size() >= 1024) s.primitives.clear();  // shapes of many models
      it = s.primitives.emplace(key, make(key, alpha)).first;
    }
    Primitive& p = it->second;
    const size_t scratch_floats = (p.scratch_bytes + sizeof(float) - 1) / sizeof(float);
    if (s.scratch.size() < scratch_floats) s.scratch.resize(scratch_floats);
    p.a.set_data_handle(const_cast<uint16_t*>(a));
    p.b.set_data_handle(const_cast<uint16_t*>(b));
    p.c.set_data_handle(c);
    p.scratch.set_data_handle(s.scratch.data());
    // The C call takes the arguments from the stack (the C++ one builds a map of them).
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, p.a.get()},
                                    {DNNL_ARG_WEIGHTS, p.b.get()},
                                    {DNNL_ARG_DST, p.c.get()},
                                    {DNNL_ARG_SCRATCHPAD, p.scratch.get()}};
    dnnl::error::wrap_c_api(dnnl_primitive_execute(p.matmul.get(), s.stream.get(), 4, args),
                            "dnnl_primitive_execute");
    s.stream.wait();
  } catch (const dnnl::error& err) {
    throw Error("oneDNN's bf16 matmul (" + shape(key) + ") failed: " + err.what() + " (status " +
                std::to_string(static_cast<int>(err.status)) +
                "); run on another kernel path: ABLATE_ISA=avx512_bf16 or avx512");
  }
}

}  // namespace

const Bf16Kernels* kernels() {
  // The roundings and gemv: avx512's (isa.cpp).
  static const Bf16Kernels k = {&gemm_bf16, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  return &k;
}

bool amx_usable() {
#if defined(__linux__) && defined(__x86_64__)
  // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE (clang's __builtin_cpu_supports knows
  // neither).
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (!(edx >> 22 & 1) || !(edx >> 24 & 1)) return false;
  // Linux hands out AMX's tile data state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for
  // XFEATURE_XTILEDATA); without it a tile instruction is a fault.
  constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
#else
  return false;
#endif
}

std::string isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2: return "avx2";
    default: return "another ISA";
  }
}

#else
const Bf16Kernels* kernels() { return nullptr; }
bool amx_usable() { return false; }
std::string isa() { return ""; }
#endif

}  // namespace ablate::kernels::onednn
