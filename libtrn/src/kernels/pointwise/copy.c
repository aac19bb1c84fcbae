// copy.c - owns the copy kernel: descriptor validation, dimension
// coalescing, and the task that moves elements (memmove for same-dtype
// contiguous data, element-size copies for same-dtype strided data, and
// PyTorch-compatible conversion between every pair of dtypes).
//
// Conversions are generated per (source, destination) pair: convert_one is
// forced inline with both dtypes constant, so each of the 400 inner loops
// compiles to straight-line code without a per-element switch.
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../kit/launch.h"
#include "../kit/bf16_store.h"
#include "../kit/dims.h"
#include "trn/convert.h"
#include "trn/parallel.h"

// Elements per parallel piece: a copy of fewer than 2 x 32K elements is
// done before a second thread would have started.
#define COPY_GRAIN 32768

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

_Static_assert(TRN_DTYPE_COUNT == 20, "add the new dtype to this file");

// Launch arguments: a header and the coalesced dims, strides in bytes.
// Only the used part of dims travels through the queue.
typedef struct copy_args {
    char *dst;
    const char *src;
    trn_dtype dst_dtype, src_dtype;
    int ndim;  // >= 1
    // Byte range each side touches, relative to dst/src (for protect mode).
    int64_t lo[2], span[2];          // [0] dst, [1] src
    int64_t dims[3 * TRN_MAX_DIMS];  // sizes, dst strides, src strides
} copy_args;

_Static_assert(sizeof(copy_args) <= TRN_TASK_MAX_ARGS, "copy args too large");

// ---- scalar conversions -------------------------------------------------------
// Float -> integer follows what PyTorch's CPU kernels produce on x86-64,
// without undefined behaviour: NaN and out-of-range values become the
// "integer indefinite" value of the conversion instruction.

static inline int64_t real_to_i64(double v) {
    if (!(v >= -0x1p63 && v < 0x1p63)) return INT64_MIN;  // NaN fails too
    return (int64_t)v;
}

static inline int32_t real_to_i32(double v) {
    if (!(v > -2147483649.0 && v < 2147483648.0)) return INT32_MIN;
    return (int32_t)v;
}

// What compilers emit for float -> uint64 on x86-64 (two cvttsd2si paths).
static inline uint64_t real_to_u64(double v) {
    if (v != v) return UINT64_C(1) << 63;
    if (v < 0x1p63) return (uint64_t)real_to_i64(v);
    if (v < 0x1p64) return (uint64_t)v;
    return 0;
}

