// trace.c - owns the activity buffer, the per-thread launch labels and the
// traced-task wrapper that stream.c runs in place of a task while tracing is
// on (see trn/trace.h). The buffer is a plain array behind a mutex: records
// arrive at launch rate (microseconds apart), far below where a lock-free
// ring would pay off.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../internal.h"
#include "trace_next.h"
#include "trn/trace.h"

#define LABEL_DEPTH 8

typedef struct label {
    trn_activity_kind kind;
    uint64_t correlation, bytes;
    char name[TRN_TRACE_NAME_MAX];
    char detail[TRN_TRACE_DETAIL_MAX];
} label;

static atomic_bool g_active;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static trn_activity *g_buf;
static size_t g_n, g_cap, g_limit;
static uint64_t g_dropped;
static atomic_uint_fast64_t g_seq;

static _Thread_local label tl_labels[LABEL_DEPTH];
static _Thread_local int tl_depth;
static _Thread_local uint64_t tl_correlation;

void trn_trace_set_correlation(uint64_t correlation) { tl_correlation = correlation; }

uint64_t trn_trace_get_correlation(void) { return tl_correlation; }

uint64_t trn_trace_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void trn_trace_start(size_t capacity) {
    trn__lock(&g_mu);
    g_n = 0;
    g_dropped = 0;
    g_limit = capacity != 0 ? capacity : (size_t)1 << 20;
    trn__unlock(&g_mu);
    atomic_store(&g_active, true);
}

void trn_trace_stop(void) { atomic_store(&g_active, false); }

bool trn_trace_active(void) { return atomic_load_explicit(&g_active, memory_order_relaxed); }

void trn_trace_record(const trn_activity *a) {
    if (a == NULL || !trn_trace_active()) return;
    trn__lock(&g_mu);
    if (g_n == g_cap && g_cap < g_limit) {
        size_t cap = g_cap ? g_cap * 2 : 1024;
        if (cap > g_limit) cap = g_limit;
        trn_activity *grown = realloc(g_buf, cap * sizeof *grown);
        if (grown != NULL) {
            g_buf = grown;
            g_cap = cap;
        }
    }
    if (g_n < g_cap) {
        g_buf[g_n] = *a;
        if (g_buf[g_n].seq == 0) g_buf[g_n].seq = atomic_fetch_add(&g_seq, 1) + 1;
        g_n++;
    } else {
        g_dropped++;
    }
    trn__unlock(&g_mu);
}

size_t trn_trace_drain(trn_activity *out, size_t max) {
    trn__lock(&g_mu);
    size_t n = g_n < max ? g_n : max;
    if (out != NULL && n != 0) {
        memcpy(out, g_buf, n * sizeof *out);
        memmove(g_buf, g_buf + n, (g_n - n) * sizeof *g_buf);
        g_n -= n;
    }
    trn__unlock(&g_mu);
    return out != NULL ? n : 0;
}

size_t trn_trace_pending(void) {
    trn__lock(&g_mu);
    size_t n = g_n;
    trn__unlock(&g_mu);
    return n;
}

uint64_t trn_trace_dropped(void) {
    trn__lock(&g_mu);
    uint64_t n = g_dropped;
    trn__unlock(&g_mu);
    return n;
}

void trn_trace_push(trn_activity_kind kind, const char *name, const char *detail,
                    uint64_t correlation, uint64_t bytes) {
    int d = tl_depth++;
    if (d < 0 || d >= LABEL_DEPTH) return;
    label *l = &tl_labels[d];
    l->kind = kind;
    l->correlation = correlation;
    l->bytes = bytes;
    snprintf(l->name, sizeof l->name, "%s", name != NULL ? name : "");
    snprintf(l->detail, sizeof l->detail, "%s", detail != NULL ? detail : "");
}

void trn_trace_pop(void) {
    if (tl_depth > 0) tl_depth--;
}

