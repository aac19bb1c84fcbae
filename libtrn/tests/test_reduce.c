// test_reduce.c - the reduction, scan and softmax kernels against double
// references: every loop shape (contiguous runs, column, strided), dtypes,
// NaN rules, indices, empty reductions, protect mode (run again with
// TORCH_NEURONX_DEBUG_PROTECT_MEMORY=1) and invalid descriptors.
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "test.h"
#include "test_common_dev.h"
#include "trn/convert.h"
#include "trn/scalar.h"

static trn_stream *g_stream;

// Device buffer holding a copy of host data.
static void *to_dev(const void *host, size_t bytes) {
    void *d = dev_alloc(g_stream, bytes);
    if (host) xfer(g_stream, d, host, bytes);
    return d;
}

static int close_to(double got, double want, double rtol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= rtol * fabs(want) + 1e-6;
}

#define CHECK_CLOSE(got, want, rtol)                                                               \
    do {                                                                                           \
        double g_ = (got), w_ = (want);                                                            \
        if (close_to(g_, w_, rtol)) {                                                              \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_fail_header(__FILE__, __LINE__);                                                  \
            fprintf(stderr, "%s ~ %s: %.9g vs %.9g\n", #got, #want, g_, w_);                       \
        }                                                                                          \
    } while (0)

// Runs a reduction of a host float32 matrix [r, c] (strides rs, cs) over
// `dims` (bit 0 = rows, bit 1 = cols) into a host result.
static void reduce2d(trn_reduce_op op, trn_dtype dt, trn_dtype odt, const void *host, size_t bytes,
                     int64_t r, int64_t c, int64_t rs, int64_t cs, int dims, double param,
                     void *out, size_t out_bytes, int64_t *out2, trn_status expect) {
    void *din = to_dev(host, bytes);
    void *dout = to_dev(NULL, out_bytes);
    void *dout2 = out2 ? to_dev(NULL, 8 * (size_t)(r * c)) : NULL;
    int64_t sizes[2] = {r, c}, strides[2] = {rs, cs};
    int64_t osz[2], ost[2], ist[2], isz[2], one[2] = {1, 1};
    int no = 0, ni = 0;
    for (int k = 0; k < 2; k++) {
        if (dims & (1 << k)) {
            isz[ni] = sizes[k];
            ist[ni++] = strides[k];
        } else {
            osz[no] = sizes[k];
            ist[0] = ist[0];
            ost[no++] = strides[k];
        }
    }
    (void)one;
    int64_t outs[2] = {1, 1};
    if (no == 2) outs[0] = c;
    trn_reduce_desc d = {op,  dt,   odt,  din, dout, dout2, no,   osz,
                         ost, outs, outs, ni,  isz,  ist,   param};
    CHECK_STATUS(trn_reduce_launch(g_stream, &d), expect);
    CHECK_OK(trn_stream_synchronize(g_stream));
    if (expect == TRN_SUCCESS) {
        xfer(g_stream, out, dout, out_bytes);
        int64_t nout = no == 0 ? 1 : osz[0];
        if (out2) xfer(g_stream, out2, dout2, 8 * (size_t)nout);
    }
    trn_mem_free(din);
    trn_mem_free(dout);
    if (dout2) trn_mem_free(dout2);
}

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xFFFF) / 65536.0 - 0.5;
}

static void test_sum_large(void) {
    const int64_t n = 1000000;
    float *x = malloc(sizeof(float) * (size_t)n);
    unsigned s = 1;
    double ref = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(frand(&s) + 0.25);
        ref += x[i];
    }
    float got;
    reduce2d(TRN_REDUCE_SUM, TRN_DTYPE_F32, TRN_DTYPE_F32, x, sizeof(float) * (size_t)n, 1, n, n, 1,
             3, 0, &got, 4, NULL, TRN_SUCCESS);
    CHECK_CLOSE(got, ref, 2e-6);
    float mean;
    reduce2d(TRN_REDUCE_MEAN, TRN_DTYPE_F32, TRN_DTYPE_F32, x, sizeof(float) * (size_t)n, 1, n, n,
             1, 3, 0, &mean, 4, NULL, TRN_SUCCESS);
    CHECK_CLOSE(mean, ref / (double)n, 2e-6);
    free(x);
}

