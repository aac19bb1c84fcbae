// test_embedding_bag.c - embedding_bag sum / mean / max bags (empty bag,
// padding index, per-sample weights, include_last_offset, int32 indices)
// against a reference, the backwards as exact adjoints of the forward
// (<bag(w), g> == <w, grad_weight(g)>, likewise for the per-sample
// weights), scale_grad_by_freq, and index / offset / argument errors.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/embedding_bag.h"

static trn_stream *g_stream;

enum { NW = 5, D = 3, NI = 6, NB = 4 };

static const int64_t IDX[NI] = {0, 2, 1, 4, 4, 3};
static const int64_t OFF[NB] = {0, 2, 2, 5};  // bags [0,2) [2,2) [2,5) [5,6)

static trn_embedding_bag_desc base(trn_embedding_bag_mode mode, const double *w, double *out,
                                   int64_t *o2b, int64_t *bs, int64_t *mx) {
    trn_embedding_bag_desc d = {0};
    d.dtype = TRN_DTYPE_F64;
    d.index_dtype = TRN_DTYPE_I64;
    d.mode = mode;
    d.num_weights = NW;
    d.dim = D;
    d.num_indices = NI;
    d.num_offsets = NB;
    d.num_bags = NB;
    d.padding_idx = -1;
    d.weight = w;
    d.indices = IDX;
    d.offsets = OFF;
    d.output = out;
    d.offset2bag = o2b;
    d.bag_size = bs;
    d.max_indices = mx;
    return d;
}

