// test_compiler_index.c - the graph compiler's indexed reads and writes:
// an embedding lookup fused with an add, a 2-index gather with negative
// (wrapped) indices, a scatter-add with duplicate positions (the embedding
// backward), scatters folding by product, max and min (scatter_reduce;
// a NaN source wins), and out-of-range indices failing the run with
// PyTorch's message instead of reading or writing out of bounds; iotas.
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "compiler_test.h"

static trn_program *compile(trn_graph *g) { return compile_named(g, NULL, "test_index"); }

// y[b, t, :] = W[ids[b, t], :] + P[t, :]: the gather fuses into the add.
static void test_embedding(void) {
    enum { V = 7, D = 5, B = 2, T = 3 };
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int w, ids, pos, idv, pv, e, y;
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 2, (int64_t[]){V, D}, (int64_t[]){D, 1}, &w),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_I64, 2, (int64_t[]){B, T}, (int64_t[]){T, 1}, &ids),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 2, (int64_t[]){T, D}, (int64_t[]){D, 1}, &pos),
              TRN_SUCCESS);
    const int64_t out[3] = {B, T, D};
    CHECK_INT(trn_graph_view(g, ids, 3, out, (int64_t[]){T, 1, 0}, 0, &idv), TRN_SUCCESS);
    CHECK_INT(trn_graph_view(g, pos, 3, out, (int64_t[]){0, D, 1}, 0, &pv), TRN_SUCCESS);
    // Builder checks: a walked dim larger than the source's, a dim walked twice.
    CHECK_INT(
        trn_graph_gather(g, w, 1, &idv, (int[]){0}, (int[]){-1, 1, 1}, 0, TRN_INDEX_ERROR_SELF, &e),
        TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_gather(g, w, 1, &idv, (int[]){0}, (int[]){-1, -1, 0}, 0,
                               TRN_INDEX_ERROR_SELF, &e),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_gather(g, w, 1, &idv, (int[]){0}, (int[]){-1, -1, 1}, 0,
                               TRN_INDEX_ERROR_SELF, &e),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_ADD, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){e, pv},
                                  (double[]){1, 0, 0, 0}, &y),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_export(g, y, NULL), TRN_SUCCESS);
    trn_program *p = compile(g);
    trn_graph_free(g);
    if (!p) return;
    CHECK_INT(trn_program_kernel_count(p), 1);
    CHECK_INT(trn_program_checks_indices(p), 1);
    float W[V * D], P[T * D], Y[B * T * D];
    for (int i = 0; i < V * D; i++) W[i] = (float)i;
    for (int i = 0; i < T * D; i++) P[i] = 0.5f * (float)i;
    int64_t I[B * T] = {6, 0, 3, 3, 1, 2};
    CHECK_INT(run_status(p, (int[]){w, ids, pos, y}, (void *[]){W, I, P, Y}, 4), TRN_SUCCESS);
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++)
                bad += Y[(b * T + t) * D + d] != W[I[b * T + t] * D + d] + P[t * D + d];
    CHECK_INT(bad, 0);
    // An index past the table fails the run with index_select's message.
    I[4] = V;
    CHECK_INT(run_status(p, (int[]){w, ids, pos, y}, (void *[]){W, I, P, Y}, 4),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STR(trn_last_error(), "index out of range in self");
    I[4] = -1;  // no wrapping here
    CHECK_INT(run_status(p, (int[]){w, ids, pos, y}, (void *[]){W, I, P, Y}, 4),
              TRN_ERROR_INVALID_ARGUMENT);
    trn_clear_error();
    trn_program_free(p);
}

