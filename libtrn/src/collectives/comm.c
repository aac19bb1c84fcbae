// comm.c - owns the shared region's lifetime (memfd create, attach, unmap),
// the barrier every collective step is built on, and failure handling:
// timeouts, dead peers and the region-wide abort flag.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

// Per-rank slot and per-pair pipe sizes. Small groups get large slots (fewer
// barriers per byte); memfd pages are only backed once touched, so unused
// pipes cost address space, not memory.
#define SLOT_BYTES_SMALL ((uint64_t)4 << 20)
#define SLOT_BYTES_LARGE ((uint64_t)1 << 20)
#define PIPE_BYTES_SMALL ((uint64_t)1 << 20)
#define PIPE_BYTES_LARGE ((uint64_t)128 << 10)
#define SMALL_GROUP 8

// Waiting: pause-spin first (a peer usually arrives within microseconds),
// then yield briefly (more ranks than cores), then sleep on a futex in the
// region until an arrival (or abort) wakes it. Sleeping early matters: a rank
// that waits for a peer still computing (DDP's bucket all-reduce during
// backward) would otherwise take CPU time from that peer, and from its own
// compute thread, whenever ranks outnumber free cores.
#define SPIN_PAUSES 64
#define SLEEP_AFTER_NS ((uint64_t)20000)
#define LIVENESS_EVERY_NS ((uint64_t)20000000)

static uint64_t align64(uint64_t v) { return (v + 63) & ~(uint64_t)63; }

static void layout(trn__region_hdr *h, int size) {
    bool small = size <= SMALL_GROUP;
    uint64_t n = (uint64_t)size;
    h->magic = TRN__COMM_MAGIC;
    h->size = size;
    h->slot_bytes = small ? SLOT_BYTES_SMALL : SLOT_BYTES_LARGE;
    h->pipe_bytes = small ? PIPE_BYTES_SMALL : PIPE_BYTES_LARGE;
    h->desc_bytes = align64(sizeof(trn__desc) + n * 3 * sizeof(uint64_t));
    h->off_ctl = align64(sizeof(trn__region_hdr));
    h->off_desc = align64(h->off_ctl + n * sizeof(trn__rank_ctl));
    h->off_slots = align64(h->off_desc + 2 * n * h->desc_bytes);
    h->off_pipes = align64(h->off_slots + 2 * n * h->slot_bytes);
    h->total_bytes = h->off_pipes + n * n * (sizeof(trn__pipe_ctl) + h->pipe_bytes);
}

trn_status trn_comm_region_create(int size, int *fd) {
    if (fd == NULL || size < 1 || size > TRN_COMM_MAX_RANKS)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "collective group size %d is out of range 1..%d", size,
                              TRN_COMM_MAX_RANKS);
    trn__region_hdr h;
    memset(&h, 0, sizeof h);
    layout(&h, size);
    // memfd: anonymous, so nothing is ever left in /dev/shm.
    int f = (int)syscall(SYS_memfd_create, "trn_c10d", 0);
    if (f < 0) return trn__set_error(TRN_ERROR_SYSTEM, "memfd_create failed: %s", strerror(errno));
    if (ftruncate(f, (off_t)h.total_bytes) != 0) {
        int e = errno;
        close(f);
        return trn__set_error(TRN_ERROR_SYSTEM,
                              "sizing the collective region to %llu bytes "
                              "failed: %s",
                              (unsigned long long)h.total_bytes, strerror(e));
    }
    if (pwrite(f, &h, sizeof h, 0) != (ssize_t)sizeof h) {
        int e = errno;
        close(f);
        return trn__set_error(TRN_ERROR_SYSTEM, "writing the collective region header failed: %s",
                              strerror(e));
    }
    *fd = f;
    return TRN_SUCCESS;
}

