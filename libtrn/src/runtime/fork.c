// fork.c - owns the runtime's fork handlers, so that a child forked from a
// process that used the device (DataLoader workers, multiprocessing's
// default start method on Linux) can use it too.
//
// Why this is sound: before fork, the forking thread drains every stream's
// queue and takes every runtime lock, in the order the code nests them
// (stream exec locks, the stream table, each stream's queue lock, then the
// allocator, the weight cache's table, pinned-host registry, oneDNN plan cache, trace buffer and
// metrics table, all leaves; last, the leaf locks of the layers above,
// trn_fork_add_leaf_lock). So no other thread is inside any of them when
// the address space is copied: the child's allocator, registries and queues
// are consistent, and its device memory is the parent's, copied on write
// (shared blocks stay shared). The child then releases the locks (its only
// thread holds them) and restarts streams without workers; they start again
// on demand. The parallel pool runs the child's kernels on the calling thread
// (parallel.c), since its workers are gone.
//
// Not covered: locks of objects the runtime does not enumerate (an event
// being recorded by another thread at the moment of fork), and the layers'
// locks not registered as leaves.
#include <pthread.h>
#include <stdatomic.h>

#include "../internal.h"
#include "trn/fork.h"

// Registered leaf locks: an entry is written before g_n_leaves counts it.
static trn_fork_lock_fn g_leaf_lock[TRN_FORK_LEAVES_MAX], g_leaf_unlock[TRN_FORK_LEAVES_MAX];
static atomic_size_t g_n_leaves;
static pthread_mutex_t g_leaves_mu = PTHREAD_MUTEX_INITIALIZER;  // registration
// How many leaves prepare took (the forking thread's, until parent / child).
static size_t g_leaves_held;

trn_status trn_fork_add_leaf_lock(trn_fork_lock_fn lock, trn_fork_lock_fn unlock) {
    if (lock == NULL || unlock == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_fork_add_leaf_lock: NULL function");
    trn__lock(&g_leaves_mu);
    const size_t n = atomic_load(&g_n_leaves);
    if (n == TRN_FORK_LEAVES_MAX) {
        trn__unlock(&g_leaves_mu);
        return trn__set_error(TRN_ERROR_UNSUPPORTED,
                              "trn_fork_add_leaf_lock: %d leaf locks are registered already",
                              TRN_FORK_LEAVES_MAX);
    }
    g_leaf_lock[n] = lock;
    g_leaf_unlock[n] = unlock;
    atomic_store(&g_n_leaves, n + 1);
    trn__unlock(&g_leaves_mu);
    return TRN_SUCCESS;
}

// Last: a leaf's holder takes nothing else inside it, so it lets go while
// this thread holds every runtime lock; taken first, a thread holding a
// runtime lock and about to take the leaf would wait on this one forever.
static void leaves_lock(void) {
    g_leaves_held = atomic_load(&g_n_leaves);
    for (size_t i = 0; i < g_leaves_held; i++) g_leaf_lock[i]();
}

static void leaves_unlock(void) {
    for (size_t i = g_leaves_held; i-- > 0;) g_leaf_unlock[i]();
    g_leaves_held = 0;
}

static void fork_prepare(void) {
    trn__stream_fork_prepare();
    trn__mem_fork_prepare();
    trn__wcache_fork_prepare();
    trn__host_fork_prepare();
    trn__plan_fork_prepare();
    trn__trace_fork_prepare();
    trn__metrics_fork_prepare();
    leaves_lock();
}

static void release_leaves(void) {
    leaves_unlock();
    trn__metrics_fork_release();
    trn__trace_fork_release();
    trn__plan_fork_release();
    trn__host_fork_release();
    trn__wcache_fork_release();
    trn__mem_fork_release();
}

static void fork_parent(void) {
    release_leaves();
    trn__stream_fork_parent();
}

static void fork_child(void) {
    release_leaves();
    if (!trn__stream_fork_child()) trn__fork_mark_bad();
}

int trn__fork_handlers_install(void) {
    return pthread_atfork(fork_prepare, fork_parent, fork_child);
}
