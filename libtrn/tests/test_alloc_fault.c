// test_alloc_fault.c - kernels whose parallel pieces allocate scratch (SDPA,
// FlexAttention, select, sort, embedding_bag, multinomial), with
// each allocation libtrn makes during a call failed in turn (the Debug
// builds' injection, src/runtime/alloc_fault.c). Every such call must either
// fail with TRN_ERROR_OUT_OF_MEMORY or succeed with the bits of a clean run
// (a fallback), never succeed with part of its output unwritten (outputs
// are filled with NaN bytes first); the next call must succeed with the
// clean run's bits; the ASan build checks that the failure paths leak
// nothing. Skipped (passes) in builds without the injection.
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trn/attention.h"
#include "trn/embedding_bag.h"
#include "trn/flex_attention.h"
#include "trn/sample.h"
#include "trn/select.h"
#include "trn/sort.h"

void trn__alloc_fault_arm(int64_t nth) __attribute__((weak));
bool trn__alloc_fault_disarm(void) __attribute__((weak));
// attention.c: its pieces keep their scratch per thread between calls.
void trn__attention_scratch_forget(void);

static trn_stream *g_stream;

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

static void fill(float *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (float)frand(&seed);
}

// ---- cases -------------------------------------------------------------------
enum { NOUT = 4 };
typedef struct fault_case {
    const char *name;
    trn_status (*launch)(void);
    void *out[NOUT];  // what the call writes (NULL: unused)
    size_t bytes[NOUT];
} fault_case;

// Strides of a contiguous [batch, heads, len, dim] tensor (the last, 1, implied).
static void bhld_strides(int64_t s[3], int64_t heads, int64_t len, int64_t dim) {
    s[0] = heads * len * dim, s[1] = len * dim, s[2] = dim;
}

// Fused attention: three query blocks per head, so the forward runs in
// several pieces over the pool; grouped-query heads for the backward.
enum { AB = 2, AH = 4, AHK = 2, AL = 150, AS = 83, AE = 16 };
static float aq[AB * AH * AL * AE], ak[AB * AHK * AS * AE], av[AB * AHK * AS * AE];
static float aout[AB * AH * AL * AE], alse[AB * AH * AL], adout[AB * AH * AL * AE];
static float adq[AB * AH * AL * AE], adk[AB * AHK * AS * AE], adv[AB * AHK * AS * AE];

static trn_attention_desc attn_desc(void) {
    trn_attention_desc d = {0};
    d.dtype = TRN_DTYPE_F32;
    d.batch = AB, d.heads = AH, d.kv_heads = AHK, d.q_len = AL, d.kv_len = AS;
    d.head_dim = AE, d.v_dim = AE;
    d.q = aq, d.k = ak, d.v = av, d.out = aout;
    bhld_strides(d.q_strides, AH, AL, AE);
    bhld_strides(d.k_strides, AHK, AS, AE);
    bhld_strides(d.v_strides, AHK, AS, AE);
    bhld_strides(d.out_strides, AH, AL, AE);
    d.lse = alse;
    d.scale = 0.25;
    d.causal = 1;
    return d;
}

// Each call starts cold, as the first call on a thread: the kept scratch
// is allocated again, so its failures are exercised.
static trn_status attn_fwd(void) {
    const trn_attention_desc d = attn_desc();
    trn__attention_scratch_forget();
    return trn_attention_launch(g_stream, &d);
}

static trn_status attn_bwd(void) {
    const trn_attention_backward_desc bd = {.fwd = attn_desc(),
                                            .dout = adout,
                                            .dout_strides = {AH * AL * AE, AL * AE, AE},
                                            .dq = adq,
                                            .dk = adk,
                                            .dv = adv};
    trn__attention_scratch_forget();
    return trn_attention_backward_launch(g_stream, &bd);
}