// Every op over rows, cols and both, on a contiguous and a transposed
// matrix, against a double reference.
static double ref_op(trn_reduce_op op, const float *v, int64_t n, double p, int64_t *idx) {
    double acc = 0, m = 0;
    *idx = 0;
    switch (op) {
    case TRN_REDUCE_SUM:
        for (int64_t i = 0; i < n; i++) acc += v[i];
        return acc;
    case TRN_REDUCE_MEAN:
        for (int64_t i = 0; i < n; i++) acc += v[i];
        return acc / (double)n;
    case TRN_REDUCE_PROD:
        acc = 1;
        for (int64_t i = 0; i < n; i++) acc *= v[i];
        return acc;
    case TRN_REDUCE_AMAX:
    case TRN_REDUCE_MAX:
        acc = v[0];
        for (int64_t i = 1; i < n; i++)
            if (v[i] > acc) {
                acc = v[i];
                *idx = i;
            }
        return acc;
    case TRN_REDUCE_AMIN:
    case TRN_REDUCE_MIN:
        acc = v[0];
        for (int64_t i = 1; i < n; i++)
            if (v[i] < acc) {
                acc = v[i];
                *idx = i;
            }
        return acc;
    case TRN_REDUCE_VAR:
    case TRN_REDUCE_STD:
        for (int64_t i = 0; i < n; i++) m += v[i];
        m /= (double)n;
        for (int64_t i = 0; i < n; i++) acc += (v[i] - m) * (v[i] - m);
        acc /= (double)n - p;
        return op == TRN_REDUCE_STD ? sqrt(acc) : acc;
    case TRN_REDUCE_NORM:
        if (p == INFINITY) {
            for (int64_t i = 0; i < n; i++) acc = fmax(acc, fabs(v[i]));
            return acc;
        }
        if (p == 0) {
            for (int64_t i = 0; i < n; i++) acc += v[i] != 0;
            return acc;
        }
        for (int64_t i = 0; i < n; i++) acc += pow(fabs(v[i]), p);
        return pow(acc, 1 / p);
    case TRN_REDUCE_LOGSUMEXP:
        m = v[0];
        for (int64_t i = 1; i < n; i++) m = fmax(m, v[i]);
        for (int64_t i = 0; i < n; i++) acc += exp(v[i] - m);
        return m + log(acc);
    case TRN_REDUCE_COUNT_NONZERO:
        for (int64_t i = 0; i < n; i++) acc += v[i] != 0;
        return acc;
    default: return 0;
    }
}

