// h16_stage.h - 16-bit float operands (float16; bfloat16 products off their
// native path, trn__dnnl_bf16_native) of matmul and convolution as float32
// copies. oneDNN 2.6 has no float16 matmul or convolution for the CPU at all
// (not even a reference one: dnnl_unimplemented, on AVX512-FP16 too), and
// its float16 <-> float32 reorders are its generic `simple:any` loops. So a
// float16 product or convolution converts its operands to float32 here
// (vcvtph2ps / vcvtps2ph, split over the pool), runs the float32 kernel on
// them (its blocked reductions and pool splits included) and rounds the
// float32 results to float16 once. Internal to libtrn.
#ifndef TRN_H16_STAGE_H
#define TRN_H16_STAGE_H

#include <stdint.h>

#include "../../internal.h"

// Dense strides (elements) for `sizes` in the dim order of `strides`
// (outermost: largest stride; ties keep the order of the dims): a copy
// with these strides is read and written in runs along the same dim as the
// original. Returns the element count.
int64_t trn__f16_dense_like(int nd, const int64_t *sizes, const int64_t *strides, int64_t *out);

// dst (float32, strides ds) = src (float16, strides ss), shape `sizes`
// (nd <= 5); exact. Split over the pool when large.
void trn__f16_widen_nd(int nd, const int64_t *sizes, const void *src, const int64_t *ss, float *dst,
                       const int64_t *ds);
// dst (float16, strides ds) = src (float32, strides ss) rounded to nearest
// even (trn_float_to_half's bits, NaNs included).
void trn__f16_narrow_nd(int nd, const int64_t *sizes, const float *src, const int64_t *ss,
                        void *dst, const int64_t *ds);

// The same for float16 or bfloat16 (`dt`): a bfloat16 product or
// convolution off its native path (trn_matmul_bf16_native false: the core's
// float32 FMA outruns its vdpbf16ps, dnnl_common.c) is widened the same way.
void trn__h16_widen_nd(trn_dtype dt, int nd, const int64_t *sizes, const void *src,
                       const int64_t *ss, float *dst, const int64_t *ds);
void trn__h16_narrow_nd(trn_dtype dt, int nd, const int64_t *sizes, const float *src,
                        const int64_t *ss, void *dst, const int64_t *ds);

// The same for one contiguous run of n elements, on the calling thread.
void trn__f16_widen_run(const uint16_t *src, float *dst, int64_t n);
void trn__f16_narrow_run(const float *src, uint16_t *dst, int64_t n);

#endif
