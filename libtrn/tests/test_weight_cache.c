// test_weight_cache.c - the packed-weight cache of few-row float32 products
// (src/kernels/blas/weight_cache.h): a product given B's version packs B on
// its second call and reads the copy after, with the bits of the uncached
// product (version 0); a new version, a freed block (whose address a new
// allocation then reuses), and a write that did not move the version (caught
// by the sampled elements) never find a stale copy; the table is empty once
// its weights are freed. Buffers live in device memory, so the test also
// runs in protect-memory mode. Bfloat16 few-row products (packed as
// float32, cached or packed for the call) give the same bits with and
// without a version, close to a double reference.
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "test_common_dev.h"
#include "trn/convert.h"
#include "trn/cpu.h"
#include "trn/matmul_bias.h"

// The packed path is AVX-512 code: at the avx2 level nothing is cached.
static bool g_packs;

static trn_stream *g_stream;

typedef struct prod {
    int64_t m, k, n;
    float *da, *db, *dc, *dbias;
} prod;

static void fill_dev(float *dst, int64_t count) {
    float *h = malloc((size_t)count * sizeof *h);
    for (int64_t i = 0; i < count; i++) h[i] = (float)rng_unit();
    xfer(g_stream, dst, h, (size_t)count * sizeof *h);
    free(h);
}

static prod prod_make(int64_t m, int64_t k, int64_t n, bool bias) {
    prod p = {m, k, n, NULL, NULL, NULL, NULL};
    p.da = dev_alloc(g_stream, (size_t)(m * k) * sizeof(float));
    p.db = dev_alloc(g_stream, (size_t)(n * k) * sizeof(float));  // n rows of k (nn.Linear)
    p.dc = dev_alloc(g_stream, (size_t)(m * n) * sizeof(float));
    fill_dev(p.da, m * k);
    fill_dev(p.db, n * k);
    if (bias) {
        p.dbias = dev_alloc(g_stream, (size_t)n * sizeof(float));
        fill_dev(p.dbias, n);
    }
    return p;
}

static void prod_free(prod *p) {
    CHECK_OK(trn_mem_free(p->da));
    CHECK_OK(trn_mem_free(p->db));
    CHECK_OK(trn_mem_free(p->dc));
    if (p->dbias) CHECK_OK(trn_mem_free(p->dbias));
}

// C on the host after C = alpha * A.B^T (+ bias), B given its version.
static float *run(const prod *p, double alpha, uint64_t version) {
    trn_matmul_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = TRN_DTYPE_F32, d.batch = 1, d.m = p->m, d.n = p->n, d.k = p->k;
    d.a = p->da, d.b = p->db, d.c = p->dc;
    d.a_strides[1] = p->k, d.a_strides[2] = 1;
    d.b_strides[1] = 1, d.b_strides[2] = p->k;
    d.c_strides[1] = p->n, d.c_strides[2] = 1;
    d.alpha = alpha;
    d.b_version = version;
    CHECK_OK(p->dbias ? trn_matmul_bias_launch(g_stream, &d, p->dbias, 1)
                      : trn_matmul_launch(g_stream, &d));
    CHECK_OK(trn_stream_synchronize(g_stream));
    float *h = malloc((size_t)(p->m * p->n) * sizeof *h);
    xfer(g_stream, h, p->dc, (size_t)(p->m * p->n) * sizeof *h);
    return h;
}

static bool same_bits(const float *a, const float *b, int64_t count) {
    return memcmp(a, b, (size_t)count * sizeof *a) == 0;
}

static trn_weight_cache_stats stats(void) {
    trn_weight_cache_stats s;
    trn_weight_cache_stats_get(&s);
    return s;
}

// Record, pack, hit: each the uncached bits.
static void test_same_bits(int64_t m, int64_t k, int64_t n, bool bias, double alpha) {
    prod p = prod_make(m, k, n, bias);
    float *want = run(&p, alpha, 0);
    const trn_weight_cache_stats s0 = stats();
    for (int i = 0; i < 3; i++) {
        float *got = run(&p, alpha, 7);
        CHECK(same_bits(got, want, m * n));
        free(got);
    }
    const trn_weight_cache_stats s1 = stats();
    CHECK_U64(s1.packs, s0.packs + (g_packs ? 1 : 0));
    CHECK_U64(s1.hits, s0.hits + (g_packs ? 1 : 0));
    free(want);
    prod_free(&p);
    CHECK_INT(stats().entries, 0);  // freed with B's block
}