static void test_ops_layouts(void) {
    enum { R = 37, C = 1100 };
    float *x = malloc(sizeof(float) * R * C), *col = malloc(sizeof(float) * R * C);
    unsigned s = 7;
    for (int i = 0; i < R * C; i++) x[i] = (float)(frand(&s) * 4 + 0.05);
    for (int i = 0; i < 50; i++) x[(i * 977) % (R * C)] = 0;  // zeros for count/norm0
    const struct {
        trn_reduce_op op;
        double p;
        double rtol;
    } ops[] = {
        {TRN_REDUCE_SUM, 0, 1e-5},        {TRN_REDUCE_MEAN, 0, 1e-5},
        {TRN_REDUCE_AMAX, 0, 0},          {TRN_REDUCE_AMIN, 0, 0},
        {TRN_REDUCE_MAX, 0, 0},           {TRN_REDUCE_MIN, 0, 0},
        {TRN_REDUCE_VAR, 1, 1e-6},        {TRN_REDUCE_STD, 0, 1e-6},
        {TRN_REDUCE_NORM, 2, 1e-5},       {TRN_REDUCE_NORM, 1, 1e-5},
        {TRN_REDUCE_NORM, INFINITY, 0},   {TRN_REDUCE_NORM, 0, 0},
        {TRN_REDUCE_NORM, 3.5, 1e-5},     {TRN_REDUCE_LOGSUMEXP, 0, 1e-5},
        {TRN_REDUCE_COUNT_NONZERO, 0, 0},
    };
    float *out = malloc(sizeof(float) * (R > C ? R : C) * 2);
    int64_t *out2 = malloc(8 * (R > C ? R : C) * 2);
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        const trn_reduce_op op = ops[k].op;
        const int cnt = op == TRN_REDUCE_COUNT_NONZERO;
        const int idx = op == TRN_REDUCE_MAX || op == TRN_REDUCE_MIN;
        const trn_dtype odt = cnt ? TRN_DTYPE_I64 : TRN_DTYPE_F32;
        for (int layout = 0; layout < 2; layout++) {
            // layout 0: x is [R, C] row-major; layout 1: the same logical
            // matrix [R, C] read through a transposed [C, R] buffer.
            const float *buf = x;
            int64_t rs = C, cs = 1;
            if (layout == 1) {
                for (int i = 0; i < R; i++)
                    for (int j = 0; j < C; j++) col[j * R + i] = x[i * C + j];
                buf = col;
                rs = 1;
                cs = R;
            }
            for (int dims = 1; dims <= 3; dims++) {
                if (idx && dims == 3) continue;
                const int64_t nout = dims == 1 ? C : dims == 2 ? R : 1;
                reduce2d(op, TRN_DTYPE_F32, odt, buf, sizeof(float) * R * C, R, C, rs, cs, dims,
                         ops[k].p, out, (cnt ? 8 : 4) * (size_t)nout, idx ? out2 : NULL,
                         TRN_SUCCESS);
                int bad = 0;
                for (int64_t o = 0; o < nout; o++) {
                    float v[R * C];
                    int64_t n = 0;
                    if (dims == 1)
                        for (int i = 0; i < R; i++) v[n++] = x[i * C + o];
                    if (dims == 2)
                        for (int j = 0; j < C; j++) v[n++] = x[o * C + j];
                    if (dims == 3)
                        for (int i = 0; i < R * C; i++) v[n++] = x[i];
                    int64_t ri;
                    double want = ref_op(op, v, n, ops[k].p, &ri);
                    double got = cnt ? (double)((int64_t *)(void *)out)[o] : out[o];
                    // Sums of ~1000 float32 terms of size ~2: absolute error up to ~1e-4.
                    const int ok = close_to(got, want, ops[k].rtol + 1e-7) ||
                                   (ops[k].rtol > 0 && fabs(got - want) < 5e-4);
                    if (!ok || (idx && out2[o] != ri)) {
                        if (bad++ < 3)
                            fprintf(stderr, "op %s p %g layout %d dims %d out %lld: %.9g vs %.9g\n",
                                    trn_reduce_op_name(op), ops[k].p, layout, dims, (long long)o,
                                    got, want);
                    }
                }
                CHECK_INT(bad, 0);
            }
        }
    }
    free(out);
    free(out2);
    free(x);
    free(col);
}

static void test_nan_and_indices(void) {
    float x[6] = {1, 5, 5, NAN, 2, NAN};
    float v;
    int64_t i;
    reduce2d(TRN_REDUCE_MAX, TRN_DTYPE_F32, TRN_DTYPE_F32, x, sizeof x, 1, 6, 6, 1, 2, 0, &v, 4, &i,
             TRN_SUCCESS);
    CHECK(isnan(v));
    CHECK_INT(i, 3);
    reduce2d(TRN_REDUCE_MAX, TRN_DTYPE_F32, TRN_DTYPE_F32, x, sizeof x, 1, 3, 3, 1, 2, 0, &v, 4, &i,
             TRN_SUCCESS);
    CHECK_CLOSE(v, 5, 0);
    CHECK_INT(i, 1);  // first of the ties
    reduce2d(TRN_REDUCE_AMIN, TRN_DTYPE_F32, TRN_DTYPE_F32, x, sizeof x, 1, 6, 6, 1, 2, 0, &v, 4,
             NULL, TRN_SUCCESS);
    CHECK(isnan(v));
    reduce2d(TRN_REDUCE_ARGMIN, TRN_DTYPE_F32, TRN_DTYPE_I64, x, sizeof x, 1, 6, 6, 1, 2, 0, &i, 8,
             NULL, TRN_SUCCESS);
    CHECK_INT(i, 3);
    // NaN in a column reduction (column loop) propagates.
    float m[8 * 3] = {0};
    m[8 + 5] = NAN;
    float out[8];
    reduce2d(TRN_REDUCE_AMAX, TRN_DTYPE_F32, TRN_DTYPE_F32, m, sizeof m, 3, 8, 8, 1, 1, 0, out,
             sizeof out, NULL, TRN_SUCCESS);
    CHECK(isnan(out[5]));
    CHECK_CLOSE(out[4], 0, 0);
    reduce2d(TRN_REDUCE_ANY, TRN_DTYPE_F32, TRN_DTYPE_BOOL, m, sizeof m, 3, 8, 8, 1, 3, 0, out, 1,
             NULL, TRN_SUCCESS);
    CHECK_INT(((uint8_t *)out)[0], 1);
}

