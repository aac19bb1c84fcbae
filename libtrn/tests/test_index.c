// test_index.c - the indexing kernels: gather (index_select-like rows and
// per-element), wrapping of negative indices, out-of-range errors (deferred
// to synchronize, with PyTorch's message), scatter stores and reductions
// (add with alpha, mul, max/min with NaN, mean with and without self,
// bool/int/bf16), masked_fill, count_nonzero / nonzero / masked_select
// (-0.0, NaN, strided), cat (contiguous, strided, empty inputs, many inputs),
// slice_backward (steps, transposed and expanded gradients) and invalid
// descriptors. Buffers are device memory so the protect-memory
// run checks the kernels' access brackets.
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "trn/convert.h"
#include "trn/slice_backward.h"

static trn_stream *S;

static void *dev(size_t n) {
    void *p = NULL;
    if (trn_mem_alloc(0, n ? n : 1, NULL, &p) != TRN_SUCCESS) abort();
    return p;
}

// Copies host <-> device through the copy kernel (protect mode needs it).
static void h2d(void *d, const void *h, size_t n) {
    int64_t sz = (int64_t)n, one = 1;
    trn_copy_desc c = {1, &sz, d, &one, TRN_DTYPE_U8, h, &one, TRN_DTYPE_U8};
    if (trn_copy_launch(S, &c) != TRN_SUCCESS || trn_stream_synchronize(S) != TRN_SUCCESS) abort();
}
static void d2h(void *h, const void *d, size_t n) { h2d(h, d, n); }

