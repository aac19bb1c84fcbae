// test_compiler.c - the graph compiler end to end: build, schedule, render,
// gcc, dlopen, run; fusion, reductions, extern matmul, host steps, the disk
// cache (hit, corrupted entry recompiled, refused directories, planted
// entries never loaded), builder errors and kernels
// sharing a body.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler_test.h"

static trn_program *compile(trn_graph *g, const char *cache) {
    return compile_named(g, cache, "test");
}

static void run(trn_program *p, const int *nodes, void **bufs, int n) {
    CHECK_INT(run_status(p, nodes, bufs, n), TRN_SUCCESS);
}

// y = relu(x * 2 + b) with b broadcast along rows: one fused kernel.
static void test_fused_pointwise(void) {
    trn_graph *g;
    CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
    int64_t xs[2] = {5, 33}, xst[2] = {33, 1}, bs[1] = {33}, bst[1] = {1}, zero_row[2] = {0, 1};
    int x, b, bv, two, m, a, y;
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 2, xs, xst, &x), TRN_SUCCESS);
    CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 1, bs, bst, &b), TRN_SUCCESS);
    CHECK_INT(trn_graph_view(g, b, 2, xs, zero_row, 0, &bv), TRN_SUCCESS);
    CHECK_INT(trn_graph_const(g, TRN_DTYPE_F32, 2.0, 2, 0, NULL, &two), TRN_SUCCESS);
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){x, two},
                                  NULL, &m),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_ADD, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){m, bv},
                                  (double[]){1, 0, 0, 0}, &a),
              TRN_SUCCESS);
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_RELU, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, &a, NULL, &y),
              TRN_SUCCESS);
    trn_graph_set_label(g, y, "relu_1");
    CHECK_INT(trn_graph_export(g, y, NULL), TRN_SUCCESS);
    trn_program *p = compile(g, NULL);
    trn_graph_free(g);
    if (!p) return;
    CHECK_INT(trn_program_kernel_count(p), 1);
    CHECK_INT(trn_program_workspace_size(p), 0);
    CHECK(strstr(trn_program_source(p), "relu_1") != NULL);
    float X[5 * 33], B[33], Y[5 * 33];
    for (int i = 0; i < 5 * 33; i++) X[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 33; i++) B[i] = (float)i * 0.1f - 1.0f;
    run(p, (int[]){x, b, y}, (void *[]){X, B, Y}, 3);
    int bad = 0;
    for (int i = 0; i < 5 * 33; i++) {
        float e = X[i] * 2.0f + B[i % 33];
        e = e > 0 ? e : 0;
        bad += fabsf(Y[i] - e) > 1e-6f;
    }
    CHECK_INT(bad, 0);
    trn_program_free(p);
}

// Softmax over the last dim: max and sum reductions, exp fused into both.
static void test_softmax(void) {
    trn_graph *g;
    trn_graph_create(&g);
    int64_t xs[2] = {3, 100}, xst[2] = {100, 1}, bc[2] = {1, 0};
    int x, mx, mxv, d, e, s, sv, y;
    trn_graph_input(g, TRN_DTYPE_F32, 2, xs, xst, &x);
    CHECK_INT(trn_graph_reduce(g, TRN_GRAPH_MAX, x, TRN_DTYPE_F32, 2u, &mx), TRN_SUCCESS);
    CHECK_INT(trn_graph_view(g, mx, 2, xs, bc, 0, &mxv), TRN_SUCCESS);
    trn_graph_pointwise(g, TRN_EW_SUB, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){x, mxv},
                        (double[]){1, 0, 0, 0}, &d);
    trn_graph_pointwise(g, TRN_EW_EXP, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, &d, NULL, &e);
    CHECK_INT(trn_graph_reduce(g, TRN_GRAPH_SUM, e, TRN_DTYPE_F32, 2u, &s), TRN_SUCCESS);
    trn_graph_view(g, s, 2, xs, bc, 0, &sv);
    trn_graph_pointwise(g, TRN_EW_DIV, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){e, sv}, NULL, &y);
    trn_graph_export(g, y, NULL);
    trn_program *p = compile(g, NULL);
    trn_graph_free(g);
    if (!p) return;
    float X[300], Y[300];
    for (int i = 0; i < 300; i++) X[i] = (float)((i * 37) % 23) * 0.3f;
    run(p, (int[]){x, y}, (void *[]){X, Y}, 2);
    int bad = 0;
    for (int r = 0; r < 3; r++) {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < 100; j++) m = fmax(m, X[r * 100 + j]);
        for (int j = 0; j < 100; j++) sum += exp(X[r * 100 + j] - m);
        for (int j = 0; j < 100; j++)
            bad += fabs(Y[r * 100 + j] - exp(X[r * 100 + j] - m) / sum) > 1e-6;
    }
    CHECK_INT(bad, 0);
    trn_program_free(p);
}