// FlexAttention: one kv head, so that the backward splits it into parts
// with partial sums (on more than one thread).
enum { FB = 1, FH = 2, FHK = 1, FL = 100, FS = 100, FE = 8, BLK = 32 };
enum { NQB = (FL + BLK - 1) / BLK, NKB = (FS + BLK - 1) / BLK };
static float fq[FB * FH * FL * FE], fk[FB * FHK * FS * FE], fv[FB * FHK * FS * FE];
static float fout[FB * FH * FL * FE], flse[FB * FH * FL], fdout[FB * FH * FL * FE];
static float fdq[FB * FH * FL * FE], fdk[FB * FHK * FS * FE], fdv[FB * FHK * FS * FE];
static int32_t kv_num[NQB], kv_idx[NQB * NKB];

// A causal mask (the kernel applies it on the listed, partial, blocks).
static void causal_score(const trn_flex_buffers *bf, int64_t b, int64_t h, int64_t i0, int64_t ni,
                         int64_t j0, int64_t nj, float *st, int64_t ld, int masked) {
    (void)bf, (void)b, (void)h;
    if (!masked) return;
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < ni; i++)
            if (j0 + j > i0 + i) st[j * ld + i] = -INFINITY;
}

static trn_flex_attention_desc flex_desc(void) {
    trn_flex_attention_desc d = {0};
    d.dtype = TRN_DTYPE_F32;
    d.batch = FB, d.heads = FH, d.kv_heads = FHK, d.q_len = FL, d.kv_len = FS;
    d.head_dim = FE, d.v_dim = FE;
    d.q = fq, d.k = fk, d.v = fv, d.out = fout;
    bhld_strides(d.q_strides, FH, FL, FE);
    bhld_strides(d.k_strides, FHK, FS, FE);
    bhld_strides(d.v_strides, FHK, FS, FE);
    bhld_strides(d.out_strides, FH, FL, FE);
    d.lse = flse;
    d.scale = 0.3;
    d.q_block = BLK, d.kv_block = BLK;
    d.mask_batch = 1, d.mask_heads = 1, d.mask_q_blocks = NQB, d.mask_kv_blocks = NKB;
    d.kv_num_blocks = kv_num, d.kv_indices = kv_idx;
    d.score_fn = causal_score;
    return d;
}

static trn_status flex_fwd(void) {
    const trn_flex_attention_desc d = flex_desc();
    return trn_flex_attention_launch(g_stream, &d);
}

static trn_status flex_bwd(void) {
    const trn_flex_attention_backward_desc bd = {.fwd = flex_desc(),
                                                 .dout = fdout,
                                                 .dout_strides = {FH * FL * FE, FL * FE, FE},
                                                 .dq = fdq,
                                                 .dk = fdk,
                                                 .dv = fdv,
                                                 .dq_strides = {FH * FL * FE, FL * FE, FE},
                                                 .dk_strides = {FHK * FS * FE, FS * FE, FE},
                                                 .dv_strides = {FHK * FS * FE, FS * FE, FE}};
    return trn_flex_attention_backward_launch(g_stream, &bd);
}

// Row-wise selection and sort: rows in several pieces, each piece with its
// own buffers.
enum { SR = 48, SN = 3000 };
static float sx[SR * SN], sval[SR * SN], selv[SR];
static int64_t sidx[SR * SN], seli[SR];

static trn_status select_kth(void) {
    const trn_select_desc d = {.dtype = TRN_DTYPE_F32,
                               .mode = TRN_SELECT_KTH,
                               .rows = SR,
                               .n = SN,
                               .k = SN / 3,
                               .x = sx,
                               .values = selv,
                               .indices = seli};
    return trn_select_launch(g_stream, &d);
}

static trn_status sort_rows(void) {
    static const int64_t outer[1] = {SR}, outer_st[1] = {SN};
    const trn_sort_desc d = {.dtype = TRN_DTYPE_F32,
                             .outer_ndim = 1,
                             .outer_sizes = outer,
                             .in_outer_strides = outer_st,
                             .val_outer_strides = outer_st,
                             .idx_outer_strides = outer_st,
                             .len = SN,
                             .in_stride = 1,
                             .val_stride = 1,
                             .idx_stride = 1,
                             .in = sx,
                             .values = sval,
                             .indices = sidx};
    return trn_sort_launch(g_stream, &d);
}

