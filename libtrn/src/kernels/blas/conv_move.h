// conv_move.h - owns the float32 copies and adds between the blocked
// convolution's accumulation buffers and the caller's tensors (conv.c's
// float32 reduction blocks). Each output element is one assignment or one
// `dst += src`, so every path gives the same bits; the paths differ only in
// how they walk memory: dimensions both sides lay out densely are merged,
// an inner run contiguous on both sides is a plain vector loop, and the
// channels-last -> channels-first copy of the forward runs in square tiles.
// A strided scalar loop over [n, c, plane] was 45 % of a 128-channel 4x4
// input gradient's time.
#ifndef TRN_KERNELS_BLAS_CONV_MOVE_H
#define TRN_KERNELS_BLAS_CONV_MOVE_H

#include <stdbool.h>
#include <stdint.h>

#define CONV_MOVE_TILE 16

// Contiguous runs; `restrict` lets GCC vectorize without an alias check.
static void conv_move_run(float *restrict o, const float *restrict q, int64_t n, bool add) {
    if (add)
        for (int64_t j = 0; j < n; j++) o[j] += q[j];
    else
        for (int64_t j = 0; j < n; j++) o[j] = q[j];
}

// o[r * ro + c] (op)= q[c * qc + r] for r < rows, c < cols: a transpose in
// tiles, so both sides touch whole cache lines.
static void conv_move_transpose(float *o, int64_t ro, const float *q, int64_t qc, int64_t rows,
                                int64_t cols, bool add) {
    for (int64_t r0 = 0; r0 < rows; r0 += CONV_MOVE_TILE) {
        const int64_t r1 = r0 + CONV_MOVE_TILE < rows ? r0 + CONV_MOVE_TILE : rows;
        for (int64_t c0 = 0; c0 < cols; c0 += CONV_MOVE_TILE) {
            const int64_t c1 = c0 + CONV_MOVE_TILE < cols ? c0 + CONV_MOVE_TILE : cols;
            for (int64_t r = r0; r < r1; r++) {
                float *orow = o + r * ro;
                if (add)
                    for (int64_t c = c0; c < c1; c++) orow[c] += q[c * qc + r];
                else
                    for (int64_t c = c0; c < c1; c++) orow[c] = q[c * qc + r];
            }
        }
    }
}

// dst (float32, strides ds) = or += src (float32, strides ss), shape sizes[nd]
// (nd <= 5).
static void conv_move_f32(float *dst, const int64_t *ds, const float *src, const int64_t *ss,
                          int nd, const int64_t *sizes, bool add) {
    // Drop size-1 dims, then merge a dim into the next where both sides
    // step over it densely.
    int64_t sz[5], dst_st[5], src_st[5];
    int m = 0;
    for (int i = 0; i < nd; i++) {
        if (sizes[i] == 0) return;
        if (sizes[i] == 1) continue;
        sz[m] = sizes[i], dst_st[m] = ds[i], src_st[m] = ss[i];
        m++;
    }
    if (m == 0) {
        *dst = add ? *dst + *src : *src;
        return;
    }
    int k = 0;
    for (int i = 1; i < m; i++) {
        if (dst_st[k] == dst_st[i] * sz[i] && src_st[k] == src_st[i] * sz[i]) {
            sz[k] *= sz[i], dst_st[k] = dst_st[i], src_st[k] = src_st[i];
        } else {
            k++;
            sz[k] = sz[i], dst_st[k] = dst_st[i], src_st[k] = src_st[i];
        }
    }
    m = k + 1;
    // Innermost kernel: a contiguous run, or a transpose of the last two
    // dims (dst contiguous along the last, src along the one before).
    const bool run = dst_st[m - 1] == 1 && src_st[m - 1] == 1;
    const bool tr = !run && m >= 2 && dst_st[m - 1] == 1 && src_st[m - 2] == 1;
    const int outer = run ? m - 1 : tr ? m - 2 : m - 1;
    int64_t idx[5] = {0}, total = 1;
    for (int i = 0; i < outer; i++) total *= sz[i];
    for (int64_t t = 0; t < total; t++) {
        int64_t od = 0, os = 0;
        for (int i = 0; i < outer; i++) od += idx[i] * dst_st[i], os += idx[i] * src_st[i];
        float *o = dst + od;
        const float *q = src + os;
        if (run) {
            conv_move_run(o, q, sz[m - 1], add);
        } else if (tr) {
            conv_move_transpose(o, dst_st[m - 2], q, src_st[m - 1], sz[m - 2], sz[m - 1], add);
        } else {
            const int64_t inner = sz[m - 1], di = dst_st[m - 1], si = src_st[m - 1];
            if (add)
                for (int64_t j = 0; j < inner; j++) o[j * di] += q[j * si];
            else
                for (int64_t j = 0; j < inner; j++) o[j * di] = q[j * si];
        }
        for (int i = outer - 1; i >= 0; i--) {
            if (++idx[i] < sz[i]) break;
            idx[i] = 0;
        }
    }
}

#endif