// Bfloat16 C = A.B^T (+ bias) with B's version: the call without a version
// (a copy packed for the call) and the cached calls agree bit for bit, and
// each output is within a bf16 rounding (plus float32 sums) of a double sum.
static void test_bf16_same_bits(int64_t m, int64_t k, int64_t n, bool with_bias) {
    const size_t es = sizeof(uint16_t);
    uint16_t *ha = malloc((size_t)(m * k) * es), *hb = malloc((size_t)(n * k) * es);
    uint16_t *hbias = malloc((size_t)n * es), *want = malloc((size_t)(m * n) * es);
    uint16_t *got = malloc((size_t)(m * n) * es);
    for (int64_t i = 0; i < m * k; i++) ha[i] = trn_float_to_bf16((float)rng_unit());
    for (int64_t i = 0; i < n * k; i++) hb[i] = trn_float_to_bf16((float)rng_unit());
    for (int64_t i = 0; i < n; i++) hbias[i] = trn_float_to_bf16((float)rng_unit());
    void *da = dev_alloc(g_stream, (size_t)(m * k) * es),
         *db = dev_alloc(g_stream, (size_t)(n * k) * es);
    void *dc = dev_alloc(g_stream, (size_t)(m * n) * es),
         *dbias = dev_alloc(g_stream, (size_t)n * es);
    xfer(g_stream, da, ha, (size_t)(m * k) * es);
    xfer(g_stream, db, hb, (size_t)(n * k) * es);
    xfer(g_stream, dbias, hbias, (size_t)n * es);
    trn_matmul_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = TRN_DTYPE_BF16, d.batch = 1, d.m = m, d.n = n, d.k = k;
    d.a = da, d.b = db, d.c = dc;
    d.a_strides[1] = k, d.a_strides[2] = 1;
    d.b_strides[1] = 1, d.b_strides[2] = k;
    d.c_strides[1] = n, d.c_strides[2] = 1;
    d.alpha = 1.0;
    const trn_weight_cache_stats s0 = stats();
    for (int i = 0; i < 4; i++) {
        d.b_version = i == 0 ? 0 : 3;
        CHECK_OK(with_bias ? trn_matmul_bias_launch(g_stream, &d, dbias, 1)
                           : trn_matmul_launch(g_stream, &d));
        CHECK_OK(trn_stream_synchronize(g_stream));
        xfer(g_stream, i == 0 ? want : got, dc, (size_t)(m * n) * es);
        if (i > 0) CHECK(memcmp(got, want, (size_t)(m * n) * es) == 0);
    }
    CHECK_U64(stats().packs, s0.packs + (g_packs ? 1 : 0));
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < n; j++) {
            double ref = with_bias ? trn_bf16_to_float(hbias[j]) : 0.0, mag = fabs(ref);
            for (int64_t p = 0; p < k; p++) {
                const double t =
                    (double)trn_bf16_to_float(ha[r * k + p]) * trn_bf16_to_float(hb[j * k + p]);
                ref += t;
                mag += fabs(t);
            }
            const double err = fabs(trn_bf16_to_float(want[r * n + j]) - ref);
            CHECK(err <= fabs(ref) / 256.0 + mag * 1e-6);
        }
    CHECK_OK(trn_mem_free(da));
    CHECK_OK(trn_mem_free(db));
    CHECK_OK(trn_mem_free(dc));
    CHECK_OK(trn_mem_free(dbias));
    free(ha), free(hb), free(hbias), free(want), free(got);
    CHECK_INT(stats().entries, 0);
}

// A new version repacks from what B holds now.
static void test_new_version(void) {
    prod p = prod_make(1, 256, 544, false);
    for (int i = 0; i < 3; i++) free(run(&p, 1.0, 1));
    // One element no sample reads: only the version tells.
    float v = 9.0f;
    xfer(g_stream, p.db + 7 * 256 + 9, &v, sizeof v);
    float *want = run(&p, 1.0, 0);
    for (int i = 0; i < 3; i++) {
        float *got = run(&p, 1.0, 2);
        CHECK(same_bits(got, want, 544));
        free(got);
    }
    free(want);
    prod_free(&p);
}

// Written without the version moving: the samples catch a whole rewrite.
static void test_samples(void) {
    prod p = prod_make(2, 256, 544, false);
    for (int i = 0; i < 3; i++) free(run(&p, 1.0, 1));
    fill_dev(p.db, 544 * 256);
    const uint64_t drops = stats().drops;
    float *want = run(&p, 1.0, 0), *got = run(&p, 1.0, 1);
    CHECK(same_bits(got, want, 2 * 544));
    CHECK(stats().drops > drops || !g_packs);
    free(want);
    free(got);
    prod_free(&p);
}

