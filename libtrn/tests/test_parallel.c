// test_parallel.c - trn_parallel_for: every index of every job is run
// exactly once, whatever the sizes and grains, over many jobs in a row
// (the pool's generations and job slots); and the launching thread's
// indices of a job are a prefix of [0, n) (it claims chunks from the
// front, workers from the back: an op's halves stay on the cores that
// wrote them in the op before). Set TORCH_NEURONX_NUM_THREADS to run it
// with more threads (the CPU count otherwise).
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "test.h"
#include "trn/parallel.h"

enum { MAX_N = 4096 };

typedef struct job_ctx {
    pthread_t launcher;
    _Atomic int runs[MAX_N];
    _Atomic char by_launcher[MAX_N];
} job_ctx;

static void mark(void *ctx, int64_t begin, int64_t end) {
    job_ctx *j = ctx;
    const char mine = pthread_equal(pthread_self(), j->launcher) ? 1 : 0;
    for (int64_t i = begin; i < end; i++) {
        atomic_fetch_add(&j->runs[i], 1);
        atomic_store(&j->by_launcher[i], mine);
    }
}

static void test_every_index_once_and_launcher_prefix(void) {
    static job_ctx j;
    static const int64_t sizes[] = {1, 2, 7, 64, 100, 257, 1000, 4096};
    static const int64_t grains[] = {1, 3, 16, 100};
    int bad_runs = 0, bad_prefix = 0;
    for (int rep = 0; rep < 200; rep++)
        for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
            for (size_t b = 0; b < sizeof grains / sizeof *grains; b++) {
                const int64_t n = sizes[a];
                j.launcher = pthread_self();
                for (int64_t i = 0; i < n; i++) {
                    atomic_store(&j.runs[i], 0);
                    atomic_store(&j.by_launcher[i], 0);
                }
                trn_parallel_for(n, grains[b], mark, &j);
                int64_t i = 0;
                for (int64_t k = 0; k < n; k++) bad_runs += atomic_load(&j.runs[k]) != 1;
                while (i < n && atomic_load(&j.by_launcher[i])) i++;
                for (; i < n; i++) bad_prefix += atomic_load(&j.by_launcher[i]) != 0;
            }
    CHECK_INT(bad_runs, 0);
    CHECK_INT(bad_prefix, 0);
}

int main(void) {
    printf("threads %d\n", trn_parallel_threads());
    test_every_index_once_and_launcher_prefix();
    return TEST_REPORT();
}
