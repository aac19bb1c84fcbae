// trn/grouped_mm.h - grouped matrix products (torch._grouped_mm, and the
// float8 torch._scaled_grouped_mm at the end): G independent products whose
// group boundaries are device data.
//
// Owns: the grouped-mm kernel (libtrn/src/kernels/blas/grouped_mm.c). MoE
// layers call it with one group per expert; `offs` holds the cumulative
// token counts, read by the task when it runs, so the sizes of the groups
// never reach the host (no synchronisation, and a compiled graph keeps one
// shape while the counts change).
//
// Layouts (every operand: up to one group dim, then rows and columns; all
// strides in ELEMENTS, non-negative, any order - transposed views need no
// copy):
//   TRN_GMM_2D_3D  A (m, k), B (G, k, n) -> C (m, n); group g owns the rows
//                  [offs[g-1], offs[g]) of A and C (offs[-1] = 0). Rows at
//                  or past offs[G-1] are not written.
//   TRN_GMM_3D_3D  A (G, m, k), B (G, k, n) -> C (G, m, n); no offs.
//   TRN_GMM_3D_2D  A (G, m, k), B (k, n) -> C (m, n); group g owns the
//                  columns [offs[g-1], offs[g]) of B and C.
//   TRN_GMM_2D_2D  A (m, k), B (k, n) -> C (G, m, n); group g sums over
//                  [offs[g-1], offs[g]) of k (an empty range gives zeros).
//
// Compute: each group is a launch-free run of the matmul kernel (trn/blas.h)
// in `dtype` (float32, bfloat16 natively on AVX512-BF16, float16), float32
// accumulation. A group's varying dim is cut (2D_3D and 3D_2D layouts)
// into pieces of 1024, then a multiple of 32, then a remainder below 32, so
// the matmul plans that the pieces need are few (at most 63 sizes) and
// repeat from step to step whatever the counts are. offs must be
// non-decreasing and end at most at the grouped dim's size; otherwise the
// task fails with TRN_ERROR_INVALID_ARGUMENT (reported at the next
// synchronisation).
#ifndef TRN_GROUPED_MM_H
#define TRN_GROUPED_MM_H

#include <stdbool.h>
#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum trn_gmm_layout {
    TRN_GMM_2D_3D,
    TRN_GMM_3D_3D,
    TRN_GMM_3D_2D,
    TRN_GMM_2D_2D,
} trn_gmm_layout;

typedef struct trn_grouped_mm_desc {
    trn_dtype dtype;  // of A, B and C
    trn_gmm_layout layout;
    int64_t groups;   // G >= 1
    int64_t m, n, k;  // sizes of the row/column dims as above, >= 0
    const void *a;
    int64_t a_strides[3];  // group (ignored for a 2-d A), row, column
    const void *b;
    int64_t b_strides[3];
    void *c;
    int64_t c_strides[3];
    const int32_t *offs;  // G cumulative ends (device memory); NULL for 3D_3D
} trn_grouped_mm_desc;

// Whether the kernel computes in `dtype`.
bool trn_grouped_mm_supports(trn_dtype dtype);

// Validates the descriptor and enqueues the products on `stream`; the
// operands and offs must stay valid until the task has run.
trn_status trn_grouped_mm_launch(trn_stream *stream, const trn_grouped_mm_desc *desc);

// ---- scaled grouped products (torch._scaled_grouped_mm) ----------------------
// 8-bit float A and B (e4m3fn, e5m2 or fnuz, not e8m0fnu) with rowwise
// float32 scales, layouts 2D_3D and 3D_3D only: the operands are widened
// exactly to float32, multiplied as a float32 grouped product, then each
// result is (sum * scale_a[row]) * scale_b[group, column] in float32 and
// rounded once to out_dtype (float32 or bfloat16) - the same operations in
// the same order as the adapter's eager composition, so the same bits. C is
// contiguous; 2D_3D rows past offs[G-1] are written as zeros.
typedef struct trn_scaled_grouped_mm_desc {
    trn_dtype a_dtype, b_dtype, out_dtype;
    trn_gmm_layout layout;  // TRN_GMM_2D_3D or TRN_GMM_3D_3D
    int64_t groups, m, n, k;
    const void *a;
    int64_t a_strides[3];  // elements; group stride ignored for a 2-d A
    const void *b;
    int64_t b_strides[3];
    void *c;               // contiguous (m, n) or (G, m, n)
    const float *scale_a;  // m (2D_3D) or G * m values, contiguous
    const float *scale_b;  // G * n values, contiguous
    const int32_t *offs;   // G cumulative row ends (2D_3D); NULL for 3D_3D
} trn_scaled_grouped_mm_desc;

// Validates the descriptor and enqueues the product on `stream`.
trn_status trn_scaled_grouped_mm_launch(trn_stream *stream, const trn_scaled_grouped_mm_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
