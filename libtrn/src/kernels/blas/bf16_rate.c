// bf16_rate.c - owns the measurement behind the default bfloat16 kernel
// choice (dnnl_common.c): whether this core's vdpbf16ps gives more
// multiply-adds per second than its float32 FMA.
//
// Why it is measured, not read from the CPU's name: an AVX512-BF16
// instruction does 32 multiply-adds where a float32 FMA does 16, but cores
// issue them at different rates. AMD Zen 4 issues one of each a cycle (so
// bfloat16 kernels run at twice the rate), an Intel Xeon without AMX (the
// 2026-12 development host: avx512_bf16 and two 512-bit FMA ports) issues
// two FMAs a cycle and one vdpbf16ps: the same multiply-adds per cycle,
// and oneDNN 2.6's bfloat16 kernels reached 84 G multiply-adds/s there
// against 139-155 for its float32 ones. Throughput of independent chains,
// minimum over interleaved trials, is a property of the core that
// preemption can only make slower for one trial, never reverse.
#include "dnnl_common.h"

#include <time.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define CHAINS 12    // independent accumulators: covers latency x ports on both
#define ROUNDS 2048  // instructions per chain per trial: ~10-50 us
#define TRIALS 7

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

// The accumulators go through memory at the end so no chain is dead code;
// the operands stay small normal numbers (no denormal slow paths).
__attribute__((target("avx512f,avx512bf16"), noinline)) static double dot_trial(float *sink) {
    __m512 acc[CHAINS];
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3A80);  // 2^-10 as bfloat16
    const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3A80);
    const double t0 = now_ns();
    for (int r = 0; r < ROUNDS; r++)
        for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    const double t = now_ns() - t0;
    for (int c = 1; c < CHAINS; c++) acc[0] = _mm512_add_ps(acc[0], acc[c]);
    _mm512_storeu_ps(sink, acc[0]);
    return t;
}

__attribute__((target("avx512f"), noinline)) static double fma_trial(float *sink) {
    __m512 acc[CHAINS];
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
    const double t0 = now_ns();
    for (int r = 0; r < ROUNDS; r++)
        for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    const double t = now_ns() - t0;
    for (int c = 1; c < CHAINS; c++) acc[0] = _mm512_add_ps(acc[0], acc[c]);
    _mm512_storeu_ps(sink, acc[0]);
    return t;
}

double trn__bf16_dot_rate_ratio(void) {
    float sink[16];
    double dot = 0, fma = 0;
    (void)dot_trial(sink), (void)fma_trial(sink);  // warm the units and the clock
    for (int t = 0; t < TRIALS; t++) {
        const double d = dot_trial(sink), f = fma_trial(sink);
        if (t == 0 || d < dot) dot = d;
        if (t == 0 || f < fma) fma = f;
    }
    if (dot <= 0 || fma <= 0) return 0;
    // Multiply-adds per second: 32 an instruction against 16.
    return (32.0 / dot) / (16.0 / fma);
}
#else
double trn__bf16_dot_rate_ratio(void) { return 0; }
#endif
