// matmul_run.h - the matmul kernel's body for the other blas kernels
// (grouped_mm.c, scaled_mm.c): one product computed now, on the calling
// task's thread, with the same paths as trn_matmul_launch. Private to
// src/kernels/blas and src/nki (NKI tile products, program.c); matmul.c
// implements it.
#ifndef TRN_KERNELS_BLAS_MATMUL_RUN_H
#define TRN_KERNELS_BLAS_MATMUL_RUN_H

#include <stdint.h>

#include "trn/blas.h"

// desc as for trn_matmul_launch, already validated by the caller (supported
// dtype, sizes >= 0, non-negative strides, C not overlapping A or B); the
// caller holds access to the memory.
trn_status trn__matmul_run_now(const trn_matmul_desc *desc);

// C (m x n float32) = A (m x k bfloat16) @ B (k x n bfloat16), A and C
// row-major contiguous, B at element strides (b_rs, b_cs) (row-major
// (n, 1) or a transposed (1, k)), float32 accumulation, split over
// libtrn's pool.
// Only where the native bfloat16 path runs (trn_matmul_bf16_native) and
// m, n, k > 0: TRN_ERROR_UNSUPPORTED otherwise, and the caller computes
// another way.
trn_status trn__matmul_bf16_f32_now(int64_t m, int64_t n, int64_t k, const uint16_t *a,
                                    const uint16_t *b, int64_t b_rs, int64_t b_cs, float *c);

#endif
