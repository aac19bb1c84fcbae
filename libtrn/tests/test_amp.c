// test_amp.c - GradScaler kernels: unscale multiplies in place and flags
// inf/NaN (per dtype, across a threaded split, never clearing a set flag);
// the scale update backs off, grows at the interval, keeps a finite scale.
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "trn/amp.h"
#include "trn/convert.h"

static trn_stream *g_stream;

static void test_unscale(void) {
    enum { N = 100003 };
    float *x = malloc(N * sizeof *x);
    for (int i = 0; i < N; i++) x[i] = (float)(i % 97) - 48.0f;
    float inv = 0.25f, found = 0.0f;
    trn_amp_unscale_desc d = {TRN_DTYPE_F32, N, x, &inv, &found};
    CHECK_OK(trn_amp_unscale_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += x[i] != ((float)(i % 97) - 48.0f) * 0.25f;
    CHECK_INT(bad, 0);
    CHECK(found == 0.0f);
    // One inf far into the data (another piece of the split): flagged.
    x[N - 5] = INFINITY;
    CHECK_OK(trn_amp_unscale_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(found == 1.0f);
    // A clean tensor afterwards leaves the flag set (it is or-ed over grads).
    x[N - 5] = 1.0f;
    CHECK_OK(trn_amp_unscale_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(found == 1.0f);
    free(x);
    // bfloat16 with a NaN; double with -inf.
    uint16_t h[5];
    for (int i = 0; i < 5; i++) h[i] = trn_float_to_bf16((float)i);
    h[3] = trn_float_to_bf16(NAN);
    found = 0.0f;
    inv = 0.5f;
    trn_amp_unscale_desc hd = {TRN_DTYPE_BF16, 5, h, &inv, &found};
    CHECK_OK(trn_amp_unscale_launch(g_stream, &hd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(found == 1.0f && trn_bf16_to_float(h[4]) == 2.0f);
    double dd[3] = {1.0, -INFINITY, 3.0};
    found = 0.0f;
    trn_amp_unscale_desc ddesc = {TRN_DTYPE_F64, 3, dd, &inv, &found};
    CHECK_OK(trn_amp_unscale_launch(g_stream, &ddesc));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(found == 1.0f && dd[2] == 1.5);
    // Errors.
    trn_amp_unscale_desc bad_dtype = {TRN_DTYPE_I32, 3, dd, &inv, &found};
    CHECK_INT(trn_amp_unscale_launch(g_stream, &bad_dtype), TRN_ERROR_UNSUPPORTED);
    trn_amp_unscale_desc null_ptr = {TRN_DTYPE_F32, 3, NULL, &inv, &found};
    CHECK_INT(trn_amp_unscale_launch(g_stream, &null_ptr), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_amp_unscale_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
}

static void test_update_scale(void) {
    float scale = 1024.0f, found = 0.0f;
    int32_t tracker = 0;
    trn_amp_update_scale_desc d = {&scale, &tracker, &found, 2.0, 0.5, 3};
    for (int step = 0; step < 2; step++) CHECK_OK(trn_amp_update_scale_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(scale == 1024.0f);
    CHECK_INT(tracker, 2);
    CHECK_OK(trn_amp_update_scale_launch(g_stream, &d));  // third success: grow
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(scale == 2048.0f);
    CHECK_INT(tracker, 0);
    found = 1.0f;  // overflow: back off, reset
    tracker = 1;
    CHECK_OK(trn_amp_update_scale_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(scale == 1024.0f);
    CHECK_INT(tracker, 0);
    found = 0.0f;  // growth that would overflow float keeps the scale
    scale = 3e38f;
    tracker = 2;
    CHECK_OK(trn_amp_update_scale_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(scale == 3e38f);
    CHECK_INT(tracker, 0);
    trn_amp_update_scale_desc null_ptr = {NULL, &tracker, &found, 2.0, 0.5, 3};
    CHECK_INT(trn_amp_update_scale_launch(g_stream, &null_ptr), TRN_ERROR_INVALID_ARGUMENT);
}

TEST_MAIN_DEFAULT_STREAM(test_unscale, test_update_scale)
