// test_matmul.c - the matmul kernel against a naive double-precision loop:
// every supported dtype, layouts (row-major, transposed, strided views that
// need staging, broadcast batches, negative strides), alpha/beta (beta = 0
// with NaN in C), degenerate sizes, wrap-around integer arithmetic, and the
// errors of invalid descriptors; a bias row (fused into oneDNN's float32
// matmul, broadcast into C elsewhere); bfloat16 on both of its paths (native
// where the CPU has AVX512-BF16, float32 staging), held to one rounding of
// a float32 sum. Buffers live in device memory and move through the copy
// kernel, so the test also runs in protect-memory mode.
#include "internal.h"
#include "test_common_dev.h"
#include "trn/bf16_path.h"
#include "trn/cpu.h"
#include "trn/matmul_bias.h"

static trn_stream *g_stream;

typedef enum layout { ROW, COL, STEP2, BCAST } layout;

// Strides (elements) and element count of the buffer holding a batch of
// rows x cols matrices in `l`, plus the offset of element (0,0,0).
static int64_t make_layout(layout l, int64_t batch, int64_t rows, int64_t cols, int64_t *s,
                           int64_t *origin) {
    *origin = 0;
    switch (l) {
    case ROW: s[2] = 1, s[1] = cols, s[0] = rows * cols; return batch * rows * cols;
    case COL: s[1] = 1, s[2] = rows, s[0] = rows * cols; return batch * rows * cols;
    case STEP2:  // every other column, padded rows: no unit stride anywhere
        s[2] = 2, s[1] = 2 * cols + 3, s[0] = rows * s[1];
        return batch * rows * s[1];
    case BCAST: s[2] = 1, s[1] = cols, s[0] = 0; return rows * cols;
    }
    return 0;
}

static int g_case;
// > 0: check_mm passes a bias row with this element stride (beta must be 0).
static int64_t g_bias_stride;

