// test_collectives.c - the shared-memory collective engine with forked ranks:
// every collective against values computed here, messages larger than a slot
// or a pipe, mismatches, a stalled rank (timeout), a dead rank, and an attach
// that waits for every rank.
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "trn/collectives.h"
#include "trn/convert.h"

// Runs fn(comm) in `size` forked ranks; returns how many ranks failed.
typedef int (*rank_fn)(trn_comm *c);

// Single-copy path (process_vm_readv) per run: SC_DEFAULT leaves it on,
// SC_OFF turns it off on every rank, SC_MIXED on rank 1 only (every rank must
// then fall back to the slots).
enum { SC_DEFAULT, SC_OFF, SC_MIXED };
static int g_single_copy = SC_DEFAULT;

static int run_ranks(int size, int64_t timeout_ms, rank_fn fn) {
    int fd = -1;
    if (trn_comm_region_create(size, &fd) != TRN_SUCCESS) return size;
    pid_t pids[16];
    for (int r = 0; r < size; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            if (g_single_copy == SC_OFF || (g_single_copy == SC_MIXED && r == 1))
                setenv("TORCH_NEURONX_DIST_SINGLE_COPY", "0", 1);
            trn_comm *c = NULL;
            if (trn_comm_attach(fd, r, size, timeout_ms, &c) != TRN_SUCCESS) _exit(100);
            int failures = fn(c);
            trn_comm_destroy(c);
            _exit(failures > 99 ? 99 : failures);
        }
    }
    close(fd);
    int bad = 0;
    for (int r = 0; r < size; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "rank %d failed (status %d)\n", r, status);
            bad++;
        }
    }
    return bad;
}

#define RANK_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed: %s\n", trn_comm_rank(c), __FILE__,  \
                    __LINE__, #cond, trn_last_error());                                            \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

// 1.5 slots of float32 so the rounds loop runs more than once.
#define BIG ((size_t)1536 * 1024)

