// trn/histc.h - histogram with equal-width bins (torch.histc).
//
// Owned by libtrn/src/kernels/reduce/histc.c; the C++ side is
// torch_neuronx/csrc/aten/histc.cpp, which makes the input contiguous,
// resolves the range (min == max: the data's extrema; still equal: widened
// by 1 each way, as CPU) and checks it.
//
// out[b] counts the elements x with lo <= x <= hi whose bin is b, and NaN
// is counted nowhere. Floating inputs compute the bin as PyTorch CPU does,
// in the input's dtype: (int64)((x - lo) * bins / (hi - lo)) (each step
// rounded to the dtype for float16/bfloat16), x == hi in the last bin.
// Integer inputs (which CPU rejects) use CUDA's rule, integer arithmetic on
// the same formula. Counts are exact (int64) and stored once in out's dtype
// (the input's).
#ifndef TRN_HISTC_H
#define TRN_HISTC_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_histc_desc {
    trn_dtype dtype;  // of input and out
    int64_t n;        // contiguous input elements
    int64_t bins;     // >= 1
    double lo, hi;    // the range, lo < hi, in the input's dtype
    const void *input;
    void *out;  // bins elements, contiguous
} trn_histc_desc;

int trn_histc_supports(trn_dtype dtype);
trn_status trn_histc_launch(trn_stream *stream, const trn_histc_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
