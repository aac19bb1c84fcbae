// trn/isin.h - membership test: out[i] = (elements[i] is in test_elements),
// negated when invert (torch.isin).
//
// Owned by libtrn/src/kernels/sort/isin.c; the C++ side is
// torch_neuronx/csrc/aten/isin.cpp, which promotes both inputs to one dtype
// and makes them contiguous. Real dtypes (bool, integers, float16/bfloat16/
// float32/float64). Equality is ==, as on CPU: -0.0 equals 0.0 and a NaN
// equals nothing (a NaN element is never found, a NaN test element never
// matches).
#ifndef TRN_ISIN_H
#define TRN_ISIN_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_isin_desc {
    trn_dtype dtype;  // of elements and test_elements
    int invert;
    int64_t n;  // contiguous elements
    int64_t m;  // contiguous test elements
    const void *elements;
    const void *test_elements;
    uint8_t *out;  // n bools, contiguous
} trn_isin_desc;

int trn_isin_supports(trn_dtype dtype);
trn_status trn_isin_launch(trn_stream *stream, const trn_isin_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
