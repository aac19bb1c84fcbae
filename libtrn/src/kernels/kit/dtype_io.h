// kit/dtype_io.h - owns how kernels load and store each floating dtype: the
// per-element converters their loop macros are instantiated with, the list
// of floating dtypes those macros are instantiated for, and element-at-a-time
// load/store as double for values whose cost dwarfs a dtype switch (layer
// norm's parameters, nll_loss, statistics). Private to src/kernels.
#ifndef TRN_KERNELS_KIT_DTYPE_IO_H
#define TRN_KERNELS_KIT_DTYPE_IO_H

#include <math.h>
#include <stdint.h>

#include "vec_sum.h"
#include "trn/convert.h"
#include "trn/dtype.h"

// Storage -> compute type and back: 16-bit floats compute in float32 and
// round once on store; float32 and float64 compute in their own type.
#define LD_id(v) (v)
#define LD_f16(v) trn_half_to_float(v)
#define LD_bf16(v) trn_bf16_to_float(v)
#define ST_id(v) (v)
#define ST_f16(v) trn_float_to_half(v)
#define ST_bf16(v) trn_float_to_bf16(v)

// X(E, N, T, C, V, LD, ST) once per floating dtype a kernel generates loops
// for: its enum E, name suffix N, storage type T, compute type C, partial-sum
// vector type V (vec_sum.h), load LD and store ST. A kernel defines its loops
// with TRN_KIT_FLOAT_TYPES(DEFINE_...) and its dtype switch with
// TRN_KIT_FLOAT_TYPES(CASE), so the list cannot drift between the two.
#define TRN_KIT_FLOAT_TYPES(X)                                                                     \
    X(TRN_DTYPE_F16, f16, uint16_t, float, trn__vec_f, LD_f16, ST_f16)                             \
    X(TRN_DTYPE_BF16, bf16, uint16_t, float, trn__vec_f, LD_bf16, ST_bf16)                         \
    X(TRN_DTYPE_F32, f32, float, float, trn__vec_f, LD_id, ST_id)                                  \
    X(TRN_DTYPE_F64, f64, double, double, trn__vec_d, LD_id, ST_id)

static inline int trn__is_float_dtype(trn_dtype d) {
    return d == TRN_DTYPE_F16 || d == TRN_DTYPE_BF16 || d == TRN_DTYPE_F32 || d == TRN_DTYPE_F64;
}

// Element i of a floating buffer as double; unsupported dtypes load NaN.
static inline double trn__load_real(trn_dtype d, const void *p, int64_t i) {
    switch (d) {
    case TRN_DTYPE_F16: return trn_half_to_float(((const uint16_t *)p)[i]);
    case TRN_DTYPE_BF16: return trn_bf16_to_float(((const uint16_t *)p)[i]);
    case TRN_DTYPE_F32: return ((const float *)p)[i];
    case TRN_DTYPE_F64: return ((const double *)p)[i];
    default: return NAN;
    }
}

// Stores v (rounded once) as element i; unsupported dtypes store nothing.
static inline void trn__store_real(trn_dtype d, void *p, int64_t i, double v) {
    switch (d) {
    case TRN_DTYPE_F16: ((uint16_t *)p)[i] = trn_float_to_half((float)v); break;
    case TRN_DTYPE_BF16: ((uint16_t *)p)[i] = trn_float_to_bf16((float)v); break;
    case TRN_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case TRN_DTYPE_F64: ((double *)p)[i] = v; break;
    default: break;
    }
}

// n contiguous elements of dtype t (float32, float16 or bfloat16) at element
// offset off of p into float32 dst, times mul; and back, rounding once. The
// attention kernels stage their rows through these.
static inline void trn__load_row_f32(trn_dtype t, const void *p, int64_t off, int64_t n, float mul,
                                     float *dst) {
    switch (t) {
    case TRN_DTYPE_F16: {
        const uint16_t *s = (const uint16_t *)p + off;
        for (int64_t e = 0; e < n; e++) dst[e] = trn_half_to_float(s[e]) * mul;
        break;
    }
    case TRN_DTYPE_BF16: {
        const uint16_t *s = (const uint16_t *)p + off;
        for (int64_t e = 0; e < n; e++) dst[e] = trn_bf16_to_float(s[e]) * mul;
        break;
    }
    default: {
        const float *s = (const float *)p + off;
        for (int64_t e = 0; e < n; e++) dst[e] = s[e] * mul;
    }
    }
}

static inline void trn__store_row_f32(trn_dtype t, void *p, int64_t off, int64_t n,
                                      const float *src, float mul) {
    switch (t) {
    case TRN_DTYPE_F16: {
        uint16_t *d = (uint16_t *)p + off;
        for (int64_t e = 0; e < n; e++) d[e] = trn_float_to_half(src[e] * mul);
        break;
    }
    case TRN_DTYPE_BF16: {
        uint16_t *d = (uint16_t *)p + off;
        for (int64_t e = 0; e < n; e++) d[e] = trn_float_to_bf16(src[e] * mul);
        break;
    }
    default: {
        float *d = (float *)p + off;
        for (int64_t e = 0; e < n; e++) d[e] = src[e] * mul;
    }
    }
}

#endif
