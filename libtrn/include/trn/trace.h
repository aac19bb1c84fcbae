// trn/trace.h - device activity records for profilers: one record per
// kernel, copy or collective executed while tracing is on, with its device,
// stream, start and end time, name, details and the correlation id of the
// host operation that launched it.
//
// Who labels what: the layer that knows the operation pushes a label on the
// launching thread (trn_trace_push: name like "trn::add", details such as
// input shapes, bytes, and a correlation id from the profiler); every launch
// made while the label is on top is recorded under it. libtrn itself marks
// copies (kind MEMCPY, direction in the name) and counts every launch.
// Timestamps are CLOCK_REALTIME nanoseconds (what Kineto uses).
// Cost when tracing is off: one relaxed atomic load per launch.
#ifndef TRN_TRACE_H
#define TRN_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum trn_activity_kind {
    TRN_ACTIVITY_KERNEL = 0,
    TRN_ACTIVITY_MEMCPY = 1,
    TRN_ACTIVITY_MEMSET = 2,
    TRN_ACTIVITY_COLLECTIVE = 3,
} trn_activity_kind;

#define TRN_TRACE_NAME_MAX 64
#define TRN_TRACE_DETAIL_MAX 192

typedef struct trn_activity {
    trn_activity_kind kind;
    int device;
    int64_t stream;             // trn_stream_id
    uint64_t start_ns, end_ns;  // CLOCK_REALTIME
    uint64_t correlation;       // of the launching host op; 0 if none
    uint64_t bytes;             // bytes the launch reads and writes (label's
                                // figure; copies: bytes copied)
    uint64_t seq;               // launch order within the process
    char name[TRN_TRACE_NAME_MAX];
    char detail[TRN_TRACE_DETAIL_MAX];
} trn_activity;

// Starts recording (discarding older records); at most `capacity` records
// are kept (0: 1<<20), later ones are counted as dropped.
void trn_trace_start(size_t capacity);
void trn_trace_stop(void);
bool trn_trace_active(void);
// Moves up to max records (oldest first) into out; returns how many.
size_t trn_trace_drain(trn_activity *out, size_t max);
size_t trn_trace_pending(void);
uint64_t trn_trace_dropped(void);

// The profiler's correlation id of the host op running on the calling thread
// (0: none); launches record it unless their label carries its own.
void trn_trace_set_correlation(uint64_t correlation);
uint64_t trn_trace_get_correlation(void);

// Labels the calling thread's next launches (a stack, up to 8 deep; deeper
// pushes are ignored but must still be popped). Strings are copied.
void trn_trace_push(trn_activity_kind kind, const char *name, const char *detail,
                    uint64_t correlation, uint64_t bytes);
void trn_trace_pop(void);
// Records an activity that did not go through a stream launch (collectives
// run by another engine, for example). Ignored when tracing is off.
void trn_trace_record(const trn_activity *activity);
uint64_t trn_trace_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif
