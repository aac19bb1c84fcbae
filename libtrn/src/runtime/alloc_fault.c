// alloc_fault.c - allocation-failure injection for the C tests. Debug builds
// (TRN_ALLOC_FAULTS, see CMakeLists.txt) link libtrn with --wrap for the
// malloc family, so every allocation libtrn makes comes here first; a test
// arms a countdown and the allocation it reaches returns NULL, as on a host
// out of memory. Release builds (the Python package) compile nothing here
// and call libc's allocator directly: no cost.
#ifdef TRN_ALLOC_FAULTS
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc_fault.h"

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__real_aligned_alloc(size_t align, size_t size);
int __real_posix_memalign(void **out, size_t align, size_t size);
// Hidden: only libtrn's own calls are redirected here (by the linker), and
// no other library in the process can bind to them.
#define WRAP __attribute__((visibility("hidden")))
WRAP void *__wrap_malloc(size_t size);
WRAP void *__wrap_calloc(size_t n, size_t size);
WRAP void *__wrap_realloc(void *p, size_t size);
WRAP void *__wrap_aligned_alloc(size_t align, size_t size);
WRAP int __wrap_posix_memalign(void **out, size_t align, size_t size);

// > 0: allocations left until the one that fails (any thread's: pool
// workers and stream threads count too). Threads that race past the failing
// one drive it below 0, where nothing fails.
static _Atomic int64_t countdown;
static atomic_bool fired;

static bool fail_now(void) {
    if (atomic_load_explicit(&countdown, memory_order_relaxed) <= 0) return false;
    if (atomic_fetch_sub(&countdown, 1) != 1) return false;
    atomic_store(&fired, true);
    errno = ENOMEM;
    return true;
}

void trn__alloc_fault_arm(int64_t nth) {
    atomic_store(&fired, false);
    atomic_store(&countdown, nth);
}

bool trn__alloc_fault_disarm(void) {
    atomic_store(&countdown, 0);
    return atomic_exchange(&fired, false);
}

void *__wrap_malloc(size_t size) { return fail_now() ? NULL : __real_malloc(size); }
void *__wrap_calloc(size_t n, size_t size) { return fail_now() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t size) { return fail_now() ? NULL : __real_realloc(p, size); }
void *__wrap_aligned_alloc(size_t align, size_t size) {
    return fail_now() ? NULL : __real_aligned_alloc(align, size);
}
int __wrap_posix_memalign(void **out, size_t align, size_t size) {
    return fail_now() ? ENOMEM : __real_posix_memalign(out, align, size);
}
#else
// ISO C wants a translation unit to declare something.
typedef int trn__alloc_fault_unused;
#endif
