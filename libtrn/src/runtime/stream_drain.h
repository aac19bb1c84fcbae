// stream_drain.h - waiting out queued work before code it calls is unloaded.
//
// Owner: stream.c. Used where libtrn dlclose()s generated code (compiled
// programs, flex-attention modifiers, NKI kernels): with worker threads
// (TORCH_NEURONX_ENABLE_ASYNC_NRT=1) a task queued on any stream may still
// call into that code when its owner frees it.
#ifndef TRN_RUNTIME_STREAM_DRAIN_H
#define TRN_RUNTIME_STREAM_DRAIN_H

// Returns once every task launched so far on every stream with a worker
// thread has run, without running the streams' pending hooks (callers free
// from deleters and background threads). A stream's own worker skips its
// stream (the running task is its own). Inline streams have nothing queued.
void trn__streams_drain(void);

#endif