void trn__trace_fill(trn_activity *a, int device, int64_t stream, trn_activity_kind kind,
                     const char *name, uint64_t bytes) {
    memset(a, 0, sizeof *a);
    a->device = device;
    a->stream = stream;
    a->kind = kind;
    a->bytes = bytes;
    a->seq = atomic_fetch_add(&g_seq, 1) + 1;
    int d = tl_depth < LABEL_DEPTH ? tl_depth : LABEL_DEPTH;
    const label *l = d > 0 ? &tl_labels[d - 1] : NULL;
    a->correlation = tl_correlation;
    if (l != NULL) {
        if (l->correlation != 0) a->correlation = l->correlation;
        if (kind == TRN_ACTIVITY_KERNEL) a->kind = l->kind;
        if (a->bytes == 0) a->bytes = l->bytes;
        snprintf(a->detail, sizeof a->detail, "%s", l->detail);
    }
    if (name != NULL)
        snprintf(a->name, sizeof a->name, "%s", name);
    else if (l != NULL && l->name[0] != '\0')
        snprintf(a->name, sizeof a->name, "%s", l->name);
    else
        snprintf(a->name, sizeof a->name, "trn::kernel");
}

// ---- the traced task -------------------------------------------------------

// What stream.c queues instead of (fn, args) while tracing: this header, then
// the original arguments at TRN__TRACE_HEADER bytes.
typedef struct traced_header {
    trn_task_fn fn;
    trn_activity activity;
} traced_header;
_Static_assert(sizeof(traced_header) <= TRN__TRACE_HEADER, "TRN__TRACE_HEADER too small");

static _Thread_local const char *tl_next_name;
static _Thread_local trn_activity_kind tl_next_kind;
static _Thread_local uint64_t tl_next_bytes;

void trn__trace_mark_next(trn_activity_kind kind, const char *name, uint64_t bytes) {
    tl_next_kind = kind;
    tl_next_name = name;
    tl_next_bytes = bytes;
}

static trn_status traced_task(void *args) {
    traced_header *h = args;
    h->activity.start_ns = trn_trace_now_ns();
    trn_status st = h->fn((char *)args + TRN__TRACE_HEADER);
    h->activity.end_ns = trn_trace_now_ns();
    trn_trace_record(&h->activity);
    return st;
}

size_t trn__trace_wrap(int device, int64_t stream, trn_task_fn fn, const void *args,
                       size_t args_size, void *out, trn_task_fn *out_fn) {
    traced_header h;
    trn__trace_fill(&h.activity, device, stream, tl_next_kind, tl_next_name, tl_next_bytes);
    tl_next_name = NULL;
    tl_next_kind = TRN_ACTIVITY_KERNEL;
    tl_next_bytes = 0;
    h.fn = fn;
    memcpy(out, &h, sizeof h);
    if (args_size != 0) memcpy((char *)out + TRN__TRACE_HEADER, args, args_size);
    *out_fn = traced_task;
    return TRN__TRACE_HEADER + args_size;
}

void trn__trace_stash_next(trn__trace_next *saved) {
    saved->name = tl_next_name;
    saved->kind = tl_next_kind;
    saved->bytes = tl_next_bytes;
    trn__trace_clear_next();
}

void trn__trace_restore_next(const trn__trace_next *saved) {
    trn__trace_mark_next(saved->kind, saved->name, saved->bytes);
}

void trn__trace_clear_next(void) {
    tl_next_name = NULL;
    tl_next_kind = TRN_ACTIVITY_KERNEL;
    tl_next_bytes = 0;
}

void trn__copy_observe(trn_stream *stream, const void *dst, const void *src, uint64_t bytes) {
    int device = trn_stream_device(stream);
    bool dst_dev = trn__mem_device_of(dst) >= 0;
    bool src_dev = trn__mem_device_of(src) >= 0;
    trn_counter which = !src_dev   ? TRN_COUNTER_BYTES_H2D
                        : !dst_dev ? TRN_COUNTER_BYTES_D2H
                                   : TRN_COUNTER_BYTES_D2D;
    trn_counter_add(TRN_COUNTER_COPIES, device, 1);
    trn_counter_add(which, device, bytes);
    if (!trn_trace_active()) return;
    const char *name = which == TRN_COUNTER_BYTES_H2D   ? "Memcpy HtoD (Host -> Device)"
                       : which == TRN_COUNTER_BYTES_D2H ? "Memcpy DtoH (Device -> Host)"
                                                        : "Memcpy DtoD (Device -> Device)";
    trn__trace_mark_next(TRN_ACTIVITY_MEMCPY, name, bytes);
}

// ---- fork (see fork.c): the buffer's lock is held across fork. ------------------
void trn__trace_fork_prepare(void) { trn__lock(&g_mu); }
void trn__trace_fork_release(void) { trn__unlock(&g_mu); }
