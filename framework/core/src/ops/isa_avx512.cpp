// The AVX-512 (F, BW, DQ, VL) kernel path (dispatch.hpp): compiled with its target flags
// (framework/CMakeLists.txt), chosen at run time when the CPU has it.
#define ABLATE_ISA_NS avx512
#define ABLATE_VEC_WIDTH 16
#include "simd.hpp"
// (after simd.hpp)
#include "attention_lanes.inc"
#include "gemv.inc"
#include "gemm_avx512.inc"

// (last: the table of the kernels above)
#include "kernel_table.inc"