static inline void put_u8(void *p, uint8_t v) { memcpy(p, &v, 1); }
static inline void put_u16(void *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void put_u32(void *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put_u64(void *p, uint64_t v) { memcpy(p, &v, 8); }
static inline void put_f32(void *p, float v) { memcpy(p, &v, 4); }
static inline void put_f64(void *p, double v) { memcpy(p, &v, 8); }
static inline void put_c64(void *p, float re, float im) {
    float v[2] = {re, im};
    memcpy(p, v, sizeof v);
}
static inline void put_c128(void *p, double re, double im) {
    double v[2] = {re, im};
    memcpy(p, v, sizeof v);
}

// 8-bit float targets round a float32 once (trn/convert.h); every source
// reaches them as float32, as c10 converts.
static ALWAYS_INLINE void store_fp8(trn_dtype d, void *p, float v) {
    switch (d) {
    case TRN_DTYPE_F8E4M3FN: put_u8(p, trn_float_to_fp8_e4m3fn(v)); break;
    case TRN_DTYPE_F8E5M2: put_u8(p, trn_float_to_fp8_e5m2(v)); break;
    case TRN_DTYPE_F8E4M3FNUZ: put_u8(p, trn_float_to_fp8_e4m3fnuz(v)); break;
    case TRN_DTYPE_F8E5M2FNUZ: put_u8(p, trn_float_to_fp8_e5m2fnuz(v)); break;
    case TRN_DTYPE_F8E8M0FNU: put_u8(p, trn_float_to_fp8_e8m0fnu(v)); break;
    default: break;
    }
}

// Integer targets take the low bits (two's complement), as a C++ cast does.
static ALWAYS_INLINE void store_uint(trn_dtype d, void *p, uint64_t v) {
    switch (d) {
    case TRN_DTYPE_BOOL: put_u8(p, v != 0); break;
    case TRN_DTYPE_U8:
    case TRN_DTYPE_I8: put_u8(p, (uint8_t)v); break;
    case TRN_DTYPE_I16:
    case TRN_DTYPE_U16: put_u16(p, (uint16_t)v); break;
    case TRN_DTYPE_I32:
    case TRN_DTYPE_U32: put_u32(p, (uint32_t)v); break;
    case TRN_DTYPE_I64:
    case TRN_DTYPE_U64: put_u64(p, v); break;
    case TRN_DTYPE_F16: put_u16(p, trn_float_to_half((float)v)); break;
    case TRN_DTYPE_BF16: put_u16(p, trn_float_to_bf16((float)v)); break;
    case TRN_DTYPE_F32: put_f32(p, (float)v); break;
    case TRN_DTYPE_F64: put_f64(p, (double)v); break;
    case TRN_DTYPE_C64: put_c64(p, (float)v, 0.0f); break;
    case TRN_DTYPE_C128: put_c128(p, (double)v, 0.0); break;
    default: store_fp8(d, p, (float)v); break;
    }
}

// Floats are rounded from the exact integer once (int64 -> float directly,
// not via double); 16-bit floats go through float32 as c10 does.
static ALWAYS_INLINE void store_int(trn_dtype d, void *p, int64_t v) {
    switch (d) {
    case TRN_DTYPE_F16: put_u16(p, trn_float_to_half((float)v)); break;
    case TRN_DTYPE_BF16: put_u16(p, trn_float_to_bf16((float)v)); break;
    case TRN_DTYPE_F32: put_f32(p, (float)v); break;
    case TRN_DTYPE_F64: put_f64(p, (double)v); break;
    case TRN_DTYPE_C64: put_c64(p, (float)v, 0.0f); break;
    case TRN_DTYPE_C128: put_c128(p, (double)v, 0.0); break;
    case TRN_DTYPE_F8E4M3FN:
    case TRN_DTYPE_F8E5M2:
    case TRN_DTYPE_F8E4M3FNUZ:
    case TRN_DTYPE_F8E5M2FNUZ:
    case TRN_DTYPE_F8E8M0FNU: store_fp8(d, p, (float)v); break;
    default: store_uint(d, p, (uint64_t)v); break;
    }
}

// Every real float source arrives as double (exact for float16/bfloat16/
// float32). Narrow integers take the low bits of the int32 conversion
// (cvttss2si), except uint8, which c10 routes through int64, and uint32,
// which compilers convert through int64.
static ALWAYS_INLINE void store_real(trn_dtype d, void *p, double v) {
    switch (d) {
    case TRN_DTYPE_BOOL: put_u8(p, v != 0); break;  // NaN != 0 -> true
    case TRN_DTYPE_U8: put_u8(p, (uint8_t)(uint64_t)real_to_i64(v)); break;
    case TRN_DTYPE_I8: put_u8(p, (uint8_t)(uint32_t)real_to_i32(v)); break;
    case TRN_DTYPE_I16:
    case TRN_DTYPE_U16: put_u16(p, (uint16_t)(uint32_t)real_to_i32(v)); break;
    case TRN_DTYPE_I32: put_u32(p, (uint32_t)real_to_i32(v)); break;
    case TRN_DTYPE_U32: put_u32(p, (uint32_t)(uint64_t)real_to_i64(v)); break;
    case TRN_DTYPE_I64: put_u64(p, (uint64_t)real_to_i64(v)); break;
    case TRN_DTYPE_U64: put_u64(p, real_to_u64(v)); break;
    case TRN_DTYPE_F16: put_u16(p, trn_float_to_half((float)v)); break;
    case TRN_DTYPE_BF16: put_u16(p, trn_float_to_bf16((float)v)); break;
    case TRN_DTYPE_F32: put_f32(p, (float)v); break;
    case TRN_DTYPE_F64: put_f64(p, v); break;
    case TRN_DTYPE_C64: put_c64(p, (float)v, 0.0f); break;
    case TRN_DTYPE_C128: put_c128(p, v, 0.0); break;
    default: store_fp8(d, p, (float)v); break;
    }
}

// An 8-bit float source, widened exactly to float32: float16 and bfloat16
// targets take PyTorch's NaN patterns, the rest is any real source's path.
// The NaN of the fnuz and e8m0 formats (float32 0x7F800001) converts to
// integer 0 on PyTorch CPU (`nan_int_zero`), the other formats' NaN like a
// float32 NaN.
static ALWAYS_INLINE void store_fp8_value(trn_dtype d, void *p, float v, int nan_int_zero) {
    switch (d) {
    case TRN_DTYPE_F16: put_u16(p, trn_fp8_value_to_half(v)); break;
    case TRN_DTYPE_BF16: put_u16(p, trn_fp8_value_to_bf16(v)); break;
    // Not through double: that would quiet the fnuz/e8m0 NaN pattern.
    case TRN_DTYPE_F32: put_f32(p, v); break;
    case TRN_DTYPE_C64: put_c64(p, v, 0.0f); break;
    case TRN_DTYPE_U8:
    case TRN_DTYPE_I8:
    case TRN_DTYPE_I16:
    case TRN_DTYPE_U16:
    case TRN_DTYPE_I32:
    case TRN_DTYPE_U32:
    case TRN_DTYPE_I64:
    case TRN_DTYPE_U64:
        if (nan_int_zero && v != v) {
            store_uint(d, p, 0);
            break;
        }
        store_real(d, p, v);
        break;
    default: store_real(d, p, v); break;
    }
}

// Complex -> real keeps the real part; -> bool tests both parts.
static ALWAYS_INLINE void store_complex(trn_dtype d, void *p, double re, double im) {
    switch (d) {
    case TRN_DTYPE_BOOL: put_u8(p, re != 0 || im != 0); break;
    case TRN_DTYPE_C64: put_c64(p, (float)re, (float)im); break;
    case TRN_DTYPE_C128: put_c128(p, re, im); break;
    default: store_real(d, p, re); break;
    }
}

#define LOAD(type, p)                                                                              \
    type v;                                                                                        \
    memcpy(&v, p, sizeof v)
// One case of a source of C type `type`: read into v, then STORE (a
// statement using v), then break out of the switch.
#define FROM(type, STORE)                                                                          \
    {                                                                                              \
        LOAD(type, src);                                                                           \
        STORE;                                                                                     \
        break;                                                                                     \
    }

static ALWAYS_INLINE void convert_one(trn_dtype d, void *dst, trn_dtype s, const void *src) {
    switch (s) {
    case TRN_DTYPE_BOOL: FROM(uint8_t, store_uint(d, dst, v != 0));
    case TRN_DTYPE_U8: FROM(uint8_t, store_uint(d, dst, v));
    case TRN_DTYPE_U16: FROM(uint16_t, store_uint(d, dst, v));
    case TRN_DTYPE_U32: FROM(uint32_t, store_uint(d, dst, v));
    case TRN_DTYPE_U64: FROM(uint64_t, store_uint(d, dst, v));
    case TRN_DTYPE_I8: FROM(int8_t, store_int(d, dst, v));
    case TRN_DTYPE_I16: FROM(int16_t, store_int(d, dst, v));
    case TRN_DTYPE_I32: FROM(int32_t, store_int(d, dst, v));
    case TRN_DTYPE_I64: FROM(int64_t, store_int(d, dst, v));
    case TRN_DTYPE_F16: FROM(uint16_t, store_real(d, dst, trn_half_to_float(v)));
    case TRN_DTYPE_BF16: FROM(uint16_t, store_real(d, dst, trn_bf16_to_float(v)));
    case TRN_DTYPE_F32: FROM(float, store_real(d, dst, v));
    case TRN_DTYPE_F64: FROM(double, store_real(d, dst, v));
    case TRN_DTYPE_C64: {
        LOAD(float, src);
        float im;
        memcpy(&im, (const char *)src + 4, 4);
        store_complex(d, dst, v, im);
        break;
    }
    case TRN_DTYPE_C128: {
        LOAD(double, src);
        double im;
        memcpy(&im, (const char *)src + 8, 8);
        store_complex(d, dst, v, im);
        break;
    }
    case TRN_DTYPE_F8E4M3FN: FROM(uint8_t, store_fp8_value(d, dst, trn_fp8_e4m3fn_to_float(v), 0));
    case TRN_DTYPE_F8E5M2: FROM(uint8_t, store_fp8_value(d, dst, trn_fp8_e5m2_to_float(v), 0));
    case TRN_DTYPE_F8E4M3FNUZ:
        FROM(uint8_t, store_fp8_value(d, dst, trn_fp8_e4m3fnuz_to_float(v), 1));
    case TRN_DTYPE_F8E5M2FNUZ:
        FROM(uint8_t, store_fp8_value(d, dst, trn_fp8_e5m2fnuz_to_float(v), 1));
    case TRN_DTYPE_F8E8M0FNU:
        FROM(uint8_t, store_fp8_value(d, dst, trn_fp8_e8m0fnu_to_float(v), 1));
    default: break;
    }
}

// ---- 1-d runs -------------------------------------------------------------------

typedef void (*run_fn)(trn_dtype dst_dtype, char *dst, int64_t dst_stride, const char *src,
                       int64_t src_stride, int64_t n);

#define CONV_CASE(name, size, text)                                                                \
    case name:                                                                                     \
        for (int64_t i = 0; i < n; i++)                                                            \
            convert_one(name, dst + i * dst_stride, st, src + i * src_stride);                     \
        break;

#define DEFINE_CONV_FROM(S)                                                                        \
    static void conv_from_##S(trn_dtype dt, char *dst, int64_t dst_stride, const char *src,        \
                              int64_t src_stride, int64_t n) {                                     \
        const trn_dtype st = S;                                                                    \
        switch (dt) {                                                                              \
            TRN_DTYPE_LIST(CONV_CASE)                                                              \
        default: break;                                                                            \
        }                                                                                          \
    }

DEFINE_CONV_FROM(TRN_DTYPE_BOOL)
DEFINE_CONV_FROM(TRN_DTYPE_U8)
DEFINE_CONV_FROM(TRN_DTYPE_I8)
DEFINE_CONV_FROM(TRN_DTYPE_I16)
DEFINE_CONV_FROM(TRN_DTYPE_I32)
DEFINE_CONV_FROM(TRN_DTYPE_I64)
DEFINE_CONV_FROM(TRN_DTYPE_U16)
DEFINE_CONV_FROM(TRN_DTYPE_U32)
DEFINE_CONV_FROM(TRN_DTYPE_U64)
DEFINE_CONV_FROM(TRN_DTYPE_F16)
DEFINE_CONV_FROM(TRN_DTYPE_BF16)
DEFINE_CONV_FROM(TRN_DTYPE_F32)
DEFINE_CONV_FROM(TRN_DTYPE_F64)
DEFINE_CONV_FROM(TRN_DTYPE_C64)
DEFINE_CONV_FROM(TRN_DTYPE_C128)
DEFINE_CONV_FROM(TRN_DTYPE_F8E4M3FN)
DEFINE_CONV_FROM(TRN_DTYPE_F8E5M2)
DEFINE_CONV_FROM(TRN_DTYPE_F8E4M3FNUZ)
DEFINE_CONV_FROM(TRN_DTYPE_F8E5M2FNUZ)
DEFINE_CONV_FROM(TRN_DTYPE_F8E8M0FNU)

static const run_fn conv_from[TRN_DTYPE_COUNT] = {
#define CONV_ENTRY(name, size, text) [name] = conv_from_##name,
    TRN_DTYPE_LIST(CONV_ENTRY)
#undef CONV_ENTRY
};

// Same dtype: move bytes, one element size at a time.
#define DEFINE_MOVE(N)                                                                             \
    static void move_##N(trn_dtype dt, char *dst, int64_t dst_stride, const char *src,             \
                         int64_t src_stride, int64_t n) {                                          \
        (void)dt;                                                                                  \
        if (dst_stride == N && src_stride == N) {                                                  \
            memmove(dst, src, (size_t)n *N);                                                       \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * dst_stride, src + i * src_stride, N);     \
    }