// y[i] = X[r[i], c[i]] with negative indices counting from the end (x[r, c]).
static void test_two_indices(void) {
    enum { R = 4, C = 6, N = 5 };
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int x, r, c, y;
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 2, (int64_t[]){R, C}, (int64_t[]){1, R}, &x),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_I64, 1, (int64_t[]){N}, (int64_t[]){1}, &r),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_I64, 1, (int64_t[]){N}, (int64_t[]){2}, &c),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_gather(g, x, 2, (int[]){r, c}, (int[]){0, 1}, (int[]){-1}, 1,
                               TRN_INDEX_ERROR_BOUNDS, &y),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_export(g, y, NULL), TRN_SUCCESS);
    trn_program *p = compile(g);
    trn_graph_free(g);
    if (!p) return;
    float X[R * C], Y[N];
    for (int i = 0; i < R * C; i++) X[i] = (float)i;  // column-major: X[i, j] = i + j * R
    int64_t RI[N] = {0, 3, -1, 2, -4}, CI[2 * N] = {5, 0, -6, 0, 1, 0, 2, 0, -1, 0};
    CHECK_INT(run_status(p, (int[]){x, r, c, y}, (void *[]){X, RI, CI, Y}, 4), TRN_SUCCESS);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        int64_t ri = RI[i] < 0 ? RI[i] + R : RI[i], ci = CI[2 * i] < 0 ? CI[2 * i] + C : CI[2 * i];
        bad += Y[i] != X[ri + ci * R];
    }
    CHECK_INT(bad, 0);
    CI[4] = 6;
    CHECK_INT(run_status(p, (int[]){x, r, c, y}, (void *[]){X, RI, CI, Y}, 4),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STR(trn_last_error(), "index 6 is out of bounds for dimension 1 with size 6");
    trn_clear_error();
    trn_program_free(p);
}

// gw = zeros(V, D) with gw[ids[n], :] += g[n, :] (the embedding backward),
// then gw * 2 fused into another kernel reading it.
static void test_scatter_add(void) {
    enum { V = 4, D = 3, N = 6 };
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int gr, ids, idv, zero, s, two, y;
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 2, (int64_t[]){N, D}, (int64_t[]){D, 1}, &gr),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_I64, 1, (int64_t[]){N}, (int64_t[]){1}, &ids),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_view(g, ids, 2, (int64_t[]){N, D}, (int64_t[]){1, 0}, 0, &idv),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_const(g, TRN_DTYPE_F32, 0.0, 0, 2, (int64_t[]){V, D}, &zero), TRN_SUCCESS);
    CHECK_INT(
        trn_graph_scatter(g, zero, idv, gr, 0, (int[]){-1, 1}, 1, 1, TRN_INDEX_ERROR_BOUNDS, &s),
        TRN_SUCCESS);
    CHECK_INT(trn_graph_const(g, TRN_DTYPE_F32, 2.0, 2, 0, NULL, &two), TRN_SUCCESS);
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){s, two},
                                  NULL, &y),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_export(g, y, NULL), TRN_SUCCESS);
    trn_program *p = compile(g);
    trn_graph_free(g);
    if (!p) return;
    CHECK_INT(trn_program_kernel_count(p), 2);
    CHECK(strstr(trn_program_source(p), "scatter") != NULL);
    float G[N * D], Y[V * D], E[V * D] = {0};
    for (int i = 0; i < N * D; i++) G[i] = (float)i * 0.25f;
    int64_t I[N] = {1, 3, 1, -1, 0, 1};  // -1 wraps to 3; row 2 gets nothing
    CHECK_INT(run_status(p, (int[]){gr, ids, y}, (void *[]){G, I, Y}, 3), TRN_SUCCESS);
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++) E[(I[n] < 0 ? I[n] + V : I[n]) * D + d] += G[n * D + d];
    int bad = 0;
    for (int i = 0; i < V * D; i++) bad += Y[i] != 2.0f * E[i];
    CHECK_INT(bad, 0);
    I[2] = -5;
    CHECK_INT(run_status(p, (int[]){gr, ids, y}, (void *[]){G, I, Y}, 3),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK_STR(trn_last_error(), "index -5 is out of bounds for dimension 0 with size 4");
    trn_clear_error();
    trn_program_free(p);
}

