// trn/stream.h - streams (in-order work queues) and events.
//
// Every kernel and copy is a task launched on a stream. Tasks of one stream run
// in launch order; tasks of different streams are unordered unless an event
// orders them. Each device has a default stream (id 0) and a pool of
// TRN_STREAM_POOL_SIZE created streams (ids 1..N) handed out round-robin, like
// CUDA's stream pool; streams live until process exit.
//
// Execution: with TORCH_NEURONX_ENABLE_ASYNC_NRT=1 each stream owns a worker
// thread that drains its queue (spinning briefly between tasks, then sleeping);
// with 0 (the default) a launch runs the task on the calling thread before
// returning. The API is asynchronous in both cases. Inline is the default
// because it measured ~10x cheaper per launch+sync on this 2-core host
// (bench/c/stream_overhead.c: ~0.1 us vs ~1 us), and kernels parallelize
// across the cores themselves; a worker would compete with them. NEURON_LAUNCH_BLOCKING=1 makes every
// launch wait for its task and return the task's own status.
//
// Errors inside a task are deferred (as in CUDA): the first failing status and
// message stick to the stream and are returned by the next synchronize on it
// (stream, event or device), which then clears them.
#ifndef TRN_STREAM_H
#define TRN_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_STREAM_POOL_SIZE 8
// Largest argument block a launch may copy into the queue.
#define TRN_TASK_MAX_ARGS 4096

typedef struct trn_stream trn_stream;
typedef struct trn_event trn_event;

// A task: runs on the stream's thread with a pointer to its private copy of
// the launch arguments. Returns TRN_SUCCESS or an error it has already
// described with the internal error setter.
typedef trn_status (*trn_task_fn)(void *args);

trn_status trn_stream_get_default(int device, trn_stream **stream);
// Next stream of the device's pool (round-robin); priority is recorded only.
trn_status trn_stream_create(int device, int priority, trn_stream **stream);
// Execution mode chosen at initialisation: true when streams run their tasks
// on worker threads (TORCH_NEURONX_ENABLE_ASYNC_NRT=1, the default), false
// when launches run them inline (=0).
bool trn_stream_async_enabled(void);

// Stream by (device, id) as PyTorch's c10::Stream stores it.
trn_status trn_stream_from_id(int device, int64_t id, trn_stream **stream);
int64_t trn_stream_id(const trn_stream *stream);
int trn_stream_device(const trn_stream *stream);

// The calling thread's current stream for the device (default stream until
// set) and setting it.
trn_status trn_stream_get_current(int device, trn_stream **stream);
trn_status trn_stream_set_current(trn_stream *stream);

// Copies args_size bytes of args into the queue and schedules fn. Blocks only
// while the queue is full (or always, under NEURON_LAUNCH_BLOCKING=1).
trn_status trn_stream_launch(trn_stream *stream, trn_task_fn fn, const void *args,
                             size_t args_size);
// Waits for every task launched so far; returns the stream's deferred error.
trn_status trn_stream_synchronize(trn_stream *stream);
// *done = true when every launched task has finished. Never blocks.
trn_status trn_stream_query(trn_stream *stream, bool *done);
// Later tasks of `stream` wait until `event` (as last recorded) completes.
trn_status trn_stream_wait_event(trn_stream *stream, trn_event *event);

// Events. TRN_EVENT_TIMING makes record take a timestamp for elapsed time.
#define TRN_EVENT_TIMING 1u
trn_status trn_event_create(unsigned flags, trn_event **event);
// Safe while a record is still queued: the event is reference-counted.
void trn_event_destroy(trn_event *event);
// Captures the stream's work launched so far; the event completes when that
// work has run. Re-recording replaces the previous capture.
trn_status trn_event_record(trn_event *event, trn_stream *stream);
// An event never recorded counts as done.
trn_status trn_event_query(trn_event *event, bool *done);
trn_status trn_event_synchronize(trn_event *event);
// Milliseconds from start to end; both must be timing events, recorded and
// completed, else TRN_ERROR_INVALID_ARGUMENT.
trn_status trn_event_elapsed_ms(trn_event *start, trn_event *end, double *ms);
// Device of the stream the event was last recorded on; -1 if never recorded.
int trn_event_device(const trn_event *event);

#ifdef __cplusplus
}
#endif
#endif