static void check_mm(trn_dtype dt, int64_t batch, int64_t m, int64_t n, int64_t k, layout la,
                     layout lb, layout lc, double alpha, double beta, bool nan_c) {
    g_case++;
    const size_t es = trn_dtype_size(dt);
    int64_t as[3], bs[3], cs[3], ao, bo, co;
    int64_t an = make_layout(la, batch, m, k, as, &ao);
    int64_t bn = make_layout(lb, batch, k, n, bs, &bo);
    int64_t cn = make_layout(lc, batch, m, n, cs, &co);
    char *ha = calloc((size_t)an + 1, es), *hb = calloc((size_t)bn + 1, es),
         *hc = calloc((size_t)cn + 1, es), *out = calloc((size_t)cn + 1, es);
    const bool isint = is_int_dtype(dt);
    for (int64_t i = 0; i < an; i++)
        put_elem(dt, ha, i, isint ? (double)(int64_t)(rng_next() % 19) - 9 : rng_unit());
    for (int64_t i = 0; i < bn; i++)
        put_elem(dt, hb, i, isint ? (double)(int64_t)(rng_next() % 19) - 9 : rng_unit());
    for (int64_t i = 0; i < cn; i++)
        put_elem(dt, hc, i,
                 nan_c   ? NAN
                 : isint ? (double)(int64_t)(rng_next() % 7) - 3
                         : rng_unit());

    char *da = dev_alloc(g_stream, (size_t)an * es), *db = dev_alloc(g_stream, (size_t)bn * es),
         *dc = dev_alloc(g_stream, (size_t)cn * es);
    xfer(g_stream, da, ha, (size_t)an * es);
    xfer(g_stream, db, hb, (size_t)bn * es);
    xfer(g_stream, dc, hc, (size_t)cn * es);

    trn_matmul_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt, d.batch = batch, d.m = m, d.n = n, d.k = k;
    d.a = da + ao * (int64_t)es, d.b = db + bo * (int64_t)es, d.c = dc + co * (int64_t)es;
    memcpy(d.a_strides, as, sizeof as);
    memcpy(d.b_strides, bs, sizeof bs);
    memcpy(d.c_strides, cs, sizeof cs);
    if (isint) alpha = (double)(int64_t)alpha, beta = (double)(int64_t)beta;
    d.alpha = alpha, d.beta = beta, d.alpha_int = (int64_t)alpha, d.beta_int = (int64_t)beta;
    char *hbias = NULL, *dbias = NULL;
    if (g_bias_stride > 0) {
        const int64_t bn_ = (n - 1) * g_bias_stride + 1;
        hbias = calloc((size_t)bn_, es);
        for (int64_t i = 0; i < bn_; i++)
            put_elem(dt, hbias, i, isint ? (double)(int64_t)(rng_next() % 11) - 5 : rng_unit());
        dbias = dev_alloc(g_stream, (size_t)bn_ * es);
        xfer(g_stream, dbias, hbias, (size_t)bn_ * es);
    }
    CHECK_OK(dbias ? trn_matmul_bias_launch(g_stream, &d, dbias, g_bias_stride)
                   : trn_matmul_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    xfer(g_stream, out, dc, (size_t)cn * es);

    const double tol = dt == TRN_DTYPE_F32    ? 1e-5
                       : dt == TRN_DTYPE_F64  ? 1e-12
                       : isint                ? 0
                       : dt == TRN_DTYPE_BF16 ? 1e-5
                                              : 1e-2;
    int bad = 0;
    for (int64_t t = 0; t < batch; t++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0, scale = 0;
                for (int64_t p = 0; p < k; p++) {
                    double x = get_elem(dt, ha, ao + t * as[0] + i * as[1] + p * as[2]);
                    double y = get_elem(dt, hb, bo + t * bs[0] + p * bs[1] + j * bs[2]);
                    acc += x * y;
                    scale += fabs(x * y);
                }
                const int64_t ci = co + t * cs[0] + i * cs[1] + j * cs[2];
                double want = alpha * acc;
                if (beta != 0) want += beta * get_elem(dt, hc, ci);
                if (hbias) want += get_elem(dt, hbias, j * g_bias_stride);
                double got = get_elem(dt, out, ci);
                if (isint) {
                    // Wrap the exact value to the dtype, as the kernel must.
                    double tmp;
                    char buf[8];
                    put_elem(TRN_DTYPE_I64, buf, 0, want);
                    tmp = get_elem(TRN_DTYPE_I64, buf, 0);
                    put_elem(dt, buf, 0, 0);
                    int64_t w = (int64_t)tmp;
                    switch (dt) {
                    case TRN_DTYPE_I8: want = (int8_t)w; break;
                    case TRN_DTYPE_U8: want = (uint8_t)w; break;
                    case TRN_DTYPE_I16: want = (int16_t)w; break;
                    case TRN_DTYPE_I32: want = (int32_t)w; break;
                    default: want = (double)w; break;
                    }
                }
                double err = fabs(got - want);
                double lim = tol * (scale * fabs(alpha) + fabs(want) + 1);
                // bfloat16: a float32 sum (error within tol) rounded once to
                // nearest, so at most half a unit in the last place of the
                // 8-bit significand of `want` (|want| < 2^e: 2^(e - 9)).
                if (dt == TRN_DTYPE_BF16) {
                    int e;
                    (void)frexp(want, &e);
                    lim += ldexp(1.0, e - 9);
                }
                if (!(err <= lim)) {
                    if (bad++ < 3)
                        fprintf(stderr,
                                "case %d (%s b%lld m%lld n%lld k%lld layouts %d/%d/%d): "
                                "[%lld,%lld,%lld] got %g want %g\n",
                                g_case, trn_dtype_name(dt), (long long)batch, (long long)m,
                                (long long)n, (long long)k, la, lb, lc, (long long)t, (long long)i,
                                (long long)j, got, want);
                }
            }
    CHECK_INT(bad, 0);
    CHECK_OK(trn_mem_free(da));
    CHECK_OK(trn_mem_free(db));
    CHECK_OK(trn_mem_free(dc));
    if (dbias) CHECK_OK(trn_mem_free(dbias));
    free(ha), free(hb), free(hc), free(out), free(hbias);
}

static void test_layouts(trn_dtype dt) {
    const layout ls[] = {ROW, COL, STEP2};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) check_mm(dt, 1, 13, 9, 17, ls[a], ls[b], ROW, 1, 0, false);
    check_mm(dt, 1, 13, 9, 17, ROW, ROW, COL, 1, 0, false);
    check_mm(dt, 1, 13, 9, 17, ROW, ROW, STEP2, 1, 0, false);
    check_mm(dt, 3, 7, 5, 6, ROW, ROW, ROW, 1, 0, false);      // batched
    check_mm(dt, 3, 7, 5, 6, BCAST, ROW, ROW, 1, 0, false);    // broadcast A
    check_mm(dt, 3, 7, 5, 6, ROW, BCAST, ROW, 1, 0, false);    // broadcast B
    check_mm(dt, 3, 7, 5, 6, BCAST, BCAST, ROW, 1, 0, false);  // both
    check_mm(dt, 3, 7, 5, 6, COL, STEP2, COL, 2, 0, false);
    check_mm(dt, 1, 8, 8, 8, ROW, ROW, ROW, 2, 3, false);  // alpha, beta
    check_mm(dt, 2, 8, 8, 8, ROW, COL, STEP2, -1, 0.5, false);
    check_mm(dt, 1, 1, 1, 33, ROW, ROW, ROW, 1, 0, false);  // dot
    check_mm(dt, 1, 9, 1, 33, ROW, ROW, ROW, 1, 1, false);  // mv
    check_mm(dt, 1, 1, 9, 33, ROW, COL, ROW, 1, 0, false);  // vm
    check_mm(dt, 1, 5, 4, 0, ROW, ROW, ROW, 1, 2, false);   // k == 0
    check_mm(dt, 1, 5, 4, 0, ROW, ROW, ROW, 1, 0, false);
    check_mm(dt, 1, 64, 70, 300, ROW, COL, ROW, 1, 0, false);  // beyond one block
}