static void test_int_and_half(void) {
    int64_t xi[5] = {INT64_MAX, 1, -3, 7, 2};
    int64_t r;
    reduce2d(TRN_REDUCE_SUM, TRN_DTYPE_I64, TRN_DTYPE_I64, xi, sizeof xi, 1, 5, 5, 1, 2, 0, &r, 8,
             NULL, TRN_SUCCESS);
    CHECK_INT(r, (int64_t)((uint64_t)INT64_MAX + 7));  // wraps like PyTorch
    reduce2d(TRN_REDUCE_PROD, TRN_DTYPE_I64, TRN_DTYPE_I64, xi + 1, 32, 1, 4, 4, 1, 2, 0, &r, 8,
             NULL, TRN_SUCCESS);
    CHECK_INT(r, -42);
    reduce2d(TRN_REDUCE_AMIN, TRN_DTYPE_I64, TRN_DTYPE_I64, xi, sizeof xi, 1, 5, 5, 1, 2, 0, &r, 8,
             NULL, TRN_SUCCESS);
    CHECK_INT(r, -3);
    int64_t mx;
    reduce2d(TRN_REDUCE_MAX, TRN_DTYPE_I64, TRN_DTYPE_I64, xi, sizeof xi, 1, 5, 5, 1, 2, 0, &r, 8,
             &mx, TRN_SUCCESS);
    CHECK_INT(r, INT64_MAX);
    CHECK_INT(mx, 0);
    uint8_t b[4] = {1, 1, 0, 1}, o;
    reduce2d(TRN_REDUCE_ALL, TRN_DTYPE_BOOL, TRN_DTYPE_BOOL, b, 4, 1, 4, 4, 1, 2, 0, &o, 1, NULL,
             TRN_SUCCESS);
    CHECK_INT(o, 0);
    reduce2d(TRN_REDUCE_COUNT_NONZERO, TRN_DTYPE_BOOL, TRN_DTYPE_I64, b, 4, 1, 4, 4, 1, 2, 0, &r, 8,
             NULL, TRN_SUCCESS);
    CHECK_INT(r, 3);
    uint16_t h[3000], hs;
    double ref = 0;
    for (int i = 0; i < 3000; i++) {
        h[i] = trn_float_to_bf16((float)(i % 7) * 0.25f);
        ref += trn_bf16_to_float(h[i]);
    }
    reduce2d(TRN_REDUCE_SUM, TRN_DTYPE_BF16, TRN_DTYPE_BF16, h, sizeof h, 1, 3000, 3000, 1, 2, 0,
             &hs, 2, NULL, TRN_SUCCESS);
    CHECK_CLOSE(trn_bf16_to_float(hs), ref, 4e-3);
    // Unsupported combinations.
    reduce2d(TRN_REDUCE_MEAN, TRN_DTYPE_I64, TRN_DTYPE_I64, xi, sizeof xi, 1, 5, 5, 1, 2, 0, &r, 8,
             NULL, TRN_ERROR_UNSUPPORTED);
    reduce2d(TRN_REDUCE_SUM, TRN_DTYPE_C64, TRN_DTYPE_C64, xi, sizeof xi, 1, 5, 5, 1, 2, 0, &r, 8,
             NULL, TRN_ERROR_UNSUPPORTED);
}

