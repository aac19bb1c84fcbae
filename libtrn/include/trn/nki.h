// trn/nki.h - NKI kernels compiled to C: the tile-instruction program that
// the Python `nki` package traces is checked against the NeuronCore's rules,
// rendered to one C translation unit, built by the graph compiler's jit and
// disk cache, and run with one kernel instance (SPMD program) per work item
// on the device's threads.
//
// Owner: src/nki/ (parse.c reads the program text, check.c enforces the
// hardware rules, render*.c writes C, program.c compiles and runs).
// The program text format is documented in src/nki/nki_impl.h; its
// producer is nki/_ir.py. Every check failure names the kernel, the
// instruction and its source line.
#ifndef TRN_NKI_H
#define TRN_NKI_H

#include <stddef.h>
#include <stdint.h>

#include "trn/compiler.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_nki_program trn_nki_program;

// Parses, checks, renders and compiles (or loads from opts->cache_dir) the
// program text `ir`. A kernel that breaks a hardware rule fails with
// TRN_ERROR_INVALID_ARGUMENT and a message naming kernel, instruction, line.
trn_status trn_nki_compile(const char *ir, const trn_compile_options *opts,
                           trn_nki_program **program);
void trn_nki_program_free(trn_nki_program *p);
// Number of HBM tensors a run binds: the kernel's arguments, then its
// outputs, in the order of the program text.
int trn_nki_program_arg_count(const trn_nki_program *p);
// 1 when run slot `arg` is an output the kernel writes entirely and never
// reads: its poison fill can be skipped (nothing could observe it).
int trn_nki_program_output_covered(const trn_nki_program *p, int arg);
int trn_nki_program_from_cache(const trn_nki_program *p);
double trn_nki_program_compile_seconds(const trn_nki_program *p);
const char *trn_nki_program_source(const trn_nki_program *p);
const char *trn_nki_program_cache_key(const trn_nki_program *p);
// Runs every instance of the grid now, on the calling thread and the
// device's worker threads; args: one base address per HBM tensor.
trn_status trn_nki_run(const trn_nki_program *p, void *const *args);
// Queues the same run on `stream` (args are copied; the program must stay
// alive until the stream has run it).
trn_status trn_nki_launch(const trn_nki_program *p, trn_stream *stream, void *const *args);

#ifdef __cplusplus
}
#endif
#endif
