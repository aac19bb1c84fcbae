// trn/dtype.h - element types the device stores, their sizes and names.
//
// The numbering is libtrn's own; the C++ layer maps c10::ScalarType to it and
// rejects everything else with a clear error.
#ifndef TRN_DTYPE_H
#define TRN_DTYPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// X(name, element size in bytes, printable name)
#define TRN_DTYPE_LIST(X)                                                                          \
    X(TRN_DTYPE_BOOL, 1, "bool")                                                                   \
    X(TRN_DTYPE_U8, 1, "uint8")                                                                    \
    X(TRN_DTYPE_I8, 1, "int8")                                                                     \
    X(TRN_DTYPE_I16, 2, "int16")                                                                   \
    X(TRN_DTYPE_I32, 4, "int32")                                                                   \
    X(TRN_DTYPE_I64, 8, "int64")                                                                   \
    X(TRN_DTYPE_U16, 2, "uint16")                                                                  \
    X(TRN_DTYPE_U32, 4, "uint32")                                                                  \
    X(TRN_DTYPE_U64, 8, "uint64")                                                                  \
    X(TRN_DTYPE_F16, 2, "float16")                                                                 \
    X(TRN_DTYPE_BF16, 2, "bfloat16")                                                               \
    X(TRN_DTYPE_F32, 4, "float32")                                                                 \
    X(TRN_DTYPE_F64, 8, "float64")                                                                 \
    X(TRN_DTYPE_C64, 8, "complex64")                                                               \
    X(TRN_DTYPE_C128, 16, "complex128")                                                            \
    X(TRN_DTYPE_F8E4M3FN, 1, "float8_e4m3fn")                                                      \
    X(TRN_DTYPE_F8E5M2, 1, "float8_e5m2")                                                          \
    X(TRN_DTYPE_F8E4M3FNUZ, 1, "float8_e4m3fnuz")                                                  \
    X(TRN_DTYPE_F8E5M2FNUZ, 1, "float8_e5m2fnuz")                                                  \
    X(TRN_DTYPE_F8E8M0FNU, 1, "float8_e8m0fnu")

typedef enum trn_dtype {
#define TRN__DTYPE_ENUM(name, size, text) name,
    TRN_DTYPE_LIST(TRN__DTYPE_ENUM)
#undef TRN__DTYPE_ENUM
        TRN_DTYPE_COUNT
} trn_dtype;

// Whether `dtype` is one of the 8-bit floats (trn/convert.h converts them).
static inline int trn_dtype_is_fp8(trn_dtype dtype) {
    return dtype >= TRN_DTYPE_F8E4M3FN && dtype <= TRN_DTYPE_F8E8M0FNU;
}

// Element size in bytes; 0 for an out-of-range value.
size_t trn_dtype_size(trn_dtype dtype);
// "float32"; "invalid" for an out-of-range value.
const char *trn_dtype_name(trn_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
