// trn/parallel.h - splitting one kernel across the host's cores.
//
// Owner: src/runtime/parallel.c keeps a pool of worker threads (one fewer
// than the thread count; the launching thread takes a share). Workers spin
// briefly between jobs, because waking a sleeping thread costs 100-300 us in
// this VM (design/architecture.md), then sleep. The thread count is
// TORCH_NEURONX_NUM_THREADS, else the CPUs this process may run on.
#ifndef TRN_PARALLEL_H
#define TRN_PARALLEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*trn_parallel_fn)(void *ctx, int64_t begin, int64_t end);

// Calls fn on contiguous pieces of [0, n) of at least `grain` items, in
// parallel, and returns when all are done. Runs serially (one call, on the
// calling thread) when n < 2 * grain, from inside another parallel region,
// while another thread uses the pool, or in a forked child.
void trn_parallel_for(int64_t n, int64_t grain, trn_parallel_fn fn, void *ctx);
int trn_parallel_threads(void);

#ifdef __cplusplus
}
#endif
#endif