trn_status trn_comm_attach(int fd, int rank, int size, int64_t timeout_ms, trn_comm **out) {
    if (out == NULL || size < 1 || size > TRN_COMM_MAX_RANKS || rank < 0 || rank >= size)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "rank %d of a collective group of %d is invalid", rank, size);
    trn__region_hdr h;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
        return trn__set_error(TRN_ERROR_SYSTEM, "reading the collective region header failed: %s",
                              strerror(errno));
    if (h.magic != TRN__COMM_MAGIC || h.size != size)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "the collective region was made for %d ranks, "
                              "this group has %d",
                              h.size, size);
    void *base = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return trn__set_error(TRN_ERROR_SYSTEM, "mapping the collective region failed: %s",
                              strerror(errno));
    trn_comm *c = calloc(1, sizeof *c);
    if (c == NULL) {
        munmap(base, h.total_bytes);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    c->base = base;
    c->map_bytes = h.total_bytes;
    c->hdr = base;
    c->rank = rank;
    c->size = size;
    c->timeout_ms = timeout_ms;
    trn__comm_ctl(c, rank)->base_addr = (uint64_t)(uintptr_t)base;
    trn__comm_ctl(c, rank)->pid = (int32_t)getpid();
    // Nobody leaves before everybody is here: the rendezvous that handed out
    // the descriptor (a TCP store hosted by rank 0's process) is then over on
    // every rank, so a rank 0 that returns and exits at once (accelerate's
    // notebook_launcher environment check) cannot reset a peer still reading
    // the store.
    trn_status st = trn__comm_barrier(c, "attach");
    if (st != TRN_SUCCESS) {
        trn_comm_destroy(c);
        return st;
    }
    *out = c;
    return TRN_SUCCESS;
}

void trn_comm_destroy(trn_comm *c) {
    if (c == NULL) return;
    munmap(c->base, c->map_bytes);
    free(c->scratch);
    free(c);
}

void trn_comm_set_timeout(trn_comm *c, int64_t timeout_ms) {
    if (c) c->timeout_ms = timeout_ms;
}
int trn_comm_rank(const trn_comm *c) { return c ? c->rank : -1; }
int trn_comm_size(const trn_comm *c) { return c ? c->size : 0; }
bool trn_comm_single_copy(const trn_comm *c) { return c && c->direct > 0; }

