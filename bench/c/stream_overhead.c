// stream_overhead.c - what a launch costs in each execution mode: the
// round trip of one empty task (launch + synchronize), the throughput of
// 100k back-to-back empty launches followed by one synchronize, and a 4-byte
// copy launch + synchronize, and the launcher's own time for one launch (256
// argument bytes, as an op's descriptor) when launches come 5 us apart (the
// worker spins between them) or 200 us apart (it may sleep): what a decode
// token's Python thread pays per op. The mode is fixed when the runtime initialises,
// so each mode runs in its own forked child with its environment set first.
//
//   trn_bench_stream [repeats]      (prints microseconds per operation)
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trn/trn.h"

#define BURST 100000

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static trn_status empty_task(void *args) {
    (void)args;
    return TRN_SUCCESS;
}

static int check(trn_status st, const char *what) {
    if (st == TRN_SUCCESS) return 0;
    fprintf(stderr, "%s: %s: %s\n", what, trn_status_name(st), trn_last_error());
    return 1;
}

// The launcher's time in trn_stream_launch, us per launch, with `gap_us` of
// busy host work after each (the wait is not counted).
static double paced_launch(trn_stream *s, double gap_us, int n) {
    static unsigned char args[256];
    double spent = 0.0;
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        trn_stream_launch(s, empty_task, args, sizeof args);
        double t1 = now_us();
        spent += t1 - t0;
        while (now_us() - t1 < gap_us) {}
    }
    trn_stream_synchronize(s);
    return spent / n;
}

// Best (lowest) of `repeats` runs of each measurement: the minimum is the
// least noisy estimate of the mechanism's own cost on a shared machine.
static int run_mode(const char *label, int repeats) {
    trn_stream *s;
    if (check(trn_stream_get_default(0, &s), "stream")) return 1;
    float src = 1.0f, dst = 0.0f;
    int64_t one = 1;
    trn_copy_desc copy = {1, &one, &dst, &one, TRN_DTYPE_F32, &src, &one, TRN_DTYPE_F32};
    const int rounds = 20000;
    double best_rt = 1e30, best_burst = 1e30, best_copy = 1e30, best_p5 = 1e30, best_p200 = 1e30;
    // Warm up (starts the worker thread, faults in the queue).
    for (int i = 0; i < 1000; i++)
        if (check(trn_stream_launch(s, empty_task, NULL, 0), "launch")) return 1;
    if (check(trn_stream_synchronize(s), "sync")) return 1;

    for (int r = 0; r < repeats; r++) {
        double t0 = now_us();
        for (int i = 0; i < rounds; i++) {
            trn_stream_launch(s, empty_task, NULL, 0);
            trn_stream_synchronize(s);
        }
        double rt = (now_us() - t0) / rounds;

        t0 = now_us();
        for (int i = 0; i < BURST; i++) trn_stream_launch(s, empty_task, NULL, 0);
        if (check(trn_stream_synchronize(s), "sync")) return 1;
        double burst = (now_us() - t0) / BURST;

        t0 = now_us();
        for (int i = 0; i < rounds; i++) {
            trn_copy_launch(s, &copy);
            trn_stream_synchronize(s);
        }
        double cp = (now_us() - t0) / rounds;
        if (rt < best_rt) best_rt = rt;
        if (burst < best_burst) best_burst = burst;
        if (cp < best_copy) best_copy = cp;
        double p5 = paced_launch(s, 5.0, rounds);
        double p200 = paced_launch(s, 200.0, rounds / 20);
        if (p5 < best_p5) best_p5 = p5;
        if (p200 < best_p200) best_p200 = p200;
    }
    if (dst != 1.0f) {
        fprintf(stderr, "copy did not run\n");
        return 1;
    }
    printf("%-16s %14.3f %18.3f %16.3f %12.3f %12.3f\n", label, best_rt, best_burst, best_copy,
           best_p5, best_p200);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 5;
    if (repeats < 1) repeats = 1;
    static const struct {
        const char *label, *async;
    } modes[] = {{"inline", "0"}, {"worker thread", "1"}};
    printf("libtrn stream overhead, us/op (best of %d)\n", repeats);
    printf("%-16s %14s %18s %16s %12s %12s\n", "mode", "launch+sync", "100k launches+sync",
           "4B copy+sync", "launch@5us", "launch@200us");
    fflush(stdout);
    int failed = 0;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            setenv("TORCH_NEURONX_ENABLE_ASYNC_NRT", modes[m].async, 1);
            unsetenv("NEURON_LAUNCH_BLOCKING");
            _exit(run_mode(modes[m].label, repeats));
        }
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed = 1;
    }
    return failed;
}
