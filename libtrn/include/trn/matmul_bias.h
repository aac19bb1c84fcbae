// trn/matmul_bias.h - the matmul kernel (trn/blas.h) with a bias row:
// C = alpha * A @ B + bias, the bias (n elements of C's dtype, element stride
// bias_stride >= 0) added to every row of every matrix of C.
//
// Owns: nothing new (libtrn/src/kernels/blas/matmul.c implements it). It exists
// for nn.Linear's addmm(bias, x, W^T): the same result as broadcasting the
// bias into C and launching with beta = 1, but float32 products (and
// bfloat16 ones on the native path, trn_matmul_bf16_native) with alpha == 1
// and a contiguous row hand the bias to oneDNN's matmul, which adds it to
// the float32 sum as it writes C - no separate pass writing C nor a "sum"
// post-op reading it back. Other cases (small products, alpha != 1, strided
// rows, other dtypes, k == 0) broadcast the row into C first.
#ifndef TRN_MATMUL_BIAS_H
#define TRN_MATMUL_BIAS_H

#include "trn/blas.h"

#ifdef __cplusplus
extern "C" {
#endif

// As trn_matmul_launch, plus the bias row; desc's beta (and beta_int) must
// be 0 and `bias` must stay valid until the task has run.
trn_status trn_matmul_bias_launch(trn_stream *stream, const trn_matmul_desc *desc, const void *bias,
                                  int64_t bias_stride);

#ifdef __cplusplus
}
#endif
#endif
