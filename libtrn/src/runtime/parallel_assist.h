// parallel_assist.h - a waiting thread lends its core to the worker pool.
//
// Owner: parallel.c. Used by stream.c: a thread that synchronises with a
// stream's worker thread (asynchronous mode) runs chunks of the kernels that
// worker launches instead of idling, so the pool needs one dedicated worker
// fewer and the application's thread, while it runs Python, does not compete
// with one.
#ifndef TRN_RUNTIME_PARALLEL_ASSIST_H
#define TRN_RUNTIME_PARALLEL_ASSIST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

// Runs chunks of the pool's jobs until *counter >= target. Before it sleeps it
// lowers *wake_at to `target`; whoever advances *counter calls
// trn__parallel_assist_reached. False, without waiting, in a forked child
// (its pool's wake-up state is the parent's).
bool trn__parallel_assist(const atomic_uint_fast64_t *counter, uint64_t target,
                          atomic_uint_fast64_t *wake_at);
// Called after *counter became `value`: wakes the assisting threads if one
// waits for no more than `value`.
void trn__parallel_assist_reached(atomic_uint_fast64_t *wake_at, uint64_t value);

#endif
