// test_common_dev.h - helpers shared by the kernel tests (matmul, conv, fill,
// sort, isin, reduce): typed
// element access on host buffers, a deterministic random generator, and
// host <-> device transfers through the copy kernel (so the tests also pass
// with every device block mprotect-ed).
#ifndef TRN_TEST_COMMON_DEV_H
#define TRN_TEST_COMMON_DEV_H

#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "trn/convert.h"

static uint64_t rng_state = 88172645463325252ull;
static inline uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
// Uniform in [-1, 1).
static inline double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1p-52 - 1.0; }

static inline void put_elem(trn_dtype d, void *base, int64_t i, double v) {
    char *p = (char *)base + i * (int64_t)trn_dtype_size(d);
    switch (d) {
    case TRN_DTYPE_U8: {
        uint8_t x = (uint8_t)(int64_t)v;
        memcpy(p, &x, 1);
        break;
    }
    case TRN_DTYPE_I8: {
        int8_t x = (int8_t)v;
        memcpy(p, &x, 1);
        break;
    }
    case TRN_DTYPE_I16: {
        int16_t x = (int16_t)v;
        memcpy(p, &x, 2);
        break;
    }
    case TRN_DTYPE_I32: {
        int32_t x = (int32_t)v;
        memcpy(p, &x, 4);
        break;
    }
    case TRN_DTYPE_I64: {
        int64_t x = (int64_t)v;
        memcpy(p, &x, 8);
        break;
    }
    case TRN_DTYPE_F16: {
        uint16_t x = trn_float_to_half((float)v);
        memcpy(p, &x, 2);
        break;
    }
    case TRN_DTYPE_BF16: {
        uint16_t x = trn_float_to_bf16((float)v);
        memcpy(p, &x, 2);
        break;
    }
    case TRN_DTYPE_F32: {
        float x = (float)v;
        memcpy(p, &x, 4);
        break;
    }
    case TRN_DTYPE_F64: memcpy(p, &v, 8); break;
    default: break;
    }
}

static inline double get_elem(trn_dtype d, const void *base, int64_t i) {
    const char *p = (const char *)base + i * (int64_t)trn_dtype_size(d);
    switch (d) {
    case TRN_DTYPE_U8: {
        uint8_t x;
        memcpy(&x, p, 1);
        return x;
    }
    case TRN_DTYPE_I8: {
        int8_t x;
        memcpy(&x, p, 1);
        return x;
    }
    case TRN_DTYPE_I16: {
        int16_t x;
        memcpy(&x, p, 2);
        return x;
    }
    case TRN_DTYPE_I32: {
        int32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    case TRN_DTYPE_I64: {
        int64_t x;
        memcpy(&x, p, 8);
        return (double)x;
    }
    case TRN_DTYPE_F16: {
        uint16_t x;
        memcpy(&x, p, 2);
        return trn_half_to_float(x);
    }
    case TRN_DTYPE_BF16: {
        uint16_t x;
        memcpy(&x, p, 2);
        return trn_bf16_to_float(x);
    }
    case TRN_DTYPE_F32: {
        float x;
        memcpy(&x, p, 4);
        return x;
    }
    case TRN_DTYPE_F64: {
        double x;
        memcpy(&x, p, 8);
        return x;
    }
    default: return 0;
    }
}

static inline bool is_int_dtype(trn_dtype d) {
    return d == TRN_DTYPE_U8 || d == TRN_DTYPE_I8 || d == TRN_DTYPE_I16 || d == TRN_DTYPE_I32 ||
           d == TRN_DTYPE_I64;
}

// Byte copy host <-> device on `s`, synchronized.
static inline void xfer(trn_stream *s, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    int64_t n = (int64_t)bytes, one = 1;
    trn_copy_desc c = {1, &n, dst, &one, TRN_DTYPE_U8, src, &one, TRN_DTYPE_U8};
    CHECK_OK(trn_copy_launch(s, &c));
    CHECK_OK(trn_stream_synchronize(s));
}

static inline void *dev_alloc(trn_stream *s, size_t bytes) {
    void *p = NULL;
    CHECK_OK(trn_mem_alloc(0, bytes ? bytes : 1, s, &p));
    return p;
}

#endif
