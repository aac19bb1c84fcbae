// test_conv.c - the convolution kernels (forward, backward data, backward
// weights + bias) against naive double-precision loops: 1-d/2-d/3-d, groups,
// stride, padding, dilation, with and without bias, channels-last inputs,
// bfloat16 (natively and through float32 staging, bit for bit on
// small-integer operands), both gradients in one launch
// (trn_conv_backward_launch: the bits of the two launches), an empty batch,
// and invalid descriptors. Device memory moves
// through the copy kernel, so the test also runs in protect-memory mode.
#include "internal.h"
#include "test_common_dev.h"
#include "trn/bf16_path.h"
#include "trn/blas.h"
#include "trn/conv_backward.h"

static trn_stream *g_stream;

// kernels/blas/dnnl_common.h (not included: it needs oneDNN's headers).
void trn__dnnl_set_amx(int forced);

typedef struct geo {
    int sp;
    int64_t n, ci, co, g, in[3], k[3], s[3], p[3], d[3], out[3];
} geo;

// Linear index of (n, c, x0, x1, x2) for strides st (spatial dims padded to 3).
static int64_t at(const int64_t *st, int sp, int64_t n, int64_t c, const int64_t *x) {
    int64_t off = n * st[0] + c * st[1];
    for (int i = 0; i < sp; i++) off += x[i] * st[2 + i];
    return off;
}

static void contiguous(int nd, const int64_t *sizes, int64_t *st) {
    int64_t acc = 1;
    for (int i = nd - 1; i >= 0; i--) st[i] = acc, acc *= sizes[i];
}

static int g_case;
// Small-integer operands: every float32 partial sum is exact, so a correct
// kernel returns the exact value rounded once to the dtype, whatever its
// summation order (native bfloat16 and float32 staging alike).
static bool g_exact;

static double operand(void) { return g_exact ? (double)(int)(rng_next() % 9) - 4 : rng_unit(); }

static double rounded(trn_dtype dt, double v) {
    uint64_t cell = 0;
    put_elem(dt, &cell, 0, v);
    return get_elem(dt, &cell, 0);
}

