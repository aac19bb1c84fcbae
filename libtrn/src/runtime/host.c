// host.c - owns pinned host memory: page-aligned host buffers recorded in a
// registry so the C++ layer can ask whether a CPU tensor may be copied
// asynchronously (trn_host_is_pinned, interior pointers included). Nothing is
// actually locked in RAM: the emulated device reads host memory directly.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../internal.h"

typedef struct pinned {
    char *ptr;
    size_t size;
} pinned;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pinned *g_reg;  // sorted by ptr
static size_t g_n, g_cap;

// Index of the first entry whose address is > ptr.
static size_t upper(const void *ptr) {
    size_t lo = 0, hi = g_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((const char *)ptr < g_reg[mid].ptr)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

trn_status trn_host_alloc(size_t nbytes, void **ptr) {
    if (ptr == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_host_alloc: ptr is NULL");
    *ptr = NULL;
    trn_status st = trn_runtime_init();
    if (st != TRN_SUCCESS || nbytes == 0) return st;
    long page = sysconf(_SC_PAGE_SIZE);
    void *p = NULL;
    char want[32];
    trn__format_bytes(want, sizeof want, nbytes);
    if (posix_memalign(&p, page > 0 ? (size_t)page : 4096, nbytes) != 0)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "pinned host allocation of %s failed", want);
    trn__lock(&g_mu);
    if (g_n == g_cap) {
        size_t cap = g_cap ? g_cap * 2 : 64;
        pinned *grown = realloc(g_reg, cap * sizeof *grown);
        if (grown == NULL) {
            trn__unlock(&g_mu);
            free(p);
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                                  "pinned host allocation of %s failed: no "
                                  "memory for its registry entry",
                                  want);
        }
        g_reg = grown;
        g_cap = cap;
    }
    size_t i = upper(p);
    memmove(&g_reg[i + 1], &g_reg[i], (g_n - i) * sizeof *g_reg);
    g_reg[i] = (pinned){p, nbytes};
    g_n++;
    trn__unlock(&g_mu);
    *ptr = p;
    return TRN_SUCCESS;
}

trn_status trn_host_free(void *ptr) {
    if (ptr == NULL) return TRN_SUCCESS;
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    trn__lock(&g_mu);
    size_t i = upper(ptr);
    if (i == 0 || g_reg[i - 1].ptr != (char *)ptr) {
        trn__unlock(&g_mu);
        return trn__set_error(TRN_ERROR_INVALID_POINTER,
                              "trn_host_free: %p is not the start of a pinned "
                              "host buffer (or was already freed)",
                              ptr);
    }
    memmove(&g_reg[i - 1], &g_reg[i], (g_n - i) * sizeof *g_reg);
    g_n--;
    trn__unlock(&g_mu);
    free(ptr);
    return TRN_SUCCESS;
}

bool trn_host_is_pinned(const void *ptr) {
    // In a bad fork the mutex may have been copied in a locked state.
    if (ptr == NULL || trn_runtime_in_bad_fork()) return false;
    trn__lock(&g_mu);
    size_t i = upper(ptr);
    bool pinned_ptr = i > 0 && (uintptr_t)ptr - (uintptr_t)g_reg[i - 1].ptr < g_reg[i - 1].size;
    trn__unlock(&g_mu);
    return pinned_ptr;
}

// ---- fork (see fork.c): the registry's lock is held across fork. ----------------
void trn__host_fork_prepare(void) { trn__lock(&g_mu); }
void trn__host_fork_release(void) { trn__unlock(&g_mu); }