// (x @ w) * 3 with a host step in between; a 5-node chain reuses workspace.
static void test_matmul_host_and_workspace(void) {
    trn_graph *g;
    trn_graph_create(&g);
    int64_t as[3] = {1, 4, 6}, ast[3] = {24, 6, 1}, bs[3] = {1, 6, 3}, bst[3] = {18, 3, 1};
    int a, b, c, three, y, step, h;
    trn_graph_input(g, TRN_DTYPE_F32, 3, as, ast, &a);
    trn_graph_input(g, TRN_DTYPE_F32, 3, bs, bst, &b);
    CHECK_INT(trn_graph_matmul(g, a, b, 1.0, &c), TRN_SUCCESS);
    trn_graph_const(g, TRN_DTYPE_F32, 3.0, 3, 0, NULL, &three);
    trn_graph_pointwise(g, TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){c, three}, NULL,
                        &y);
    trn_graph_export(g, y, NULL);
    CHECK_INT(trn_graph_host_call(g, 1, &y, &step), TRN_SUCCESS);
    int64_t ys[3] = {1, 4, 3}, yst[3] = {12, 3, 1};
    CHECK_INT(trn_graph_host_result(g, step, TRN_DTYPE_F32, 3, ys, yst, &h), TRN_SUCCESS);
    // Chain of materialized values (each read twice) to exercise reuse.
    int prev = h;
    for (int i = 0; i < 5; i++) {
        int n;
        trn_graph_pointwise(g, TRN_EW_ADD, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){prev, prev},
                            (double[]){1, 0, 0, 0}, &n);
        int m;
        trn_graph_pointwise(g, TRN_EW_NEG, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, &n, NULL, &m);
        int k;
        trn_graph_pointwise(g, TRN_EW_ADD, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){n, m},
                            (double[]){-1, 0, 0, 0}, &k);
        prev = k;  // k = n - (-n) = 2n = 4 prev
    }
    trn_graph_export(g, prev, NULL);
    trn_program *p = compile(g, NULL);
    trn_graph_free(g);
    if (!p) return;
    // n is read twice (by m and k), so it is in memory; pieces are reused.
    CHECK(trn_program_workspace_size(p) > 0);
    CHECK(trn_program_workspace_size(p) < 5 * 64 * 2);
    float A[24], B[18], Y[12], H[12], O[12];
    for (int i = 0; i < 24; i++) A[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 18; i++) B[i] = (float)(i % 3) + 0.5f;
    void *ws = aligned_alloc(64, (trn_program_workspace_size(p) + 63) & ~(size_t)63);
    trn_run *r;
    CHECK_INT(trn_run_create(p, ws, &r), TRN_SUCCESS);
    trn_run_set_buffer(r, a, A);
    trn_run_set_buffer(r, b, B);
    trn_run_set_buffer(r, y, Y);
    trn_run_set_buffer(r, prev, O);
    int host = -2;
    CHECK_INT(trn_run_continue(r, stream(), &host), TRN_SUCCESS);
    CHECK_INT(host, 0);
    trn_stream_synchronize(stream());
    for (int i = 0; i < 12; i++) H[i] = Y[i] + 1.0f;  // the "eager op"
    CHECK_INT(trn_run_set_buffer(r, h, H), TRN_SUCCESS);
    CHECK_INT(trn_run_continue(r, stream(), &host), TRN_SUCCESS);
    CHECK_INT(host, -1);
    trn_run_finish(r, stream());
    CHECK_INT(trn_stream_synchronize(stream()), TRN_SUCCESS);
    int bad = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            double e = 0;
            for (int k = 0; k < 6; k++) e += A[i * 6 + k] * B[k * 3 + j];
            bad += fabs(Y[i * 3 + j] - 3 * e) > 1e-4;
            bad += fabs(O[i * 3 + j] - (3 * e + 1) * 1024.0) > 1e-1;
        }
    CHECK_INT(bad, 0);
    free(ws);
    trn_program_free(p);
}

// exp(x) on 10 floats, compiled with `cache`; NULL if the compile failed.
// ids (when not NULL) receives the input's and the output's value ids.
static trn_program *compile_exp(const char *cache, int ids[2]) {
    trn_graph *g;
    trn_graph_create(&g);
    int64_t s[1] = {10}, st[1] = {1};
    int x, y;
    trn_graph_input(g, TRN_DTYPE_F32, 1, s, st, &x);
    trn_graph_pointwise(g, TRN_EW_EXP, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, &x, NULL, &y);
    trn_graph_export(g, y, NULL);
    trn_program *p = compile(g, cache);
    trn_graph_free(g);
    if (ids) ids[0] = x, ids[1] = y;
    return p;
}

