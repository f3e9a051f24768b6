// Runtime dispatch (dispatch.hpp): the CPU's best kernel path from CPUID, ABLATE_ISA's
// choice checked against it, and the CPU's model name for the bench and the run files.
#include <cstdlib>
#include <fstream>
#include <string>

#include "ablate/error.hpp"
#include "ablate/ops.hpp"
#include "dispatch.hpp"

namespace ablate::kernels {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::onednn_bf16: return "onednn_bf16";
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "portable";
  }
}

Isa cpu_isa() {
#if defined(__x86_64__) || defined(__i386__)
  // (__builtin_cpu_supports also checks that the OS saves the registers: XGETBV.)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
  return Isa::portable;
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return cpu_isa() == Isa::avx512 && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

// Whether bf16 products take AVX512_BF16's dot product (VDPBF16PS) unless ABLATE_ISA says
// otherwise. Not on Intel's CPUs: there it issues at a quarter of the FMA instructions' rate
// (Emerald Rapids, family 6 model 207: 1.4 against 5.9 instructions per ns on one core),
// 32 products an instruction against 16, so half as many products per second as float32
// FMAs on the same values (Intel's fast bf16 path on those CPUs is AMX, which ablate
// takes through oneDNN where the CPU has it: onednn_bf16). On AMD's (Zen 4, family 25 model
// 17: 3.67 against 3.66 per ns) it issues at the FMAs' rate, twice their products: the fast
// path there.
bool dot_by_default() {
#if defined(__x86_64__) || defined(__i386__)
  return cpu_has_avx512_bf16() && !__builtin_cpu_is("intel");
#else
  return false;
#endif
}

namespace {
#if defined(__x86_64__) || defined(__i386__)
// The avx512 path (its float32 kernels) with the bf16 GEMM `bf` (and its other bf16 kernels
// where it has them), named `name`.
IsaKernels avx512_with(Isa name, const Bf16Kernels& bf) {
  IsaKernels k = avx512::kTable;
  k.isa = name;
  k.bf16 = bf;
  const Bf16Kernels& own = avx512::kTable.bf16;
  if (!k.bf16.gemm_round_b) k.bf16.gemm_round_b = own.gemm_round_b;
  if (!k.bf16.to_bf16) k.bf16.to_bf16 = own.to_bf16;
  if (!k.bf16.round) k.bf16.round = own.round;
  if (!k.bf16.gemv) k.bf16.gemv = own.gemv;
  return k;
}
#endif

// The avx512 path with the dot-product bf16 GEMM, named `isa` (avx512_bf16 when forced by
// ABLATE_ISA, avx512 when chosen by default).
const IsaKernels& with_dot(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  static const IsaKernels named[2] = {avx512_with(Isa::avx512, avx512_bf16::kBf16),
                                      avx512_with(Isa::avx512_bf16, avx512_bf16::kBf16)};
  return named[isa == Isa::avx512_bf16 ? 1 : 0];
#else
  (void)isa;
  return portable::kTable;
#endif
}

// The avx512 path with oneDNN's bf16 GEMM, named `isa` (onednn_bf16 when forced, avx512 when
// chosen by default); null in a build without oneDNN.
const IsaKernels* with_onednn(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (!onednn::kernels()) return nullptr;
  static const IsaKernels named[2] = {avx512_with(Isa::avx512, *onednn::kernels()),
                                      avx512_with(Isa::onednn_bf16, *onednn::kernels())};
  return &named[isa == Isa::onednn_bf16 ? 1 : 0];
#else
  (void)isa;
  return nullptr;
#endif
}

const IsaKernels& forced_onednn() {
  const Isa best = cpu_isa();
  if (best != Isa::avx512)
    throw Error("ABLATE_ISA=onednn_bf16: this CPU (" + cpu_model() +
                ") has no AVX-512, which that path's float32 kernels need; the best it runs is '" +
                isa_name(best) + "': set ABLATE_ISA to " + isa_name(best) +
                " or lower, or unset it");
  const IsaKernels* k = with_onednn(Isa::onednn_bf16);
  if (!k)
    throw Error(
        "ABLATE_ISA=onednn_bf16: this build of ablate has no oneDNN; install it (Debian: apt-get "
        "install libdnnl-dev) and configure again, or set ABLATE_ISA to avx512_bf16, avx512, avx2 "
        "or portable");
  return *k;
}

const IsaKernels& table(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa == Isa::onednn_bf16) return forced_onednn();
  if (isa == Isa::avx512_bf16) return with_dot(isa);
  if (isa == Isa::avx512) return avx512::kTable;
  if (isa == Isa::avx2) return avx2::kTable;
#endif
  return portable::kTable;
}

const IsaKernels& select() {
  const Isa best = cpu_isa();
  const char* env = std::getenv("ABLATE_ISA");
  if (!env || !*env) {
    if (best == Isa::avx512 && onednn::amx_usable() && with_onednn(Isa::avx512))
      return *with_onednn(Isa::avx512);
    return best == Isa::avx512 && dot_by_default() ? with_dot(Isa::avx512) : table(best);
  }
  const std::string want = env;
  if (want == isa_name(Isa::onednn_bf16)) return table(Isa::onednn_bf16);
  if (want == isa_name(Isa::avx512_bf16)) {
    if (!cpu_has_avx512_bf16())
      throw Error("ABLATE_ISA=" + want + ": this CPU (" + cpu_model() +
                  ") has no AVX512_BF16; the best it runs is '" + isa_name(best) +
                  "': set ABLATE_ISA to " + isa_name(best) + " or lower, or unset it");
    return table(Isa::avx512_bf16);
  }
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
    if (want != isa_name(isa)) continue;
    if (isa > best)
      throw Error("ABLATE_ISA=" + want + ": this CPU (" + cpu_model() + ") has no " + want +
                  "; the best it runs is '" + isa_name(best) + "': set ABLATE_ISA to " +
                  isa_name(best) + " or lower, or unset it");
    return table(isa);
  }
  throw Error("ABLATE_ISA='" + want +
              "' is not a kernel path: use avx512, avx2 or portable (each at most what the CPU "
              "has: here " +
              isa_name(best) +
              "), avx512_bf16 (avx512 with AVX512_BF16's dot product for bf16 products; " +
              (cpu_has_avx512_bf16() ? "this CPU has it" : "this CPU lacks it") +
              "), onednn_bf16 (avx512 with oneDNN's matmul for bf16 products; " +
              (onednn::kernels() ? "this build has it" : "this build lacks it") +
              "), or unset it for the best");
}
}  // namespace