// The freed block's address handed out again, same shape and version.
static void test_reuse(void) {
    prod p = prod_make(1, 256, 544, false);
    for (int i = 0; i < 3; i++) free(run(&p, 1.0, 1));
    CHECK_INT(stats().packed, g_packs ? 1 : 0);
    float *old = p.db;
    CHECK_OK(trn_mem_free(p.db));
    CHECK_INT(stats().entries, 0);
    p.db = dev_alloc(g_stream, 544 * 256 * sizeof(float));
    fill_dev(p.db, 544 * 256);
    if (p.db == old) {
        float *want = run(&p, 1.0, 0);
        for (int i = 0; i < 3; i++) {
            float *got = run(&p, 1.0, 1);
            CHECK(same_bits(got, want, 544));
            free(got);
        }
        free(want);
    }
    prod_free(&p);
}

// B inside a larger block (a view past its start): only the block holding a
// recorded operand drops entries at its free, so freeing other blocks keeps
// them and freeing the holder, found from the interior address, drops them.
static void test_interior_operand(void) {
    prod p = prod_make(1, 256, 544, false);
    float *whole = p.db;
    p.db = dev_alloc(g_stream, 2 * 544 * 256 * sizeof(float));
    float *block = p.db;
    p.db = block + 544 * 256;
    fill_dev(p.db, 544 * 256);
    for (int i = 0; i < 3; i++) free(run(&p, 1.0, 1));
    CHECK(stats().entries >= 1);
    const uint64_t entries = stats().entries;
    CHECK_OK(trn_mem_free(whole));  // never an operand: its free drops nothing
    CHECK_INT(stats().entries, entries);
    CHECK_OK(trn_mem_free(block));
    CHECK_INT(stats().entries, 0);
    p.db = dev_alloc(g_stream, 544 * 256 * sizeof(float));
    prod_free(&p);
}

// fork() while another thread is inside the cache's lock: the runtime's fork
// handlers take it first, so no child inherits it held (a child's first
// cached product then waited forever).
static atomic_bool g_hammer_stop;

static void *hammer(void *arg) {
    (void)arg;
    trn_weight_cache_stats s;
    while (!atomic_load(&g_hammer_stop)) trn_weight_cache_stats_get(&s);
    return NULL;
}

static void test_fork_while_locked(void) {
    pthread_t t;
    atomic_store(&g_hammer_stop, false);
    CHECK(pthread_create(&t, NULL, hammer, NULL) == 0);
    enum { FORKS = 100 };
    pid_t pids[FORKS];
    int forked = 0;
    for (int i = 0; i < FORKS; i++) {
        const pid_t pid = fork();
        if (pid == 0) {
            trn_weight_cache_stats s;
            trn_weight_cache_stats_get(&s);
            _exit(0);
        }
        if (pid > 0) pids[forked++] = pid;
    }
    atomic_store(&g_hammer_stop, true);
    pthread_join(t, NULL);
    int hung = 0, failed = 0;
    const time_t deadline = time(NULL) + 20;
    for (int i = 0; i < forked; i++) {
        int status = 0;
        pid_t done = 0;
        while ((done = waitpid(pids[i], &status, WNOHANG)) == 0 && time(NULL) < deadline)
            usleep(1000);
        if (done == 0) {
            hung++;
            kill(pids[i], SIGKILL);
            waitpid(pids[i], &status, 0);
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            failed++;
        }
    }
    CHECK_INT(forked, FORKS);
    CHECK_INT(hung, 0);
    CHECK_INT(failed, 0);
}

int main(void) {
    CHECK_OK(trn_stream_get_default(0, &g_stream));
    trn_weight_cache_clear();
    g_packs = strcmp(trn_cpu_capability(), "avx2") != 0;
    const int64_t shapes[][3] = {{1, 256, 544}, {4, 33, 200},    {3, 300, 17},
                                 {2, 64, 1000}, {1, 1024, 1024}, {4, 130, 4100}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        test_same_bits(shapes[i][0], shapes[i][1], shapes[i][2], false, 1.0);
        test_same_bits(shapes[i][0], shapes[i][1], shapes[i][2], true, 1.0);
        test_same_bits(shapes[i][0], shapes[i][1], shapes[i][2], true, 0.5);
    }
    test_bf16_same_bits(1, 256, 544, false);
    test_bf16_same_bits(3, 300, 170, true);
    test_bf16_same_bits(4, 1024, 1024, true);
    test_new_version();
    test_samples();
    test_reuse();
    test_interior_operand();
    test_fork_while_locked();
    CHECK_INT(stats().entries, 0);
    return TEST_REPORT();
}