static void test_beta_zero_ignores_nan(trn_dtype dt) {
    check_mm(dt, 1, 6, 7, 5, ROW, ROW, ROW, 1, 0, true);
    check_mm(dt, 2, 6, 7, 5, ROW, COL, STEP2, 2, 0, true);
}

static void test_int_wraps(void) {
    // int8: 100 * 100 wraps; int64: products past 2^63 wrap.
    int8_t a8[2] = {100, 100}, b8[2] = {100, 1}, c8 = 0;
    void *da = dev_alloc(g_stream, 2), *db = dev_alloc(g_stream, 2), *dc = dev_alloc(g_stream, 1);
    xfer(g_stream, da, a8, 2);
    xfer(g_stream, db, b8, 2);
    trn_matmul_desc d = {TRN_DTYPE_I8, 1,  1,         1, 2, da, {0, 2, 1}, db,
                         {0, 1, 1},    dc, {0, 1, 1}, 1, 0, 1,  0,         0};
    CHECK_OK(trn_matmul_launch(g_stream, &d));
    xfer(g_stream, &c8, dc, 1);
    CHECK_INT(c8, (int8_t)(uint8_t)(10000 + 100));
    trn_mem_free(da), trn_mem_free(db), trn_mem_free(dc);

    int64_t a[1] = {INT64_C(1) << 62}, b[1] = {4}, c = 0;
    da = dev_alloc(g_stream, 8), db = dev_alloc(g_stream, 8), dc = dev_alloc(g_stream, 8);
    xfer(g_stream, da, a, 8);
    xfer(g_stream, db, b, 8);
    trn_matmul_desc e = {TRN_DTYPE_I64, 1,  1,         1, 1, da, {1, 1, 1}, db,
                         {1, 1, 1},     dc, {1, 1, 1}, 1, 0, 3,  0,         0};
    CHECK_OK(trn_matmul_launch(g_stream, &e));
    xfer(g_stream, &c, dc, 8);
    CHECK_INT(c, 0);  // 3 * 2^64 mod 2^64
    trn_mem_free(da), trn_mem_free(db), trn_mem_free(dc);
}