const IsaKernels& isa_kernels() {
  static const IsaKernels& k = select();
  return k;
}

}  // namespace ablate::kernels

namespace ablate {

const char* kernel_path() { return kernels::isa_name(kernels::isa_kernels().isa); }

const char* bf16_kernel() {
  const kernels::IsaKernels& k = kernels::isa_kernels();
#if defined(__x86_64__) || defined(__i386__)
  if (k.bf16.gemm == kernels::avx512_bf16::kBf16.gemm) return "avx512_bf16";
#endif
  if (kernels::onednn::kernels() && k.bf16.gemm == kernels::onednn::kernels()->gemm)
    return "onednn_bf16";
  return kernels::isa_name(k.isa);
}

std::string bf16_notice() {
  const std::string kernel = bf16_kernel();
  if (kernel == "avx512_bf16" || kernel == "onednn_bf16") return "";
  const std::string path = kernel_path();
  std::string why;
  if (!kernels::cpu_has_avx512_bf16()) why = "this CPU has no AVX512_BF16";
  else if (std::getenv("ABLATE_ISA") && *std::getenv("ABLATE_ISA")) why = "ABLATE_ISA=" + path;
  else
    why =
        "AVX512_BF16's dot product is slower than that on this Intel CPU; ABLATE_ISA=avx512_bf16 "
        "forces it";
  return "bf16: the matrix products multiply their bf16-rounded inputs as float32 values on the " +
         path +
         " path's float32 GEMM (exact products, float32 sums): bf16 numerics, no faster than "
         "float32 (" +
         why + ")";
}

std::string cpu_model() {
  // /proc/cpuinfo (Linux): "model name", and on x86 its family and model numbers.
  std::ifstream in("/proc/cpuinfo");
  std::string line, name, family, model;
  auto value = [&](const std::string& l) {
    const auto colon = l.find(':');
    return colon == std::string::npos ? std::string()
                                      : l.substr(l.find_first_not_of(" \t", colon + 1));
  };
  while (std::getline(in, line) && (name.empty() || family.empty() || model.empty())) {
    if (line.rfind("model name", 0) == 0 && name.empty()) name = value(line);
    else if (line.rfind("cpu family", 0) == 0 && family.empty()) family = value(line);
    else if (line.rfind("model\t", 0) == 0 && model.empty()) model = value(line);
  }
  if (name.empty()) name = "unknown CPU";
  if (!family.empty() && !model.empty()) name += " (family " + family + " model " + model + ")";
  return name;
}

}  // namespace ablate
