// trn/slice_backward.h - the gradient of a slice (src/kernels/index/slice_backward.c).
// Its own header so that adding it left trn/index.h (which most of the
// adapter layer includes) unchanged.
#ifndef TRN_SLICE_BACKWARD_H
#define TRN_SLICE_BACKWARD_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/index.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// out (contiguous, `sizes`) is zero except at rows start, start + step, ...
// (count of them) along dim, which take grad (out's sizes except sizes[dim] =
// count; strides in ELEMENTS, any sign, 0 for an expanded gradient). The rows
// must lie inside out: start + step * (count - 1) < sizes[dim]. Each element of
// out is written once.
typedef struct trn_slice_backward_desc {
    trn_dtype dtype;
    int ndim;              // 1..TRN_INDEX_MAX_DIMS
    const int64_t *sizes;  // of out
    void *out;
    const void *grad;             // may be NULL when count == 0
    const int64_t *grad_strides;  // ndim entries, elements
    int dim;
    int64_t start, step, count;  // start >= 0, step >= 1, count >= 0
} trn_slice_backward_desc;
trn_status trn_slice_backward_launch(trn_stream *stream, const trn_slice_backward_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