// embedding_bag (each piece's bag accumulator) and multinomial (each
// piece's cumulative weights).
enum { NW = 500, DIM = 64, BAGS = 256, PER_BAG = 10, MR = 32, MC = 2000, MS = 4 };
static float ew[NW * DIM], eout[BAGS * DIM], mprobs[MR * MC];
static int64_t eidx[BAGS * PER_BAG], eoff[BAGS], msamples[MR * MS];

static trn_status embedding_bag_sum(void) {
    const trn_embedding_bag_desc d = {.dtype = TRN_DTYPE_F32,
                                      .index_dtype = TRN_DTYPE_I64,
                                      .mode = TRN_EMBEDDING_BAG_SUM,
                                      .num_weights = NW,
                                      .dim = DIM,
                                      .num_indices = BAGS * PER_BAG,
                                      .num_offsets = BAGS,
                                      .num_bags = BAGS,
                                      .padding_idx = -1,
                                      .weight = ew,
                                      .indices = eidx,
                                      .offsets = eoff,
                                      .output = eout};
    return trn_embedding_bag_launch(g_stream, &d);
}

static trn_status multinomial(void) {
    const trn_multinomial_desc d = {.dtype = TRN_DTYPE_F32,
                                    .rows = MR,
                                    .categories = MC,
                                    .samples = MS,
                                    .replacement = 1,
                                    .probs = mprobs,
                                    .out = msamples,
                                    .seed = 1234};
    return trn_multinomial_launch(g_stream, &d);
}

// ---- the sweep -----------------------------------------------------------------
static trn_status run(const fault_case *c) {
    for (int i = 0; i < NOUT; i++)
        if (c->out[i]) memset(c->out[i], 0xff, c->bytes[i]);  // NaN: unwritten shows
    const trn_status st = c->launch();
    const trn_status sync = trn_stream_synchronize(g_stream);
    return st != TRN_SUCCESS ? st : sync;
}

static bool same(const fault_case *c, unsigned char *const *ref) {
    for (int i = 0; i < NOUT; i++)
        if (c->out[i] && memcmp(c->out[i], ref[i], c->bytes[i]) != 0) return false;
    return true;
}

// Whether a clean run wrote every element (none left as the fill's bytes).
static bool all_written(const fault_case *c) {
    for (int i = 0; i < NOUT; i++)
        for (size_t b = 0; c->out[i] && b + 4 <= c->bytes[i]; b += 4) {
            uint32_t w;
            memcpy(&w, (const unsigned char *)c->out[i] + b, 4);
            if (w == UINT32_MAX) return false;
        }
    return true;
}

static void sweep(const fault_case *c) {
    unsigned char *ref[NOUT] = {0};
    CHECK_OK(run(c));
    if (!all_written(c)) {
        test_fail_header(__FILE__, __LINE__);
        fprintf(stderr, "%s: a clean run left outputs unwritten (the case is wrong)\n", c->name);
    }
    for (int i = 0; i < NOUT; i++)
        if (c->out[i]) {
            ref[i] = malloc(c->bytes[i]);
            if (ref[i] == NULL) abort();
            memcpy(ref[i], c->out[i], c->bytes[i]);
        }
    int n, oom = 0;
    for (n = 1; n < 10000; n++) {
        trn__alloc_fault_arm(n);
        const trn_status st = run(c);
        const bool fired = trn__alloc_fault_disarm();
        if (!fired) {  // past the call's last allocation
            CHECK_OK(st);
            CHECK(same(c, ref));
            break;
        }
        if (st == TRN_SUCCESS) {
            if (!same(c, ref)) {
                test_fail_header(__FILE__, __LINE__);
                fprintf(stderr, "%s: allocation %d failed, the call succeeded, output differs\n",
                        c->name, n);
            }
        } else {
            CHECK_INT(st, TRN_ERROR_OUT_OF_MEMORY);
            CHECK_CONTAINS(trn_last_error(), "memory");
            oom++;
        }
        // The next call, with memory back, is whole.
        CHECK_OK(run(c));
        if (!same(c, ref)) {
            test_fail_header(__FILE__, __LINE__);
            fprintf(stderr, "%s: the call after allocation %d failed differs\n", c->name, n);
        }
    }
    printf("%s: %d allocations failed in turn, %d reported out of memory\n", c->name, n - 1, oom);
    CHECK(oom > 0);
    for (int i = 0; i < NOUT; i++) free(ref[i]);
}