DEFINE_MOVE(1)
DEFINE_MOVE(2)
DEFINE_MOVE(4)
DEFINE_MOVE(8)
DEFINE_MOVE(16)

static run_fn move_for(size_t element_size) {
    switch (element_size) {
    case 1: return move_1;
    case 2: return move_2;
    case 4: return move_4;
    case 8: return move_8;
    default: return move_16;
    }
}

// Contiguous float16/bfloat16 <-> float32 runs (autocast's casts): loops of
// fixed stride over the select-based conversions, which the compiler
// vectorizes; the same functions as convert_one, so the same bits
// (float32 -> bfloat16: bf16_store.h, the same bits again).
#define DEFINE_CONV_RUN(NAME, SRC_T, SRC_SIZE, DST_SIZE, PUT, CONVERT)                             \
    static void NAME(trn_dtype dt, char *dst, int64_t ds, const char *src, int64_t ss,             \
                     int64_t n) {                                                                  \
        (void)dt, (void)ds, (void)ss;                                                              \
        for (int64_t i = 0; i < n; i++) {                                                          \
            SRC_T v;                                                                               \
            memcpy(&v, src + SRC_SIZE * i, SRC_SIZE);                                              \
            PUT(dst + DST_SIZE * i, CONVERT(v));                                                   \
        }                                                                                          \
    }