// Wakes every rank sleeping in a barrier (shared futex: the region is mapped
// by several processes).
static void wake_sleepers(trn_comm *c) {
    atomic_fetch_add(&c->hdr->wake, 1);
    if (atomic_load(&c->hdr->sleepers) > 0)
        (void)syscall(SYS_futex, &c->hdr->wake, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static void set_abort(trn_comm *c, const char *msg) {
    int32_t expected = 0;
    // The first reason wins; later ones are consequences.
    if (atomic_compare_exchange_strong(&c->hdr->aborted, &expected, -1)) {
        snprintf(c->hdr->abort_msg, sizeof c->hdr->abort_msg, "%s", msg);
        atomic_store_explicit(&c->hdr->aborted, 1, memory_order_release);
        wake_sleepers(c);
    }
}

void trn_comm_abort(trn_comm *c, const char *why) {
    if (c == NULL) return;
    char msg[sizeof c->hdr->abort_msg];
    snprintf(msg, sizeof msg, "rank %d aborted the group: %s", c->rank,
             why ? why : "no reason given");
    set_abort(c, msg);
}

trn_status trn__comm_check_abort(trn_comm *c, const char *what) {
    int32_t a = atomic_load_explicit(&c->hdr->aborted, memory_order_acquire);
    if (a == 0) return TRN_SUCCESS;
    // -1: the reason is being written; it is short, so wait for it.
    while (a < 0) {
        sched_yield();
        a = atomic_load_explicit(&c->hdr->aborted, memory_order_acquire);
    }
    return trn__set_error(TRN_ERROR_SYSTEM,
                          "neuron %s on rank %d failed: the process group was "
                          "aborted (%s)",
                          what, c->rank, c->hdr->abort_msg);
}

trn_status trn__comm_fail(trn_comm *c, const char *fmt, ...) {
    char msg[sizeof c->hdr->abort_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    set_abort(c, msg);
    return trn__set_error(TRN_ERROR_SYSTEM, "%s", msg);
}

bool trn__comm_peer_alive(trn_comm *c, int r) {
    int32_t pid = trn__comm_ctl(c, r)->pid;
    if (pid <= 0) return true;  // not attached yet: cannot tell
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errno != ENOENT;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return true;
    buf[n] = '\0';
    // "pid (comm) S ...": the state follows the last ')'.
    const char *p = strrchr(buf, ')');
    if (p == NULL || p[1] == '\0' || p[2] == '\0') return true;
    return p[2] != 'Z' && p[2] != 'X';
}

// Lists the ranks whose arrive counter is below `target` into buf.
static void missing_ranks(trn_comm *c, uint64_t target, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int r = 0; r < c->size && used + 16 < size; r++) {
        uint64_t a = atomic_load_explicit(&trn__comm_ctl(c, r)->arrive, memory_order_acquire);
        if (a < target)
            used += (size_t)snprintf(buf + used, size - used, "%s%d", used ? ", " : "", r);
    }
}

// Sleeps until `wake` moves past `seen` or `ns` pass. Arrivals store their
// counter, then bump `wake`, then read `sleepers`; a sleeper bumps
// `sleepers`, then re-reads the counters (all sequentially consistent), so
// either the arrival sees the sleeper and wakes it, or the sleeper sees the
// arrival and does not sleep; a bump between reading `seen` and sleeping
// makes the futex return at once.
static void sleep_for_arrival(trn_comm *c, uint32_t seen, uint64_t target, uint64_t ns) {
    atomic_fetch_add(&c->hdr->sleepers, 1);
    bool all = true;
    for (int r = 0; r < c->size && all; r++)
        all = atomic_load(&trn__comm_ctl(c, r)->arrive) >= target;
    if (!all && atomic_load(&c->hdr->aborted) == 0) {
        struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
        (void)syscall(SYS_futex, &c->hdr->wake, FUTEX_WAIT, seen, &ts, NULL, 0);
    }
    atomic_fetch_sub(&c->hdr->sleepers, 1);
}

trn_status trn__comm_barrier(trn_comm *c, const char *what) {
    uint64_t target = ++c->barriers;
    atomic_store(&trn__comm_ctl(c, c->rank)->arrive, target);
    wake_sleepers(c);
    uint64_t start = 0, last_check = 0;
    int first = 0;
    for (unsigned iter = 0;; iter++) {
        uint32_t seen = atomic_load(&c->hdr->wake);
        while (first < c->size && atomic_load_explicit(&trn__comm_ctl(c, first)->arrive,
                                                       memory_order_acquire) >= target)
            first++;
        if (first == c->size) return TRN_SUCCESS;
        trn_status st = trn__comm_check_abort(c, what);
        if (st != TRN_SUCCESS) return st;
        if (iter < SPIN_PAUSES) {
            trn__cpu_relax();
            continue;
        }
        uint64_t now = trn__now_ns();
        if (start == 0) start = last_check = now;
        char ranks[256];
        if (c->timeout_ms > 0 && now - start > (uint64_t)c->timeout_ms * UINT64_C(1000000)) {
            missing_ranks(c, target, ranks, sizeof ranks);
            return trn__comm_fail(c,
                                  "neuron %s (collective #%llu) timed out on "
                                  "rank %d after %lld ms waiting for rank(s) "
                                  "%s",
                                  what, (unsigned long long)c->seq, c->rank,
                                  (long long)c->timeout_ms, ranks);
        }
        if (now - last_check > LIVENESS_EVERY_NS) {
            last_check = now;
            for (int r = 0; r < c->size; r++) {
                if (atomic_load_explicit(&trn__comm_ctl(c, r)->arrive, memory_order_acquire) <
                        target &&
                    !trn__comm_peer_alive(c, r))
                    return trn__comm_fail(c,
                                          "neuron %s (collective #%llu) failed on rank %d: "
                                          "rank %d (pid %d) exited without joining it",
                                          what, (unsigned long long)c->seq, c->rank, r,
                                          (int)trn__comm_ctl(c, r)->pid);
            }
        }
        if (now - start > SLEEP_AFTER_NS) {
            // Woken by the next arrival; wakes up anyway for the liveness
            // check and the timeout.
            uint64_t ns = LIVENESS_EVERY_NS;
            if (c->timeout_ms > 0) {
                uint64_t left = (uint64_t)c->timeout_ms * UINT64_C(1000000) - (now - start);
                if (left + 1000000 < ns) ns = left + 1000000;
            }
            sleep_for_arrival(c, seen, target, ns);
        } else {
            sched_yield();
        }
    }
}

trn_status trn_comm_barrier(trn_comm *c) {
    if (c == NULL) return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "null communicator");
    trn__desc d;
    memset(&d, 0, sizeof d);
    snprintf(d.what, sizeof d.what, "barrier");
    return trn__comm_begin(c, &d, NULL, NULL);
}

void trn_comm_agree_next(trn_comm *c, const trn_comm_agree *agree) {
    if (c == NULL) return;
    c->has_agree = agree != NULL;
    if (agree) c->agree = *agree;
}

trn_status trn_comm_fail_call(trn_comm *c, const char *what, const char *why) {
    if (c == NULL) return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "null communicator");
    trn__desc d;
    memset(&d, 0, sizeof d);
    snprintf(d.what, sizeof d.what, "%s", what ? what : "collective");
    d.failed = 1;
    snprintf(d.error, sizeof d.error, "%s", why ? why : "no reason given");
    c->has_agree = false;
    return trn__comm_begin(c, &d, NULL, NULL);
}