static void test_cache(void) {
    char dir[] = "/tmp/trn-cc-test-XXXXXX";
    if (mkdtemp(dir) == NULL) return;
    char cache[4200];
    snprintf(cache, sizeof cache, "%s/config", dir);
    setenv("XDG_CONFIG_HOME", cache, 1);  // the cache key, kept out of $HOME
    snprintf(cache, sizeof cache, "%s/sub/cache", dir);
    for (int round = 0; round < 3; round++) {
        int ids[2];
        trn_program *p = compile_exp(cache, ids);
        if (!p) continue;
        // 0: compiled; 1: cache hit; 2: after corrupting the entry, compiled again.
        CHECK_INT(trn_program_from_cache(p), round == 1);
        char so[4400];
        snprintf(so, sizeof so, "%s/%s.so", cache, trn_program_cache_key(p));
        if (round == 1) {
            FILE *f = fopen(so, "r+b");
            CHECK(f != NULL);
            if (f) {
                fseek(f, 100, SEEK_SET);
                fputc(0x5a, f);
                fclose(f);
            }
        }
        struct stat sb;
        CHECK_INT(stat(cache, &sb), 0);
        CHECK_INT(sb.st_mode & 0777, 0700);
        float X[10], Y[10];
        for (int i = 0; i < 10; i++) X[i] = (float)i * 0.1f;
        if (round != 1) run(p, ids, (void *[]){X, Y}, 2);
        if (round != 1) CHECK(fabsf(Y[3] - expf(0.3f)) < 1e-6f);
        trn_program_free(p);
    }
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_INT(system(cmd), 0);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

// Another user's code must never load from the cache: directories that are
// symlinks, foreign-owned or writable by others are refused (the compile
// goes on without a cache), and an entry is trusted only with a MAC under the
// user's own key: a planted object with a matching checksum, or with a MAC
// under someone else's key, is recompiled, and its constructor never runs.
static void test_cache_trust(void) {
    char dir[] = "/tmp/trn-cc-trust-XXXXXX";
    if (mkdtemp(dir) == NULL) return;
    char path[4200], other[4200], cmd[9000];
    snprintf(path, sizeof path, "%s/config", dir);
    setenv("XDG_CONFIG_HOME", path, 1);

    // Refused directories: the reason is named, and a compile still works.
    snprintf(other, sizeof other, "%s/real", dir);
    CHECK_INT(trn_compile_cache_check_dir(other), TRN_SUCCESS);
    snprintf(path, sizeof path, "%s/link", dir);
    CHECK_INT(symlink(other, path), 0);
    CHECK_INT(trn_compile_cache_check_dir(path), TRN_ERROR_SYSTEM);
    CHECK(strstr(trn_last_error(), "symbolic link") != NULL);
    trn_program *p = compile_exp(path, NULL);
    if (p) CHECK_INT(trn_program_from_cache(p), 0);
    trn_program_free(p);
    snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -q .", other);
    CHECK(system(cmd) != 0);  // nothing written through the link
    snprintf(path, sizeof path, "%s/open", dir);
    CHECK_INT(mkdir(path, 0700), 0);
    CHECK_INT(chmod(path, 0777), 0);
    CHECK_INT(trn_compile_cache_check_dir(path), TRN_ERROR_SYSTEM);
    CHECK(strstr(trn_last_error(), "writable by group or others") != NULL);
    snprintf(path, sizeof path, "%s/file", dir);
    write_text(path, "not a directory");
    CHECK(trn_compile_cache_check_dir(path) != TRN_SUCCESS);
    p = compile_exp(path, NULL);  // a cache path that is a file: compiled without it
    CHECK(p != NULL);
    trn_program_free(p);
    if (geteuid() == 0) {  // only root can give a directory away
        snprintf(path, sizeof path, "%s/foreign", dir);
        CHECK_INT(mkdir(path, 0700), 0);
        CHECK_INT(chown(path, 65534, 65534), 0);
        CHECK_INT(trn_compile_cache_check_dir(path), TRN_ERROR_SYSTEM);
        CHECK(strstr(trn_last_error(), "owned by uid 65534") != NULL);
    }

    // A planted entry: an object whose constructor leaves a mark.
    snprintf(path, sizeof path, "%s/cache", dir);
    p = compile_exp(path, NULL);
    if (p == NULL) return;
    char key[65], so[4400], mac[4400], mark[4200], csrc[4200];
    snprintf(key, sizeof key, "%s", trn_program_cache_key(p));
    trn_program_free(p);
    snprintf(so, sizeof so, "%s/%s.so", path, key);
    snprintf(mac, sizeof mac, "%s/%s.mac", path, key);
    snprintf(mark, sizeof mark, "%s/planted-code-ran", dir);
    snprintf(csrc, sizeof csrc, "%s/evil.c", dir);
    snprintf(cmd, sizeof cmd,
             "#include <stdio.h>\n__attribute__((constructor)) static void f(void) "
             "{ FILE *m = fopen(\"%s\", \"w\"); if (m) fclose(m); }\n",
             mark);
    write_text(csrc, cmd);
    snprintf(cmd, sizeof cmd, "gcc -shared -fPIC -o '%s' '%s'", so, csrc);
    CHECK_INT(system(cmd), 0);
    size_t n = 0;
    char *bytes = NULL;
    FILE *f = fopen(so, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        n = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        bytes = malloc(n);
        if (bytes && fread(bytes, 1, n, f) != n) n = 0;
        fclose(f);
    }
    CHECK(bytes != NULL && n > 0);
    char planted[65];
    for (int attack = 0; bytes && attack < 2; attack++) {
        if (attack == 0) {
            trn_sha256_hex(bytes, n, planted);  // a checksum, as the old cache kept
        } else {                                // a MAC under the attacker's own key
            snprintf(other, sizeof other, "%s/attacker", dir);
            setenv("XDG_CONFIG_HOME", other, 1);
            CHECK_INT(trn_compile_cache_mac(key, bytes, n, planted), TRN_SUCCESS);
            snprintf(other, sizeof other, "%s/config", dir);
            setenv("XDG_CONFIG_HOME", other, 1);
        }
        write_text(mac, planted);
        p = compile_exp(path, NULL);
        if (p) CHECK_INT(trn_program_from_cache(p), 0);
        trn_program_free(p);
        CHECK(access(mark, F_OK) != 0);
        // The recompile replaced the planted entry: it loads again.
        p = compile_exp(path, NULL);
        if (p) CHECK_INT(trn_program_from_cache(p), 1);
        trn_program_free(p);
        snprintf(cmd, sizeof cmd, "gcc -shared -fPIC -o '%s' '%s'", so, csrc);
        CHECK_INT(system(cmd), 0);
    }
    free(bytes);

    // The key itself must be private: a readable key is refused, by name.
    snprintf(other, sizeof other, "%s/config/openneuron/compile-cache.key", dir);
    CHECK_INT(chmod(other, 0644), 0);
    snprintf(other, sizeof other, "%s/config2", dir);
    setenv("XDG_CONFIG_HOME", other, 1);  // a new path: the key is read again
    char out[65];
    CHECK_INT(trn_compile_cache_mac("k", "x", 1, out), TRN_SUCCESS);
    snprintf(other, sizeof other, "%s/config2/openneuron/compile-cache.key", dir);
    CHECK_INT(chmod(other, 0644), 0);
    snprintf(other, sizeof other, "%s/config", dir);
    setenv("XDG_CONFIG_HOME", other, 1);
    CHECK_INT(trn_compile_cache_mac("k", "x", 1, out), TRN_ERROR_SYSTEM);
    CHECK(strstr(trn_last_error(), "readable or writable by others") != NULL);
    unsetenv("XDG_CONFIG_HOME");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_INT(system(cmd), 0);
}

static void test_errors(void) {
    trn_graph *g;
    trn_graph_create(&g);
    int64_t a[2] = {2, 3}, b[2] = {3, 2}, st[2] = {3, 1}, st2[2] = {2, 1};
    int x, y, z;
    trn_graph_input(g, TRN_DTYPE_F32, 2, a, st, &x);
    trn_graph_input(g, TRN_DTYPE_F32, 2, b, st2, &y);
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_ADD, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){x, y},
                                  NULL, &z),
              TRN_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(trn_last_error(), "different shape") != NULL);
    CHECK_INT(
        trn_graph_pointwise(g, TRN_EW_EXP, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, (int[]){99}, NULL, &z),
        TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_pointwise(g, TRN_EW_BITWISE_AND, TRN_DTYPE_F32, TRN_DTYPE_F32, 2,
                                  (int[]){x, x}, NULL, &z),
              TRN_ERROR_UNSUPPORTED);
    int e;
    trn_graph_pointwise(g, TRN_EW_EXP, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, &x, NULL, &e);
    int64_t big[1] = {7}, one[1] = {1};
    CHECK_INT(trn_graph_view(g, e, 1, big, one, 0, &z), TRN_ERROR_INVALID_ARGUMENT);
    int64_t overlap[2] = {1, 1};
    CHECK_INT(trn_graph_export(g, e, overlap), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_matmul(g, x, y, 1.0, &z), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_INT(trn_graph_host_call(g, 1, &e, &z), TRN_ERROR_INVALID_ARGUMENT);
    trn_graph_free(g);
    char hex[65];
    trn_sha256_hex("abc", 3, hex);
    CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
}

