// compiler_test.h - what the graph compiler's C tests share: where the
// public headers are (for the generated C), compiling a graph, and running a
// program with no host steps to the end on the default stream (inline: a
// test may use only some of them).
#ifndef TRN_COMPILER_TEST_H
#define TRN_COMPILER_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trn/compiler.h"

static char include_dir[4096];

// The libtrn/include next to this header (__FILE__ is .../libtrn/tests/compiler_test.h).
static inline void find_include_dir(void) {
    snprintf(include_dir, sizeof include_dir, "%s", __FILE__);
    char *p = strstr(include_dir, "tests/compiler_test.h");
    if (p) strcpy(p, "include");
}

static inline trn_stream *stream(void) {
    trn_stream *s = NULL;
    trn_stream_get_default(0, &s);
    return s;
}

static inline trn_program *compile_named(trn_graph *g, const char *cache, const char *name) {
    // Warnings are errors here: the generated C must compile clean.
    trn_compile_options o = {include_dir, cache, NULL, name, 0, "-Wall -Wextra -Werror", 0, 0};
    trn_program *p = NULL;
    trn_status st = trn_program_compile(g, &o, &p);
    if (st != TRN_SUCCESS) fprintf(stderr, "compile: %s\n", trn_last_error());
    CHECK_INT(st, TRN_SUCCESS);
    return p;
}

// Runs the program; returns the stream's status after it (the run's error).
static inline trn_status run_status(trn_program *p, const int *nodes, void **bufs, int n) {
    void *ws = NULL;
    if (trn_program_workspace_size(p))
        ws = aligned_alloc(64, (trn_program_workspace_size(p) + 63) & ~(size_t)63);
    trn_run *r = NULL;
    CHECK_INT(trn_run_create(p, ws, &r), TRN_SUCCESS);
    for (int i = 0; i < n; i++) CHECK_INT(trn_run_set_buffer(r, nodes[i], bufs[i]), TRN_SUCCESS);
    int host = 0;
    CHECK_INT(trn_run_continue(r, stream(), &host), TRN_SUCCESS);
    CHECK_INT(host, -1);
    CHECK_INT(trn_run_finish(r, stream()), TRN_SUCCESS);
    trn_status st = trn_stream_synchronize(stream());
    free(ws);
    return st;
}

#endif
