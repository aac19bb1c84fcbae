// real_io.h - element-at-a-time load/store of the floating dtypes as double,
// for kernels whose per-element cost dwarfs a dtype switch (layer norm's
// parameters, nll_loss). Unsupported dtypes load NaN and store nothing.
#ifndef TRN_KERNELS_REAL_IO_H
#define TRN_KERNELS_REAL_IO_H

#include <math.h>
#include <stdint.h>

#include "trn/convert.h"
#include "trn/dtype.h"

static inline double trn__load_real(trn_dtype d, const void *p, int64_t i) {
    switch (d) {
    case TRN_DTYPE_F16: return trn_half_to_float(((const uint16_t *)p)[i]);
    case TRN_DTYPE_BF16: return trn_bf16_to_float(((const uint16_t *)p)[i]);
    case TRN_DTYPE_F32: return ((const float *)p)[i];
    case TRN_DTYPE_F64: return ((const double *)p)[i];
    default: return NAN;
    }
}

static inline void trn__store_real(trn_dtype d, void *p, int64_t i, double v) {
    switch (d) {
    case TRN_DTYPE_F16: ((uint16_t *)p)[i] = trn_float_to_half((float)v); break;
    case TRN_DTYPE_BF16: ((uint16_t *)p)[i] = trn_float_to_bf16((float)v); break;
    case TRN_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case TRN_DTYPE_F64: ((double *)p)[i] = v; break;
    default: break;
    }
}

#endif