static void f32_to_bf16_run(trn_dtype dt, char *dst, int64_t ds, const char *src, int64_t ss,
                            int64_t n) {
    (void)dt, (void)ds, (void)ss;
    trn__bf16_store_run(dst, src, n);
}
DEFINE_CONV_RUN(bf16_to_f32_run, uint16_t, 2, 4, put_f32, trn_bf16_to_float)
DEFINE_CONV_RUN(f32_to_f16_run, float, 4, 2, put_u16, trn_float_to_half)
DEFINE_CONV_RUN(f16_to_f32_run, uint16_t, 2, 4, put_f32, trn_half_to_float)
#undef DEFINE_CONV_RUN

// The contiguous loop for a conversion, or NULL.
static run_fn contiguous_conv(trn_dtype dt, trn_dtype st) {
    if (st == TRN_DTYPE_F32 && dt == TRN_DTYPE_BF16) return f32_to_bf16_run;
    if (st == TRN_DTYPE_BF16 && dt == TRN_DTYPE_F32) return bf16_to_f32_run;
    if (st == TRN_DTYPE_F32 && dt == TRN_DTYPE_F16) return f32_to_f16_run;
    if (st == TRN_DTYPE_F16 && dt == TRN_DTYPE_F32) return f16_to_f32_run;
    return NULL;
}

