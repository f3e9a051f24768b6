// The AVX-512 (F, BW, DQ, VL) kernel path (dispatch.hpp): compiled with its target flags
// (framework/CMakeLists.txt), chosen at run time when the CPU has it.
#define ABLATE_ISA_NS avx512
#define ABLATE_VEC_WIDTH 16
#include "simd.hpp"
// (after simd.hpp)
#include "attention_lanes.inc"
#include "gemv.inc"
#include "gemm_avx512.inc"

namespace ablate::kernels::avx512 {
const IsaKernels kTable = {
    Isa::avx512,
    &gemm<false>,
    &gemv<float>,
    &transpose,
    &forward_head_lanes,
    &backward_group_lanes,
    &forward_head_decode,
    {nullptr, &gemm<true>, &to_bf16, &round_bf16, &gemv<uint16_t>, nullptr, nullptr}};
}  // namespace ablate::kernels::avx512
