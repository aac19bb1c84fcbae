// test_protect.c - debug memory protection. Children re-exec this binary with
// TORCH_NEURONX_DEBUG_PROTECT_MEMORY=1 (read once, at init): copies through
// the kernel work, concurrent kernels share a block, the access hooks are
// reference-counted, and a plain host read of device memory dies with
// SIGSEGV. Sanitizers are told not to catch that signal.
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"
#include "test.h"
#include "test_reexec.h"

static trn_status copy_f32(trn_stream *s, void *dst, const void *src, int64_t n) {
    int64_t one = 1;
    trn_copy_desc c = {1, &n, dst, &one, TRN_DTYPE_F32, src, &one, TRN_DTYPE_F32};
    return trn_copy_launch(s, &c);
}

// Child: everything that must work with protection on.
static int child_copy(void) {
    CHECK(trn_mem_protect_enabled());
    trn_stream *s;
    CHECK_OK(trn_stream_get_default(0, &s));
    float h[1000], back[1000];
    for (int i = 0; i < 1000; i++) h[i] = (float)i;
    void *d;
    CHECK_OK(trn_mem_alloc(0, sizeof h, NULL, &d));
    CHECK_INT((uintptr_t)d % 64, 0);
    CHECK_OK(copy_f32(s, d, h, 1000));
    CHECK_OK(copy_f32(s, back, d, 1000));
    CHECK_OK(trn_stream_synchronize(s));
    CHECK(memcmp(h, back, sizeof h) == 0);

    // Many streams reading the same block at once (access refcount).
    enum { STREAMS = 4, ROUNDS = 200 };
    static float sinks[STREAMS][1000];
    trn_stream *ss[STREAMS];
    for (int k = 0; k < STREAMS; k++) CHECK_OK(trn_stream_create(0, 0, &ss[k]));
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < STREAMS; k++) CHECK_OK(copy_f32(ss[k], sinks[k], d, 1000));
    for (int k = 0; k < STREAMS; k++) {
        CHECK_OK(trn_stream_synchronize(ss[k]));
        CHECK(memcmp(sinks[k], h, sizeof h) == 0);
    }

    // The hooks themselves: nested begin/end keep the block open.
    CHECK_OK(trn__mem_access_begin(d, 16));
    CHECK_OK(trn__mem_access_begin((char *)d + 8, 8));
    CHECK(((volatile float *)d)[1] == 1.0f);
    trn__mem_access_end((char *)d + 8, 8);
    CHECK(((volatile float *)d)[2] == 2.0f);
    trn__mem_access_end(d, 16);
    // Host pointers are not device memory: no-ops.
    CHECK_OK(trn__mem_access_begin(h, sizeof h));
    trn__mem_access_end(h, sizeof h);
    // Ranges beyond the block are refused.
    CHECK_STATUS(trn__mem_access_begin(d, 4096 + 1), TRN_ERROR_INVALID_POINTER);
    CHECK_CONTAINS(trn_last_error(), "runs past the end");
    CHECK_OK(trn_mem_free(d));
    // Reuse from the cache keeps protection working.
    void *d2;
    CHECK_OK(trn_mem_alloc(0, sizeof h, NULL, &d2));
    CHECK(d2 == d);
    CHECK_OK(copy_f32(s, d2, h, 1000));
    CHECK_OK(copy_f32(s, back, d2, 1000));
    CHECK_OK(trn_stream_synchronize(s));
    CHECK(back[999] == 999.0f);
    CHECK_OK(trn_mem_free(d2));
    CHECK_OK(trn_mem_empty_cache(0));
    return TEST_REPORT();
}

// Child: a host read after the kernels are done must fault.
static int child_read(void) {
    trn_stream *s;
    float h[16] = {1};
    void *d;
    if (trn_stream_get_default(0, &s) != TRN_SUCCESS ||
        trn_mem_alloc(0, sizeof h, NULL, &d) != TRN_SUCCESS ||
        copy_f32(s, d, h, 16) != TRN_SUCCESS || trn_stream_synchronize(s) != TRN_SUCCESS)
        return 2;
    volatile float x = *(volatile float *)d;  // must raise SIGSEGV
    (void)x;
    return 3;
}

static void append_env(const char *name, const char *option) {
    const char *old = getenv(name);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s%s%s", old ? old : "", old && *old ? ":" : "", option);
    setenv(name, buf, 1);
}

// The child's settings: protection on, sanitizers leaving SIGSEGV to it.
static void protect_env(const void *unused) {
    (void)unused;
    setenv("TORCH_NEURONX_DEBUG_PROTECT_MEMORY", "1", 1);
    append_env("ASAN_OPTIONS", "handle_segv=0");
    append_env("UBSAN_OPTIONS", "handle_segv=0");
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "copy") == 0) return child_copy();
    if (argc > 1 && strcmp(argv[1], "read") == 0) return child_read();

    // This process runs without protection: device memory is plain memory.
    unsetenv("TORCH_NEURONX_DEBUG_PROTECT_MEMORY");
    CHECK(!trn_mem_protect_enabled());
    void *d;
    CHECK_OK(trn_mem_alloc(0, 64, NULL, &d));
    memset(d, 0, 64);
    CHECK_OK(trn__mem_access_begin(d, 64));  // cheap no-op
    trn__mem_access_end(d, 64);
    CHECK_OK(trn_mem_free(d));

    int st = test_reexec(argv[0], "copy", protect_env, NULL);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    st = test_reexec(argv[0], "read", protect_env, NULL);
    CHECK(WIFSIGNALED(st));
    if (WIFSIGNALED(st))
        CHECK_INT(WTERMSIG(st), SIGSEGV);
    else
        fprintf(stderr, "read child exited with %d\n", WEXITSTATUS(st));
    return TEST_REPORT();
}
