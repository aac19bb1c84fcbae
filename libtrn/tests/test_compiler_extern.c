// test_compiler_extern.c - extern kernel calls as steps of a compiled graph
// (trn/graph_extern.h): arguments read from the workspace and through views,
// results planned in the workspace or exported, the call queued on the
// run's stream between generated kernels with no host step, and the
// builder's refusals.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler_test.h"
#include "trn/graph_extern.h"

// The "kernel": r[i] = 2 * y[i] + xv[i % 24] over 32 floats, run as a task.
typedef struct twice_task {
    const float *y, *xv;
    float *r;
} twice_task;

static trn_status twice_run(void *args) {
    const twice_task *t = args;
    for (int i = 0; i < 32; i++) t->r[i] = 2.0f * t->y[i] + t->xv[i % 24];
    return TRN_SUCCESS;
}

static int calls;

static trn_status twice_launch(void *ctx, trn_stream *s, void *const *bufs, int n) {
    CHECK_INT(n, 3);
    CHECK(ctx == &calls);
    calls++;
    twice_task t = {bufs[0], bufs[1], bufs[2]};
    return trn_stream_launch(s, twice_run, &t, sizeof t);
}

// x (4x8) -> y = exp(x) (fused alone, so forced into the workspace) ->
// r = extern(y, x[1:]) -> z = r + 1 exported.
static void test_extern_between_kernels(void) {
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int64_t xs[2] = {4, 8}, xst[2] = {8, 1}, vs[2] = {3, 8};
    int x, y, xv, call, r, one, z;
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 2, xs, xst, &x), TRN_SUCCESS);
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_EXP, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, &x, NULL, &y),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_view(g, x, 2, vs, xst, 8, &xv), TRN_SUCCESS);
    CHECK_INT(trn_graph_extern_call(g, 2, (int[]){y, xv}, twice_launch, &calls, &call),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_extern_result(g, call, TRN_DTYPE_F32, 2, xs, NULL, &r), TRN_SUCCESS);
    trn_graph_const(g, TRN_DTYPE_F32, 1.0, 1, 0, NULL, &one);
    int late;  // results come right after their call: a node in between ends them
    CHECK_INT(trn_graph_extern_result(g, call, TRN_DTYPE_F32, 2, xs, NULL, &late),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_ADD, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){r, one},
                                  (double[]){1, 0, 0, 0}, &z),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_export(g, z, NULL), TRN_SUCCESS);
    trn_program *p = compile_named(g, NULL, "extern");
    trn_graph_free(g);
    if (!p) return;
    CHECK_INT(trn_program_extern_count(p), 1);
    CHECK(trn_program_workspace_size(p) > 0);  // y and both results
    CHECK(strstr(trn_program_source(p), "extern kernel call 0") != NULL);
    float X[32], Z[32];
    for (int i = 0; i < 32; i++) X[i] = (float)(i % 7) * 0.25f - 0.5f;
    calls = 0;
    CHECK_INT(run_status(p, (int[]){x, z}, (void *[]){X, Z}, 2), TRN_SUCCESS);
    CHECK_INT(calls, 1);
    int bad = 0;
    for (int i = 0; i < 32; i++) {
        double want = 2.0 * exp((double)X[i]) + X[8 + i % 24] + 1.0;
        bad += fabs(Z[i] - want) > 1e-5 * fabs(want) + 1e-6;
    }
    CHECK_INT(bad, 0);
    trn_program_free(p);  // the graph's copy of the call goes with it
}

static void test_extern_errors(void) {
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int64_t xs[2] = {4, 8}, xst[2] = {8, 1}, bad_st[2] = {1, 1};
    int x, c, call, r;
    trn_graph_input(g, TRN_DTYPE_F32, 2, xs, xst, &x);
    trn_graph_const(g, TRN_DTYPE_F32, 1.0, 1, 2, xs, &c);
    CHECK_INT(trn_graph_extern_call(g, 1, &c, twice_launch, NULL, &call),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(trn_last_error(), "constant") != NULL);
    CHECK_INT(trn_graph_extern_call(g, 1, (int[]){99}, twice_launch, NULL, &call),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_extern_call(g, 1, &x, NULL, NULL, &call), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_extern_call(g, 1, &x, twice_launch, NULL, &call), TRN_SUCCESS);
    CHECK_INT(trn_graph_extern_result(g, call, TRN_DTYPE_F32, 2, xs, bad_st, &r),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_extern_result(g, call + 1, TRN_DTYPE_F32, 2, xs, NULL, &r),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_extern_result(g, call, TRN_DTYPE_F32, 2, xs, xst, &r), TRN_SUCCESS);
    CHECK_INT(trn_graph_set_layout(g, r, (int64_t[]){1, 4}), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_export(g, r, (int64_t[]){1, 4}), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_export(g, r, xst), TRN_SUCCESS);
    trn_graph_free(g);
}

int main(void) {
    find_include_dir();
    test_extern_between_kernels();
    test_extern_errors();
    return TEST_REPORT();
}
