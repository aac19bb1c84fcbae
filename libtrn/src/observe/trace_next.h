// observe/trace_next.h - the name a launcher gave its next launch
// (trn__trace_mark_next), set aside while held work (trn/stream_hook.h)
// launches first, so the held kernels are not recorded under it.
// Owner: observe/trace.c; used by runtime/stream.c.
#ifndef TRN_OBSERVE_TRACE_NEXT_H
#define TRN_OBSERVE_TRACE_NEXT_H

#include <stdint.h>

#include "trn/trace.h"

typedef struct trn__trace_next {
    const char *name;
    trn_activity_kind kind;
    uint64_t bytes;
} trn__trace_next;

// Moves the calling thread's mark into *saved (the mark is cleared).
void trn__trace_stash_next(trn__trace_next *saved);
void trn__trace_restore_next(const trn__trace_next *saved);

#endif
