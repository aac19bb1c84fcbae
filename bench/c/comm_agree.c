// comm_agree.c - what the shared-memory collectives' cross-rank agreement
// costs (issue 26): the same broadcast / all_reduce with and without the
// agreement record the adapter attaches to each call (trn_comm_agree_next:
// root, dtype name, part / parts of a coalesced call; process_group.cpp
// agree_next). The record rides in the descriptor every collective already
// exchanges, so "with" adds no message, only the copy and the compares in
// trn__comm_begin / check_agreed; "without" still compares the root and sizes
// the engine always carried. Ranks are forked processes on one region, as
// the c10d backend's are.
//
//   trn_bench_comm_agree [repeats]   (prints microseconds per call, rank 0)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trn/collectives.h"
#include "trn/trn.h"

#define LARGE ((size_t)4 << 20)

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

// One timed batch of `iters` calls; agree: attach the record first.
static double batch(trn_comm *c, int allreduce, float *buf, float *out, size_t nbytes, int agree,
                    int iters) {
    const trn_comm_agree a = {
        .root = allreduce ? -1 : 0, .dtype = "float32", .part = 0, .parts = 1};
    if (trn_comm_barrier(c) != TRN_SUCCESS) return -1;
    const double t0 = now_us();
    for (int i = 0; i < iters; i++) {
        if (agree) trn_comm_agree_next(c, &a);
        const trn_status st = allreduce ? trn_comm_allreduce(c, buf, out, nbytes / sizeof(float),
                                                             TRN_DTYPE_F32, TRN_REDOP_SUM, NULL)
                                        : trn_comm_broadcast(c, buf, nbytes, 0);
        if (st != TRN_SUCCESS) return -1;
    }
    return (now_us() - t0) / iters;
}

static int rank_main(trn_comm *c, int repeats) {
    float *buf = calloc(LARGE / sizeof(float), sizeof(float));
    float *out = calloc(LARGE / sizeof(float), sizeof(float));
    if (buf == NULL || out == NULL) return 1;
    const size_t sizes[2] = {8, LARGE};
    const char *ops[2] = {"broadcast", "all_reduce"};
    for (int op = 0; op < 2; op++) {
        for (int s = 0; s < 2; s++) {
            const int iters = sizes[s] < 4096 ? 2000 : 20;
            double best[2] = {1e30, 1e30};
            batch(c, op, buf, out, sizes[s], 1, iters / 10 + 1);  // warm up
            // Alternate which goes first: the machine's load drifts.
            for (int r = 0; r < repeats; r++) {
                for (int k = 0; k < 2; k++) {
                    const int agree = (r + k) % 2;
                    const double t = batch(c, op, buf, out, sizes[s], agree, iters);
                    if (t < 0) {
                        fprintf(stderr, "rank %d: %s: %s\n", trn_comm_rank(c), ops[op],
                                trn_last_error());
                        return 1;
                    }
                    if (t < best[agree]) best[agree] = t;
                }
            }
            if (trn_comm_rank(c) == 0)
                printf("%d ranks %-10s %8zu B: with agreement %9.2f us, without %9.2f us, "
                       "with/without %.3f\n",
                       trn_comm_size(c), ops[op], sizes[s], best[1], best[0], best[1] / best[0]);
        }
    }
    fflush(stdout);
    free(buf);
    free(out);
    return 0;
}

static int run(int size, int repeats) {
    int fd = -1;
    if (trn_comm_region_create(size, &fd) != TRN_SUCCESS) {
        fprintf(stderr, "region: %s\n", trn_last_error());
        return 1;
    }
    pid_t pids[8];
    for (int r = 0; r < size; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            trn_comm *c = NULL;
            if (trn_comm_attach(fd, r, size, 120000, &c) != TRN_SUCCESS) _exit(100);
            const int bad = rank_main(c, repeats);
            trn_comm_destroy(c);
            _exit(bad);
        }
    }
    close(fd);
    int bad = 0;
    for (int r = 0; r < size; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return bad;
}

int main(int argc, char **argv) {
    const int repeats = argc > 1 ? atoi(argv[1]) : 5;
    int bad = 0;
    for (int size = 2; size <= 4; size += 2) bad += run(size, repeats > 0 ? repeats : 1);
    return bad ? 1 : 0;
}