// In-place stores of graph inputs (an optimizer step): m = 0.9 m + g and
// p = p - 0.1 m_new write their inputs; a second graph whose stores read each
// other's input is computed first, then copied; a transposed self-read is
// refused (the caller copies eagerly).
static void test_store(void) {
    int64_t sz[2] = {4, 8}, st[2] = {8, 1};
    trn_graph *g;
    trn_graph_create(&g);
    int p, m, gr, c09, c01, mm, mn, u, pn, sm, sp;
    trn_graph_input(g, TRN_DTYPE_F32, 2, sz, st, &p);
    trn_graph_input(g, TRN_DTYPE_F32, 2, sz, st, &m);
    trn_graph_input(g, TRN_DTYPE_F32, 2, sz, st, &gr);
    trn_graph_const(g, TRN_DTYPE_F32, 0.9, 0, 0, NULL, &c09);
    trn_graph_const(g, TRN_DTYPE_F32, 0.1, 0, 0, NULL, &c01);
    trn_graph_pointwise(g, TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){m, c09}, NULL, &mm);
    trn_graph_pointwise(g, TRN_EW_ADD, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){mm, gr},
                        (double[]){1, 0, 0, 0}, &mn);
    trn_graph_pointwise(g, TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){mn, c01}, NULL, &u);
    trn_graph_pointwise(g, TRN_EW_SUB, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){p, u},
                        (double[]){1, 0, 0, 0}, &pn);
    CHECK_INT(trn_graph_store(g, m, mn, &sm), TRN_SUCCESS);
    CHECK_INT(trn_graph_store(g, p, pn, &sp), TRN_SUCCESS);
    CHECK_INT(trn_graph_store(g, p, pn, &sp), TRN_ERROR_INVALID_ARGUMENT);  // one store per input
    CHECK_INT(trn_graph_store(g, mn, p, &sp), TRN_ERROR_INVALID_ARGUMENT);  // not an input
    CHECK_INT(trn_graph_export(g, sm, NULL), TRN_ERROR_INVALID_ARGUMENT);
    trn_program *prog = compile(g, NULL);
    trn_graph_free(g);
    if (!prog) return;
    // mn is read twice (in memory); the store of p computes p - 0.1 mn itself.
    CHECK_INT(trn_program_kernel_count(prog), 3);
    CHECK(strstr(trn_program_source(prog), "in place") != NULL);
    float P[32], M[32], G[32], P0[32], M0[32];
    for (int i = 0; i < 32; i++)
        P0[i] = P[i] = (float)i, M0[i] = M[i] = (float)(i % 5), G[i] = 1.0f - (float)(i % 3);
    trn_run *r = NULL;
    void *ws = trn_program_workspace_size(prog) ? aligned_alloc(64, 4096) : NULL;
    CHECK_INT(trn_run_create(prog, ws, &r), TRN_SUCCESS);
    CHECK_INT(trn_run_set_buffer(r, sm, M), TRN_ERROR_INVALID_ARGUMENT);
    trn_run_set_buffer(r, p, P);
    trn_run_set_buffer(r, m, M);
    trn_run_set_buffer(r, gr, G);
    int host = 0;
    CHECK_INT(trn_run_continue(r, stream(), &host), TRN_SUCCESS);
    trn_run_finish(r, stream());
    trn_stream_synchronize(stream());
    free(ws);
    int bad = 0;
    for (int i = 0; i < 32; i++) {
        float mnew = M0[i] * 0.9f + G[i];
        bad += fabsf(M[i] - mnew) > 1e-6f || fabsf(P[i] - (P0[i] - mnew * 0.1f)) > 1e-5f;
    }
    CHECK_INT(bad, 0);
    trn_program_free(prog);

    // a = a + b; b = b * a_old: the fused store of a would clobber what b's reads.
    trn_graph_create(&g);
    int a, b, an, bn, sa, sb;
    trn_graph_input(g, TRN_DTYPE_F32, 2, sz, st, &a);
    trn_graph_input(g, TRN_DTYPE_F32, 2, sz, st, &b);
    trn_graph_pointwise(g, TRN_EW_ADD, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){a, b},
                        (double[]){1, 0, 0, 0}, &an);
    trn_graph_pointwise(g, TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){b, a}, NULL, &bn);
    trn_graph_store(g, a, an, &sa);
    trn_graph_store(g, b, bn, &sb);
    prog = compile(g, NULL);
    trn_graph_free(g);
    if (!prog) return;
    CHECK_INT(trn_program_kernel_count(prog), 4);  // both values first, then two copies
    float A[32], B[32], A0[32], B0[32];
    for (int i = 0; i < 32; i++)
        A0[i] = A[i] = (float)i * 0.5f, B0[i] = B[i] = 2.0f - (float)(i % 4);
    run(prog, (int[]){a, b}, (void *[]){A, B}, 2);
    bad = 0;
    for (int i = 0; i < 32; i++) bad += A[i] != A0[i] + B0[i] || B[i] != B0[i] * A0[i];
    CHECK_INT(bad, 0);
    trn_program_free(prog);

    // x = x^T (square): reads other elements of what it writes -> unsupported.
    trn_graph_create(&g);
    int64_t sq[2] = {4, 4}, sqs[2] = {4, 1}, tr[2] = {1, 4};
    int x, xt, sx;
    trn_graph_input(g, TRN_DTYPE_F32, 2, sq, sqs, &x);
    trn_graph_view(g, x, 2, sq, tr, 0, &xt);
    CHECK_INT(trn_graph_store(g, x, xt, &sx), TRN_SUCCESS);
    trn_compile_options o = {include_dir, NULL, NULL, "test", 0, "-Wall -Wextra -Werror", 0, 0};
    CHECK_INT(trn_program_compile(g, &o, &prog), TRN_ERROR_UNSUPPORTED);
    CHECK(strstr(trn_last_error(), "store") != NULL);
    trn_graph_free(g);
}