// ---- task -----------------------------------------------------------------------

// Copies the linear range [begin, end) of the coalesced index space.
static void copy_range(void *ctx, int64_t begin, int64_t end) {
    const copy_args *a = ctx;
    const int nd = a->ndim;
    const int64_t *size = a->dims;
    const int64_t *dstr = a->dims + nd;
    const int64_t *sstr = a->dims + 2 * nd;
    const int inner = nd - 1;
    const int64_t row = size[inner];
    const size_t dsize = trn_dtype_size(a->dst_dtype);
    const size_t ssize = trn_dtype_size(a->src_dtype);
    const bool same = a->dst_dtype == a->src_dtype;
    const bool contiguous = dstr[inner] == (int64_t)dsize && sstr[inner] == (int64_t)ssize;
    run_fn run = same ? move_for(dsize) : conv_from[a->src_dtype];
    if (!same && contiguous) {
        run_fn fast = contiguous_conv(a->dst_dtype, a->src_dtype);
        if (fast != NULL) run = fast;
    }
    // Multi-index of `begin` over the outer dims, and its byte offsets.
    int64_t index[TRN_MAX_DIMS] = {0};
    int64_t rem = begin / row, col = begin % row;
    int64_t doff = col * dstr[inner], soff = col * sstr[inner];
    for (int d = inner - 1; d >= 0; d--) {
        index[d] = rem % size[d];
        rem /= size[d];
        doff += index[d] * dstr[d];
        soff += index[d] * sstr[d];
    }
    int64_t pos = begin;
    while (pos < end) {
        const int64_t n = end - pos < row - col ? end - pos : row - col;
        run(a->dst_dtype, a->dst + doff, dstr[inner], a->src + soff, sstr[inner], n);
        pos += n;
        doff -= col * dstr[inner];  // back to the start of the row
        soff -= col * sstr[inner];
        col = 0;
        trn_kit_odo_next(inner, size, index, dstr, &doff, sstr, &soff, NULL, NULL);
    }
}

