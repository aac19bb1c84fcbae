// matmul_rate.c - libtrn's matrix products and a 3x3 convolution timed
// through its public API alone (no PyTorch), so the rate of the kernels a
// device op runs can be read on any host, including one that has no PyTorch
// 2.13 (issue 22's Intel AMX machine): mm 2048^3 and a model-sized product
// in float32 and bfloat16, and conv 8x64x56x56 3x3 forward and backward.
//
//   trn_bench_matmul [repeats]       (best of `repeats` per line, default 5)
//
// Threads: libtrn's pool (TORCH_NEURONX_NUM_THREADS); oneDNN's choice of
// kernel is printed by ONEDNN_VERBOSE=1. Prints ms and G multiply-adds per s.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trn/trn.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int check(trn_status st, const char *what) {
    if (st == TRN_SUCCESS) return 0;
    fprintf(stderr, "%s: %s: %s\n", what, trn_status_name(st), trn_last_error());
    return 1;
}

// Device memory filled with small values (float32 or bfloat16 bits of
// (i % 17 - 8) / 16: exact in both dtypes, no denormals).
static void *dev_filled(trn_stream *s, trn_dtype dt, int64_t count) {
    size_t es = dt == TRN_DTYPE_F32 ? 4 : 2, bytes = (size_t)count * es;
    void *host = malloc(bytes), *dev = NULL;
    if (!host) return NULL;
    for (int64_t i = 0; i < count; i++) {
        float v = (float)(i % 17 - 8) / 16.0f;
        if (es == 4) {
            memcpy((char *)host + i * 4, &v, 4);
        } else {
            uint32_t bits;
            memcpy(&bits, &v, 4);
            uint16_t h = (uint16_t)(bits >> 16);
            memcpy((char *)host + i * 2, &h, 2);
        }
    }
    int64_t n = (int64_t)bytes, one = 1;
    if (trn_mem_alloc(0, bytes, s, &dev) != TRN_SUCCESS) dev = NULL;
    if (dev) {
        trn_copy_desc c = {1, &n, dev, &one, TRN_DTYPE_U8, host, &one, TRN_DTYPE_U8};
        if (trn_copy_launch(s, &c) != TRN_SUCCESS || trn_stream_synchronize(s) != TRN_SUCCESS)
            dev = NULL;
    }
    free(host);
    return dev;
}

static int time_mm(trn_stream *s, trn_dtype dt, int64_t m, int64_t n, int64_t k, int repeats) {
    void *a = dev_filled(s, dt, m * k), *b = dev_filled(s, dt, k * n),
         *c = dev_filled(s, dt, m * n);
    if (!a || !b || !c) return check(TRN_ERROR_OUT_OF_MEMORY, "alloc");
    trn_matmul_desc d = {.dtype = dt,
                         .batch = 1,
                         .m = m,
                         .n = n,
                         .k = k,
                         .a = a,
                         .a_strides = {m * k, k, 1},
                         .b = b,
                         .b_strides = {k * n, n, 1},
                         .c = c,
                         .c_strides = {m * n, n, 1},
                         .alpha = 1.0,
                         .beta = 0.0};
    double best = 1e30;
    for (int r = 0; r <= repeats; r++) {  // the first run warms up
        double t = now_ms();
        if (check(trn_matmul_launch(s, &d), "matmul") || check(trn_stream_synchronize(s), "sync"))
            return 1;
        t = now_ms() - t;
        if (r && t < best) best = t;
    }
    printf("mm   %-8s %5lld x %5lld x %5lld  %9.3f ms  %7.1f G MAC/s\n", trn_dtype_name(dt),
           (long long)m, (long long)k, (long long)n, best, (double)m * n * k / best / 1e6);
    trn_mem_free(a);
    trn_mem_free(b);
    trn_mem_free(c);
    return 0;
}

static int time_conv(trn_stream *s, trn_dtype dt, int repeats) {
    const int64_t N = 8, C = 64, H = 56, W = 56;
    void *x = dev_filled(s, dt, N * C * H * W), *w = dev_filled(s, dt, C * C * 9),
         *y = dev_filled(s, dt, N * C * H * W);
    if (!x || !w || !y) return check(TRN_ERROR_OUT_OF_MEMORY, "alloc");
    trn_conv_desc d = {.dtype = dt,
                       .spatial = 2,
                       .n = N,
                       .c_in = C,
                       .c_out = C,
                       .groups = 1,
                       .in_size = {H, W},
                       .out_size = {H, W},
                       .kernel = {3, 3},
                       .stride = {1, 1},
                       .padding = {1, 1},
                       .dilation = {1, 1},
                       .input = x,
                       .input_strides = {C * H * W, H * W, W, 1},
                       .weight = w,
                       .weight_strides = {C * 9, 9, 3, 1},
                       .output = y,
                       .output_strides = {C * H * W, H * W, W, 1}};
    // One descriptor, three passes (trn/conv.h): forward writes `y`, backward
    // data reads it as the output gradient and writes `x`, backward weights
    // writes `w`.
    typedef trn_status (*conv_launch)(trn_stream *, const trn_conv_desc *);
    const conv_launch launch[3] = {trn_conv_forward_launch, trn_conv_backward_data_launch,
                                   trn_conv_backward_weights_launch};
    const char *pass[3] = {"fwd", "bwd data", "bwd weights"};
    const double macs = (double)N * C * C * 9 * H * W;
    for (int j = 0; j < 3; j++) {
        double best = 1e30;
        for (int r = 0; r <= repeats; r++) {
            double t = now_ms();
            if (check(launch[j](s, &d), pass[j]) || check(trn_stream_synchronize(s), "sync"))
                return 1;
            t = now_ms() - t;
            if (r && t < best) best = t;
        }
        printf("conv %-8s 8x64x56x56 3x3 %-11s %9.3f ms  %7.1f G MAC/s\n", trn_dtype_name(dt),
               pass[j], best, macs / best / 1e6);
    }
    trn_mem_free(x);
    trn_mem_free(w);
    trn_mem_free(y);
    return 0;
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 5;
    if (repeats < 1) repeats = 1;
    trn_stream *s;
    if (check(trn_stream_get_default(0, &s), "stream")) return 1;
    printf("bf16 native path: %s\n", trn_matmul_bf16_native() ? "yes" : "no");
    const trn_dtype dts[2] = {TRN_DTYPE_F32, TRN_DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        if (time_mm(s, dts[i], 2048, 2048, 2048, repeats)) return 1;
        if (time_mm(s, dts[i], 512, 1024, 256, repeats)) return 1;  // a small-model MLP product
        if (time_conv(s, dts[i], repeats)) return 1;
    }
    return 0;
}