// Two kernels doing the same work on different buffers share one body; a
// reduction whose length is not a multiple of four folds its tail (11 and 13
// elements: blocks of four, past the end the identity), and max still
// returns a NaN met in the tail.
static void test_shared_bodies(void) {
    trn_graph *g;
    trn_graph_create(&g);
    int64_t xs[2] = {4, 11}, xst[2] = {11, 1}, ws[2] = {3, 13}, wst[2] = {13, 1};
    int x1, x2, w, two, m1, m2, y1, y2, s1, mx;
    trn_graph_input(g, TRN_DTYPE_F32, 2, xs, xst, &x1);
    trn_graph_input(g, TRN_DTYPE_F32, 2, xs, xst, &x2);
    trn_graph_input(g, TRN_DTYPE_F32, 2, ws, wst, &w);
    trn_graph_const(g, TRN_DTYPE_F32, 2.0, 2, 0, NULL, &two);
    trn_graph_pointwise(g, TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){x1, two}, NULL,
                        &m1);
    trn_graph_pointwise(g, TRN_EW_RELU, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, &m1, NULL, &y1);
    trn_graph_pointwise(g, TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){x2, two}, NULL,
                        &m2);
    trn_graph_pointwise(g, TRN_EW_RELU, TRN_DTYPE_F32, TRN_DTYPE_F32, 1, &m2, NULL, &y2);
    CHECK_INT(trn_graph_reduce(g, TRN_GRAPH_SUM, x1, TRN_DTYPE_F32, 2u, &s1), TRN_SUCCESS);
    CHECK_INT(trn_graph_reduce(g, TRN_GRAPH_MAX, w, TRN_DTYPE_F32, 2u, &mx), TRN_SUCCESS);
    trn_graph_export(g, y1, NULL);
    trn_graph_export(g, y2, NULL);
    trn_graph_export(g, s1, NULL);
    trn_graph_export(g, mx, NULL);
    trn_program *p = compile(g, NULL);
    trn_graph_free(g);
    if (!p) return;
    CHECK_INT(trn_program_kernel_count(p), 4);
    const char *src = trn_program_source(p);
    int bodies = 0, shared = 0;
    for (const char *q = src; (q = strstr(q, "static void k")) != NULL; q++) bodies++;
    for (const char *q = src; (q = strstr(q, "//   loop: k")) != NULL; q++) shared++;
    CHECK_INT(bodies, 3);
    CHECK_INT(shared, 1);
    float X1[44], X2[44], W[39], Y1[44], Y2[44], S[4], M[3];
    for (int i = 0; i < 44; i++) {
        X1[i] = (float)(i % 9) - 4.0f;
        X2[i] = 3.0f - (float)(i % 5);
    }
    for (int i = 0; i < 39; i++) W[i] = (float)((i * 7) % 13);
    W[13 + 12] = NAN;   // row 1, the last (tail) element
    W[26 + 9] = 99.0f;  // row 2's maximum, in the tail
    run(p, (int[]){x1, x2, w, y1, y2, s1, mx}, (void *[]){X1, X2, W, Y1, Y2, S, M}, 7);
    int bad = 0;
    for (int i = 0; i < 44; i++) {
        bad += Y1[i] != (X1[i] > 0 ? 2 * X1[i] : 0);
        bad += Y2[i] != (X2[i] > 0 ? 2 * X2[i] : 0);
    }
    for (int r = 0; r < 4; r++) {
        float e = 0;
        for (int j = 0; j < 11; j++) e += X1[r * 11 + j];
        bad += S[r] != e;  // small integers: exact in any order
    }
    CHECK_INT(bad, 0);
    CHECK(M[0] == 12.0f);
    CHECK(isnan(M[1]));
    CHECK(M[2] == 99.0f);
    trn_program_free(p);
}