int main(void) {
    if (trn__alloc_fault_arm == NULL || trn__alloc_fault_disarm == NULL) {
        printf("skipped: libtrn built without allocation-failure injection (TRN_ALLOC_FAULTS)\n");
        return 0;
    }
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    fill(aq, sizeof aq / sizeof *aq, 1);
    fill(ak, sizeof ak / sizeof *ak, 2);
    fill(av, sizeof av / sizeof *av, 3);
    fill(adout, sizeof adout / sizeof *adout, 4);
    fill(fq, sizeof fq / sizeof *fq, 5);
    fill(fk, sizeof fk / sizeof *fk, 6);
    fill(fv, sizeof fv / sizeof *fv, 7);
    fill(fdout, sizeof fdout / sizeof *fdout, 8);
    fill(sx, sizeof sx / sizeof *sx, 9);
    fill(ew, sizeof ew / sizeof *ew, 10);
    fill(mprobs, sizeof mprobs / sizeof *mprobs, 11);
    for (size_t i = 0; i < sizeof mprobs / sizeof *mprobs; i++) mprobs[i] = fabsf(mprobs[i]);
    for (int i = 0; i < BAGS * PER_BAG; i++) eidx[i] = (i * 37) % NW;
    for (int b = 0; b < BAGS; b++) eoff[b] = b * PER_BAG;
    for (int m = 0; m < NQB; m++) {  // causal blocks: n <= m listed
        kv_num[m] = m + 1;
        for (int n = 0; n <= m; n++) kv_idx[m * NKB + n] = n;
    }
    // The backward reads the forward's out and lse: run it clean first.
    CHECK_OK(attn_fwd());
    CHECK_OK(flex_fwd());
    CHECK_OK(trn_stream_synchronize(g_stream));
    static float aout0[sizeof aout / sizeof *aout], fout0[sizeof fout / sizeof *fout];
    memcpy(aout0, aout, sizeof aout);
    memcpy(fout0, fout, sizeof fout);

    const fault_case cases[] = {
        {"attention", attn_fwd, {aout, alse}, {sizeof aout, sizeof alse}},
        {"flex_attention", flex_fwd, {fout, flse}, {sizeof fout, sizeof flse}},
        {"select", select_kth, {selv, seli}, {sizeof selv, sizeof seli}},
        {"sort", sort_rows, {sval, sidx}, {sizeof sval, sizeof sidx}},
        {"embedding_bag", embedding_bag_sum, {eout}, {sizeof eout}},
        {"multinomial", multinomial, {msamples}, {sizeof msamples}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) sweep(&cases[i]);
    // The forward sweeps leave out and lse as a clean run wrote them.
    CHECK(memcmp(aout, aout0, sizeof aout) == 0);
    CHECK(memcmp(fout, fout0, sizeof fout) == 0);
    const fault_case bwd[] = {
        {"attention backward", attn_bwd, {adq, adk, adv}, {sizeof adq, sizeof adk, sizeof adv}},
        {"flex_attention backward",
         flex_bwd,
         {fdq, fdk, fdv},
         {sizeof fdq, sizeof fdk, sizeof fdv}},
    };
    for (size_t i = 0; i < sizeof bwd / sizeof *bwd; i++) sweep(&bwd[i]);
    return TEST_REPORT();
}