// 2-d transposes (one side's rows run along the other side's columns):
// walking either side's rows strides the other by a whole row per element,
// a cache miss each (a 4096^2 float32 transpose ran at 0.8 GB/s); TILE x TILE
// tiles keep both sides' lines in cache. Pieces are bands of TILE rows.
#define TILE 32
#define DEFINE_TILE(N, T)                                                                          \
    static void tile_##N(char *dst, int64_t d0, int64_t d1, const char *src, int64_t s0,           \
                         int64_t s1, int64_t rows, int64_t cols) {                                 \
        for (int64_t r = 0; r < rows; r++)                                                         \
            for (int64_t c = 0; c < cols; c++) {                                                   \
                T v;                                                                               \
                memcpy(&v, src + r * s0 + c * s1, sizeof v);                                       \
                memcpy(dst + r * d0 + c * d1, &v, sizeof v);                                       \
            }                                                                                      \
    }
DEFINE_TILE(2, uint16_t)
DEFINE_TILE(4, uint32_t)
DEFINE_TILE(8, uint64_t)

static bool is_transpose(const copy_args *a) {
    if (a->ndim != 2 || a->dst_dtype != a->src_dtype) return false;
    const int64_t es = (int64_t)trn_dtype_size(a->dst_dtype);
    const int64_t *size = a->dims, *dstr = a->dims + 2, *sstr = a->dims + 4;
    if (es != 2 && es != 4 && es != 8) return false;
    if (size[0] < TILE || size[1] < TILE) return false;
    return (dstr[1] == es && sstr[0] == es) || (dstr[0] == es && sstr[1] == es);
}

static void transpose_range(void *ctx, int64_t b0, int64_t b1) {
    const copy_args *a = ctx;
    const int64_t *size = a->dims, *dstr = a->dims + 2, *sstr = a->dims + 4;
    const size_t es = trn_dtype_size(a->dst_dtype);
    for (int64_t rb = b0; rb < b1; rb++) {
        const int64_t r0 = rb * TILE, rows = size[0] - r0 < TILE ? size[0] - r0 : TILE;
        for (int64_t c0 = 0; c0 < size[1]; c0 += TILE) {
            const int64_t cols = size[1] - c0 < TILE ? size[1] - c0 : TILE;
            char *d = a->dst + r0 * dstr[0] + c0 * dstr[1];
            const char *src = a->src + r0 * sstr[0] + c0 * sstr[1];
            if (es == 2)
                tile_2(d, dstr[0], dstr[1], src, sstr[0], sstr[1], rows, cols);
            else if (es == 4)
                tile_4(d, dstr[0], dstr[1], src, sstr[0], sstr[1], rows, cols);
            else
                tile_8(d, dstr[0], dstr[1], src, sstr[0], sstr[1], rows, cols);
        }
    }
}

static trn_status copy_run(const void *args) {
    copy_args *a = (copy_args *)args;
    int64_t numel = 1;
    for (int d = 0; d < a->ndim; d++) numel *= a->dims[d];
    if (is_transpose(a)) {
        const int64_t bands = (a->dims[0] + TILE - 1) / TILE;
        int64_t grain = COPY_GRAIN / (TILE * a->dims[1]);
        trn_parallel_for(bands, grain < 1 ? 1 : grain, transpose_range, a);
        return TRN_SUCCESS;
    }
    trn_parallel_for(numel, COPY_GRAIN, copy_range, a);
    return TRN_SUCCESS;
}

static trn_status copy_task(void *args) {
    const copy_args *a = args;
    return trn__access_run(copy_run, a, 2, (const void *[]){a->dst, a->src}, a->lo, a->span);
}

// ---- launch -----------------------------------------------------------------------