// pow by a literal exponent: the special cases of eager's pow (x*x, x*x*x,
// sqrt, 1/x, ...) are rendered as those functions, bit-identical to the
// eager kernel; another exponent keeps the general pow.
static void test_pow_literal(void) {
    const double exps[] = {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.0, 0.0, 2.5};
    const char *fns[] = {"pow_square",     "pow_cube", "sqrt_f",   "rsqrt_f",     "reciprocal_f",
                         "pow_inv_square", "pow_one",  "pow_zero", "trn_sc_pow_f"};
    enum { N = 97 };
    float X[N], Y[N], E[N];
    for (int i = 0; i < N; i++) X[i] = (float)(i - 48) * 0.173f + (i % 5 ? 0.0f : 1e-3f);
    trn_stream *s = stream();
    for (size_t t = 0; t < sizeof exps / sizeof exps[0]; t++) {
        trn_graph *g;
        CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
        int64_t xs[1] = {N}, xst[1] = {1};
        int x, e, y;
        CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 1, xs, xst, &x), TRN_SUCCESS);
        CHECK_INT(trn_graph_const(g, TRN_DTYPE_F32, exps[t], 0, 0, NULL, &e), TRN_SUCCESS);
        int64_t one[1] = {N}, zero[1] = {0};
        int ev;
        CHECK_INT(trn_graph_view(g, e, 1, one, zero, 0, &ev), TRN_SUCCESS);
        CHECK_INT(trn_graph_pointwise(g, TRN_EW_POW, TRN_DTYPE_F32, TRN_DTYPE_F32, 2,
                                      (int[]){x, ev}, NULL, &y),
                  TRN_SUCCESS);
        CHECK_INT(trn_graph_export(g, y, NULL), TRN_SUCCESS);
        trn_program *p = compile(g, NULL);
        trn_graph_free(g);
        if (!p) return;
        CHECK(strstr(trn_program_source(p), fns[t]) != NULL);
        run(p, (int[]){x, y}, (void *[]){X, Y}, 2);
        trn_program_free(p);
        // The eager kernel, pow(tensor, scalar).
        int64_t sizes[1] = {N}, st4[1] = {4};
        trn_ew_desc d;
        memset(&d, 0, sizeof d);
        d.op = TRN_EW_POW;
        d.dtype = d.out_dtype = TRN_DTYPE_F32;
        d.ndim = 1;
        d.sizes = sizes;
        d.out = E;
        d.out_strides = st4;
        d.in[0] = X;
        d.in_dtype[0] = d.in_dtype[1] = TRN_DTYPE_F32;
        d.in_strides[0] = d.in_strides[1] = st4;
        d.scalar_in[1].f = exps[t];
        CHECK_INT(trn_ew_launch(s, &d), TRN_SUCCESS);
        CHECK_INT(trn_stream_synchronize(s), TRN_SUCCESS);
        CHECK(memcmp(Y, E, sizeof Y) == 0);
    }
}