static int ranks_allreduce(trn_comm *c) {
    int fails = 0, r = trn_comm_rank(c), n = trn_comm_size(c);
    float *x = malloc(BIG * sizeof *x), *y = malloc(BIG * sizeof *y);
    for (size_t i = 0; i < BIG; i++) x[i] = (float)(r + 1) * (float)(i % 97);
    RANK_CHECK(trn_comm_allreduce(c, x, y, BIG, TRN_DTYPE_F32, TRN_REDOP_SUM, NULL) == TRN_SUCCESS);
    float tri = (float)(n * (n + 1) / 2);
    size_t bad = 0;
    for (size_t i = 0; i < BIG; i++) bad += y[i] != tri * (float)(i % 97);
    RANK_CHECK(bad == 0);
    // Every rank took the same path; none single-copy if any rank opted out
    // (with SC_DEFAULT it depends on the host's ptrace rules).
    int32_t sc = trn_comm_single_copy(c), lo = -1, hi = -1;
    RANK_CHECK(trn_comm_allreduce(c, &sc, &lo, 1, TRN_DTYPE_I32, TRN_REDOP_MIN, NULL) ==
               TRN_SUCCESS);
    RANK_CHECK(trn_comm_allreduce(c, &sc, &hi, 1, TRN_DTYPE_I32, TRN_REDOP_MAX, NULL) ==
               TRN_SUCCESS);
    RANK_CHECK(lo == hi);
    RANK_CHECK(g_single_copy == SC_DEFAULT || sc == 0);
    // A count that does not split evenly into segments, in place.
    size_t odd = 100003;
    for (size_t i = 0; i < odd; i++) y[i] = (float)(r + 1) * (float)(i % 31);
    RANK_CHECK(trn_comm_allreduce(c, y, y, odd, TRN_DTYPE_F32, TRN_REDOP_MAX, NULL) == TRN_SUCCESS);
    for (size_t i = 0; i < odd; i++) bad += y[i] != (float)n * (float)(i % 31);
    RANK_CHECK(bad == 0);
    // In place, AVG.
    trn_reduce_post avg = {true, false, 1.0};
    RANK_CHECK(trn_comm_allreduce(c, x, x, BIG, TRN_DTYPE_F32, TRN_REDOP_SUM, &avg) == TRN_SUCCESS);
    bad = 0;
    for (size_t i = 0; i < BIG; i++) bad += x[i] != tri * (float)(i % 97) / (float)n;
    RANK_CHECK(bad == 0);
    // int32 MAX / BXOR, bool PROD, bfloat16 SUM.
    int32_t a[5], b[5];
    for (int i = 0; i < 5; i++) a[i] = r * 10 + i;
    RANK_CHECK(trn_comm_allreduce(c, a, b, 5, TRN_DTYPE_I32, TRN_REDOP_MAX, NULL) == TRN_SUCCESS);
    RANK_CHECK(b[4] == (n - 1) * 10 + 4);
    RANK_CHECK(trn_comm_allreduce(c, a, b, 5, TRN_DTYPE_I32, TRN_REDOP_BXOR, NULL) == TRN_SUCCESS);
    int32_t want = 0;
    for (int q = 0; q < n; q++) want ^= q * 10 + 1;
    RANK_CHECK(b[1] == want);
    unsigned char t = r != 1, u = 9;
    RANK_CHECK(trn_comm_allreduce(c, &t, &u, 1, TRN_DTYPE_BOOL, TRN_REDOP_PROD, NULL) ==
               TRN_SUCCESS);
    RANK_CHECK(u == 0);
    uint16_t h = trn_float_to_bf16(1.5f), g = 0;
    RANK_CHECK(trn_comm_allreduce(c, &h, &g, 1, TRN_DTYPE_BF16, TRN_REDOP_SUM, NULL) ==
               TRN_SUCCESS);
    RANK_CHECK(trn_bf16_to_float(g) == 1.5f * (float)n);
    // Zero elements, then a reduce to the last rank with PREMUL_SUM.
    RANK_CHECK(trn_comm_allreduce(c, x, y, 0, TRN_DTYPE_F32, TRN_REDOP_SUM, NULL) == TRN_SUCCESS);
    trn_reduce_post pre = {false, true, 0.5};
    double v = r + 1, w = -1;
    RANK_CHECK(trn_comm_reduce(c, &v, &w, 1, TRN_DTYPE_F64, TRN_REDOP_SUM, &pre, n - 1) ==
               TRN_SUCCESS);
    RANK_CHECK(r != n - 1 || w == 0.5 * n * (n + 1) / 2);
    // Bitwise on floats is refused before any rank waits.
    RANK_CHECK(trn_comm_allreduce(c, x, y, 1, TRN_DTYPE_F32, TRN_REDOP_BAND, NULL) ==
               TRN_ERROR_INVALID_ARGUMENT);
    free(x);
    free(y);
    return fails;
}

static int ranks_reduce_scatter(trn_comm *c) {
    int fails = 0, r = trn_comm_rank(c), n = trn_comm_size(c);
    size_t count = BIG / 2;
    int64_t *x = malloc(count * (size_t)n * sizeof *x);
    int64_t *y = malloc(count * sizeof *y);
    for (size_t i = 0; i < count * (size_t)n; i++) x[i] = (int64_t)i * (r + 1);
    RANK_CHECK(trn_comm_reduce_scatter(c, x, y, count, TRN_DTYPE_I64, TRN_REDOP_SUM, NULL) ==
               TRN_SUCCESS);
    size_t bad = 0;
    int64_t tri = n * (n + 1) / 2;
    for (size_t i = 0; i < count; i++) bad += y[i] != (int64_t)((size_t)r * count + i) * tri;
    RANK_CHECK(bad == 0);
    free(x);
    free(y);
    return fails;
}