static void test_empty(void) {
    float x[1] = {0}, out[4];
    reduce2d(TRN_REDUCE_SUM, TRN_DTYPE_F32, TRN_DTYPE_F32, x, 4, 0, 4, 4, 1, 1, 0, out, 16, NULL,
             TRN_SUCCESS);
    CHECK_CLOSE(out[0], 0, 0);
    CHECK_CLOSE(out[3], 0, 0);
    reduce2d(TRN_REDUCE_PROD, TRN_DTYPE_F32, TRN_DTYPE_F32, x, 4, 0, 4, 4, 1, 1, 0, out, 16, NULL,
             TRN_SUCCESS);
    CHECK_CLOSE(out[2], 1, 0);
    reduce2d(TRN_REDUCE_MEAN, TRN_DTYPE_F32, TRN_DTYPE_F32, x, 4, 0, 4, 4, 1, 1, 0, out, 16, NULL,
             TRN_SUCCESS);
    CHECK(isnan(out[1]));
    reduce2d(TRN_REDUCE_LOGSUMEXP, TRN_DTYPE_F32, TRN_DTYPE_F32, x, 4, 0, 4, 4, 1, 1, 0, out, 16,
             NULL, TRN_SUCCESS);
    CHECK(isinf(out[1]) && out[1] < 0);
    reduce2d(TRN_REDUCE_AMAX, TRN_DTYPE_F32, TRN_DTYPE_F32, x, 4, 0, 4, 4, 1, 1, 0, out, 16, NULL,
             TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "no identity");
    // Rows of zero columns: each of the 4 outputs is an empty sum (0). The
    // output is 16 bytes (it was allocated as 4, a write past the block that
    // ASan's poisoning of device memory now catches).
    out[0] = out[3] = 7;
    reduce2d(TRN_REDUCE_SUM, TRN_DTYPE_F32, TRN_DTYPE_F32, x, 4, 4, 0, 1, 1, 2, 0, out, 16, NULL,
             TRN_SUCCESS);
    CHECK_CLOSE(out[0], 0, 0);
    CHECK_CLOSE(out[3], 0, 0);
    float var[2];
    float one[2] = {3, 4};
    // var_mean with correction 1 of one element: 0/0 -> NaN, mean 3.
    void *din = to_dev(one, 8), *dv = to_dev(NULL, 8), *dm = to_dev(NULL, 8);
    int64_t osz = 2, ost = 1, isz = 1, ist = 1;
    trn_reduce_desc d = {TRN_REDUCE_VAR_MEAN,
                         TRN_DTYPE_F32,
                         TRN_DTYPE_F32,
                         din,
                         dv,
                         dm,
                         1,
                         &osz,
                         &ost,
                         &ost,
                         &ost,
                         1,
                         &isz,
                         &ist,
                         1.0};
    CHECK_OK(trn_reduce_launch(g_stream, &d));
    xfer(g_stream, var, dv, 8);
    CHECK(isnan(var[0]));
    xfer(g_stream, var, dm, 8);
    CHECK_CLOSE(var[1], 4, 0);
    d.out2 = NULL;
    CHECK_STATUS(trn_reduce_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_reduce_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
    trn_mem_free(din);
    trn_mem_free(dv);
    trn_mem_free(dm);
}

static void test_scan(void) {
    enum { R = 5, C = 40 };
    float x[R * C], y[R * C];
    unsigned s = 3;
    for (int i = 0; i < R * C; i++) x[i] = (float)frand(&s);
    void *din = to_dev(x, sizeof x), *dout = to_dev(NULL, sizeof y);
    for (int dim = 0; dim < 2; dim++) {
        int64_t osz = dim == 0 ? C : R, ost = dim == 0 ? 1 : C;
        trn_scan_desc d = {
            TRN_SCAN_CUMSUM,  TRN_DTYPE_F32,   din, dout, 1, &osz, &ost, &ost, dim == 0 ? R : C,
            dim == 0 ? C : 1, dim == 0 ? C : 1};
        CHECK_OK(trn_scan_launch(g_stream, &d));
        xfer(g_stream, y, dout, sizeof y);
        int bad = 0;
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) {
                double acc = 0;
                if (dim == 0)
                    for (int k = 0; k <= i; k++) acc += x[k * C + j];
                else
                    for (int k = 0; k <= j; k++) acc += x[i * C + k];
                bad += !close_to(y[i * C + j], acc, 1e-6);
            }
        CHECK_INT(bad, 0);
    }
    int32_t xi[6] = {1, 2, 3, 4, 5, 6}, yi[6];
    void *di = to_dev(xi, sizeof xi);
    int64_t osz = 1, ost = 1;
    trn_scan_desc d = {TRN_SCAN_CUMPROD, TRN_DTYPE_I32, di, di, 1, &osz, &ost, &ost, 6, 1, 1};
    CHECK_OK(trn_scan_launch(g_stream, &d));  // in place
    xfer(g_stream, yi, di, sizeof yi);
    CHECK_INT(yi[5], 720);
    CHECK_INT(yi[2], 6);
    d.dtype = TRN_DTYPE_C64;
    CHECK_STATUS(trn_scan_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    trn_mem_free(din);
    trn_mem_free(dout);
    trn_mem_free(di);
}

static void test_softmax(void) {
    enum { O = 3, D = 37, I = 5 };
    float x[O * D * I], y[O * D * I], g[O * D * I], z[O * D * I];
    unsigned s = 11;
    for (int i = 0; i < O * D * I; i++) {
        x[i] = (float)(frand(&s) * 20);
        g[i] = (float)frand(&s);
    }
    void *dx = to_dev(x, sizeof x), *dy = to_dev(NULL, sizeof y), *dg = to_dev(g, sizeof g);
    void *dz = to_dev(NULL, sizeof z);
    for (int inner = 0; inner < 2; inner++) {
        const int64_t outer = inner ? O : O * I, dim = D, in = inner ? I : 1;
        for (int lg = 0; lg < 2; lg++) {
            trn_softmax_desc d = {
                lg ? TRN_LOG_SOFTMAX : TRN_SOFTMAX, TRN_DTYPE_F32, dx, NULL, dy, outer, dim, in};
            CHECK_OK(trn_softmax_launch(g_stream, &d));
            trn_softmax_desc b = {lg ? TRN_LOG_SOFTMAX_BACKWARD : TRN_SOFTMAX_BACKWARD,
                                  TRN_DTYPE_F32,
                                  dy,
                                  dg,
                                  dz,
                                  outer,
                                  dim,
                                  in};
            CHECK_OK(trn_softmax_launch(g_stream, &b));
            xfer(g_stream, y, dy, sizeof y);
            xfer(g_stream, z, dz, sizeof z);
            int bad = 0;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t j = 0; j < in; j++) {
                    const int64_t base = o * dim * in + j;
                    double m = -INFINITY, sum = 0, gs = 0, gy = 0;
                    for (int64_t k = 0; k < dim; k++) m = fmax(m, x[base + k * in]);
                    for (int64_t k = 0; k < dim; k++) sum += exp(x[base + k * in] - m);
                    for (int64_t k = 0; k < dim; k++) {
                        const int64_t e = base + k * in;
                        double p = exp(x[e] - m) / sum;
                        gs += g[e];
                        gy += g[e] * (lg ? log(p) : p);
                        bad += !close_to(y[e], lg ? log(p) : p, 1e-5);
                    }
                    for (int64_t k = 0; k < dim; k++) {
                        const int64_t e = base + k * in;
                        double yy = y[e];
                        double want = lg ? g[e] - exp(yy) * gs : yy * (g[e] - gy);
                        bad += !close_to(z[e], want, 1e-4);
                    }
                }
            CHECK_INT(bad, 0);
        }
    }
    // NaN row: every output NaN; -inf entries give 0.
    float r[4] = {1, NAN, 2, -INFINITY}, q[4];
    void *dr = to_dev(r, sizeof r);
    trn_softmax_desc d = {TRN_SOFTMAX, TRN_DTYPE_F32, dr, NULL, dr, 1, 4, 1};
    CHECK_OK(trn_softmax_launch(g_stream, &d));
    xfer(g_stream, q, dr, sizeof q);
    CHECK(isnan(q[0]) && isnan(q[3]));
    float r2[3] = {0, 1, -INFINITY};
    void *dr2 = to_dev(r2, sizeof r2);
    d.in = d.out = dr2;
    d.dim = 3;
    CHECK_OK(trn_softmax_launch(g_stream, &d));
    xfer(g_stream, q, dr2, sizeof r2);
    CHECK_CLOSE(q[2], 0, 0);
    CHECK_CLOSE(q[1], exp(1) / (1 + exp(1)), 1e-6);
    d.dtype = TRN_DTYPE_I32;
    CHECK_STATUS(trn_softmax_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    trn_mem_free(dx);
    trn_mem_free(dy);
    trn_mem_free(dg);
    trn_mem_free(dz);
    trn_mem_free(dr);
    trn_mem_free(dr2);
}

static void test_sc_expf(void) {
    double worst = 0;
    for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
        double want = exp((double)x), got = trn_sc_expf(x);
        double ulp = fabs(got - want) / (nextafterf((float)want, INFINITY) - (float)want);
        if (ulp > worst) worst = ulp;
    }
    CHECK(worst < 2.0);
    CHECK(isnan(trn_sc_expf(NAN)));
    CHECK(isinf(trn_sc_expf(100.0f)));
    CHECK(trn_sc_expf(-INFINITY) == 0.0f);
    CHECK(trn_sc_expf(0.0f) == 1.0f);
}

