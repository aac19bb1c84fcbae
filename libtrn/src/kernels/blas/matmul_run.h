// matmul_run.h - the matmul kernel's body for the other blas kernels
// (grouped_mm.c, scaled_mm.c): one product computed now, on the calling
// task's thread, with the same paths as trn_matmul_launch. Private to
// src/kernels/blas; matmul.c implements it.
#ifndef TRN_KERNELS_BLAS_MATMUL_RUN_H
#define TRN_KERNELS_BLAS_MATMUL_RUN_H

#include "trn/blas.h"

// desc as for trn_matmul_launch, already validated by the caller (supported
// dtype, sizes >= 0, non-negative strides, C not overlapping A or B); the
// caller holds access to the memory.
trn_status trn__matmul_run_now(const trn_matmul_desc *desc);

#endif
