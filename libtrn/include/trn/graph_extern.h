// trn/graph_extern.h - extern kernels as nodes of a compiled graph.
//
// Owner: src/compiler/ (graph.c declares, schedule.c plans, run.c calls).
// An extern call is a step of the compiled program that calls an
// already-compiled kernel (an NKI program, a native libtrn kernel) on the
// run's stream, between the generated kernels, with no return to the
// caller: unlike a host step (trn_graph_host_call) its arguments need not be
// caller-visible and its results are planned like any other node (a
// workspace piece, or the caller's buffer when exported).
//
// Kept out of trn.h and trn/compiler.h: only the compile bindings and the
// NKI glue use it, and a public header every unit includes would rebuild them all.
#ifndef TRN_GRAPH_EXTERN_H
#define TRN_GRAPH_EXTERN_H

#include <stdint.h>

#include "trn/compiler.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// Called once per run at the call's position, on the thread that runs
// trn_run_continue: queues the kernel on `stream` (it must not wait for it).
// `buffers`: the address of each argument (its view's first element), then
// of each result; the array is only valid during the call.
typedef trn_status (*trn_graph_extern_fn)(void *ctx, trn_stream *stream, void *const *buffers,
                                          int n_buffers);

// Declares an extern call reading `args` (any nodes but consts and views of
// consts; each is read through its own layout, or its view's strides, which
// the kernel must have been built for). `ctx` must outlive every program
// compiled from the graph. *call: its number.
trn_status trn_graph_extern_call(trn_graph *g, int n_args, const int *args, trn_graph_extern_fn fn,
                                 void *ctx, int *call);
// A result of the latest extern call, declared right after it (no other
// node in between): the kernel writes it with `strides` (dense; NULL:
// contiguous).
trn_status trn_graph_extern_result(trn_graph *g, int call, trn_dtype dtype, int ndim,
                                   const int64_t *sizes, const int64_t *strides, int *node);
// How many extern calls a compiled program makes per run.
int trn_program_extern_count(const trn_program *p);

#ifdef __cplusplus
}
#endif
#endif
