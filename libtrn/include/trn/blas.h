// trn/blas.h - batched matrix multiplication: C = alpha * A @ B + beta * C.
//
// Owns: the matmul kernel (libtrn/src/kernels/blas/matmul.c). Every ATen matrix
// product (mm, bmm, addmm, baddbmm, addbmm, mv, addmv, dot, and through them
// matmul and linear) is one or more launches of it; the C++ layer only maps
// each op's arguments onto (A, B, C, alpha, beta).
//
// Layout: each operand is a batch of matrices described by three strides in
// ELEMENTS, [batch, row, column]; any non-negative strides are accepted
// (transposed and sliced views need no copy; PyTorch never makes negative
// strides, and oneDNN cannot describe them). A batch stride of 0 in A or B broadcasts that
// matrix across the batch. C must not overlap A or B, nor itself.
//
// Compute:
//   float32            oneDNN matmul; products of >= 2^20 multiply-adds are
//                      cut into pieces over libtrn's pool (trn/parallel.h),
//                      each piece a single-threaded oneDNN call.
//   bfloat16           on a CPU with AVX512-BF16: oneDNN's bf16 matmul on
//                      the operands as they are (vdpbf16ps, float32
//                      accumulation), split like float32. Elsewhere, or
//                      when oneDNN would only take the strides in its
//                      reference kernel: as float16.
//   float16            oneDNN in float32: operands staged in float32 by
//                      libtrn's conversion loops, accumulation in float32.
//   Both half dtypes round C once (to nearest even) on store; alpha scales
//   the float32 sum and beta * C is added to it before that rounding.
//   float64            blocked C loop in double.
//   int8/uint8/int16/  C loop; arithmetic wraps modulo 2^bits, like PyTorch's
//   int32/int64        CPU kernels. alpha_int/beta_int are used.
// Other dtypes give TRN_ERROR_UNSUPPORTED at launch.
//
// beta == 0 means C is written without being read (NaN/inf in C do not
// propagate), as in BLAS and PyTorch. k == 0 gives C = beta * C.
// trn/matmul_bias.h adds a bias row (nn.Linear's addmm).
#ifndef TRN_BLAS_H
#define TRN_BLAS_H

#include <stdbool.h>
#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_matmul_desc {
    trn_dtype dtype;         // of A, B and C
    int64_t batch, m, n, k;  // each >= 0
    const void *a;           // batch x m x k
    int64_t a_strides[3];
    const void *b;  // batch x k x n
    int64_t b_strides[3];
    void *c;  // batch x m x n
    int64_t c_strides[3];
    double alpha, beta;           // floating dtypes
    int64_t alpha_int, beta_int;  // integer dtypes
    // B's version + 1 (a tensor's version counter, which every in-place
    // write moves) where B may be a weight reused across calls: a few-row
    // product may then keep a packed copy of B for the next call at the same
    // version (src/kernels/blas/weight_cache.h). 0: never cached.
    uint64_t b_version;
} trn_matmul_desc;

// Whether the kernel supports `dtype` (false: the caller must not launch).
bool trn_matmul_supports(trn_dtype dtype);

// Whether bfloat16 products and convolutions (trn/conv.h) run on oneDNN's
// bfloat16 kernels now, rather than on its float32 kernels with the operands
// widened to float32 (float32 sums and one rounding to bfloat16 either way).
// The default (trn/bf16_path.h): native where the CPU has AVX512-BF16 and its
// vdpbf16ps outruns its float32 FMA, or oneDNN uses AMX.
bool trn_matmul_bf16_native(void);

// For tests and benchmarks: false makes every bfloat16 product and
// convolution take the float32 path; true the native one where the CPU has
// AVX512-BF16; trn_matmul_set_bf16_default (trn/bf16_path.h) restores the
// default. Affects kernels launched afterwards.
void trn_matmul_set_bf16_native(bool allow);

// Validates the descriptor and enqueues the product on `stream`. The
// descriptor is copied; A and B must stay valid until the task has run.
trn_status trn_matmul_launch(trn_stream *stream, const trn_matmul_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