// trn_sc_expf zeroes its last factor at x <= -104 instead of running the
// clamped arithmetic (whose underflow costs Intel cores an assist): the
// results must stay those of the clamped arithmetic, +0 and the subnormal
// tail included, in the vectorized loop as well as the scalar calls.
__attribute__((noinline)) static void expf_rows(const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = trn_sc_expf(x[i]);
}

static void test_sc_expf_low_tail(void) {
    enum { N = 4099 };
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = -112.0f + 0.006f * (float)i;  // [-112, -87.4]
    x[0] = -INFINITY;
    x[1] = -104.0f;
    x[2] = nextafterf(-104.0f, 0.0f);
    x[3] = -FLT_MAX;
    expf_rows(x, y, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const float xc = x[i] > -104.0f ? x[i] : -104.0f;
        const float want = trn_sc_exp_clamped_f(xc);
        uint32_t a, b;
        memcpy(&a, &y[i], 4);
        memcpy(&b, &want, 4);
        bad += a != b;
        if (x[i] <= -104.0f) bad += a != 0;  // +0, not -0
    }
    CHECK(bad == 0);
    CHECK(y[N - 1] > 0.0f && y[N - 1] < FLT_MIN);  // the subnormal tail kept
}

// softmax.c and the attention kernels take trn_sc_exp_nonpos_f /
// trn_sc_exp_nonpos_nan_f where every argument is a score minus its row max:
// they must give trn_sc_expf's bits for every float <= 43 (and NaN), in the
// vectorized loop as well as the scalar calls. Float bit patterns at a
// stride over [-inf, 43] and [-0, 43], plus the edges.
__attribute__((noinline)) static void exp_nonpos_rows(const float *x, float *y, float *z, int n) {
    for (int i = 0; i < n; i++) y[i] = trn_sc_exp_nonpos_nan_f(x[i]);
    for (int i = 0; i < n; i++) z[i] = trn_sc_exp_nonpos_f(x[i]);
}

