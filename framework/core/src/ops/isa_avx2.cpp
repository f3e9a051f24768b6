// The AVX2 + FMA kernel path (dispatch.hpp): compiled with its target flags
// (framework/CMakeLists.txt), chosen at run time when the CPU has it.
#define ABLATE_ISA_NS avx2
#define ABLATE_VEC_WIDTH 8
#include "simd.hpp"
// (after simd.hpp)
#include "attention_lanes.inc"
#include "gemv.inc"
#include "gemm_vec.inc"

namespace ablate::kernels::avx2 {
const IsaKernels kTable = {
    Isa::avx2,
    &gemm<false>,
    &gemv<float>,
    &transpose,
    &forward_head_lanes,
    &backward_group_lanes,
    &forward_head_decode,
    {nullptr, &gemm<true>, &to_bf16, &round_bf16, &gemv<uint16_t>, nullptr, nullptr}};
}  // namespace ablate::kernels::avx2
