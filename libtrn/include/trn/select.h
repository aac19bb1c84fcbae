// trn/select.h - order statistics along rows: the k-th smallest value of
// each row with its index (kthvalue), and the median (lower median, as
// PyTorch) with or without NaNs (median / nanmedian), by quickselect
// (expected O(n) per row, no full sort).
//
// Owned by libtrn/src/kernels/sort/select.c; the C++ adapter is
// torch_neuronx/csrc/aten/select.cpp, which moves the reduced dim last and
// makes the input a contiguous [rows, n] matrix. Semantics follow PyTorch
// CPU: NaN orders above every number (kthvalue can select a NaN); MEDIAN
// returns a row's first NaN (value and index) if it has one, else its
// ((n - 1) / 2)-th smallest; NANMEDIAN takes the ((m - 1) / 2)-th smallest of
// the m non-NaN values (a NaN when a row is all NaN). Among equal values the
// returned index is any of theirs (PyTorch CPU does not define it either).
// Dtypes: U8, I8, I16, I32, I64, F16, BF16, F32, F64.
#ifndef TRN_SELECT_H
#define TRN_SELECT_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum trn_select_mode {
    TRN_SELECT_KTH = 0,        // k-th smallest, 0-based (0 <= k < n)
    TRN_SELECT_MEDIAN = 1,     // NaN if any, else the lower median
    TRN_SELECT_NANMEDIAN = 2,  // lower median of the non-NaN values
    TRN_SELECT_MODE_COUNT
} trn_select_mode;

typedef struct trn_select_desc {
    trn_dtype dtype;
    trn_select_mode mode;
    int64_t rows, n;  // x is [rows, n], n >= 1 when rows > 0
    int64_t k;        // KTH only
    const void *x;
    void *values;      // [rows], x's dtype
    int64_t *indices;  // [rows] or NULL (values only)
} trn_select_desc;

trn_status trn_select_launch(trn_stream *stream, const trn_select_desc *desc);

// Whether the dtype is supported; never sets an error.
int trn_select_supports(trn_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