static void test_sc_exp_nonpos_matches_expf(void) {
    enum { N = 1 << 16, EDGES = 16 };
    // Room for the edges after a partial last batch.
    static float x[N + EDGES], y[N + EDGES], z[N + EDGES], want[N + EDGES];
    const uint32_t top43 = 0x422c0000u;  // 43.0f
    int bad = 0, n = 0;
    for (uint64_t pass = 0; pass < 2; pass++) {
        // pass 0: negatives from -0 (0x80000000) to -inf (0xff800000);
        // pass 1: +0 to 43.
        const uint64_t lo = pass == 0 ? 0x80000000u : 0u, hi = pass == 0 ? 0xff800000u : top43;
        for (uint64_t b = lo; b <= hi; b += 997) {
            const uint32_t u = (uint32_t)b;
            memcpy(&x[n], &u, 4);
            if (++n == N) {
                exp_nonpos_rows(x, y, z, n);
                for (int i = 0; i < n; i++) {
                    want[i] = trn_sc_expf(x[i]);
                    bad += memcmp(&y[i], &want[i], 4) != 0 || memcmp(&z[i], &want[i], 4) != 0;
                }
                n = 0;
            }
        }
    }
    const float edge[] = {-INFINITY, -FLT_MAX, -104.0f, nextafterf(-104.0f, 0.0f),
                          -87.5f,    -1e-30f,  -0.0f,   0.0f,
                          1e-30f,    0.5f,     43.0f,   NAN};
    const int ne = (int)(sizeof edge / sizeof edge[0]);
    CHECK(ne <= EDGES);
    for (int i = 0; i < ne; i++) x[n + i] = edge[i];
    n += ne;
    exp_nonpos_rows(x, y, z, n);
    for (int i = 0; i < n; i++) {
        want[i] = trn_sc_expf(x[i]);
        bad += memcmp(&y[i], &want[i], 4) != 0;
        if (x[i] == x[i]) bad += memcmp(&z[i], &want[i], 4) != 0;
    }
    CHECK(bad == 0);
    CHECK(y[n - 1] != y[n - 1]);  // NaN stays NaN
}

