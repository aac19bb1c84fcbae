// test_select.c - kthvalue / median / nanmedian rows against a sorted
// reference: every rank of a row with duplicates, NaN ordering (kthvalue),
// first-NaN propagation (median), all-NaN rows (nanmedian), integer and
// 16-bit rows, and argument errors.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/convert.h"
#include "trn/select.h"

static trn_stream *g_stream;

static int cmp_nan_last(const void *pa, const void *pb) {
    const float a = *(const float *)pa, b = *(const float *)pb;
    if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
    return (a > b) - (a < b);
}

enum { R = 7, N = 33 };

static void test_kth_all_ranks(void) {
    static float x[R * N], sorted[R * N], vals[R];
    static int64_t idx[R];
    unsigned s = 1;
    for (int i = 0; i < R * N; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((s >> 16) % 9) - 4.0f;  // many duplicates
    }
    x[3] = NAN;
    x[N + 5] = NAN;
    x[N + 6] = NAN;
    memcpy(sorted, x, sizeof x);
    for (int r = 0; r < R; r++) qsort(sorted + r * N, N, sizeof(float), cmp_nan_last);
    int bad = 0;
    for (int64_t k = 0; k < N; k++) {
        trn_select_desc d = {TRN_DTYPE_F32, TRN_SELECT_KTH, R, N, k, x, vals, idx};
        CHECK_OK(trn_select_launch(g_stream, &d));
        CHECK_OK(trn_stream_synchronize(g_stream));
        for (int r = 0; r < R; r++) {
            const float want = sorted[r * N + k], got = vals[r];
            const float at = x[r * N + idx[r]];
            bad += !(got == want || (isnan(got) && isnan(want)));
            bad += !(at == got || (isnan(at) && isnan(got)));
        }
    }
    CHECK_INT(bad, 0);
    // median: row 0 and 1 have NaNs (the first one is returned), the rest
    // give the lower median.
    trn_select_desc d = {TRN_DTYPE_F32, TRN_SELECT_MEDIAN, R, N, 0, x, vals, idx};
    CHECK_OK(trn_select_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(isnan(vals[0]) && idx[0] == 3);
    CHECK(isnan(vals[1]) && idx[1] == 5);
    for (int r = 2; r < R; r++) bad += vals[r] != sorted[r * N + (N - 1) / 2];
    CHECK_INT(bad, 0);
    // nanmedian: row 1 has 31 numbers, its median is rank 15.
    d.mode = TRN_SELECT_NANMEDIAN;
    CHECK_OK(trn_select_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(vals[0] == sorted[(N - 2) / 2]);
    CHECK(vals[1] == sorted[N + (N - 3) / 2]);
    CHECK(!isnan(x[N + idx[1]]));
}

static void test_all_nan_and_types(void) {
    float x[4] = {NAN, NAN, NAN, NAN}, v;
    int64_t i;
    trn_select_desc d = {TRN_DTYPE_F32, TRN_SELECT_NANMEDIAN, 1, 4, 0, x, &v, &i};
    CHECK_OK(trn_select_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(isnan(v) && i >= 0 && i < 4);
    int64_t xi[6] = {INT64_MAX, -3, INT64_MIN, 9, 9, 2}, vi;
    trn_select_desc di = {TRN_DTYPE_I64, TRN_SELECT_KTH, 1, 6, 5, xi, &vi, &i};
    CHECK_OK(trn_select_launch(g_stream, &di));
    di.k = 0;
    int64_t vi0, i0;
    di.values = &vi0, di.indices = &i0;
    CHECK_OK(trn_select_launch(g_stream, &di));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(vi == INT64_MAX && i == 0);
    CHECK(vi0 == INT64_MIN && i0 == 2);
    uint8_t xu[5] = {200, 3, 255, 0, 7}, vu;
    trn_select_desc du = {TRN_DTYPE_U8, TRN_SELECT_MEDIAN, 1, 5, 0, xu, &vu, NULL};
    CHECK_OK(trn_select_launch(g_stream, &du));
    uint16_t xb[3] = {trn_float_to_bf16(2.5f), trn_float_to_bf16(-1.0f), trn_float_to_bf16(7.0f)};
    uint16_t vb;
    trn_select_desc db = {TRN_DTYPE_BF16, TRN_SELECT_MEDIAN, 1, 3, 0, xb, &vb, &i};
    CHECK_OK(trn_select_launch(g_stream, &db));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK_INT(vu, 7);
    CHECK(vb == xb[0] && i == 0);
}

static void test_errors(void) {
    float x[2] = {1, 2}, v;
    int64_t i;
    trn_select_desc d = {TRN_DTYPE_F32, TRN_SELECT_KTH, 1, 2, 2, x, &v, &i};
    CHECK_INT(trn_select_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);  // k out of range
    d.k = 0;
    d.n = 0;
    CHECK_INT(trn_select_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);  // empty rows
    d.n = 2;
    d.dtype = TRN_DTYPE_C64;
    CHECK_INT(trn_select_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d.dtype = TRN_DTYPE_F32;
    d.mode = TRN_SELECT_MODE_COUNT;
    CHECK_INT(trn_select_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.mode = TRN_SELECT_KTH;
    d.values = NULL;
    CHECK_INT(trn_select_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_select_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
}

TEST_MAIN_DEFAULT_STREAM(test_kth_all_ranks, test_all_nan_and_types, test_errors)
