// trn/copy.h - the strided, dtype-converting copy kernel.
//
// One kernel serves host->device, device->host, device->device (same or other
// device) and device-local layout changes: memory on this emulated device is
// host-addressable, so the copy only needs both sides' pointers, element
// strides and dtypes. Conversion follows PyTorch's c10::convert rules
// (float->int truncates toward zero, ->bool is "!= 0", float->half/bfloat16
// rounds to nearest even, complex->real keeps the real part).
//
// The caller keeps src alive and unmodified until the copy completes: for
// pageable host memory that means synchronizing the stream after the launch.
#ifndef TRN_COPY_H
#define TRN_COPY_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_MAX_DIMS 64

typedef struct trn_copy_desc {
    int ndim;              // 0..TRN_MAX_DIMS; 0 copies one element
    const int64_t *sizes;  // ndim entries, each >= 0
    void *dst;
    const int64_t *dst_strides;  // in elements, may be 0 only for size-1 dims
    trn_dtype dst_dtype;
    const void *src;
    const int64_t *src_strides;  // in elements, any value (0 = broadcast)
    trn_dtype src_dtype;
} trn_copy_desc;

// Validates the descriptor, coalesces dimensions and enqueues the copy on
// `stream`. The descriptor's arrays are copied: they may be freed on return.
trn_status trn_copy_launch(trn_stream *stream, const trn_copy_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