static void test_errors(void) {
    float x[4] = {0};
    trn_matmul_desc d = {TRN_DTYPE_BOOL, 1, 2,         2, 1, x, {0, 1, 1}, x,
                         {0, 2, 1},      x, {0, 2, 1}, 1, 0, 1, 0,         0};
    CHECK(!trn_matmul_supports(TRN_DTYPE_BOOL));
    CHECK(!trn_matmul_supports(TRN_DTYPE_C64));
    CHECK(trn_matmul_supports(TRN_DTYPE_BF16));
    CHECK_STATUS(trn_matmul_launch(g_stream, &d), TRN_ERROR_UNSUPPORTED);
    CHECK_CONTAINS(trn_last_error(), "bool");
    d.dtype = TRN_DTYPE_F32;
    d.m = -1;
    CHECK_STATUS(trn_matmul_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "negative size");
    d.m = 2;
    d.c_strides[1] = 0;
    CHECK_STATUS(trn_matmul_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "overlapping");
    d.c_strides[1] = 2;
    d.a_strides[1] = -1;
    CHECK_STATUS(trn_matmul_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "negative strides");
    d.a_strides[1] = 1;
    d.c = NULL;
    CHECK_STATUS(trn_matmul_launch(g_stream, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_matmul_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
    // Empty outputs are a no-op even with NULL pointers.
    trn_matmul_desc e = {TRN_DTYPE_F32, 0, 2, 2, 2, NULL, {0}, NULL, {0}, NULL, {0}, 1, 0, 1, 0, 0};
    CHECK_OK(trn_matmul_launch(g_stream, &e));
    // A bias comes with beta == 0, a non-negative stride, and a pointer.
    d.c = x;
    d.beta = 1;
    CHECK_STATUS(trn_matmul_bias_launch(g_stream, &d, x, 1), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "beta == 0");
    d.beta = 0;
    CHECK_STATUS(trn_matmul_bias_launch(g_stream, &d, x, -1), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(trn_matmul_bias_launch(g_stream, &d, NULL, 1), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "bias is NULL");
}

// The cached plan is reused: same geometry twice, then a different alpha
// (96^3 multiply-adds: above the register tiles, one oneDNN call).
static void test_plan_reuse(void) {
    for (int i = 0; i < 3; i++) check_mm(TRN_DTYPE_F32, 1, 96, 96, 96, ROW, ROW, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_F32, 1, 96, 96, 96, ROW, ROW, ROW, 0.5, 0, false);
}

// Products big enough to be cut into pieces over the thread pool (matmul.c
// splits above 2^20 multiply-adds): along the batch, the rows of C and the
// columns of C, with uneven last pieces, strided and broadcast operands,
// alpha/beta, and a staged dtype.
static void test_split(void) {
    check_mm(TRN_DTYPE_F32, 1, 301, 67, 211, ROW, ROW, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_F32, 1, 67, 301, 211, ROW, COL, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_F32, 1, 301, 67, 211, COL, STEP2, COL, 0.5, 2, false);
    check_mm(TRN_DTYPE_F32, 1, 67, 301, 211, STEP2, ROW, STEP2, 1, 0, true);
    check_mm(TRN_DTYPE_F32, 9, 37, 41, 700, ROW, ROW, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_F32, 9, 37, 41, 700, BCAST, COL, ROW, 1, 1, false);
    check_mm(TRN_DTYPE_F32, 9, 37, 41, 700, ROW, BCAST, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_F32, 3, 177, 33, 300, ROW, BCAST, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_F32, 3, 301, 67, 211, BCAST, BCAST, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_BF16, 1, 301, 67, 211, ROW, COL, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_F16, 2, 67, 301, 105, COL, ROW, ROW, 1, 0.5, false);
}

// A bias row: fused (float32, alpha 1, contiguous: whole, and cut with the
// columns of C and the batch), added after the register tiles (small
// float32 products) and broadcast into C first (alpha != 1, a strided row,
// k == 0, other dtypes); NaN in C is not read.
static void test_bias(void) {
    g_bias_stride = 1;
    check_mm(TRN_DTYPE_F32, 1, 64, 70, 300, ROW, COL, ROW, 1, 0, true);
    check_mm(TRN_DTYPE_F32, 1, 301, 67, 211, ROW, COL, ROW, 1, 0, true);
    check_mm(TRN_DTYPE_F32, 1, 67, 301, 211, ROW, COL, COL, 1, 0, false);
    check_mm(TRN_DTYPE_F32, 9, 37, 41, 700, ROW, ROW, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_F32, 1, 67, 301, 211, STEP2, ROW, STEP2, 1, 0, false);
    check_mm(TRN_DTYPE_F32, 1, 13, 9, 17, ROW, ROW, ROW, 1, 0, true);
    check_mm(TRN_DTYPE_F32, 1, 64, 70, 300, ROW, ROW, ROW, 2, 0, false);
    check_mm(TRN_DTYPE_F32, 1, 5, 4, 0, ROW, ROW, ROW, 1, 0, true);
    check_mm(TRN_DTYPE_BF16, 1, 301, 67, 211, ROW, COL, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_F64, 1, 13, 9, 17, ROW, COL, ROW, 1, 0, false);
    check_mm(TRN_DTYPE_I32, 1, 13, 9, 17, ROW, ROW, ROW, 1, 0, false);
    g_bias_stride = 3;
    check_mm(TRN_DTYPE_F32, 1, 301, 67, 211, ROW, ROW, ROW, 1, 0, false);
    g_bias_stride = 0;
}

// Float32 products below 2^19 multiply-adds with beta 0 run on register
// tiles (masked column tails, repeated last rows, transposed or strided B
// copied row-major first, a C without contiguous rows written through a
// row-major copy): each element must be exactly k in blocks of TILE_KB
// terms, each block a fused multiply-add chain in order from zero, the
// block sums added in order from zero (matmul.c's TILE_KB; one block of all
// of k where the kernels lack AVX-512: tile_mm.h's trn_tile_mm), then times
// alpha, then plus the bias, whatever the block it falls in and whatever
// the layouts.
#define TILE_KB 32
static int64_t tile_kb(int64_t k) {
    const char *level = trn_cpu_capability();
    const bool avx512 = __builtin_cpu_supports("avx512f") && strcmp(level, "avx2") != 0;
    return avx512 ? TILE_KB : k > 0 ? k : 1;
}

static void check_tile(int64_t batch, int64_t m, int64_t n, int64_t k, layout lb, float alpha,
                       bool bias, layout lc) {
    g_case++;
    int64_t as[3], bs[3], cs[3], ao, bo, co;
    const int64_t an = make_layout(ROW, batch, m, k, as, &ao),
                  bn = make_layout(lb, batch, k, n, bs, &bo),
                  cn = make_layout(lc, batch, m, n, cs, &co);
    float *ha = malloc((size_t)an * 4), *hb = malloc((size_t)bn * 4),
          *hbias = malloc((size_t)n * 4), *out = malloc((size_t)cn * 4);
    for (int64_t i = 0; i < an; i++) ha[i] = (float)rng_unit();
    for (int64_t i = 0; i < bn; i++) hb[i] = (float)rng_unit();
    for (int64_t i = 0; i < n; i++) hbias[i] = (float)rng_unit();
    float *da = dev_alloc(g_stream, (size_t)an * 4), *db = dev_alloc(g_stream, (size_t)bn * 4),
          *dc = dev_alloc(g_stream, (size_t)cn * 4), *dbias = dev_alloc(g_stream, (size_t)n * 4);
    xfer(g_stream, da, ha, (size_t)an * 4);
    xfer(g_stream, db, hb, (size_t)bn * 4);
    xfer(g_stream, dbias, hbias, (size_t)n * 4);
    trn_matmul_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = TRN_DTYPE_F32, d.batch = batch, d.m = m, d.n = n, d.k = k, d.alpha = alpha;
    d.a = da, d.b = db, d.c = dc;
    memcpy(d.a_strides, as, sizeof as);
    memcpy(d.b_strides, bs, sizeof bs);
    memcpy(d.c_strides, cs, sizeof cs);
    CHECK_OK(bias ? trn_matmul_bias_launch(g_stream, &d, dbias, 1)
                  : trn_matmul_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    xfer(g_stream, out, dc, (size_t)cn * 4);
    int bad = 0;
    const int64_t kb = tile_kb(k);
    for (int64_t t = 0; t < batch; t++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                // Block sums added compensated (src/kernels/blas/block_sum.h).
                float acc = 0, cmp = 0, blk = 0;
                for (int64_t p = 0; p < k; p++) {
                    blk = fmaf(ha[t * as[0] + i * as[1] + p * as[2]],
                               hb[t * bs[0] + p * bs[1] + j * bs[2]], blk);
                    if ((p + 1) % kb == 0 || p + 1 == k) {
                        const float sum = acc + blk, bp = sum - acc;
                        cmp += (acc - (sum - bp)) + (blk - bp);
                        acc = sum;
                        blk = 0;
                    }
                }
                float want = alpha * (isfinite(acc) ? acc + cmp : acc);
                if (bias) want += hbias[j];
                const float got = out[t * cs[0] + i * cs[1] + j * cs[2]];
                if (memcmp(&got, &want, 4) != 0 && bad++ < 3)
                    fprintf(stderr,
                            "tile case %d (b%lld m%lld n%lld k%lld B layout %d): [%lld,%lld,%lld] "
                            "got %a want %a\n",
                            g_case, (long long)batch, (long long)m, (long long)n, (long long)k, lb,
                            (long long)t, (long long)i, (long long)j, got, want);
            }
    CHECK_INT(bad, 0);
    CHECK_OK(trn_mem_free(da));
    CHECK_OK(trn_mem_free(db));
    CHECK_OK(trn_mem_free(dc));
    CHECK_OK(trn_mem_free(dbias));
    free(ha), free(hb), free(hbias), free(out);
}

static void test_tile_f32(void) {
    // Column tails of every width 1..33 (two masked vectors, one, none),
    // row tails of 1..9 (blocks of 4 and of 8), k from 1 to past 16.
    for (int64_t n = 1; n <= 33; n++) check_tile(1, 9, n, 19, ROW, 1, false, ROW);
    for (int64_t m = 1; m <= 9; m++) {
        check_tile(1, m, 10, 64, ROW, 1, false, ROW);
        check_tile(1, m, 40, 3, ROW, 1, false, ROW);
    }
    const layout lbs[] = {ROW, COL, STEP2, BCAST};
    for (int l = 0; l < 4; l++) {
        check_tile(3, 32, 64, 32, lbs[l], 1, false, ROW);
        check_tile(2, 17, 47, 40, lbs[l], 0.5f, true, ROW);
        check_tile(1, 5, 100, 129, lbs[l], 1, true, ROW);
        check_tile(2, 33, 10, 17, lbs[l], -2, false, ROW);
        // column-major and strided C: the same bits as a row-major one
        check_tile(2, 17, 47, 40, lbs[l], 1, true, COL);
        check_tile(1, 9, 20, 33, lbs[l], 0.5f, false, STEP2);
    }
}

// The 16-bit float cases both paths run: every layout, alpha/beta, broadcast
// operands, a bias (contiguous and strided), NaN in C with beta 0.
static void check_half_cases(trn_dtype dt) {
    check_mm(dt, 1, 64, 70, 300, ROW, ROW, ROW, 1, 0, false);
    check_mm(dt, 1, 64, 70, 300, ROW, COL, ROW, 1, 0, true);
    check_mm(dt, 1, 67, 45, 33, COL, ROW, ROW, 1, 0, false);
    check_mm(dt, 1, 67, 45, 33, COL, COL, ROW, 0.5, 2, false);
    check_mm(dt, 1, 61, 47, 39, ROW, ROW, COL, 1, 0, false);
    check_mm(dt, 1, 61, 47, 39, STEP2, ROW, STEP2, -1, 0.5, false);
    check_mm(dt, 1, 301, 67, 211, ROW, COL, ROW, 1, 1, false);
    check_mm(dt, 1, 67, 301, 211, COL, ROW, ROW, 2, 0, true);
    check_mm(dt, 9, 37, 41, 70, ROW, COL, ROW, 2, 0.5, false);
    check_mm(dt, 9, 37, 41, 700, BCAST, COL, ROW, 1, 0, false);
    check_mm(dt, 9, 37, 41, 70, ROW, BCAST, ROW, 1, 1, false);
    check_mm(dt, 3, 101, 67, 70, BCAST, BCAST, ROW, 1, 0, false);
    g_bias_stride = 1;
    check_mm(dt, 1, 64, 70, 300, ROW, COL, ROW, 1, 0, true);
    check_mm(dt, 1, 301, 67, 211, ROW, COL, ROW, 1, 0, false);
    check_mm(dt, 3, 37, 41, 700, ROW, ROW, ROW, 0.5, 0, false);
    check_mm(dt, 3, 37, 41, 700, ROW, BCAST, ROW, 0.5, 0, false);
    check_mm(dt, 1, 67, 301, 211, ROW, ROW, COL, 1, 0, true);  // staged, bias fused
    check_mm(dt, 2, 61, 47, 390, STEP2, COL, ROW, 1, 0, false);
    g_bias_stride = 3;
    check_mm(dt, 1, 67, 301, 211, ROW, ROW, COL, 1, 0, false);
    g_bias_stride = 0;
}

// bfloat16 products big enough for oneDNN (pieces over the pool too), once
// natively (where the CPU allows) and once on the float32 kernels (float32
// copies, matmul.c's h16_run; a real batch stages inside each oneDNN call).
static void test_bf16_paths(void) {
    const bool default_path = trn_matmul_bf16_native();
    trn_matmul_set_bf16_native(true);
    const bool native = trn_matmul_bf16_native();  // the CPU has AVX512-BF16
    CHECK(native || !default_path);
    for (int pass = 0; pass < 2; pass++) {
        trn_matmul_set_bf16_native(pass == 0);
        CHECK(trn_matmul_bf16_native() == (pass == 0 && native));
        check_half_cases(TRN_DTYPE_BF16);
    }
    trn_matmul_set_bf16_default();
    CHECK(trn_matmul_bf16_native() == default_path);
}

// float16 products past SMALL_MNK: one batch (or a broadcast operand) runs on
// float32 copies of A, B (C when beta reads it, the bias row) in each
// operand's own dim order, rounded once into C (matmul.c's h16_run); a real
// batch stages inside each oneDNN call.
static void test_f16_paths(void) { check_half_cases(TRN_DTYPE_F16); }

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    const trn_dtype dts[] = {TRN_DTYPE_F32, TRN_DTYPE_BF16, TRN_DTYPE_F16,
                             TRN_DTYPE_F64, TRN_DTYPE_I64,  TRN_DTYPE_I32,
                             TRN_DTYPE_I16, TRN_DTYPE_I8,   TRN_DTYPE_U8};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) test_layouts(dts[i]);
    test_beta_zero_ignores_nan(TRN_DTYPE_F32);
    test_beta_zero_ignores_nan(TRN_DTYPE_BF16);
    test_beta_zero_ignores_nan(TRN_DTYPE_F64);
    test_beta_zero_ignores_nan(TRN_DTYPE_F16);
    test_int_wraps();
    test_errors();
    test_plan_reuse();
    test_split();
    test_bias();
    test_tile_f32();
    test_bf16_paths();
    test_f16_paths();
    return TEST_REPORT();
}
