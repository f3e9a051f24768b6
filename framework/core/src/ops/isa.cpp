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

namespace {
const IsaKernels& table(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa == Isa::avx512) return avx512::kTable;
  if (isa == Isa::avx2) return avx2::kTable;
#endif
  return portable::kTable;
}

const IsaKernels& select() {
  const Isa best = cpu_isa();
  const char* env = std::getenv("ABLATE_ISA");
  if (!env || !*env) return table(best);
  const std::string want = env;
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
    if (want != isa_name(isa)) continue;
    if (isa > best)
      throw Error("ABLATE_ISA=" + want + ": this CPU (" + cpu_model() + ") has no " + want +
                  "; the best it runs is '" + isa_name(best) + "': set ABLATE_ISA to " + isa_name(best) +
                  " or lower, or unset it");
    return table(isa);
  }
  throw Error("ABLATE_ISA='" + want + "' is not a kernel path: use avx512, avx2 or portable (each at most what the CPU "
              "has: here " + isa_name(best) + "), or unset it for the best");
}
}  // namespace

const IsaKernels& isa_kernels() {
  static const IsaKernels& k = select();
  return k;
}

}  // namespace ablate::kernels

namespace ablate {

const char* kernel_path() { return kernels::isa_name(kernels::isa_kernels().isa); }

std::string cpu_model() {
  // /proc/cpuinfo (Linux): "model name", and on x86 its family and model numbers.
  std::ifstream in("/proc/cpuinfo");
  std::string line, name, family, model;
  auto value = [&](const std::string& l) {
    const auto colon = l.find(':');
    return colon == std::string::npos ? std::string() : l.substr(l.find_first_not_of(" \t", colon + 1));
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