static trn_status invalid(const char *fmt, int dim, long long value) {
    char what[160];
    snprintf(what, sizeof what, fmt, dim, value);
    return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_copy_launch: %s", what);
}

// Byte stride and the [lo, hi) byte offsets a dimension adds; false on
// overflow.
static bool dim_extent(int64_t size, int64_t stride, size_t esize, int64_t *byte_stride,
                       int64_t *lo, int64_t *hi) {
    int64_t reach;
    if (__builtin_mul_overflow(stride, (int64_t)esize, byte_stride) ||
        __builtin_mul_overflow(*byte_stride, size - 1, &reach))
        return false;
    return reach < 0 ? !__builtin_add_overflow(*lo, reach, lo)
                     : !__builtin_add_overflow(*hi, reach, hi);
}

trn_status trn_copy_launch(trn_stream *stream, const trn_copy_desc *desc) {
    if (stream == NULL || desc == NULL) return trn__check_launch(stream, desc, "trn_copy_launch");
    const int nd = desc->ndim;
    if (nd < 0 || nd > TRN_MAX_DIMS) return invalid("ndim %d is outside 0..%lld", nd, TRN_MAX_DIMS);
    if ((unsigned)desc->dst_dtype >= TRN_DTYPE_COUNT ||
        (unsigned)desc->src_dtype >= TRN_DTYPE_COUNT)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_copy_launch: invalid dtype (dst %d, src %d)",
                              (int)desc->dst_dtype, (int)desc->src_dtype);
    if (nd > 0 && (desc->sizes == NULL || desc->dst_strides == NULL || desc->src_strides == NULL))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_copy_launch: sizes or strides are NULL");
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        if (desc->sizes[d] < 0)
            return invalid("size of dim %d is negative (%lld)", d, desc->sizes[d]);
        if (__builtin_mul_overflow(numel, desc->sizes[d], &numel))
            return invalid("dim %d: element count overflows (%lld)", d, desc->sizes[d]);
    }
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS || numel == 0) return st;
    if (desc->dst == NULL || desc->src == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_copy_launch: %s pointer is NULL for %lld "
                              "elements",
                              desc->dst == NULL ? "dst" : "src", (long long)numel);

    copy_args a;
    a.dst = desc->dst;
    a.src = desc->src;
    a.dst_dtype = desc->dst_dtype;
    a.src_dtype = desc->src_dtype;
    a.lo[0] = a.lo[1] = 0;
    const size_t dsize = trn_dtype_size(a.dst_dtype);
    const size_t ssize = trn_dtype_size(a.src_dtype);
    int64_t dst_hi = 0, src_hi = 0;
    // Coalesce: drop size-1 dims, merge a dim into its outer neighbour when
    // both sides are laid out contiguously across them (byte strides).
    trn_kit_dims dims;
    trn_kit_dims_init(&dims, 2);
    for (int d = 0; d < nd; d++) {
        int64_t sz = desc->sizes[d], s[2];
        if (sz == 1) continue;
        if (desc->dst_strides[d] == 0)
            return invalid("dst stride of dim %d is 0 but its size is %lld "
                           "(overlapping writes)",
                           d, sz);
        if (!dim_extent(sz, desc->dst_strides[d], dsize, &s[0], &a.lo[0], &dst_hi) ||
            !dim_extent(sz, desc->src_strides[d], ssize, &s[1], &a.lo[1], &src_hi))
            return invalid("dim %d: strides overflow the address space "
                           "(size %lld)",
                           d, sz);
        trn_kit_dims_push(&dims, sz, s);
    }
    trn_kit_dims_finish(&dims, (const int64_t[]){(int64_t)dsize, (int64_t)ssize});
    a.ndim = dims.n;
    a.span[0] = dst_hi - a.lo[0] + (int64_t)dsize;
    a.span[1] = src_hi - a.lo[1] + (int64_t)ssize;
    const int64_t *end = trn_kit_dims_pack(&dims, a.dims);
    size_t args_size = (size_t)((const char *)end - (const char *)&a);
    trn__copy_observe(stream, desc->dst, desc->src, (uint64_t)numel * dsize);
    return trn_stream_launch(stream, copy_task, &a, args_size);
}