// index_select of rows: table [R, C] float, idx [N] -> out [N, C] (dims
// innermost first as TensorIterator lists them).
static void test_gather_rows(void) {
    enum { R = 5, C = 3, N = 4 };
    float ht[R * C];
    for (int i = 0; i < R * C; i++) ht[i] = (float)i;
    int64_t hidx[N] = {4, 0, -1, 2};
    float *t = dev(sizeof ht), *o = dev(N * C * 4);
    int64_t *x = dev(sizeof hidx);
    h2d(t, ht, sizeof ht);
    h2d(x, hidx, sizeof hidx);
    int64_t sizes[2] = {C, N}, ostr[2] = {4, C * 4}, sstr[2] = {4, 0}, xstr[2] = {0, 8};
    trn_index_desc d = {0};
    d.dtype = TRN_DTYPE_F32;
    d.ndim = 2;
    d.sizes = sizes;
    d.out = o;
    d.out_strides = ostr;
    d.src = t;
    d.src_strides = sstr;
    d.nidx = 1;
    d.idx[0] = x;
    d.idx_strides[0] = xstr;
    d.indexed_sizes[0] = R;
    d.indexed_strides[0] = C * 4;
    d.wrap = 1;
    CHECK_INT(trn_index_launch(S, &d), TRN_SUCCESS);
    CHECK_INT(trn_stream_synchronize(S), TRN_SUCCESS);
    float ho[N * C];
    d2h(ho, o, sizeof ho);
    const int64_t want[N] = {4, 0, 4, 2};
    int bad = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++) bad += ho[i * C + j] != (float)(want[i] * C + j);
    CHECK_INT(bad, 0);

    // Without wrap, -1 is out of range: deferred error with PyTorch's words.
    d.wrap = 0;
    d.dims[0] = 0;
    CHECK_INT(trn_index_launch(S, &d), TRN_SUCCESS);
    CHECK_INT(trn_stream_synchronize(S), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STR(trn_last_error(), "index -1 is out of bounds for dimension 0 with size 5");
    // 7 is out of range even with wrap; the stream works afterwards.
    hidx[1] = 7;
    h2d(x, hidx, sizeof hidx);
    d.wrap = 1;
    d.dims[0] = 3;
    CHECK_INT(trn_index_launch(S, &d), TRN_SUCCESS);
    CHECK_INT(trn_stream_synchronize(S), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STR(trn_last_error(), "index 7 is out of bounds for dimension 3 with size 5");
    CHECK_INT(trn_stream_synchronize(S), TRN_SUCCESS);
    trn_mem_free(t);
    trn_mem_free(o);
    trn_mem_free(x);
}

// gather along the last dim of a [2, 3] int32 tensor with a [2, 2] index.
static void test_gather_elements(void) {
    int32_t hs[6] = {10, 11, 12, 20, 21, 22};
    int64_t hx[4] = {2, 0, 1, 1};
    int32_t *s = dev(sizeof hs), *o = dev(16);
    int64_t *x = dev(sizeof hx);
    h2d(s, hs, sizeof hs);
    h2d(x, hx, sizeof hx);
    int64_t sizes[2] = {2, 2}, ostr[2] = {4, 8}, sstr[2] = {0, 12}, xstr[2] = {8, 16};
    trn_index_desc d = {0};
    d.dtype = TRN_DTYPE_I32;
    d.ndim = 2;
    d.sizes = sizes;
    d.out = o;
    d.out_strides = ostr;
    d.src = s;
    d.src_strides = sstr;
    d.nidx = 1;
    d.idx[0] = x;
    d.idx_strides[0] = xstr;
    d.indexed_sizes[0] = 3;
    d.indexed_strides[0] = 4;
    d.dims[0] = 1;
    CHECK_INT(trn_index_launch(S, &d), TRN_SUCCESS);
    int32_t ho[4];
    d2h(ho, o, sizeof ho);
    CHECK_INT(ho[0], 12);
    CHECK_INT(ho[1], 10);
    CHECK_INT(ho[2], 21);
    CHECK_INT(ho[3], 21);
    trn_mem_free(s);
    trn_mem_free(o);
    trn_mem_free(x);
}

// 1-d scatter: out[idx[i]] (reduce)= src[i] over 6 sources into 3 slots.
static void scatter1d(trn_dtype dt, trn_index_reduce r, int include_self, void *hout,
                      const void *hsrc, const int64_t *hidx, double alpha) {
    const size_t es = trn_dtype_size(dt);
    void *o = dev(3 * es), *s = dev(6 * es);
    int64_t *x = dev(6 * 8);
    h2d(o, hout, 3 * es);
    h2d(s, hsrc, 6 * es);
    h2d(x, hidx, 6 * 8);
    int64_t sizes[1] = {6}, ostr[1] = {0}, sstr[1] = {(int64_t)es}, xstr[1] = {8};
    trn_index_desc d = {0};
    d.scatter = 1;
    d.reduce = r;
    d.include_self = include_self;
    d.dtype = dt;
    d.ndim = 1;
    d.sizes = sizes;
    d.out = o;
    d.out_strides = ostr;
    d.src = s;
    d.src_strides = sstr;
    d.alpha = alpha;
    d.alpha_int = (int64_t)alpha;
    d.nidx = 1;
    d.idx[0] = x;
    d.idx_strides[0] = xstr;
    d.indexed_sizes[0] = 3;
    d.indexed_strides[0] = (int64_t)es;
    d.out_numel = 3;
    CHECK_INT(trn_index_launch(S, &d), TRN_SUCCESS);
    CHECK_INT(trn_stream_synchronize(S), TRN_SUCCESS);
    d2h(hout, o, 3 * es);
    trn_mem_free(o);
    trn_mem_free(s);
    trn_mem_free(x);
}

static void test_scatter(void) {
    const int64_t idx[6] = {0, 2, 0, 2, 2, 0};
    {
        float out[3] = {1, 1, 1}, src[6] = {1, 2, 3, 4, 5, 6};
        scatter1d(TRN_DTYPE_F32, TRN_INDEX_REDUCE_ADD, 1, out, src, idx, 2.0);
        CHECK(out[0] == 1 + 2 * 10 && out[1] == 1 && out[2] == 1 + 2 * 11);
    }
    {
        float out[3] = {9, 9, 9}, src[6] = {1, 2, 3, 4, 5, 6};
        scatter1d(TRN_DTYPE_F32, TRN_INDEX_REDUCE_NONE, 1, out, src, idx, 1.0);
        CHECK(out[0] == 6 && out[1] == 9 && out[2] == 5);  // last write wins
    }
    {
        float out[3] = {0, 0, 0}, src[6] = {1, NAN, 3, 4, 5, 6};
        scatter1d(TRN_DTYPE_F32, TRN_INDEX_REDUCE_MAX, 1, out, src, idx, 1.0);
        CHECK(out[0] == 6 && out[1] == 0 && isnan(out[2]));
        float out2[3] = {0, 0, 0}, src2[6] = {-1, 2, -3, 4, 5, -6};
        scatter1d(TRN_DTYPE_F32, TRN_INDEX_REDUCE_MIN, 1, out2, src2, idx, 1.0);
        CHECK(out2[0] == -6 && out2[1] == 0 && out2[2] == 0);
    }
    {
        int64_t out[3] = {1, 7, 2}, src[6] = {3, 4, 5, 6, 7, -9};
        scatter1d(TRN_DTYPE_I64, TRN_INDEX_REDUCE_MUL, 1, out, src, idx, 1.0);
        CHECK_INT(out[0], 1 * 3 * 5 * -9);
        CHECK_INT(out[1], 7);
        CHECK_INT(out[2], 2 * 4 * 6 * 7);
        // mean: floor division for integers, self counted once
        int64_t m[3] = {0, 7, 1}, ms[6] = {-1, 4, -1, 6, 7, -1};
        scatter1d(TRN_DTYPE_I64, TRN_INDEX_REDUCE_MEAN, 1, m, ms, idx, 1.0);
        CHECK_INT(m[0], -1);  // (0 - 3) / 4 = -0.75 -> -1
        CHECK_INT(m[1], 7);
        CHECK_INT(m[2], (1 + 4 + 6 + 7) / 4);
        float fm[3] = {100, 5, 100}, fs[6] = {1, 2, 3, 4, 5, 6};
        scatter1d(TRN_DTYPE_F32, TRN_INDEX_REDUCE_MEAN, 0, fm, fs, idx, 1.0);
        // without self, the caller has stored the identity first; here it did not
        CHECK(fm[0] == (100.0f + 10.0f) / 3 && fm[1] == 5 && fm[2] == (100.0f + 11.0f) / 3);
    }
    {
        uint16_t out[3], src[6];
        for (int i = 0; i < 3; i++) out[i] = trn_float_to_bf16(1.0f);
        for (int i = 0; i < 6; i++) src[i] = trn_float_to_bf16(0.00390625f);  // 2^-8
        scatter1d(TRN_DTYPE_BF16, TRN_INDEX_REDUCE_ADD, 1, out, src, idx, 1.0);
        // each add rounds: 1 + 2^-8 rounds back to 1 in bfloat16 (ties to even)
        CHECK(trn_bf16_to_float(out[0]) == 1.0f);
        uint8_t b[3] = {0, 0, 1}, bs[6] = {1, 0, 0, 0, 0, 0};
        scatter1d(TRN_DTYPE_BOOL, TRN_INDEX_REDUCE_ADD, 1, b, bs, idx, 1.0);
        CHECK(b[0] == 1 && b[1] == 0 && b[2] == 1);
    }
    // Unsupported reduction dtype (complex) is refused at launch.
    trn_index_desc d = {0};
    d.scatter = 1;
    d.reduce = TRN_INDEX_REDUCE_ADD;
    d.dtype = TRN_DTYPE_C64;
    CHECK_INT(trn_index_launch(S, &d), TRN_ERROR_UNSUPPORTED);
    d.dtype = TRN_DTYPE_F32;
    d.nidx = TRN_INDEX_MAX_INDICES + 1;
    CHECK_INT(trn_index_launch(S, &d), TRN_ERROR_UNSUPPORTED);
    d.nidx = 0;
    d.ndim = -1;
    CHECK_INT(trn_index_launch(S, &d), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_index_launch(NULL, &d), TRN_ERROR_INVALID_ARGUMENT);
}

// Scalar source: scatter a value through a 2-index advanced index.
static void test_scalar_put_two_indices(void) {
    int16_t h[12] = {0};
    int64_t hx0[2] = {0, 2}, hx1[2] = {3, -1};
    int16_t *o = dev(sizeof h);
    int64_t *x0 = dev(16), *x1 = dev(16);
    h2d(o, h, sizeof h);
    h2d(x0, hx0, 16);
    h2d(x1, hx1, 16);
    int64_t sizes[1] = {2}, ostr[1] = {0}, xstr[1] = {8};
    trn_index_desc d = {0};
    d.scatter = 1;
    d.dtype = TRN_DTYPE_I16;
    d.ndim = 1;
    d.sizes = sizes;
    d.out = o;
    d.out_strides = ostr;
    int16_t v = -5;
    memcpy(d.value, &v, 2);
    d.nidx = 2;
    d.idx[0] = x0;
    d.idx[1] = x1;
    d.idx_strides[0] = d.idx_strides[1] = xstr;
    d.indexed_sizes[0] = 3;
    d.indexed_sizes[1] = 4;
    d.indexed_strides[0] = 8;
    d.indexed_strides[1] = 2;
    d.wrap = 1;
    CHECK_INT(trn_index_launch(S, &d), TRN_SUCCESS);
    d2h(h, o, sizeof h);
    CHECK(h[3] == -5 && h[11] == -5 && h[0] == 0);
    trn_mem_free(o);
    trn_mem_free(x0);
    trn_mem_free(x1);
}

static void test_masks(void) {
    // masked_fill on a transposed [3, 2] view of a [2, 3] float buffer.
    float h[6] = {0, 1, 2, 3, 4, 5};
    uint8_t hm[6] = {1, 0, 0, 1, 1, 0};  // [3, 2] contiguous mask
    float *o = dev(sizeof h);
    uint8_t *m = dev(6);
    h2d(o, h, sizeof h);
    h2d(m, hm, 6);
    int64_t sizes[2] = {2, 3}, ostr[2] = {12, 4}, mstr[2] = {1, 2};  // inner first
    trn_mask_fill_desc f = {TRN_DTYPE_F32, 2, sizes, o, ostr, m, mstr, {0}};
    float v = -1;
    memcpy(f.value, &v, 4);
    CHECK_INT(trn_mask_fill_launch(S, &f), TRN_SUCCESS);
    d2h(h, o, sizeof h);
    // view element (i, j) is buffer[j * 3 + i]
    CHECK(h[0] == -1 && h[1] == 1 && h[2] == -1 && h[3] == 3 && h[4] == -1 && h[5] == 5);

    // count / nonzero / masked_select: -0.0 is zero, NaN is not.
    float hv[6] = {0.0f, -0.0f, NAN, 1.0f, 0.0f, -2.0f};  // [2, 3]
    float *t = dev(sizeof hv);
    h2d(t, hv, sizeof hv);
    int64_t tsz[2] = {2, 3}, tst[2] = {3, 1};
    trn_nz_tensor nt = {TRN_DTYPE_F32, 2, tsz, t, tst};
    int64_t count = -1;
    CHECK_INT(trn_count_nonzero_launch(S, &nt, &count), TRN_SUCCESS);
    CHECK_INT(trn_stream_synchronize(S), TRN_SUCCESS);
    CHECK_INT(count, 3);
    int64_t *coords = dev(3 * 2 * 8), hc[6];
    CHECK_INT(trn_nonzero_launch(S, &nt, count, coords, 2, 1), TRN_SUCCESS);
    d2h(hc, coords, sizeof hc);
    CHECK(hc[0] == 0 && hc[1] == 2 && hc[2] == 1 && hc[3] == 0 && hc[4] == 1 && hc[5] == 2);
    // A stale count fails the task instead of overrunning the output.
    CHECK_INT(trn_nonzero_launch(S, &nt, 2, coords, 2, 1), TRN_SUCCESS);
    CHECK_INT(trn_stream_synchronize(S), TRN_ERROR_INVALID_ARGUMENT);
    // masked_select of the transposed view [3, 2] with a mask.
    int64_t vsz[2] = {3, 2}, vst[2] = {1, 3}, mst[2] = {2, 1};
    trn_nz_tensor src = {TRN_DTYPE_F32, 2, vsz, t, vst};
    trn_nz_tensor mask = {TRN_DTYPE_BOOL, 2, vsz, m, mst};
    CHECK_INT(trn_count_nonzero_launch(S, &mask, &count), TRN_SUCCESS);
    CHECK_INT(trn_stream_synchronize(S), TRN_SUCCESS);
    CHECK_INT(count, 3);
    float *sel = dev(12), hs[3];
    CHECK_INT(trn_masked_select_launch(S, &src, &mask, count, sel, 1), TRN_SUCCESS);
    d2h(hs, sel, sizeof hs);
    // mask true at (0,0), (1,1), (2,0) -> buffer[0], buffer[4], buffer[2]
    CHECK(hs[0] == 0.0f && hs[1] == 0.0f && isnan(hs[2]));
    // zero-size tensor counts 0
    int64_t zsz[2] = {0, 3};
    trn_nz_tensor z = {TRN_DTYPE_F32, 2, zsz, NULL, tst};
    CHECK_INT(trn_count_nonzero_launch(S, &z, &count), TRN_SUCCESS);
    CHECK_INT(trn_stream_synchronize(S), TRN_SUCCESS);
    CHECK_INT(count, 0);
    trn_mem_free(o);
    trn_mem_free(m);
    trn_mem_free(t);
    trn_mem_free(coords);
    trn_mem_free(sel);
}

static void test_cat(void) {
    // dim 1 of [2, x]: a [2, 2] contiguous, b [2, 0], c [2, 1] strided (stride 3)
    int32_t ha[4] = {1, 2, 3, 4}, hc[6] = {5, 0, 0, 6, 0, 0};
    int32_t *a = dev(16), *c = dev(24), *o = dev(24);
    h2d(a, ha, 16);
    h2d(c, hc, 24);
    int64_t sa[2] = {2, 1}, sc[2] = {3, 1}, osz[2] = {2, 3}, ost[2] = {3, 1};
    trn_cat_input in[3] = {{a, sa, 2}, {NULL, sa, 0}, {c, sc, 1}};
    trn_cat_desc d = {TRN_DTYPE_I32, 2, osz, o, ost, 1, 3, in};
    CHECK_INT(trn_cat_launch(S, &d), TRN_SUCCESS);
    int32_t ho[6];
    d2h(ho, o, 24);
    CHECK(ho[0] == 1 && ho[1] == 2 && ho[2] == 5 && ho[3] == 3 && ho[4] == 4 && ho[5] == 6);
    // Many inputs (more than one task's arguments): 300 x [1] int32 on dim 0.
    enum { N = 300 };
    int32_t *src = dev(N * 4), *dst = dev(N * 4), hsrc[N], hdst[N];
    for (int i = 0; i < N; i++) hsrc[i] = i * 7;
    h2d(src, hsrc, sizeof hsrc);
    trn_cat_input *many = malloc(N * sizeof *many);
    int64_t one = 1, n = N;
    for (int i = 0; i < N; i++) many[i] = (trn_cat_input){src + (N - 1 - i), &one, 1};
    trn_cat_desc dm = {TRN_DTYPE_I32, 1, &n, dst, &one, 0, N, many};
    CHECK_INT(trn_cat_launch(S, &dm), TRN_SUCCESS);
    d2h(hdst, dst, sizeof hdst);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += hdst[i] != (N - 1 - i) * 7;
    CHECK_INT(bad, 0);
    dm.ninputs = N - 1;  // sizes no longer add up
    CHECK_INT(trn_cat_launch(S, &dm), TRN_ERROR_INVALID_ARGUMENT);
    free(many);
    trn_mem_free(a);
    trn_mem_free(c);
    trn_mem_free(o);
    trn_mem_free(src);
    trn_mem_free(dst);
}

// slice_backward: out [3, 4, 5] int32 (poisoned first), dim 1, rows 1 and 3
// (step 2) from a grad [3, 2, 5] laid out transposed (strides 1, 3, 6);
// then dim 2 with step 1 from an expanded grad (stride 0), and the checks.
static void test_slice_backward(void) {
    enum { A = 3, B = 4, C = 5, N = A * B * C };
    int32_t hg[A * 2 * C], ho[N];
    for (int i = 0; i < A * 2 * C; i++) hg[i] = 100 + i;
    int32_t *g = dev(sizeof hg), *o = dev(sizeof ho);
    h2d(g, hg, sizeof hg);
    for (int i = 0; i < N; i++) ho[i] = -7;
    h2d(o, ho, sizeof ho);
    int64_t sz[3] = {A, B, C}, gst[3] = {1, 3, 6};
    trn_slice_backward_desc d = {TRN_DTYPE_I32, 3, sz, o, g, gst, 1, 1, 2, 2};
    CHECK_INT(trn_slice_backward_launch(S, &d), TRN_SUCCESS);
    d2h(ho, o, sizeof ho);
    int bad = 0;
    for (int a = 0; a < A; a++)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++) {
                const int32_t want = (b == 1 || b == 3) ? hg[a + (b / 2) * 3 + c * 6] : 0;
                bad += ho[(a * B + b) * C + c] != want;
            }
    CHECK_INT(bad, 0);
    int64_t est[3] = {0, 0, 0};
    trn_slice_backward_desc e = {TRN_DTYPE_I32, 3, sz, o, g, est, 2, 2, 1, 3};
    CHECK_INT(trn_slice_backward_launch(S, &e), TRN_SUCCESS);
    d2h(ho, o, sizeof ho);
    bad = 0;
    for (int i = 0; i < N; i++) bad += ho[i] != (i % C >= 2 ? hg[0] : 0);
    CHECK_INT(bad, 0);
    e.count = 4;  // rows 2..5 of 5: outside the output
    CHECK_INT(trn_slice_backward_launch(S, &e), TRN_ERROR_INVALID_ARGUMENT);
    e.count = 0;  // nothing sliced: all zeros, grad never read
    e.grad = NULL;
    CHECK_INT(trn_slice_backward_launch(S, &e), TRN_SUCCESS);
    d2h(ho, o, sizeof ho);
    bad = 0;
    for (int i = 0; i < N; i++) bad += ho[i] != 0;
    CHECK_INT(bad, 0);
    e.step = 0;
    CHECK_INT(trn_slice_backward_launch(S, &e), TRN_ERROR_INVALID_ARGUMENT);
    trn_mem_free(g);
    trn_mem_free(o);
}

int main(void) {
    if (trn_stream_get_default(0, &S) != TRN_SUCCESS) return 1;
    test_gather_rows();
    test_gather_elements();
    test_scatter();
    test_scalar_put_two_indices();
    test_masks();
    test_cat();
    test_slice_backward();
    return TEST_REPORT();
}
