// matmul_widen.h - bfloat16 products on the float32 kernels (matmul_widen.c),
// for matmul.c where trn_matmul_bf16_native() is false. Private to
// src/kernels/blas.
#ifndef TRN_KERNELS_BLAS_MATMUL_WIDEN_H
#define TRN_KERNELS_BLAS_MATMUL_WIDEN_H

#include "trn/blas.h"

// Runs the float32 product `f` (dense operands, bias a float32 row or NULL)
// with matmul.c's float32 path.
typedef trn_status (*trn__mm_f32_fn)(const trn_matmul_desc *f, const void *bias);

// C = alpha * A @ B + beta * C (+ bias row) for a bfloat16 `d` with k > 0:
// A and B (and C when beta != 0, the bias row when given: contiguous,
// bfloat16) widened to float32 once, `run` computes the float32 product,
// and C is rounded to bfloat16 once. Float32 sums of exact products and one
// rounding to nearest even, the native kernel's contract.
trn_status trn__matmul_bf16_widened(const trn_matmul_desc *d, const void *bias, trn__mm_f32_fn run);

#endif
