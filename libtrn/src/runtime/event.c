// event.c - owns events: markers recorded into a stream that complete when
// the stream reaches them, carry a CLOCK_MONOTONIC timestamp for elapsed-time
// queries, and let one stream wait for another. Each record bumps a
// generation number; the record task publishes the generation it completes,
// so re-recording never confuses an old capture with the new one. Queued
// tasks hold a reference, which makes destroying a pending event safe.
#include <stdlib.h>

#include "../internal.h"

struct trn_event {
    atomic_int refs;
    unsigned flags;
    pthread_mutex_t mu;
    pthread_cond_t cv;           // signalled when done_gen advances
    trn_stream *_Atomic stream;  // stream of the last record, or NULL
    uint64_t recorded_gen;       // generation of the last record (0: never)
    uint64_t done_gen;           // highest generation whose record task ran
    uint64_t time_ns;            // timestamp of done_gen
};

typedef struct event_task_args {
    trn_event *event;
    uint64_t gen;
} event_task_args;

static void event_release(trn_event *ev) {
    if (atomic_fetch_sub(&ev->refs, 1) != 1) return;
    pthread_cond_destroy(&ev->cv);
    pthread_mutex_destroy(&ev->mu);
    free(ev);
}

static trn_status null_event(const char *what) {
    return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: event is NULL", what);
}

trn_status trn_event_create(unsigned flags, trn_event **event) {
    if (event == NULL) return null_event("trn_event_create");
    *event = NULL;
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    trn_event *ev = calloc(1, sizeof *ev);
    if (ev == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_event_create: host out of memory");
    if (pthread_mutex_init(&ev->mu, NULL) != 0) {
        free(ev);
        return trn__set_error(TRN_ERROR_SYSTEM, "trn_event_create: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&ev->cv, NULL) != 0) {
        pthread_mutex_destroy(&ev->mu);
        free(ev);
        return trn__set_error(TRN_ERROR_SYSTEM, "trn_event_create: pthread_cond_init failed");
    }
    atomic_init(&ev->refs, 1);
    ev->flags = flags;
    *event = ev;
    return TRN_SUCCESS;
}

void trn_event_destroy(trn_event *event) {
    if (event != NULL) event_release(event);
}

// Raises done_gen to `gen` (records on different streams may finish out of
// order) and wakes waiters.
static void event_complete(trn_event *ev, uint64_t gen, uint64_t time_ns) {
    trn__lock(&ev->mu);
    if (gen > ev->done_gen) {
        ev->done_gen = gen;
        ev->time_ns = time_ns;
    }
    trn__broadcast(&ev->cv);
    trn__unlock(&ev->mu);
}

static trn_status record_task(void *args) {
    const event_task_args *a = args;
    event_complete(a->event, a->gen, trn__now_ns());
    event_release(a->event);
    return TRN_SUCCESS;
}

trn_status trn_event_record(trn_event *event, trn_stream *stream) {
    if (event == NULL) return null_event("trn_event_record");
    if (stream == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_event_record: stream is NULL");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    trn__lock(&event->mu);
    event_task_args a = {event, ++event->recorded_gen};
    atomic_store(&event->stream, stream);
    trn__unlock(&event->mu);
    atomic_fetch_add(&event->refs, 1);
    st = trn_stream_launch(stream, record_task, &a, sizeof a);
    if (st != TRN_SUCCESS) {
        // Record tasks never fail, so an error means the task was never
        // queued: complete the capture now so that waiters do not hang.
        event_complete(event, a.gen, trn__now_ns());
        event_release(event);
    }
    return st;
}

trn_status trn_event_query(trn_event *event, bool *done) {
    if (event == NULL || done == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_event_query: event or done is NULL");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    trn__lock(&event->mu);
    *done = event->done_gen >= event->recorded_gen;
    trn__unlock(&event->mu);
    return TRN_SUCCESS;
}

// Blocks until the record of generation `gen` has run.
static void event_wait_gen(trn_event *ev, uint64_t gen) {
    trn__lock(&ev->mu);
    while (ev->done_gen < gen) trn__wait(&ev->cv, &ev->mu);
    trn__unlock(&ev->mu);
}

trn_status trn_event_synchronize(trn_event *event) {
    if (event == NULL) return null_event("trn_event_synchronize");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    trn__lock(&event->mu);
    uint64_t gen = event->recorded_gen;
    trn_stream *stream = atomic_load(&event->stream);
    trn__unlock(&event->mu);
    event_wait_gen(event, gen);
    return stream != NULL ? trn__stream_take_error(stream) : TRN_SUCCESS;
}

static trn_status wait_task(void *args) {
    const event_task_args *a = args;
    event_wait_gen(a->event, a->gen);
    event_release(a->event);
    return TRN_SUCCESS;
}

trn_status trn_stream_wait_event(trn_stream *stream, trn_event *event) {
    if (event == NULL) return null_event("trn_stream_wait_event");
    if (stream == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_stream_wait_event: stream is NULL");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    trn__lock(&event->mu);
    event_task_args a = {event, event->recorded_gen};
    bool done = event->done_gen >= a.gen;
    trn__unlock(&event->mu);
    if (done) return TRN_SUCCESS;  // nothing to wait for (or never recorded)
    atomic_fetch_add(&event->refs, 1);
    st = trn_stream_launch(stream, wait_task, &a, sizeof a);
    if (st != TRN_SUCCESS) event_release(event);
    return st;
}

trn_status trn_event_elapsed_ms(trn_event *start, trn_event *end, double *ms) {
    if (start == NULL || end == NULL || ms == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_event_elapsed_ms: NULL argument");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    if (!(start->flags & TRN_EVENT_TIMING) || !(end->flags & TRN_EVENT_TIMING))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "elapsed time needs both events created with "
                              "TRN_EVENT_TIMING (enable_timing=True)");
    trn_event *pair[2] = {start, end};
    uint64_t t[2];
    for (int i = 0; i < 2; i++) {
        trn__lock(&pair[i]->mu);
        bool recorded = pair[i]->recorded_gen != 0;
        bool done = pair[i]->done_gen >= pair[i]->recorded_gen;
        t[i] = pair[i]->time_ns;
        trn__unlock(&pair[i]->mu);
        if (!recorded)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "elapsed time: the %s event was never "
                                  "recorded",
                                  i == 0 ? "start" : "end");
        if (!done)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "elapsed time: the %s event has not "
                                  "completed yet; synchronize it first",
                                  i == 0 ? "start" : "end");
    }
    *ms = ((double)t[1] - (double)t[0]) / 1e6;
    return TRN_SUCCESS;
}

int trn_event_device(const trn_event *event) {
    if (event == NULL) return -1;
    trn_stream *stream = atomic_load(&((trn_event *)event)->stream);
    return stream != NULL ? trn_stream_device(stream) : -1;
}
