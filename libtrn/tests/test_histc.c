// test_histc.c - histc (trn/histc.h) against a direct count: float32 with
// out-of-range and NaN elements and the right edge in the last bin, int32
// expert ids counted with integer arithmetic, a split across parallel
// pieces (counts stay exact), bfloat16 output; plus argument errors.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trn/convert.h"
#include "trn/histc.h"

static trn_stream *g_stream;

static void float_edges(void) {
    const float x[] = {0.0f, 0.3f, 0.7f, 1.0f, 2.0f, -1.0f, NAN, 0.5f};
    float out[3] = {-1, -1, -1};
    trn_histc_desc d = {TRN_DTYPE_F32, 8, 3, 0.0, 1.0, x, out};
    CHECK_OK(trn_histc_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    // 0, 0.3 -> 0; 0.5 -> 1 (1.5); 0.7 -> 2; 1.0 -> last bin; 2, -1, NaN: none.
    CHECK(out[0] == 2.0f && out[1] == 1.0f && out[2] == 2.0f);
}

static void int_ids_and_pieces(void) {
    enum { N = 300000, E = 4 };
    int32_t *ids = malloc(N * sizeof *ids);
    CHECK(ids != NULL);
    if (ids == NULL) return;
    int64_t want[E] = {0};
    for (int i = 0; i < N; i++) {
        ids[i] = (i * 7 + i / 3) % E;
        want[ids[i]]++;
    }
    int32_t out[E];
    trn_histc_desc d = {TRN_DTYPE_I32, N, E, 0.0, E - 1.0, ids, out};
    CHECK_OK(trn_histc_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    for (int e = 0; e < E; e++) CHECK(out[e] == want[e]);
    free(ids);
}

static void bf16_counts(void) {
    uint16_t x[5], out[2];
    const float v[5] = {0.25f, 0.75f, 0.5f, 0.1f, 3.0f};
    for (int i = 0; i < 5; i++) x[i] = trn_float_to_bf16(v[i]);
    trn_histc_desc d = {TRN_DTYPE_BF16, 5, 2, 0.0, 1.0, x, out};
    CHECK_OK(trn_histc_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    CHECK(trn_bf16_to_float(out[0]) == 2.0f && trn_bf16_to_float(out[1]) == 2.0f);
}

static void argument_errors(void) {
    float x[1] = {0}, out[1];
    trn_histc_desc d = {TRN_DTYPE_F32, 1, 0, 0.0, 1.0, x, out};
    CHECK_INT(trn_histc_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.bins = 1, d.lo = 1.0, d.hi = 1.0;
    CHECK_INT(trn_histc_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.lo = 0.0, d.dtype = TRN_DTYPE_BOOL;
    CHECK_INT(trn_histc_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    CHECK_INT(trn_histc_launch(g_stream, NULL), TRN_ERROR_INVALID_ARGUMENT);
}

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    float_edges();
    int_ids_and_pieces();
    bf16_counts();
    argument_errors();
    return TEST_REPORT();
}