// Float sums run in float lanes when the innermost reduced loop is a multiple
// of 8 (16 lanes for 16): within the bound stated in render.c, ~20 u sum|x|,
// of the exact sum; other loops keep the double accumulators.
static void test_float_lane_sums(void) {
    const int64_t inner[3] = {48, 24, 20};  // 16 lanes, 8 lanes, double
    const char *mark[3] = {"trn_g_lanes16(s)", "trn_g_lanes8(s)", "double acc3"};
    for (int t = 0; t < 3; t++) {
        const int64_t n = inner[t];
        trn_graph *g;
        CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
        // sum over dims 0 and 2 of x * x, x of shape 5 x 3 x n
        int64_t xs[3] = {5, 3, n}, xst[3] = {3 * n, n, 1};
        int x, sq, s;
        CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 3, xs, xst, &x), TRN_SUCCESS);
        CHECK_INT(trn_graph_pointwise(g, TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){x, x},
                                      NULL, &sq),
                  TRN_SUCCESS);
        CHECK_INT(trn_graph_reduce(g, TRN_GRAPH_SUM, sq, TRN_DTYPE_F32, 5u, &s), TRN_SUCCESS);
        CHECK_INT(trn_graph_export(g, s, NULL), TRN_SUCCESS);
        trn_program *p = compile(g, NULL);
        trn_graph_free(g);
        if (!p) return;
        CHECK(strstr(trn_program_source(p), mark[t]) != NULL);
        float X[5 * 3 * 48], Y[3];
        for (int i = 0; i < 5 * 3 * n; i++) X[i] = (float)((i * 7919) % 1013) / 101.3f - 4.9f;
        run(p, (int[]){x, s}, (void *[]){X, Y}, 2);
        for (int c = 0; c < 3; c++) {
            double exact = 0, mag = 0;
            for (int a = 0; a < 5; a++)
                for (int64_t j = 0; j < n; j++) {
                    const float v = X[(a * 3 + c) * n + j] * X[(a * 3 + c) * n + j];
                    exact += v;
                    mag += fabs(v);
                }
            CHECK(fabs((double)Y[c] - exact) <= 20 * 0x1p-24 * mag + fabs(exact) * 0x1p-24);
        }
        trn_program_free(p);
    }
}

