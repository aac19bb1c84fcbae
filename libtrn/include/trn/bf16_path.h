// trn/bf16_path.h - the default path of bfloat16 products and convolutions,
// for the tests and bindings that force one (trn_matmul_set_bf16_native in
// trn/blas.h) and then restore it. A header of its own so the few users
// include it.
//
// Where the CPU has AVX512-BF16, bfloat16 products and convolutions run on
// oneDNN's bfloat16 kernels or on its float32 kernels with the operands
// widened (float32 sums, one rounding to bfloat16 either way). The default:
// native when oneDNN uses AMX or the core's vdpbf16ps gives at least 1.5x
// its float32 FMA's multiply-adds per second (measured once, ~50 us), else
// float32; TORCH_NEURONX_BF16_KERNELS=native / float32 / auto overrides it.
// trn_matmul_set_bf16_native(true / false) forces native (where the CPU has
// the instruction) / float32.
#ifndef TRN_BF16_PATH_H
#define TRN_BF16_PATH_H

#ifdef __cplusplus
extern "C" {
#endif

// Restores the default path after trn_matmul_set_bf16_native. Affects
// kernels launched afterwards.
void trn_matmul_set_bf16_default(void);

#ifdef __cplusplus
}
#endif
#endif