// The cascade a float32 column sum must follow (reduce.c's column loop and
// its register strips; PyTorch CPU's order): level 0 takes every row, level
// k flushes into k+1 every `step` of its flushes, ((l0 + l1) + l2) + l3.
static float sum_cascade(const float *x, int64_t rows, int64_t rs, int64_t step) {
    float l[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < rows; i++) {
        l[0] += x[i * rs];
        for (int64_t k = 0, n = i + 1; k < 3 && n % step == 0; k++, n /= step) {
            l[k + 1] += l[k];
            l[k] = 0;
        }
    }
    return ((l[0] + l[1]) + l[2]) + l[3];
}

// Every column of float32 sums over rows (strips of 64 columns and the
// column loop for the rest) must be the cascade's bits: rows cross each
// level's flush (16, 256, 4096 and its multiples), past four levels of 16
// (2^19 + 1 rows flush every 32), widths cross the strips and the
// register loop's 2048-column chunks (and the threads' pieces), rows padded
// (stride > width) too. bfloat16 sums are the same cascade over the widened
// values, rounded once; means are the float32 sums divided in float.
static void test_sum_columns_order(void) {
    static const struct {
        int64_t rows, cols, step;
    } cases[] = {{1, 8, 16},          {15, 64, 16},         {16, 100, 16},
                 {17, 200, 16},       {257, 768, 16},       {300, 64, 16},
                 {4096, 100, 16},     {4100, 768, 16},      {600, 2048 + 3 * 64 + 5, 16},
                 {33, 4096 + 64, 16}, {65536 + 17, 72, 16}, {(1 << 19) + 1, 72, 32}};
    unsigned seed = 7;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int pad = 0; pad < 2; pad++) {
            const int64_t r = cases[ci].rows, c = cases[ci].cols, rs = c + 3 * pad;
            float *x = malloc(sizeof(float) * (size_t)(r * rs)), *got = malloc(4 * (size_t)c);
            float *xw = malloc(sizeof(float) * (size_t)(r * rs));
            uint16_t *xh = malloc(2 * (size_t)(r * rs)), *goth = malloc(2 * (size_t)c);
            CHECK(x != NULL && got != NULL && xw != NULL && xh != NULL && goth != NULL);
            for (int64_t i = 0; i < r * rs; i++) {
                x[i] = (float)(frand(&seed) * (i % 5 == 0 ? 1000.0 : 1.0));
                xh[i] = trn_float_to_bf16(x[i]);
                xw[i] = trn_bf16_to_float(xh[i]);
            }
            const size_t in_bytes = sizeof(float) * (size_t)(r * rs);
            reduce2d(TRN_REDUCE_SUM, TRN_DTYPE_F32, TRN_DTYPE_F32, x, in_bytes, r, c, rs, 1, 1, 0,
                     got, 4 * (size_t)c, NULL, TRN_SUCCESS);
            int bad = 0;
            for (int64_t j = 0; j < c; j++) {
                const float want = sum_cascade(x + j, r, rs, cases[ci].step);
                bad += memcmp(&want, &got[j], 4) != 0;
            }
            CHECK_INT(bad, 0);
            reduce2d(TRN_REDUCE_MEAN, TRN_DTYPE_F32, TRN_DTYPE_F32, x, in_bytes, r, c, rs, 1, 1, 0,
                     got, 4 * (size_t)c, NULL, TRN_SUCCESS);
            bad = 0;
            for (int64_t j = 0; j < c; j++) {
                const float want = sum_cascade(x + j, r, rs, cases[ci].step) / (float)r;
                bad += memcmp(&want, &got[j], 4) != 0;
            }
            CHECK_INT(bad, 0);
            reduce2d(TRN_REDUCE_SUM, TRN_DTYPE_BF16, TRN_DTYPE_BF16, xh, in_bytes / 2, r, c, rs, 1,
                     1, 0, goth, 2 * (size_t)c, NULL, TRN_SUCCESS);
            bad = 0;
            for (int64_t j = 0; j < c; j++)
                bad += trn_float_to_bf16(sum_cascade(xw + j, r, rs, cases[ci].step)) != goth[j];
            CHECK_INT(bad, 0);
            free(x);
            free(got);
            free(xw);
            free(xh);
            free(goth);
        }
}

TEST_MAIN_DEFAULT_STREAM(test_sc_expf, test_sc_expf_low_tail, test_sc_exp_nonpos_matches_expf,
                         test_sum_large, test_ops_layouts, test_nan_and_indices, test_int_and_half,
                         test_empty, test_scan, test_softmax, test_sum_columns_order)
