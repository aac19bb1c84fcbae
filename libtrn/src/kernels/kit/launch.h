// kit/launch.h - owns what every kernel's launch and task repeat: the NULL
// stream/descriptor check, the fork check, the parallel grain, and (through
// internal.h) the one access-range helper, trn__access_set. Private to
// src/kernels; a kernel includes this and kit/dtype_io.h, not internal.h.
#ifndef TRN_KERNELS_KIT_LAUNCH_H
#define TRN_KERNELS_KIT_LAUNCH_H

#include <stdint.h>

#include "../../internal.h"
#include "trn/parallel.h"
#include "trn/stream.h"

// The first check of every launch, with one message for every kernel.
static inline trn_status trn__check_launch(const trn_stream *stream, const void *desc,
                                           const char *fn) {
    if (stream == NULL || desc == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: stream or descriptor is NULL",
                              fn);
    return TRN_SUCCESS;
}

// Items per trn_parallel_for piece when an item costs `per` elements and a
// piece should cover about `elements` (at least one item).
static inline int64_t trn__grain(int64_t elements, int64_t per) {
    const int64_t g = elements / (per > 0 ? per : 1);
    return g > 1 ? g : 1;
}

#endif