static void test_forward(void) {
    double w[NW * D], out[NB * D];
    int64_t o2b[NI], bs[NB], mx[NB * D];
    for (int i = 0; i < NW * D; i++) w[i] = (i * 7 % 11) - 5;
    trn_embedding_bag_desc d = base(TRN_EMBEDDING_BAG_SUM, w, out, o2b, bs, mx);
    CHECK_OK(trn_embedding_bag_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    for (int j = 0; j < D; j++) {
        CHECK(out[0 * D + j] == w[0 * D + j] + w[2 * D + j]);
        CHECK(out[1 * D + j] == 0);
        CHECK(out[2 * D + j] == w[1 * D + j] + 2 * w[4 * D + j]);
        CHECK(out[3 * D + j] == w[3 * D + j]);
    }
    CHECK(o2b[0] == 0 && o2b[1] == 0 && o2b[2] == 2 && o2b[4] == 2 && o2b[5] == 3);
    CHECK(bs[0] == 2 && bs[1] == 0 && bs[2] == 3 && bs[3] == 1);
    // Mean with padding index 4: bag 2 is w[1] alone.
    d.mode = TRN_EMBEDDING_BAG_MEAN;
    d.padding_idx = 4;
    CHECK_OK(trn_embedding_bag_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    for (int j = 0; j < D; j++) {
        CHECK(out[0 * D + j] == (w[0 * D + j] + w[2 * D + j]) / 2);
        CHECK(out[2 * D + j] == w[1 * D + j]);
    }
    CHECK(bs[2] == 1);
    // Max: the row of each maximum; an empty bag gives 0 and -1.
    d.mode = TRN_EMBEDDING_BAG_MAX;
    d.padding_idx = -1;
    CHECK_OK(trn_embedding_bag_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    for (int j = 0; j < D; j++) {
        const double m = fmax(w[1 * D + j], w[4 * D + j]);
        CHECK(out[2 * D + j] == m && w[mx[2 * D + j] * D + j] == m);
        CHECK(out[1 * D + j] == 0 && mx[1 * D + j] == -1);
    }
    // include_last_offset with int32 indices: offsets {0, 2, 5} are 2 bags
    // and index 5 belongs to none.
    const int32_t idx32[NI] = {0, 2, 1, 4, 4, 3}, off32[3] = {0, 2, 5};
    d.mode = TRN_EMBEDDING_BAG_SUM;
    d.index_dtype = TRN_DTYPE_I32;
    d.indices = idx32;
    d.offsets = off32;
    d.num_offsets = 3;
    d.num_bags = 2;
    CHECK_OK(trn_embedding_bag_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    for (int j = 0; j < D; j++) CHECK(out[1 * D + j] == w[1 * D + j] + 2 * w[4 * D + j]);
}

static double dot(const double *a, const double *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void test_backward(void) {
    double w[NW * D], out[NB * D], g[NB * D], gw[NW * D], psw[NI], gpsw[NI];
    int64_t o2b[NI], bs[NB], mx[NB * D];
    for (int i = 0; i < NW * D; i++) w[i] = sin(i + 1.0);
    for (int i = 0; i < NB * D; i++) g[i] = cos(i * 0.7);
    for (int i = 0; i < NI; i++) psw[i] = 0.5 + i;
    const trn_embedding_bag_mode modes[3] = {TRN_EMBEDDING_BAG_SUM, TRN_EMBEDDING_BAG_MEAN,
                                             TRN_EMBEDDING_BAG_MAX};
    for (int m = 0; m < 3; m++) {
        for (int pad = -1; pad <= 4; pad += 5) {
            trn_embedding_bag_desc d = base(modes[m], w, out, o2b, bs, mx);
            d.padding_idx = pad;
            if (m == 0) d.per_sample_weights = psw;
            CHECK_OK(trn_embedding_bag_launch(g_stream, &d));
            d.grad = g;
            d.grad_weight = gw;
            d.grad_per_sample_weights = m == 0 ? gpsw : NULL;
            CHECK_OK(trn_embedding_bag_backward_launch(g_stream, &d));
            CHECK_OK(trn_stream_synchronize(g_stream));
            const double a = dot(out, g, NB * D);
            CHECK(fabs(a - dot(w, gw, NW * D)) < 1e-12);
            if (m == 0) CHECK(fabs(a - dot(psw, gpsw, NI)) < 1e-12);
            if (pad == 4)
                for (int j = 0; j < D; j++) CHECK(gw[4 * D + j] == 0);
        }
    }
    // scale_grad_by_freq: index 4 appears twice, its row is halved.
    trn_embedding_bag_desc d = base(TRN_EMBEDDING_BAG_SUM, w, out, o2b, bs, mx);
    CHECK_OK(trn_embedding_bag_launch(g_stream, &d));
    d.grad = g;
    d.grad_weight = gw;
    d.scale_grad_by_freq = 1;
    CHECK_OK(trn_embedding_bag_backward_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    for (int j = 0; j < D; j++) CHECK(fabs(gw[4 * D + j] - g[2 * D + j]) < 1e-15);
}

static void test_errors(void) {
    double w[NW * D], out[NB * D];
    int64_t o2b[NI], bs[NB], mx[NB * D];
    for (int i = 0; i < NW * D; i++) w[i] = i;
    trn_embedding_bag_desc d = base(TRN_EMBEDDING_BAG_SUM, w, out, o2b, bs, mx);
    const int64_t bad_idx[NI] = {0, 2, 1, 5, 4, 3};
    d.indices = bad_idx;
    CHECK_OK(trn_embedding_bag_launch(g_stream, &d));
    CHECK_INT(trn_stream_synchronize(g_stream), TRN_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(trn_last_error(), "Index 3 of input takes value 5") != NULL);
    trn_clear_error();
    const int64_t bad_off[NB] = {0, 3, 2, 5};  // decreasing
    d.indices = IDX;
    d.offsets = bad_off;
    CHECK_OK(trn_embedding_bag_launch(g_stream, &d));
    CHECK_INT(trn_stream_synchronize(g_stream), TRN_ERROR_INVALID_ARGUMENT);
    trn_clear_error();
    d.offsets = OFF;
    double psw[NI];
    d.per_sample_weights = psw;
    d.mode = TRN_EMBEDDING_BAG_MEAN;
    CHECK_INT(trn_embedding_bag_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.per_sample_weights = NULL;
    d.index_dtype = TRN_DTYPE_F32;
    CHECK_INT(trn_embedding_bag_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    d.index_dtype = TRN_DTYPE_I64;
    d.num_offsets = NB + 2;
    CHECK_INT(trn_embedding_bag_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_embedding_bag_backward_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    trn_clear_error();
}

TEST_MAIN_DEFAULT_STREAM(test_forward, test_backward, test_errors)
