// lone_op.c - the runtime's share of one lone eager op on a decode-sized
// tensor: allocate the output (768 floats), launch a task that multiplies two
// inputs into it on the current stream, free the previous op's output, as a
// Python loop of `a * b` does. No PyTorch, so the runtime's own cost shows
// without the interpreter's noise. Prints the best of `repeats` runs of
// 200k ops, in ns per op (monotonic clock).
//
//   cc -O3 -march=native -Ilibtrn/include bench/c/lone_op.c -Lbuild/cmake/libtrn -ltrn -o /tmp/lone_op
//   LD_LIBRARY_PATH=build/cmake/libtrn /tmp/lone_op [repeats]
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "trn/trn.h"

#define N 768
#define OPS 200000

typedef struct mul_args {
    const float *a, *b;
    float *c;
} mul_args;

static trn_status mul_task(void *p) {
    const mul_args *m = p;
    for (int i = 0; i < N; i++) m->c[i] = m->a[i] * m->b[i];
    return TRN_SUCCESS;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int check(trn_status st, const char *what) {
    if (st == TRN_SUCCESS) return 0;
    fprintf(stderr, "%s: %s: %s\n", what, trn_status_name(st), trn_last_error());
    return 1;
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 7;
    trn_stream *s;
    if (check(trn_stream_get_default(0, &s), "stream")) return 1;
    void *a, *b, *prev = NULL;
    if (check(trn_mem_alloc(0, N * sizeof(float), s, &a), "alloc") ||
        check(trn_mem_alloc(0, N * sizeof(float), s, &b), "alloc"))
        return 1;
    double best = 1e30;
    for (int r = 0; r < repeats + 1; r++) {  // the first is the warm-up
        double t0 = now_ns();
        for (int i = 0; i < OPS; i++) {
            void *c;
            if (check(trn_mem_alloc(0, N * sizeof(float), NULL, &c), "alloc")) return 1;
            mul_args m = {a, b, c};
            if (check(trn_stream_launch(s, mul_task, &m, sizeof m), "launch")) return 1;
            if (check(trn_mem_free(prev), "free")) return 1;
            prev = c;
        }
        double t = (now_ns() - t0) / OPS;
        if (r > 0 && t < best) best = t;
    }
    if (check(trn_stream_synchronize(s), "sync")) return 1;
    // The task alone, called directly into one output: what the runtime adds
    // is the difference.
    double task = 1e30;
    for (int r = 0; r < repeats + 1; r++) {
        double t0 = now_ns();
        for (int i = 0; i < OPS; i++) {
            mul_args m = {a, b, prev};
            (void)mul_task(&m);
            __asm__ volatile("" ::: "memory");
        }
        double t = (now_ns() - t0) / OPS;
        if (r > 0 && t < task) task = t;
    }
    printf("alloc + launch (768-float mul) + free: %.1f ns per op, the task alone %.1f "
           "(best of %d)\n",
           best, task, repeats);
    return 0;
}