// All-to-all with uneven parts: rank i sends (i + j + 1) * 1000 bytes to j.
static int ranks_exchange(trn_comm *c) {
    int fails = 0, r = trn_comm_rank(c), n = trn_comm_size(c);
    size_t off[16], len[16], dlen[16], total = 0, rtotal = 0;
    for (int j = 0; j < n; j++) {
        off[j] = total;
        len[j] = (size_t)(r + j + 1) * 1000 * 1000;
        total += len[j];
        dlen[j] = (size_t)(j + r + 1) * 1000 * 1000;
        rtotal += dlen[j];
    }
    unsigned char *src = malloc(total), *dst = malloc(rtotal);
    void *dp[16];
    for (int j = 0; j < n; j++) memset(src + off[j], r * 16 + j, len[j]);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        dp[i] = dst + at;
        at += dlen[i];
    }
    RANK_CHECK(trn_comm_exchange(c, "all_to_all", src, total, off, len, dp, dlen) == TRN_SUCCESS);
    size_t bad = 0;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < dlen[i]; k++)
            bad += ((unsigned char *)dp[i])[k] != (unsigned char)(i * 16 + r);
    RANK_CHECK(bad == 0);
    // In-place all_gather: this rank's part already sits in the output.
    size_t part = 50000;
    unsigned char *all = malloc(part * (size_t)n);
    void *ap[16];
    size_t alen[16];
    for (int i = 0; i < n; i++) {
        ap[i] = all + (size_t)i * part;
        alen[i] = part;
    }
    memset(all, 0xee, part * (size_t)n);
    memset(ap[r], r + 1, part);
    RANK_CHECK(trn_comm_exchange(c, "all_gather", ap[r], part, NULL, NULL, ap, alen) ==
               TRN_SUCCESS);
    bad = 0;
    for (size_t k = 0; k < part * (size_t)n; k++) bad += all[k] != (unsigned char)(k / part + 1);
    RANK_CHECK(bad == 0);
    free(all);
    // Broadcast from rank 1.
    int32_t v[3] = {r, r, r};
    RANK_CHECK(trn_comm_broadcast(c, v, sizeof v, 1) == TRN_SUCCESS);
    RANK_CHECK(v[0] == 1 && v[2] == 1);
    // A reader expecting the wrong size: every rank gets the same error and
    // the group keeps working.
    dlen[0] = r == 0 ? dlen[0] + 1 : dlen[0];
    RANK_CHECK(trn_comm_exchange(c, "all_to_all", src, total, off, len, dp, dlen) ==
               TRN_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(strstr(trn_last_error(), "shapes differ") != NULL);
    // Different collectives on different ranks.
    trn_status st = r == 0 ? trn_comm_barrier(c) : trn_comm_broadcast(c, v, sizeof v, 0);
    RANK_CHECK(st == TRN_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(strstr(trn_last_error(), "mismatch") != NULL);
    RANK_CHECK(trn_comm_barrier(c) == TRN_SUCCESS);
    free(src);
    free(dst);
    return fails;
}

// Ranks 0 and 1 send each other 3 MiB at once (more than a pipe holds), so
// both must progress sends and receives together; rank 0 then receives from
// any source.
static int ranks_p2p(trn_comm *c) {
    int fails = 0, r = trn_comm_rank(c), n = trn_comm_size(c);
    if (r > 1) {
        int32_t v = r;
        trn_p2p_req s = {.is_send = true, .peer = 0, .tag = 7, .buf = &v, .nbytes = sizeof v};
        bool done = false;
        while (!done) RANK_CHECK(trn_comm_p2p_progress(c, &s, &done) == TRN_SUCCESS);
        return fails;
    }
    size_t bytes = (size_t)3 << 20;
    unsigned char *out = malloc(bytes), *in = malloc(bytes);
    memset(out, r + 1, bytes);
    trn_p2p_req reqs[2] = {{.is_send = true, .peer = 1 - r, .tag = 0, .buf = out, .nbytes = bytes},
                           {.is_send = false, .peer = 1 - r, .tag = 0, .buf = in, .nbytes = bytes}};
    bool done[2] = {false, false};
    while (!(done[0] && done[1]))
        for (int k = 0; k < 2; k++)
            if (!done[k]) RANK_CHECK(trn_comm_p2p_progress(c, &reqs[k], &done[k]) == TRN_SUCCESS);
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += in[i] != (unsigned char)(2 - r);
    RANK_CHECK(bad == 0);
    for (int k = 2; r == 0 && k < n; k++) {
        int32_t v = -1;
        trn_p2p_req any = {.is_send = false, .peer = -1, .tag = 7, .buf = &v, .nbytes = sizeof v};
        bool d = false;
        while (!d) RANK_CHECK(trn_comm_p2p_progress(c, &any, &d) == TRN_SUCCESS);
        RANK_CHECK(v == any.source && v >= 2);
    }
    free(out);
    free(in);
    return fails;
}

// Divergence that moves no wrong byte count must still fail on every rank,
// and a call one rank cannot make must fail everyone's (not pair with the
// next collective): each case, then a collective that must still work.
static int ranks_agree(trn_comm *c) {
    int fails = 0, r = trn_comm_rank(c), n = trn_comm_size(c);
    int32_t v[4] = {r, r, r, r}, all[16 * 4];
    void *dp[16];
    size_t dlen[16];
    for (int i = 0; i < n; i++) {
        dp[i] = all + 4 * i;
        dlen[i] = sizeof v;
    }
#define STILL_IN_STEP()                                                                            \
    do {                                                                                           \
        int32_t one = 1, sum = 0;                                                                  \
        RANK_CHECK(trn_comm_allreduce(c, &one, &sum, 1, TRN_DTYPE_I32, TRN_REDOP_SUM, NULL) ==     \
                   TRN_SUCCESS);                                                                   \
        RANK_CHECK(sum == n);                                                                      \
    } while (0)
    // Broadcast, each rank naming itself the root: every rank's message
    // names its own root and rank 0's (rank 0 names rank 1's).
    RANK_CHECK(trn_comm_broadcast(c, v, sizeof v, r) == TRN_ERROR_INVALID_ARGUMENT);
    char want[128];
    snprintf(want, sizeof want, "rank %d passed root %d, rank %d passed root %d", r, r,
             r == 0 ? 1 : 0, r == 0 ? 1 : 0);
    RANK_CHECK(strstr(trn_last_error(), want) != NULL);
    STILL_IN_STEP();
    // A gather (exchange with a root) whose ranks disagree on the root.
    trn_comm_agree ag = {.root = r == 1 ? 1 : 0, .dtype = "float32"};
    trn_comm_agree_next(c, &ag);
    RANK_CHECK(trn_comm_exchange(c, "gather", v, sizeof v, NULL, NULL, r == ag.root ? dp : NULL,
                                 dlen) == TRN_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(strstr(trn_last_error(), "different roots") != NULL);
    STILL_IN_STEP();
    // Same bytes, different dtypes.
    trn_comm_agree dt = {.root = -1};
    snprintf(dt.dtype, sizeof dt.dtype, "%s", r == 1 ? "int32" : "float32");
    trn_comm_agree_next(c, &dt);
    RANK_CHECK(trn_comm_exchange(c, "all_gather", v, sizeof v, NULL, NULL, dp, dlen) ==
               TRN_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(strstr(trn_last_error(), "dtypes differ") != NULL);
    RANK_CHECK(strstr(trn_last_error(), "int32") != NULL);
    STILL_IN_STEP();
    // A coalesced call of 2 tensors on rank 0, 3 elsewhere: caught at the
    // first, so nobody's third pairs with anything.
    trn_comm_agree co = {.root = -1, .part = 0, .parts = r == 0 ? 2 : 3};
    trn_comm_agree_next(c, &co);
    int32_t x = 1, y = 0;
    RANK_CHECK(trn_comm_allreduce(c, &x, &y, 1, TRN_DTYPE_I32, TRN_REDOP_SUM, NULL) ==
               TRN_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(strstr(trn_last_error(), "coalesced calls differ") != NULL);
    STILL_IN_STEP();
    // PREMUL_SUM factors that differ.
    trn_reduce_post pre = {false, true, r == 0 ? 0.5 : 2.0};
    float f = 1.0f, g = 0.0f;
    RANK_CHECK(trn_comm_allreduce(c, &f, &g, 1, TRN_DTYPE_F32, TRN_REDOP_SUM, &pre) ==
               TRN_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(strstr(trn_last_error(), "PREMUL_SUM factors") != NULL);
    STILL_IN_STEP();
    // Reduce ops that differ are named.
    RANK_CHECK(trn_comm_allreduce(c, &x, &y, 1, TRN_DTYPE_I32,
                                  r == 0 ? TRN_REDOP_MIN : TRN_REDOP_MAX,
                                  NULL) == TRN_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(strstr(trn_last_error(), "MIN") != NULL && strstr(trn_last_error(), "MAX") != NULL);
    STILL_IN_STEP();
    // A local argument error on rank 1 only (a root out of range, an op the
    // dtype lacks): every rank fails that call, naming rank 1 and why.
    RANK_CHECK(trn_comm_broadcast(c, v, sizeof v, r == 1 ? n : 0) == TRN_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(strstr(trn_last_error(), "rank 1 could not make the call") != NULL);
    RANK_CHECK(strstr(trn_last_error(), "not a rank") != NULL);
    STILL_IN_STEP();
    RANK_CHECK(trn_comm_allreduce(c, &f, &g, 1, TRN_DTYPE_F32,
                                  r == 1 ? TRN_REDOP_BAND : TRN_REDOP_SUM,
                                  NULL) == TRN_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(strstr(trn_last_error(), "rank 1 could not make the call") != NULL);
    STILL_IN_STEP();
    // The caller's own check (the c10d layer's) failed on rank 0.
    trn_status st = r == 0 ? trn_comm_fail_call(c, "all_gather", "bad output")
                           : trn_comm_exchange(c, "all_gather", v, sizeof v, NULL, NULL, dp, dlen);
    RANK_CHECK(st == TRN_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(strstr(trn_last_error(), "rank 0 could not make the call: "
                                        "bad output") != NULL);
    STILL_IN_STEP();
#undef STILL_IN_STEP
    return fails;
}

// After rank 0 aborts the group, no send or receive succeeds anywhere: not
// even a send that fits in the pipe (it used to "complete" into it).
static int ranks_p2p_aborted(trn_comm *c) {
    int fails = 0, r = trn_comm_rank(c);
    RANK_CHECK(trn_comm_barrier(c) == TRN_SUCCESS);
    if (r == 0) trn_comm_abort(c, "test");
    RANK_CHECK(trn_comm_barrier(c) == TRN_ERROR_SYSTEM);
    int32_t v = r;
    trn_p2p_req s = {.is_send = true, .peer = 1 - r, .tag = 1, .buf = &v, .nbytes = sizeof v};
    bool done = false;
    RANK_CHECK(trn_comm_p2p_progress(c, &s, &done) == TRN_ERROR_SYSTEM);
    RANK_CHECK(!done && strstr(trn_last_error(), "aborted") != NULL);
    trn_p2p_req q = {.is_send = false, .peer = 1 - r, .tag = 1, .buf = &v, .nbytes = sizeof v};
    RANK_CHECK(trn_comm_p2p_progress(c, &q, &done) == TRN_ERROR_SYSTEM);
    return fails;
}

// Rank 1 never joins: rank 0 times out naming it.
static int ranks_stall(trn_comm *c) {
    int fails = 0;
    if (trn_comm_rank(c) == 1) {
        usleep(600 * 1000);
        return 0;
    }
    RANK_CHECK(trn_comm_barrier(c) == TRN_ERROR_SYSTEM);
    RANK_CHECK(strstr(trn_last_error(), "timed out") != NULL);
    RANK_CHECK(strstr(trn_last_error(), "rank(s) 1") != NULL);
    return fails;
}

// Rank 1 exits: rank 0 sees it long before the (long) timeout.
static int ranks_dead(trn_comm *c) {
    int fails = 0;
    if (trn_comm_rank(c) == 1) _exit(0);
    RANK_CHECK(trn_comm_barrier(c) == TRN_ERROR_SYSTEM);
    RANK_CHECK(strstr(trn_last_error(), "exited") != NULL);
    // The group is aborted from now on.
    RANK_CHECK(trn_comm_barrier(c) == TRN_ERROR_SYSTEM);
    RANK_CHECK(strstr(trn_last_error(), "aborted") != NULL);
    return fails;
}

// Attach returns only once every rank attached (the rendezvous that handed
// out the descriptor is then over everywhere): rank 1 writes a byte, pauses,
// then attaches; rank 0 must find the byte the moment its attach returns.
static int attach_waits_for_every_rank(void) {
    int fd = -1, p[2];
    if (trn_comm_region_create(2, &fd) != TRN_SUCCESS || pipe(p) != 0) return 1;
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] != 0) continue;
        if (r == 1) {
            usleep(200 * 1000);
            if (write(p[1], "x", 1) != 1) _exit(101);
        }
        trn_comm *c = NULL;
        if (trn_comm_attach(fd, r, 2, 60000, &c) != TRN_SUCCESS) _exit(100);
        char b = 0;
        int bad = r == 0 && (fcntl(p[0], F_SETFL, O_NONBLOCK) != 0 || read(p[0], &b, 1) != 1);
        trn_comm_destroy(c);
        _exit(bad);
    }
    close(fd);
    int failed = 0;
    for (int r = 0; r < 2; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    close(p[0]);
    close(p[1]);
    return failed;
}

int main(void) {
    CHECK_INT(attach_waits_for_every_rank(), 0);
    for (g_single_copy = SC_DEFAULT; g_single_copy <= SC_MIXED; g_single_copy++) {
        CHECK_INT(run_ranks(3, 60000, ranks_allreduce), 0);
        CHECK_INT(run_ranks(2, 60000, ranks_allreduce), 0);
        CHECK_INT(run_ranks(3, 60000, ranks_reduce_scatter), 0);
        CHECK_INT(run_ranks(3, 60000, ranks_exchange), 0);
    }
    g_single_copy = SC_DEFAULT;
    CHECK_INT(run_ranks(4, 60000, ranks_p2p), 0);
    CHECK_INT(run_ranks(3, 60000, ranks_agree), 0);
    CHECK_INT(run_ranks(2, 60000, ranks_agree), 0);
    CHECK_INT(run_ranks(2, 60000, ranks_p2p_aborted), 0);
    CHECK_INT(run_ranks(2, 200, ranks_stall), 0);
    CHECK_INT(run_ranks(2, 60000, ranks_dead), 0);
    int fd = -1;
    trn_comm *c = NULL;
    CHECK(trn_comm_region_create(0, &fd) == TRN_ERROR_INVALID_ARGUMENT);
    CHECK(trn_comm_region_create(2, &fd) == TRN_SUCCESS);
    CHECK(trn_comm_attach(fd, 0, 3, 0, &c) == TRN_ERROR_INVALID_ARGUMENT);
    // A rank that never comes: the attach times out naming it.
    CHECK(trn_comm_attach(fd, 0, 2, 200, &c) == TRN_ERROR_SYSTEM);
    CHECK(strstr(trn_last_error(), "waiting for rank(s) 1") != NULL);
    CHECK(c == NULL);
    close(fd);
    return TEST_REPORT();
}
