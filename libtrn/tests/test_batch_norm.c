// test_batch_norm.c - batch norm forward (training: batch stats, saved stats,
// running-stat update with momentum and unbiased variance; eval), backward
// (training and eval) against a double reference, and argument errors.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/batch_norm.h"
#include "trn/convert.h"

static trn_stream *g_stream;

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

enum { B = 5, C = 7, S = 13, N = B * C * S };

static void test_forward_backward(void) {
    static float x[N], y[N], dy[N], dx[N];
    float w[C], bias[C], rm[C], rv[C], sm[C], si[C], dw[C], db[C];
    double mean[C], var[C];
    unsigned s = 3;
    for (int i = 0; i < N; i++) x[i] = (float)(2 * frand(&s) + 0.5), dy[i] = (float)frand(&s);
    for (int c = 0; c < C; c++)
        w[c] = (float)frand(&s), bias[c] = (float)frand(&s), rm[c] = 0.25f, rv[c] = 2.0f;
    for (int c = 0; c < C; c++) {
        double m = 0, v = 0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < S; i++) m += x[(b * C + c) * S + i];
        m /= B * S;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < S; i++) v += pow(x[(b * C + c) * S + i] - m, 2);
        mean[c] = m, var[c] = v;
    }
    trn_batch_norm_desc d = {
        TRN_DTYPE_F32, TRN_DTYPE_F32, B, C, S, x, w, bias, rm, rv, y, sm, si, 1, 0.1, 1e-5};
    CHECK_OK(trn_batch_norm_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    double worst = 0;
    for (int c = 0; c < C; c++) {
        const double inv = 1 / sqrt(var[c] / (B * S) + 1e-5);
        CHECK(fabs(sm[c] - mean[c]) < 1e-6 && fabs(si[c] - inv) < 1e-5 * inv);
        CHECK(fabs(rm[c] - (0.9 * 0.25 + 0.1 * mean[c])) < 1e-6);
        CHECK(fabs(rv[c] - (0.9 * 2.0 + 0.1 * var[c] / (B * S - 1))) < 1e-5);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < S; i++) {
                const int k = (b * C + c) * S + i;
                worst = fmax(worst, fabs(y[k] - ((x[k] - mean[c]) * inv * w[c] + bias[c])));
            }
    }
    CHECK(worst < 1e-5);
    // Backward, training.
    trn_batch_norm_backward_desc bd = {
        TRN_DTYPE_F32, TRN_DTYPE_F32, B, C, S, dy, x, w, sm, si, 1, 1e-5, dx, dw, db};
    CHECK_OK(trn_batch_norm_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    worst = 0;
    for (int c = 0; c < C; c++) {
        double g = 0, gx = 0;
        const double inv = si[c];
        for (int b = 0; b < B; b++)
            for (int i = 0; i < S; i++) {
                const int k = (b * C + c) * S + i;
                g += dy[k], gx += dy[k] * (x[k] - mean[c]) * inv;
            }
        worst = fmax(worst, fmax(fabs(dw[c] - gx), fabs(db[c] - g)));
        for (int b = 0; b < B; b++)
            for (int i = 0; i < S; i++) {
                const int k = (b * C + c) * S + i;
                const double xh = (x[k] - mean[c]) * inv;
                const double want = w[c] * inv * (dy[k] - g / (B * S) - xh * gx / (B * S));
                worst = fmax(worst, fabs(dx[k] - want));
            }
    }
    CHECK(worst < 1e-4);
    // Eval: running stats are read, not written; backward is w invstd dy.
    const float rm0 = rm[2], rv0 = rv[2];
    d.training = 0;
    CHECK_OK(trn_batch_norm_launch(g_stream, &d));
    bd.training = 0;
    bd.mean = rm;
    bd.invstd_or_var = rv;
    CHECK_OK(trn_batch_norm_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(rm[2] == rm0 && rv[2] == rv0);
    worst = 0;
    for (int k = 0; k < N; k++) {
        const int c = (k / S) % C;
        const double inv = 1 / sqrt(rv[c] + 1e-5);
        worst = fmax(worst, fabs(y[k] - ((x[k] - rm[c]) * inv * w[c] + bias[c])));
        worst = fmax(worst, fabs(dx[k] - dy[k] * inv * w[c]));
    }
    CHECK(worst < 1e-5);
    // No affine parameters, no running stats (track_running_stats=False).
    trn_batch_norm_desc d3 = {TRN_DTYPE_F32, TRN_DTYPE_F32, B, C,    S,    x, NULL, NULL,
                              NULL,          NULL,          y, NULL, NULL, 1, 0.1,  1e-5};
    CHECK_OK(trn_batch_norm_launch(g_stream, &d3));
    CHECK_OK(trn_stream_synchronize(g_stream));
    worst = 0;
    for (int k = 0; k < N; k++) {
        const int c = (k / S) % C;
        worst = fmax(worst, fabs(y[k] - (x[k] - mean[c]) / sqrt(var[c] / (B * S) + 1e-5)));
    }
    CHECK(worst < 1e-5);
    // Errors: eval without running stats, bad dtypes, NULL stream, bad sizes.
    d3.training = 0;
    CHECK_INT(trn_batch_norm_launch(g_stream, &d3), TRN_ERROR_INVALID_ARGUMENT);
    d3.training = 1;
    d3.param_dtype = TRN_DTYPE_F64;
    CHECK_INT(trn_batch_norm_launch(g_stream, &d3), TRN_ERROR_UNSUPPORTED);
    CHECK_INT(trn_batch_norm_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.channels = -1;
    CHECK_INT(trn_batch_norm_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_batch_norm_backward_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
}

// The kernels' whole-lane-group loads and stores (16 floats) and their sum
// grouping across batch items: rows longer than a lane group with a tail
// (37), rows of exactly one group over enough items to flush mid-channel
// (70 x 16 > 1024), rows longer than the flush size (1040), in each storage
// dtype, against a double reference on the stored (rounded) inputs.
static void store_as(trn_dtype dt, void *p, int64_t k, double v) {
    if (dt == TRN_DTYPE_F32)
        ((float *)p)[k] = (float)v;
    else if (dt == TRN_DTYPE_BF16)
        ((uint16_t *)p)[k] = trn_float_to_bf16((float)v);
    else
        ((uint16_t *)p)[k] = trn_float_to_half((float)v);
}

static double load_as(trn_dtype dt, const void *p, int64_t k) {
    if (dt == TRN_DTYPE_F32) return ((const float *)p)[k];
    if (dt == TRN_DTYPE_BF16) return trn_bf16_to_float(((const uint16_t *)p)[k]);
    return trn_half_to_float(((const uint16_t *)p)[k]);
}

static void check_lane_groups(trn_dtype dt, int nb, int nc, int ns) {
    const int64_t n = (int64_t)nb * nc * ns;
    const size_t es = trn_dtype_size(dt);
    void *x = malloc(n * es), *dy = malloc(n * es), *y = malloc(n * es), *dx = malloc(n * es);
    float *par = malloc(sizeof(float) * 8 * nc);
    double *ref = malloc(sizeof(double) * 2 * nc);
    CHECK(x && dy && y && dx && par && ref);
    if (!(x && dy && y && dx && par && ref)) goto out;
    float *w = par, *bias = par + nc, *rm = par + 2 * nc, *rv = par + 3 * nc, *sm = par + 4 * nc,
          *si = par + 5 * nc, *dw = par + 6 * nc, *db = par + 7 * nc;
    unsigned s = 11;
    for (int64_t k = 0; k < n; k++)
        store_as(dt, x, k, 3 * frand(&s) + 1), store_as(dt, dy, k, frand(&s));
    for (int c = 0; c < nc; c++)
        w[c] = (float)(1 + frand(&s)), bias[c] = (float)frand(&s), rm[c] = 0, rv[c] = 1;
    const int64_t m = (int64_t)nb * ns;
    for (int c = 0; c < nc; c++) {
        double sum = 0, sq = 0;
        for (int64_t k = 0; k < n; k++)
            if ((k / ns) % nc == c) sum += load_as(dt, x, k);
        for (int64_t k = 0; k < n; k++)
            if ((k / ns) % nc == c) sq += pow(load_as(dt, x, k) - sum / m, 2);
        ref[2 * c] = sum / m, ref[2 * c + 1] = 1 / sqrt(sq / m + 1e-5);
    }
    trn_batch_norm_desc d = {dt, TRN_DTYPE_F32, nb,  nc, ns, x, w, bias, rm, rv, y, sm, si,
                             1,  0.1,           1e-5};
    CHECK_OK(trn_batch_norm_launch(g_stream, &d));
    trn_batch_norm_backward_desc bd = {dt, TRN_DTYPE_F32, nb, nc, ns, dy, x, w, sm, si,
                                       1,  1e-5,          dx, dw, db};
    CHECK_OK(trn_batch_norm_backward_launch(g_stream, &bd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    // Output tolerance: one rounding to the storage type on top of float
    // math, relative to the outputs' unit scale (normalized data).
    const double ulp = dt == TRN_DTYPE_F32 ? 1e-6 : dt == TRN_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
    double worst_stat = 0, worst_y = 0, worst_dx = 0, worst_p = 0;
    for (int c = 0; c < nc; c++) {
        const double mean = ref[2 * c], inv = ref[2 * c + 1];
        worst_stat = fmax(worst_stat, fmax(fabs(sm[c] - mean), fabs(si[c] - inv) / inv));
        double g = 0, gx = 0;
        for (int64_t k = 0; k < n; k++)
            if ((k / ns) % nc == c) {
                const double gk = load_as(dt, dy, k);
                g += gk, gx += gk * (load_as(dt, x, k) - mean) * inv;
            }
        worst_p = fmax(worst_p, fmax(fabs(dw[c] - gx), fabs(db[c] - g)) / (1 + fabs(g) + fabs(gx)));
        for (int64_t k = 0; k < n; k++) {
            if ((k / ns) % nc != c) continue;
            const double xh = (load_as(dt, x, k) - mean) * inv;
            const double wy = xh * w[c] + bias[c];
            const double wdx = w[c] * inv * (load_as(dt, dy, k) - g / m - xh * gx / m);
            worst_y = fmax(worst_y, fabs(load_as(dt, y, k) - wy) / (fabs(wy) + 1));
            worst_dx = fmax(worst_dx, fabs(load_as(dt, dx, k) - wdx) / (fabs(wdx) + 1));
        }
    }
    CHECK(worst_stat < 1e-5);
    CHECK(worst_p < 1e-5);
    CHECK(worst_y < 2 * ulp);
    CHECK(worst_dx < 2 * ulp);
out:
    free(x), free(dy), free(y), free(dx), free(par), free(ref);
}

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    test_forward_backward();
    const trn_dtype dts[] = {TRN_DTYPE_F32, TRN_DTYPE_BF16, TRN_DTYPE_F16};
    for (int i = 0; i < 3; i++) {
        check_lane_groups(dts[i], 3, 2, 37);
        check_lane_groups(dts[i], 70, 2, 16);
        check_lane_groups(dts[i], 2, 3, 1040);
    }
    return TEST_REPORT();
}
