// trn/amp.h - GradScaler's two kernels: unscale gradients while checking
// them for inf/NaN, and update the loss scale.
//
// Owned by libtrn/src/kernels/train/amp.c; the C++ adapter is
// torch_neuronx/csrc/aten/amp.cpp (_amp_foreach_non_finite_check_and_unscale_
// and _amp_update_scale_). The scale tensors live on the device, so both
// kernels read them when they run (stream order), never at launch: no sync.
#ifndef TRN_AMP_H
#define TRN_AMP_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// data: n contiguous elements of dtype F16, BF16, F32 or F64, unscaled in
// place (x * inv_scale; unchanged when inv_scale is 1). inv_scale and
// found_inf: one float32 each; found_inf is set to 1 if any element of data
// (before unscaling) is inf or NaN, and left alone otherwise.
typedef struct trn_amp_unscale_desc {
    trn_dtype dtype;
    int64_t n;
    void *data;
    const float *inv_scale;
    float *found_inf;
} trn_amp_unscale_desc;

trn_status trn_amp_unscale_launch(trn_stream *stream, const trn_amp_unscale_desc *desc);

// One float32 scale, int32 growth_tracker, float32 found_inf. If found_inf
// is nonzero: scale *= backoff_factor, growth_tracker = 0. Otherwise
// growth_tracker += 1, and when it reaches growth_interval the scale grows
// by growth_factor (kept only if the result is finite) and the tracker
// resets to 0 (PyTorch's _amp_update_scale_).
typedef struct trn_amp_update_scale_desc {
    float *scale;
    int32_t *growth_tracker;
    const float *found_inf;
    double growth_factor, backoff_factor;
    int64_t growth_interval;
} trn_amp_update_scale_desc;

trn_status trn_amp_update_scale_launch(trn_stream *stream, const trn_amp_update_scale_desc *desc);

#ifdef __cplusplus
}
#endif

#endif  // TRN_AMP_H