// A gather feeding a sum (nll_loss's shape: pick one class per row, reduce),
// with gather's error kind (a RuntimeError in PyTorch: TRN_ERROR_KERNEL);
// when `keep`, the gather is also exported, so the sum reads it back.
static void test_gather_reduce(bool keep) {
    enum { N = 9, K = 5 };
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int x, t, pick, s;
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 2, (int64_t[]){N, K}, (int64_t[]){K, 1}, &x),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_I64, 2, (int64_t[]){N, 1}, (int64_t[]){1, 1}, &t),
              TRN_SUCCESS);
    CHECK_INT(
        trn_graph_gather(g, x, 1, &t, (int[]){1}, (int[]){0, -1}, 0, TRN_INDEX_ERROR_GATHER, &pick),
        TRN_SUCCESS);
    CHECK_INT(trn_graph_reduce(g, TRN_GRAPH_SUM, pick, TRN_DTYPE_F32, 3, &s), TRN_SUCCESS);
    CHECK_INT(trn_graph_export(g, s, NULL), TRN_SUCCESS);
    if (keep) CHECK_INT(trn_graph_export(g, pick, NULL), TRN_SUCCESS);
    trn_program *p = compile(g);
    trn_graph_free(g);
    if (!p) return;
    CHECK_INT(trn_program_kernel_count(p), keep ? 2 : 1);
    float X[N * K], S = 0, PK[N];
    for (int i = 0; i < N * K; i++) X[i] = (float)(i % 11);
    int64_t T[N];
    double e = 0;
    for (int i = 0; i < N; i++) {
        T[i] = (i * 3) % K;
        e += X[i * K + T[i]];
    }
    CHECK_INT(run_status(p, (int[]){x, t, s, pick}, (void *[]){X, T, &S, PK}, keep ? 4 : 3),
              TRN_SUCCESS);
    CHECK(fabs(S - e) < 1e-4);
    for (int i = 0; i < N && keep; i++) CHECK(PK[i] == X[i * K + T[i]]);
    T[8] = K;
    CHECK_INT(run_status(p, (int[]){x, t, s, pick}, (void *[]){X, T, &S, PK}, keep ? 4 : 3),
              TRN_ERROR_KERNEL);
    CHECK_STR(trn_last_error(), "index 5 is out of bounds for dimension 1 with size 5");
    trn_clear_error();
    trn_program_free(p);
}

// causal[i, j] = j <= i from two iotas (no memory read at all), and a
// float iota (arange(1.5, ., 0.5)) exported as its own kernel.
static void test_iota(void) {
    enum { T = 5 };
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int r, c, m, f;
    CHECK_INT(
        trn_graph_iota(g, TRN_DTYPE_I64, 2, (int64_t[]){T, T}, (int64_t[]){1, 0}, 0, 0, 1, &r),
        TRN_SUCCESS);
    CHECK_INT(
        trn_graph_iota(g, TRN_DTYPE_I64, 2, (int64_t[]){T, T}, (int64_t[]){0, 1}, 0, 0, 1, &c),
        TRN_SUCCESS);
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_LE, TRN_DTYPE_I64, TRN_DTYPE_BOOL, 2, (int[]){c, r},
                                  NULL, &m),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_export(g, m, NULL), TRN_SUCCESS);
    CHECK_INT(trn_graph_iota(g, TRN_DTYPE_F32, 1, (int64_t[]){T}, (int64_t[]){1}, 1, 1.5, 0.5, &f),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_export(g, f, NULL), TRN_SUCCESS);
    trn_program *p = compile(g);
    trn_graph_free(g);
    if (!p) return;
    CHECK_INT(trn_program_kernel_count(p), 2);
    CHECK_INT(trn_program_workspace_size(p), 0);
    unsigned char M[T * T];
    float F[T];
    CHECK_INT(run_status(p, (int[]){m, f}, (void *[]){M, F}, 2), TRN_SUCCESS);
    int bad = 0;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) bad += M[i * T + j] != (j <= i);
    for (int i = 0; i < T; i++) bad += F[i] != 1.5f + 0.5f * (float)(i + 1);
    CHECK_INT(bad, 0);
    trn_program_free(p);
}

