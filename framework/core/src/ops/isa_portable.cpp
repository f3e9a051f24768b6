// The portable (SSE2 on x86-64, 4-wide generic vectors elsewhere) kernel path (dispatch.hpp):
// compiled with its target flags (framework/CMakeLists.txt), chosen at run time when the CPU has
// it.
#define ABLATE_ISA_NS portable
#define ABLATE_VEC_WIDTH 4
#include "simd.hpp"
// (after simd.hpp)
#include "attention_lanes.inc"
#include "gemv.inc"
#include "gemm_vec.inc"

// (last: the table of the kernels above)
#include "kernel_table.inc"
