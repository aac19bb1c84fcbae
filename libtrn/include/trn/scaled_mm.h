// trn/scaled_mm.h - scaled 8-bit float matrix products (torch._scaled_mm):
// C = (A @ B) * scale_a * scale_b (+ bias), A and B in 8-bit floats.
//
// Owns: the scaled-mm kernel (libtrn/src/kernels/blas/scaled_mm.c).
//
// Scales are float32, one value (tensorwise) or one per row of A / column
// of B (rowwise), applied to the float32 product. The 8-bit operands are
// widened exactly (trn/convert.h) into bfloat16 staging buffers and
// multiplied by oneDNN's bfloat16 matmul with a float32 result where the
// CPU has AVX512-BF16 (trn_matmul_bf16_native), else widened to float32
// for the float32 matmul; every product of two 8-bit values is exact in
// float32 and the sums accumulate in float32, so
// the result differs from an exact one only by float32 summation rounding
// (use_fast_accum needs no separate path). The result is rounded once to
// the output dtype (float32, bfloat16, float16 or an 8-bit float), after the optional
// bias row (n entries of float32, bfloat16 or float16) is added.
//
// MX block scaling (mx_scale_a and mx_scale_b set, float32 scales unused):
// A and B in e4m3fn or e5m2, one float8_e8m0fnu scale (2^(c-127), 0xFF is
// NaN) per 32 consecutive K elements of each row of A and each column of B
// (the last block may be shorter), stored in cuBLAS's swizzled block layout
// (PyTorch's SWIZZLE_32_4_4, torchao's to_blocked): a scale matrix of
// rows x ceil(K/32) is padded to 128-row by 4-column tiles of 512 bytes,
// tiles in row-major order, and within a tile row r, column c sits at
// (r % 32) * 16 + (r / 32) * 4 + c. The scales are folded into the widened
// operands: a power of two times an 8-bit value is exact in float32 (and in
// bfloat16 while the scaled values stay normal; other scales take the
// float32 path), so the result is the float32 sum of the exact scaled
// products, as if each block's sum were scaled.
#ifndef TRN_SCALED_MM_H
#define TRN_SCALED_MM_H

#include <stdbool.h>
#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_scaled_mm_desc {
    trn_dtype a_dtype, b_dtype;  // 8-bit floats (not e8m0fnu; MX: e4m3fn/e5m2)
    trn_dtype out_dtype;         // F32, BF16, F16 or an operand dtype
    int64_t m, n, k;             // >= 0
    const void *a;               // m x k
    int64_t a_strides[2];        // elements, >= 0
    const void *b;               // k x n
    int64_t b_strides[2];
    void *c;  // m x n
    int64_t c_strides[2];
    const float *scale_a;  // 1 or m values
    int64_t scale_a_count, scale_a_stride;
    const float *scale_b;  // 1 or n values
    int64_t scale_b_count, scale_b_stride;
    const void *bias;  // NULL, or n values of bias_dtype
    trn_dtype bias_dtype;
    int64_t bias_stride;
    const uint8_t *mx_scale_a;  // NULL, or MX scales of A (m rows), swizzled
    const uint8_t *mx_scale_b;  // NULL, or MX scales of B (n columns), swizzled
} trn_scaled_mm_desc;

// Bytes of a swizzled MX scale tensor for `rows` rows (m of A, n of B) and
// k elements: 128 * ceil(rows / 128) * 4 * ceil(ceil(k / 32) / 4).
int64_t trn_scaled_mm_mx_scale_bytes(int64_t rows, int64_t k);

// Whether the kernel takes these operand and output dtypes.
bool trn_scaled_mm_supports(trn_dtype a_dtype, trn_dtype b_dtype, trn_dtype out_dtype);

// Validates the descriptor and enqueues the product on `stream`.
trn_status trn_scaled_mm_launch(trn_stream *stream, const trn_scaled_mm_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