// Float sums over strided rows with a contiguous kept dim run across the
// columns (render.c, render_reduce_cols): within ~16 u sum|x| plus the final
// rounding of the exact sum. x * x over dim 0 of 37 x 70 (blocks of 16, 16
// and 5 rows; column blocks of 64 and 6), and over dims 0 and 2 of
// 5 x 12 x 3 x 10 (an outer reduced loop, an outer kept dim).
static void test_column_sums(void) {
    const int64_t shapes[2][4] = {{37, 70, 0, 0}, {5, 12, 3, 10}};
    const int nds[2] = {2, 4};
    const unsigned masks[2] = {1u, 5u};
    for (int t = 0; t < 2; t++) {
        const int nd = nds[t];
        int64_t st[4], numel = 1;
        for (int i = nd - 1; i >= 0; i--) st[i] = numel, numel *= shapes[t][i];
        trn_graph *g;
        CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
        int x, sq, s;
        CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, nd, shapes[t], st, &x), TRN_SUCCESS);
        CHECK_INT(trn_graph_pointwise(g, TRN_EW_MUL, TRN_DTYPE_F32, TRN_DTYPE_F32, 2, (int[]){x, x},
                                      NULL, &sq),
                  TRN_SUCCESS);
        CHECK_INT(trn_graph_reduce(g, TRN_GRAPH_SUM, sq, TRN_DTYPE_F32, masks[t], &s), TRN_SUCCESS);
        CHECK_INT(trn_graph_export(g, s, NULL), TRN_SUCCESS);
        trn_program *p = compile(g, NULL);
        trn_graph_free(g);
        if (!p) return;
        CHECK(strstr(trn_program_source(p), "double acc[") != NULL);
        float *X = malloc((size_t)numel * sizeof *X), Y[70 * 12];
        for (int64_t i = 0; i < numel; i++) X[i] = (float)((i * 7919) % 1013) / 101.3f - 4.9f;
        run(p, (int[]){x, s}, (void *[]){X, Y}, 2);
        int bad = 0;
        for (int64_t o = 0; o < (t == 0 ? 70 : 12 * 10); o++) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < numel; i++) {
                // the kept coordinates of element i, as the output's index
                int64_t rest = i, kept = 0;
                for (int d = nd - 1, mul = 1; d >= 0; d--) {
                    const int64_t c = rest % shapes[t][d];
                    rest /= shapes[t][d];
                    if (!((masks[t] >> d) & 1)) kept += c * mul, mul *= (int)shapes[t][d];
                }
                if (kept != o) continue;
                const float v = X[i] * X[i];
                exact += v;
                mag += fabs(v);
            }
            bad += !(fabs((double)Y[o] - exact) <= 16 * 0x1p-24 * mag + fabs(exact) * 0x1p-24);
        }
        CHECK_INT(bad, 0);
        free(X);
        trn_program_free(p);
    }
}

// Float max/min over a multiple-of-8 inner loop run in branch-free lanes
// (render.c, put_float_extreme): exact, NaN wins, infinities kept. Rows of
// 48: plain values, one with a NaN in its last lane block, one all -inf but
// a single finite value.
static void test_float_lane_extremes(void) {
    for (int op = 0; op < 2; op++) {
        const trn_graph_reduce_op rop = op == 0 ? TRN_GRAPH_MAX : TRN_GRAPH_MIN;
        trn_graph *g;
        CHECK_INT(trn_graph_create(&g), TRN_SUCCESS);
        int64_t xs[2] = {3, 48}, xst[2] = {48, 1};
        int x, s;
        CHECK_INT(trn_graph_input(g, TRN_DTYPE_F32, 2, xs, xst, &x), TRN_SUCCESS);
        CHECK_INT(trn_graph_reduce(g, rop, x, TRN_DTYPE_F32, 2u, &s), TRN_SUCCESS);
        CHECK_INT(trn_graph_export(g, s, NULL), TRN_SUCCESS);
        trn_program *p = compile(g, NULL);
        trn_graph_free(g);
        if (!p) return;
        CHECK(strstr(trn_program_source(p), "m[l] = (e != e") != NULL);
        float X[3 * 48], Y[3];
        for (int i = 0; i < 3 * 48; i++) X[i] = (float)((i * 7919) % 1013) / 101.3f - 4.9f;
        X[48 + 45] = NAN;
        for (int i = 0; i < 48; i++) X[96 + i] = op == 0 ? -INFINITY : INFINITY;
        X[96 + 17] = 2.5f;
        run(p, (int[]){x, s}, (void *[]){X, Y}, 2);
        float want0 = X[0];
        for (int i = 1; i < 48; i++) want0 = op == 0 ? fmaxf(want0, X[i]) : fminf(want0, X[i]);
        CHECK(Y[0] == want0);
        CHECK(isnan(Y[1]));
        CHECK(Y[2] == 2.5f);
        trn_program_free(p);
    }
}

int main(void) {
    find_include_dir();
    test_fused_pointwise();
    test_softmax();
    test_matmul_host_and_workspace();
    test_cache();
    test_cache_trust();
    test_errors();
    test_store();
    test_shared_bodies();
    test_pow_literal();
    test_float_lane_sums();
    test_column_sums();
    test_float_lane_extremes();
    return TEST_REPORT();
}