// The agreed fields of every rank against this rank's; the first rank that
// differs is named with both values (so each rank's message starts with its
// own value, as the other mismatch errors do).
static trn_status check_agreed(trn_comm *c, uint64_t seq) {
    const trn__desc *mine = trn__comm_desc(c, seq, c->rank);
    for (int r = 0; r < c->size; r++) {
        const trn__desc *o = trn__comm_desc(c, seq, r);
        if (o->root != mine->root)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "neuron %s: ranks passed different roots: "
                                  "rank %d passed root %d, rank %d passed "
                                  "root %d",
                                  mine->what, c->rank, (int)mine->root, r, (int)o->root);
        if (mine->agree_dtype[0] && o->agree_dtype[0] &&
            strncmp(mine->agree_dtype, o->agree_dtype, sizeof mine->agree_dtype) != 0)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "neuron %s: dtypes differ across ranks: rank %d passed %.*s, "
                                  "rank %d passed %.*s",
                                  mine->what, c->rank, TRN_COMM_DTYPE_NAME_MAX, mine->agree_dtype,
                                  r, TRN_COMM_DTYPE_NAME_MAX, o->agree_dtype);
        if (o->parts != mine->parts || o->part != mine->part)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "neuron %s: coalesced calls differ across ranks: rank %d "
                                  "passed %u tensor(s) (this is #%u), rank %d passed %u (#%u)",
                                  mine->what, c->rank, mine->parts ? mine->parts : 1, mine->part, r,
                                  o->parts ? o->parts : 1, o->part);
    }
    return TRN_SUCCESS;
}

trn_status trn__comm_begin(trn_comm *c, const trn__desc *d, const uint64_t *parts,
                           const int64_t *expected) {
    bool agreed = c->has_agree;
    c->has_agree = false;  // consumed, whatever happens below
    trn_status st = trn__comm_check_abort(c, d->what);
    if (st != TRN_SUCCESS) return st;
    uint64_t seq = ++c->seq;
    trn__desc *mine = trn__comm_desc(c, seq, c->rank);
    // The reason of a stand-in is the bulk of a descriptor: copied only then.
    memcpy(mine, d, d->failed ? sizeof *d : offsetof(trn__desc, error));
    mine->seq = seq;
    if (agreed && !d->failed) {
        snprintf(mine->agree_dtype, sizeof mine->agree_dtype, "%.*s", TRN_COMM_DTYPE_NAME_MAX - 1,
                 c->agree.dtype);
        mine->part = c->agree.part;
        mine->parts = c->agree.parts;
    }
    size_t n = (size_t)c->size;
    if (parts) memcpy(trn__desc_parts(mine), parts, 2 * n * sizeof(uint64_t));
    if (expected) memcpy(trn__desc_expected(mine, c->size), expected, n * sizeof(int64_t));
    st = trn__comm_barrier(c, d->what);
    if (st != TRN_SUCCESS) return st;
    // A rank standing in for a call it could not make fails everyone's, with
    // the same message on every rank.
    for (int r = 0; r < c->size; r++) {
        const trn__desc *o = trn__comm_desc(c, seq, r);
        if (o->failed)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "neuron %.*s (collective #%llu) failed on "
                                  "every rank: rank %d could not make the "
                                  "call: %.*s",
                                  TRN__COMM_WHAT_MAX, o->what, (unsigned long long)seq, r,
                                  TRN__COMM_ERROR_MAX, o->error);
    }
    for (int r = 0; r < c->size; r++) {
        const trn__desc *o = trn__comm_desc(c, seq, r);
        if (strcmp(o->what, d->what) != 0)
            return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                  "neuron collective #%llu mismatch: rank %d "
                                  "called %s while rank %d called %.*s",
                                  (unsigned long long)seq, c->rank, d->what, r, TRN__COMM_WHAT_MAX,
                                  o->what);
    }
    return check_agreed(c, seq);
}