// y = x with y[idx[n]] folded with s[n] by product, max or min (1-d, duplicate
// positions; a NaN source wins max/min, as eager scatter_reduce).
static void test_scatter_fold(int mode) {
    enum { V = 4, N = 6 };
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int x, sv, ids, y, bad_mode;
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 1, (int64_t[]){V}, (int64_t[]){1}, &x),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 1, (int64_t[]){N}, (int64_t[]){1}, &sv),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_I64, 1, (int64_t[]){N}, (int64_t[]){1}, &ids),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_scatter(g, x, ids, sv, 0, (int[]){-1}, 1 + TRN_GRAPH_MIN + 1, 0,
                                TRN_INDEX_ERROR_GATHER, &bad_mode),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(
        trn_graph_scatter(g, x, ids, sv, 0, (int[]){-1}, 1 + mode, 0, TRN_INDEX_ERROR_GATHER, &y),
        TRN_SUCCESS);
    CHECK_INT(trn_graph_export(g, y, NULL), TRN_SUCCESS);
    trn_program *p = compile(g);
    trn_graph_free(g);
    if (!p) return;
    float X[V] = {1.5f, -2.0f, NAN, 4.0f}, S[N] = {3.0f, -1.0f, 0.5f, NAN, 2.0f, -7.0f}, Y[V], E[V];
    int64_t I[N] = {0, 1, 0, 3, 2, 1};
    memcpy(E, X, sizeof E);
    for (int n = 0; n < N; n++) {
        float *a = &E[I[n]], v = S[n];
        if (mode == TRN_GRAPH_PROD)
            *a = *a * v;
        else if (isnan(v))
            *a = v;
        else if (mode == TRN_GRAPH_MAX)
            *a = *a < v ? v : *a;
        else
            *a = v < *a ? v : *a;
    }
    CHECK_INT(run_status(p, (int[]){x, sv, ids, y}, (void *[]){X, S, I, Y}, 4), TRN_SUCCESS);
    int bad = 0;
    for (int i = 0; i < V; i++) bad += !(Y[i] == E[i] || (isnan(Y[i]) && isnan(E[i])));
    CHECK_INT(bad, 0);
    trn_program_free(p);
}

// The mask-count styles: the index carries -1 - count, the gathered dim's
// size is the values' (x[mask] = v, masked_scatter); a style past the last
// is rejected.
static void test_count_styles(trn_graph_index_error style, const char *want) {
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int v, i, y;
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 1, (int64_t[]){3}, (int64_t[]){1}, &v),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_I64, 1, (int64_t[]){4}, (int64_t[]){1}, &i),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_gather(g, v, 1, &i, (int[]){0}, (int[]){-1}, 0,
                               (trn_graph_index_error)(TRN_INDEX_ERROR_SOURCE + 1), &y),
              TRN_ERROR_INVALID_ARGUMENT);
    trn_clear_error();
    CHECK_INT(trn_graph_gather(g, v, 1, &i, (int[]){0}, (int[]){-1}, 0, style, &y), TRN_SUCCESS);
    CHECK_INT(trn_graph_export(g, y, NULL), TRN_SUCCESS);
    trn_program *p = compile(g);
    trn_graph_free(g);
    if (!p) return;
    float V[3] = {1, 2, 3}, Y[4];
    int64_t I[4] = {2, 0, 1, 1};
    CHECK_INT(run_status(p, (int[]){v, i, y}, (void *[]){V, I, Y}, 3), TRN_SUCCESS);
    CHECK(Y[0] == 3 && Y[1] == 1 && Y[2] == 2 && Y[3] == 2);
    for (int k = 0; k < 4; k++) I[k] = -1 - 5;
    CHECK_INT(run_status(p, (int[]){v, i, y}, (void *[]){V, I, Y}, 3), TRN_ERROR_KERNEL);
    CHECK_STR(trn_last_error(), want);
    trn_clear_error();
    trn_program_free(p);
}

int main(void) {
    find_include_dir();
    test_embedding();
    test_two_indices();
    test_scatter_add();
    test_scatter_fold(TRN_GRAPH_PROD);
    test_scatter_fold(TRN_GRAPH_MAX);
    test_scatter_fold(TRN_GRAPH_MIN);
    test_gather_reduce(false);
    test_gather_reduce(true);
    test_iota();
    test_count_styles(TRN_INDEX_ERROR_COUNT,
                      "shape mismatch: value tensor of size 3 along dimension 0 cannot be "
                      "broadcast to indexing result of 5 selected elements");
    test_count_styles(TRN_INDEX_ERROR_SOURCE,
                      "Number of elements of source < number of ones in mask");
    return TEST_REPORT();
}
