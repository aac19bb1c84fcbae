// trn/stream_hook.h - held work above libtrn (Adaptive Eager Execution,
// torch_neuronx/csrc/aten/eager_group_record.cpp): a layer may hold ops recorded
// for a stream that it has not launched yet. It marks the stream pending;
// the next launch, synchronize, query or event wait on that stream (or a
// device synchronize) first clears the mark and calls the hook, which must
// launch the held work on the stream before anything else runs there.
//
// Owner: src/runtime/stream.c. A header of its own (not trn/stream.h) so the
// few users include it.
#ifndef TRN_STREAM_HOOK_H
#define TRN_STREAM_HOOK_H

#include <stddef.h>

#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// What reached the marked stream: another task, or a wait for its work.
enum { TRN_PENDING_LAUNCH = 0, TRN_PENDING_SYNC = 1 };

// A failing hook writes its message into `msg`; the launch then fails, or a
// synchronize reports it as the stream's deferred error.
typedef trn_status (*trn_pending_hook)(trn_stream *stream, int why, char *msg, size_t msg_size);
void trn_stream_set_pending_hook(trn_pending_hook hook);
void trn_stream_mark_pending(trn_stream *stream);

#ifdef __cplusplus
}
#endif
#endif
