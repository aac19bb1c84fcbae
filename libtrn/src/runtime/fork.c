// fork.c - owns the runtime's fork handlers, so that a child forked from a
// process that used the device (DataLoader workers, multiprocessing's
// default start method on Linux) can use it too.
//
// Why this is sound: before fork, the forking thread drains every stream's
// queue and takes every runtime lock, in the order the code nests them
// (stream exec locks, the stream table, each stream's queue lock, then the
// allocator, the weight cache's table, pinned-host registry, oneDNN plan cache, trace buffer and
// metrics table, all leaves). So no other thread is inside any of them when
// the address space is copied: the child's allocator, registries and queues
// are consistent, and its device memory is the parent's, copied on write
// (shared blocks stay shared). The child then releases the locks (its only
// thread holds them) and restarts streams without workers; they start again
// on demand. The parallel pool runs the child's kernels on the calling thread
// (parallel.c), since its workers are gone.
//
// Not covered: locks of objects the runtime does not enumerate (an event
// being recorded by another thread at the moment of fork).
#include <pthread.h>

#include "../internal.h"

static void fork_prepare(void) {
    trn__stream_fork_prepare();
    trn__mem_fork_prepare();
    trn__wcache_fork_prepare();
    trn__host_fork_prepare();
    trn__plan_fork_prepare();
    trn__trace_fork_prepare();
    trn__metrics_fork_prepare();
}

static void release_leaves(void) {
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