static void check_conv(trn_dtype dt, geo G, bool bias, bool channels_last) {
    g_case++;
    const int sp = G.sp, nd = 2 + sp;
    for (int i = sp; i < 3; i++) G.in[i] = G.k[i] = G.s[i] = G.d[i] = 1, G.p[i] = 0;
    for (int i = 0; i < 3; i++)
        G.out[i] = (G.in[i] + 2 * G.p[i] - G.d[i] * (G.k[i] - 1) - 1) / G.s[i] + 1;
    const int64_t cig = G.ci / G.g, cog = G.co / G.g;
    int64_t isz[5] = {G.n, G.ci}, osz[5] = {G.n, G.co}, wsz[5] = {G.co, cig};
    int64_t in_n = G.n * G.ci, out_n = G.n * G.co, w_n = G.co * cig;
    for (int i = 0; i < sp; i++) {
        isz[2 + i] = G.in[i], osz[2 + i] = G.out[i], wsz[2 + i] = G.k[i];
        in_n *= G.in[i], out_n *= G.out[i], w_n *= G.k[i];
    }
    int64_t ist[5], ost[5], wst[5];
    contiguous(nd, isz, ist);
    contiguous(nd, osz, ost);
    contiguous(nd, wsz, wst);
    if (channels_last) {  // N, spatial..., C
        int64_t acc = 1;
        ist[1] = acc, acc *= G.ci;
        for (int i = sp - 1; i >= 0; i--) ist[2 + i] = acc, acc *= G.in[i];
        ist[0] = acc;
    }
    const size_t es = trn_dtype_size(dt);
    char *hin = calloc((size_t)in_n + 1, es), *hw = calloc((size_t)w_n + 1, es),
         *hb = calloc((size_t)G.co + 1, es), *hout = calloc((size_t)out_n + 1, es);
    for (int64_t i = 0; i < in_n; i++) put_elem(dt, hin, i, operand());
    for (int64_t i = 0; i < w_n; i++) put_elem(dt, hw, i, operand());
    for (int64_t i = 0; i < G.co; i++) put_elem(dt, hb, i, operand());
    for (int64_t i = 0; i < out_n; i++) put_elem(dt, hout, i, operand());  // grad_output

    // Reference: forward output, grad input, grad weight, grad bias.
    double *rf = calloc((size_t)out_n + 1, 8), *rgi = calloc((size_t)in_n + 1, 8),
           *rgw = calloc((size_t)w_n + 1, 8), *rgb = calloc((size_t)G.co + 1, 8);
    for (int64_t n = 0; n < G.n; n++)
        for (int64_t oc = 0; oc < G.co; oc++) {
            const int64_t grp = oc / cog;
            int64_t o[3];
            for (o[0] = 0; o[0] < G.out[0]; o[0]++)
                for (o[1] = 0; o[1] < G.out[1]; o[1]++)
                    for (o[2] = 0; o[2] < G.out[2]; o[2]++) {
                        const int64_t oi = at(ost, sp, n, oc, o);
                        const double go = get_elem(dt, hout, oi);
                        double acc = bias ? get_elem(dt, hb, oc) : 0;
                        rgb[oc] += go;
                        for (int64_t ic = 0; ic < cig; ic++) {
                            int64_t kk[3], x[3];
                            for (kk[0] = 0; kk[0] < G.k[0]; kk[0]++)
                                for (kk[1] = 0; kk[1] < G.k[1]; kk[1]++)
                                    for (kk[2] = 0; kk[2] < G.k[2]; kk[2]++) {
                                        bool inside = true;
                                        for (int i = 0; i < 3; i++) {
                                            x[i] = o[i] * G.s[i] - G.p[i] + kk[i] * G.d[i];
                                            inside = inside && x[i] >= 0 && x[i] < G.in[i];
                                        }
                                        if (!inside) continue;
                                        const int64_t ii = at(ist, sp, n, grp * cig + ic, x);
                                        const int64_t wi = at(wst, sp, oc, ic, kk);
                                        const double xv = get_elem(dt, hin, ii);
                                        const double wv = get_elem(dt, hw, wi);
                                        acc += xv * wv;
                                        rgi[ii] += go * wv;
                                        rgw[wi] += go * xv;
                                    }
                        }
                        rf[oi] = acc;
                    }
        }

    char *din = dev_alloc(g_stream, (size_t)in_n * es), *dw = dev_alloc(g_stream, (size_t)w_n * es),
         *db = dev_alloc(g_stream, (size_t)G.co * es),
         *dout = dev_alloc(g_stream, (size_t)out_n * es);
    trn_conv_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt, d.spatial = sp, d.n = G.n, d.c_in = G.ci, d.c_out = G.co, d.groups = G.g;
    for (int i = 0; i < sp; i++) {
        d.in_size[i] = G.in[i], d.out_size[i] = G.out[i], d.kernel[i] = G.k[i];
        d.stride[i] = G.s[i], d.padding[i] = G.p[i], d.dilation[i] = G.d[i];
    }
    d.input = din, d.weight = dw, d.bias = bias ? db : NULL, d.output = dout, d.bias_stride = 1;
    memcpy(d.input_strides, ist, sizeof ist);
    memcpy(d.weight_strides, wst, sizeof wst);
    memcpy(d.output_strides, ost, sizeof ost);

    const double tol = g_exact ? 0 : dt == TRN_DTYPE_F32 ? 1e-4 : 3e-2;
    char *got = malloc(((size_t)(in_n > out_n ? in_n : out_n) + w_n + 1) * es);
    int bad = 0;
#define COMPARE(what, n_, ref)                                                                     \
    for (int64_t i = 0; i < (n_); i++) {                                                           \
        double g_ = get_elem(dt, got, i), w_ = g_exact ? rounded(dt, (ref)[i]) : (ref)[i];         \
        if (!(fabs(g_ - w_) <= tol * (1 + fabs(w_)))) {                                            \
            if (bad++ < 3)                                                                         \
                fprintf(stderr, "case %d %s (%s sp%d g%lld): [%lld] got %g want %g\n", g_case,     \
                        what, trn_dtype_name(dt), sp, (long long)G.g, (long long)i, g_, w_);       \
        }                                                                                          \
    }
    // forward
    xfer(g_stream, din, hin, (size_t)in_n * es);
    xfer(g_stream, dw, hw, (size_t)w_n * es);
    xfer(g_stream, db, hb, (size_t)G.co * es);
    CHECK_OK(trn_conv_forward_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    xfer(g_stream, got, dout, (size_t)out_n * es);
    COMPARE("forward", out_n, rf);
    // backward data
    xfer(g_stream, dout, hout, (size_t)out_n * es);
    CHECK_OK(trn_conv_backward_data_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    xfer(g_stream, got, din, (size_t)in_n * es);
    COMPARE("grad_input", in_n, rgi);
    char *sep = malloc((size_t)(in_n + w_n + G.co) * es);
    memcpy(sep, got, (size_t)in_n * es);
    // backward weights (+ bias)
    xfer(g_stream, din, hin, (size_t)in_n * es);
    CHECK_OK(trn_conv_backward_weights_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    xfer(g_stream, got, dw, (size_t)w_n * es);
    COMPARE("grad_weight", w_n, rgw);
    memcpy(sep + in_n * es, got, (size_t)w_n * es);
    if (bias) {
        xfer(g_stream, got, db, (size_t)G.co * es);
        COMPARE("grad_bias", G.co, rgb);
        memcpy(sep + (in_n + w_n) * es, got, (size_t)G.co * es);
    }
    CHECK_INT(bad, 0);
    // Both gradients in one launch (dout still holds the output gradient,
    // din the input; dw gets the weights back): the bits of the two
    // launches above.
    xfer(g_stream, dw, hw, (size_t)w_n * es);
    char *gi = dev_alloc(g_stream, (size_t)in_n * es), *gw = dev_alloc(g_stream, (size_t)w_n * es),
         *gb = dev_alloc(g_stream, (size_t)G.co * es);
    trn_conv_desc dd = d, dwd = d;
    dd.input = gi, dd.bias = NULL;
    dwd.weight = gw, dwd.bias = bias ? gb : NULL;
    CHECK_OK(trn_conv_backward_launch(g_stream, &dd, &dwd));
    CHECK_OK(trn_stream_synchronize(g_stream));
    xfer(g_stream, got, gi, (size_t)in_n * es);
    CHECK(memcmp(got, sep, (size_t)in_n * es) == 0);
    xfer(g_stream, got, gw, (size_t)w_n * es);
    CHECK(memcmp(got, sep + in_n * es, (size_t)w_n * es) == 0);
    if (bias) {
        xfer(g_stream, got, gb, (size_t)G.co * es);
        CHECK(memcmp(got, sep + (in_n + w_n) * es, (size_t)G.co * es) == 0);
    }
    trn_mem_free(gi), trn_mem_free(gw), trn_mem_free(gb), free(sep);
    trn_mem_free(din), trn_mem_free(dw), trn_mem_free(db), trn_mem_free(dout);
    free(hin), free(hw), free(hb), free(hout), free(rf), free(rgi), free(rgw), free(rgb), free(got);
}

static void test_shapes(trn_dtype dt) {
    // sp, n, ci, co, g, in, k, s, p, d
    check_conv(dt, (geo){1, 2, 3, 4, 1, {11}, {3}, {1}, {1}, {1}, {0}}, true, false);
    check_conv(dt, (geo){1, 2, 4, 6, 2, {13}, {3}, {2}, {2}, {2}, {0}}, false, false);
    check_conv(dt, (geo){2, 2, 3, 5, 1, {7, 8}, {3, 2}, {1, 2}, {1, 0}, {1, 1}, {0}}, true, false);
    check_conv(dt, (geo){2, 1, 4, 4, 4, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {2, 1}, {0}}, true, false);
    check_conv(dt, (geo){2, 2, 6, 4, 2, {9, 7}, {3, 3}, {2, 1}, {0, 2}, {1, 2}, {0}}, true, true);
    check_conv(dt, (geo){2, 2, 16, 16, 1, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0}}, true,
               false);
    // Channels multiples of 16: the backward launch shares the moved output
    // gradient (stride 2 and a 1x1 kernel as ResNet's downsampling).
    check_conv(dt, (geo){2, 3, 32, 16, 1, {7, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0}}, true,
               false);
    check_conv(dt, (geo){2, 2, 16, 32, 1, {6, 6}, {1, 1}, {2, 2}, {0, 0}, {1, 1}, {0}}, false,
               false);
    check_conv(dt, (geo){3, 1, 2, 3, 1, {5, 4, 6}, {2, 3, 2}, {1, 1, 2}, {1, 0, 1}, {1, 1, 1}, {0}},
               true, false);
    check_conv(dt, (geo){3, 2, 4, 2, 2, {4, 5, 5}, {3, 1, 2}, {2, 1, 1}, {1, 0, 0}, {1, 1, 2}, {0}},
               false, false);
}

static void test_empty_batch(void) {
    // Backward weights of an empty batch: zero gradients.
    float w[6] = {1, 2, 3, 4, 5, 6}, b[2] = {7, 8}, back[8];
    void *dw = dev_alloc(g_stream, sizeof w), *dbias = dev_alloc(g_stream, sizeof b);
    xfer(g_stream, dw, w, sizeof w);
    xfer(g_stream, dbias, b, sizeof b);
    trn_conv_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = TRN_DTYPE_F32, d.spatial = 1, d.n = 0, d.c_in = 1, d.c_out = 2, d.groups = 1;
    d.in_size[0] = 5, d.out_size[0] = 3, d.kernel[0] = 3, d.stride[0] = 1, d.dilation[0] = 1;
    d.weight = dw, d.bias = dbias, d.bias_stride = 1;
    d.weight_strides[0] = 3, d.weight_strides[1] = 3, d.weight_strides[2] = 1;
    d.input_strides[0] = 5, d.input_strides[1] = 5, d.input_strides[2] = 1;
    d.output_strides[0] = 6, d.output_strides[1] = 3, d.output_strides[2] = 1;
    CHECK_OK(trn_conv_forward_launch(g_stream, &d));  // no-op
    CHECK_OK(trn_conv_backward_weights_launch(g_stream, &d));
    xfer(g_stream, back, dw, sizeof w);
    xfer(g_stream, back + 6, dbias, sizeof b);
    for (int i = 0; i < 8; i++) CHECK(back[i] == 0.0f);
    trn_mem_free(dw), trn_mem_free(dbias);
}

static void test_errors(void) {
    trn_conv_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = TRN_DTYPE_F64, d.spatial = 1, d.n = 1, d.c_in = 1, d.c_out = 1, d.groups = 1;
    CHECK(!trn_conv_supports(TRN_DTYPE_F64));
    CHECK_STATUS(trn_conv_forward_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    CHECK_CONTAINS(trn_last_error(), "float64");
    d.dtype = TRN_DTYPE_F32;
    d.spatial = 4;
    CHECK_STATUS(trn_conv_forward_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    d.spatial = 1, d.groups = 2, d.c_in = 3, d.c_out = 2;
    CHECK_STATUS(trn_conv_backward_data_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "groups");
    d.groups = 1, d.in_size[0] = 5, d.kernel[0] = 3, d.stride[0] = 1, d.dilation[0] = 1;
    d.out_size[0] = 4;
    CHECK_STATUS(trn_conv_backward_weights_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "expected 3");
    CHECK_STATUS(trn_conv_forward_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    // The backward launch takes two descriptors of one convolution.
    float x[5] = {0}, w[3] = {0}, y[3] = {0}, gx[5], gw[3];
    d.c_in = 1, d.c_out = 1, d.out_size[0] = 3;
    d.input_strides[0] = d.input_strides[1] = 5, d.input_strides[2] = 1;
    d.weight_strides[0] = d.weight_strides[1] = 3, d.weight_strides[2] = 1;
    d.output_strides[0] = d.output_strides[1] = 3, d.output_strides[2] = 1;
    trn_conv_desc dd = d, dwd = d;
    dd.input = gx, dd.weight = w, dd.output = y;
    dwd.input = x, dwd.weight = gw, dwd.output = gx;
    CHECK_STATUS(trn_conv_backward_launch(g_stream, &dd, &dwd), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "one convolution and one output gradient");
    dwd.output = y, dwd.stride[0] = 2, dwd.out_size[0] = 2;
    CHECK_STATUS(trn_conv_backward_launch(g_stream, &dd, &dwd), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_conv_backward_launch(g_stream, NULL, &dwd), TRN_ERROR_INVALID_ARGUMENT);
}

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    test_shapes(TRN_DTYPE_F32);
    // bfloat16 on both paths: native (where the CPU has AVX512-BF16) and
    // float32 staging, forced by the switch shared with matmul.
    const bool default_path = trn_matmul_bf16_native();
    trn_matmul_set_bf16_native(true);
    const bool native = trn_matmul_bf16_native();  // the CPU has AVX512-BF16
    CHECK(native || !default_path);
    for (int pass = 0; pass < 2; pass++) {
        trn_matmul_set_bf16_native(pass == 0);
        CHECK(trn_matmul_bf16_native() == (pass == 0 && native));
        g_exact = false;
        test_shapes(TRN_DTYPE_BF16);
        g_exact = true;
        test_shapes(TRN_DTYPE_BF16);
    }
    trn_matmul_set_bf16_default();
    CHECK(trn_matmul_bf16_native() == default_path);
    if (native) {
        // The layouts oneDNN chooses for bfloat16 on an AMX CPU (conv.c),
        // forced so that every AVX512-BF16 CPU runs them; plus a stem (3 ->
        // 16 channels) and a 32-channel image, the shapes whose layouts
        // differ from the non-AMX choice.
        trn__dnnl_set_amx(1);
        for (int exact = 0; exact < 2; exact++) {
            g_exact = exact;
            test_shapes(TRN_DTYPE_BF16);
            check_conv(TRN_DTYPE_BF16,
                       (geo){2, 2, 3, 16, 1, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0}}, true,
                       false);
            check_conv(TRN_DTYPE_BF16,
                       (geo){2, 2, 32, 32, 1, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0}}, false,
                       true);
        }
        trn__dnnl_set_amx(-1);
    }
    g_exact = true;
    test_shapes(TRN_DTYPE_F32);
    // float16: float32 copies of every tensor in its own dim order, the
    // float32 kernels, one rounding (conv.c's conv_f16_run): exact on small
    // integers, within a float16 rounding otherwise.
    for (int exact = 0; exact < 2; exact++) {
        g_exact = exact;
        test_shapes(TRN_DTYPE_F16);
    }
    g_exact = false;
    check_conv(TRN_DTYPE_F16, (geo){2, 2, 3, 5, 1, {7, 8}, {3, 2}, {1, 2}, {1, 0}, {1, 1}, {0}},
               true, false);
    test_empty_batch();
    test_errors();
    return TEST_REPORT();
}
