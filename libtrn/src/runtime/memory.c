// memory.c - owns device memory: the per-device caching allocator (segments
// split into blocks, stream-ordered reuse, the capacity limit and its OOM
// handling, statistics), the registry of every block, and debug protection.
// One mutex guards everything here. Allocation is driven by a single Python
// thread in practice, and stream workers only take the lock in protect mode,
// so a finer scheme would buy nothing. The lock is never held while waiting
// for a stream: tasks call trn__mem_access_begin, which takes it.
//
// The design is PyTorch's CUDA caching allocator's, so that a block holds
// little more than its request (allocated bytes track requested bytes):
// requests round up to 512 B; those under 1 MiB come from the small pool,
// whose segments are 2 MiB; the others from the large pool, whose segments
// are 20 MiB for requests under 10 MiB and the request rounded up to 2 MiB
// beyond. A request takes the smallest cached block of its pool and stream
// that holds it (best fit) and splits off the rest as a cached block; a
// freed block merges with cached neighbours of its segment. A segment goes
// back to the host only whole (empty_cache, or a flush before an OOM).
// Where a preferred segment would pass the capacity (or the host refuses
// it), a segment of just the request is tried before flushing the cache.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../internal.h"
#include "../kernels/blas/weight_cache.h"
#include "trn/ipc.h"
#include "trn/log.h"

// Under AddressSanitizer (TRN_SANITIZE; `make fuzz-asan`, docs/fuzz.md)
// device memory is poisoned everywhere except the requested bytes of
// allocated blocks: segments are carved into blocks here, so without it a
// kernel writing past a tensor's bytes would land in a neighbouring block
// (or the rounding slack) unseen. Mapped segments (protect mode, shared
// memory) are left alone.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define MEM_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define MEM_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define MEM_POISON(p, n) ((void)(p), (void)(n))
#define MEM_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define ALIGNMENT 64
#define MIN_BLOCK ((size_t)512)     // rounding granule and smallest block
#define SMALL_SIZE MiB              // requests below: small pool
#define SMALL_SEGMENT (2 * MiB)     // small pool segment
#define LARGE_SEGMENT (20 * MiB)    // large pool segment for requests below
#define MIN_LARGE_ALLOC (10 * MiB)  // this; larger ones get their own
#define ROUND_LARGE (2 * MiB)       // segment, rounded up to this

typedef enum block_state {
    BLOCK_ALLOCATED,  // handed to a user
    BLOCK_FREEING,    // freed, waiting for recorded streams before caching
    BLOCK_CACHED,     // in its stream's free list
    BLOCK_QUICK,      // freed whole into its stream's quick bin (not merged)
    BLOCK_RELEASED,   // returned to the host; about to leave the registry
} block_state;

// A block is a piece of a segment; a segment's blocks tile it in address
// order (prev/next), so a segment is whole again when its only block has
// neither neighbour. That block's ptr and size are then the segment's.
typedef struct block {
    char *ptr;
    size_t size;       // rounded size: what the request occupies
    size_t requested;  // as asked for by the current user
    size_t map_size;   // protect mode: the mapping's length; else 0
    int device;
    block_state state;
    bool small;                 // pool: segments of the small pool
    trn_stream *stream;         // allocation stream; owns the free list it joins
    uint64_t free_seq;          // stream's launch count when the block was cached
    struct block *prev, *next;  // neighbours in the segment (NULL: its ends)
    trn_stream **uses;          // other streams recorded with trn_mem_record_stream
    size_t n_uses, cap_uses;
    int access;  // protect mode: kernel accesses in flight
    // The weight cache holds entries for operands inside this block (set by
    // trn__mem_wcache_record while allocated): only such a block's free takes
    // the cache's lock to drop them, not every activation's.
    bool wcached;
    // The weight cache's name for this allocation at wc_version (0: none
    // yet; trn__mem_wcache_token): unique in the process, so an entry made
    // for one allocation is never found by a later one at the same address.
    // With worker-thread streams a product's kernel can run after the host
    // freed its operand's block and handed the address to a new tensor.
    uint64_t wc_token, wc_version;
    int shm_fd;  // shared block (trn/ipc.h): its memfd; else -1 (or 0 from
                 // calloc, see is_shared)
    bool shared;
} block;

// Cached blocks of one (device, pool, stream), sorted by (size, address) so
// a request finds its best fit by binary search. `blocks` counts every block
// of the list's segments (cached or not) and `cap` never falls below it, so
// caching a freed block never needs host memory.
typedef struct free_list {
    block **items;
    size_t n, cap, blocks;
} free_list;

// Small blocks freed whole, kept unmerged for the next request of exactly
// their size on their stream. Decode frees and allocates the same few small
// sizes once per op; a bin hit skips the best-fit search, the split, the
// merge and their registry and free-list memmoves (most of the allocator's
// time per op; the lock itself is a small part of it). A bin block counts as
// cached (reserved, not allocated). A request of another size takes its best
// fit from the free list, without the bins' blocks unless nothing else holds
// it; whatever wants whole segments or the merged layout (a request about to
// reserve a segment, release_cached, the snapshot) flushes the bins first,
// so their blocks merge as they would have at their free. What a bin keeps
// from merging is bounded: QUICK_N blocks of at most QUICK_MAX_BLOCK per
// stream.
#define QUICK_N 8
#define QUICK_MAX_BLOCK (64 * KiB)  // larger blocks take the free list
typedef struct quick_bin {
    block *items[QUICK_N];  // oldest first
    size_t n;
} quick_bin;

// Poison mode (see poison_on): freed small blocks wait here, oldest first,
// before anything can reuse them, so that a late reader finds poison rather
// than the next owner's values (LIFO reuse would hand a block out again at
// once). A block leaving it has its poison checked.
#define QUARANTINE_N 256
typedef struct quarantine {
    block *items[QUARANTINE_N];  // a ring: items[head] is the oldest
    size_t head, n;
} quarantine;

typedef struct dev_alloc {
    trn_mem_stats stats;
    uint64_t cached_bytes;                        // free lists, quick bins, quarantine
    free_list free[2][1 + TRN_STREAM_POOL_SIZE];  // [small][stream index]
    quick_bin quick[1 + TRN_STREAM_POOL_SIZE];    // [stream index], small pool
    quarantine quarantine;
    bool page_in_use;  // this process set the stats page's in_use (publish)
} dev_alloc;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static dev_alloc g_dev[TRN_MAX_DEVICES];
static size_t g_limit[TRN_MAX_DEVICES];  // 0 = the capacity
static trn_mem_observer g_observer;
static void *g_observer_ctx;

static size_t limit_of(int device);

static void observe(trn_mem_event event, const block *b, size_t size) {
    if (g_observer != NULL)
        g_observer(g_observer_ctx, event, b->device, b->ptr, size,
                   b->stream != NULL ? trn_stream_id(b->stream) : 0);
}

// Mirrors the device's memory figures into the stats page (neuron-top).
static void publish(int device) {
    trn_stats_device *p = &trn_stats_page_get()->devices[device];
    const trn_mem_stats *st = &g_dev[device].stats;
    __atomic_store_n(&p->mem_allocated, st->allocated_bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&p->mem_reserved, st->reserved_bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&p->mem_capacity, (uint64_t)limit_of(device), __ATOMIC_RELAXED);
    // Once: `in_use` shares a cache line with `running`, which a stream's
    // worker writes twice a task, so storing it on every allocation and free
    // took that line from the worker's core each time (the page is copied,
    // never cleared, so once set it stays set, in a forked child too).
    if (!g_dev[device].page_in_use) {
        __atomic_store_n(&p->in_use, 1, __ATOMIC_RELAXED);
        g_dev[device].page_in_use = true;
    }
}

static size_t limit_of(int device) {
    size_t capacity = trn__config_get()->capacity;
    size_t limit = g_limit[device];
    return limit != 0 && limit < capacity ? limit : capacity;
}
// Blocks handed out lately, direct-mapped by address, so that a free finds
// its block without the registry's binary search (pointer chasing through
// every level: ~1 % of a decode op). An entry is NULL or an allocated block:
// set by trn_mem_alloc, cleared by the free of its block.
#define RECENT_N 64
static block *g_recent[RECENT_N];
static size_t recent_slot(const void *ptr) { return ((uintptr_t)ptr / MIN_BLOCK) % RECENT_N; }

// Every block (allocated or cached) of every device, sorted by address, for
// pointer validation and interior-pointer lookup.
static block **g_reg;
static size_t g_reg_n, g_reg_cap;

static size_t round_up(size_t n, size_t to) {
    return n > SIZE_MAX - (to - 1) ? SIZE_MAX : (n + to - 1) / to * to;
}

size_t trn__mem_round_size(size_t nbytes) { return nbytes == 0 ? 0 : round_up(nbytes, MIN_BLOCK); }

// Size of the segment reserved for a rounded request the cache cannot serve.
size_t trn__mem_segment_size(size_t size) {
    if (size < SMALL_SIZE) return SMALL_SEGMENT;
    if (size < MIN_LARGE_ALLOC) return LARGE_SEGMENT;
    return round_up(size, ROUND_LARGE);
}

static void stat_add(uint64_t *current, uint64_t *peak, uint64_t delta) {
    *current += delta;
    if (*current > *peak) *peak = *current;
}

// ---- registry ---------------------------------------------------------------

// Index of the first block whose address is > ptr.
static size_t reg_upper(const void *ptr) {
    size_t lo = 0, hi = g_reg_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((const char *)ptr < g_reg[mid]->ptr)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static block *reg_find_containing(const void *ptr) {
    size_t i = reg_upper(ptr);
    if (i == 0) return NULL;
    block *b = g_reg[i - 1];
    // Compare offsets, not pointers, so unrelated addresses stay defined.
    uintptr_t off = (uintptr_t)ptr - (uintptr_t)b->ptr;
    return off < b->size ? b : NULL;
}

// Room for `extra` more blocks, so the inserts that follow cannot fail.
static bool reg_reserve(size_t extra) {
    if (g_reg_n + extra <= g_reg_cap) return true;
    size_t cap = g_reg_cap ? g_reg_cap : 64;
    while (cap < g_reg_n + extra) cap *= 2;
    block **grown = realloc(g_reg, cap * sizeof *grown);
    if (grown == NULL) return false;
    g_reg = grown;
    g_reg_cap = cap;
    return true;
}

static bool reg_insert(block *b) {
    if (!reg_reserve(1)) return false;
    size_t i = reg_upper(b->ptr);
    memmove(&g_reg[i + 1], &g_reg[i], (g_reg_n - i) * sizeof *g_reg);
    g_reg[i] = b;
    g_reg_n++;
    return true;
}

// Drops a block merged into a neighbour (its struct is freed by the caller).
static void reg_remove(const block *b) {
    size_t i = reg_upper(b->ptr) - 1;
    memmove(&g_reg[i], &g_reg[i + 1], (g_reg_n - i - 1) * sizeof *g_reg);
    g_reg_n--;
}

static void reg_drop_released(void) {
    size_t kept = 0;
    for (size_t i = 0; i < g_reg_n; i++) {
        if (g_reg[i]->state == BLOCK_RELEASED) {
            free(g_reg[i]->uses);
            free(g_reg[i]);
        } else {
            g_reg[kept++] = g_reg[i];
        }
    }
    g_reg_n = kept;
}

// ---- debug poisoning ---------------------------------------------------------

// TORCH_NEURONX_DEBUG_POISON_FREED=1: every byte of device memory that no
// tensor owns holds POISON_BYTE (NaN in every floating dtype, -1 in the
// integer ones): fresh segments, and a freed block as soon as the work
// queued on its stream before the free has run. Whatever reads a block after
// its free (a kernel on another stream, a collective's thread, a deferred
// group) then sees NaN, deterministically, instead of whatever the block's
// next owner happened to write (freed small blocks also wait in a
// quarantine of QUARANTINE_N blocks before reuse, so a late reader meets
// poison, not a new owner); a write after the free is caught when the block
// leaves the quarantine or is handed out again (its poison no longer intact:
// abort, naming the block). Protect mode and shared blocks are left alone.
// Debugging aid: each free waits for its stream and each allocation scans
// its block.
#define POISON_BYTE 0xFF

static bool poison_on(const block *b) {
    return trn__config_get()->poison && b->map_size == 0 && !b->shared;
}

static void poison_fill(block *b) {
    MEM_UNPOISON(b->ptr, b->size);
    memset(b->ptr, POISON_BYTE, b->size);
}

// b was just taken from the cache (or a fresh segment) for a request.
static void poison_check(const block *b) {
    static unsigned char ref[4096];
    if (ref[0] != POISON_BYTE) memset(ref, POISON_BYTE, sizeof ref);  // under g_mu
    MEM_UNPOISON(b->ptr, b->size);
    for (size_t at = 0; at < b->size; at += sizeof ref) {
        size_t n = b->size - at < sizeof ref ? b->size - at : sizeof ref;
        if (memcmp(b->ptr + at, ref, n) == 0) continue;
        size_t i = at;
        while ((unsigned char)b->ptr[i] == POISON_BYTE) i++;
        fprintf(stderr,
                "[libtrn] neuron:%d: byte %zu of the free block %p (%zu bytes, stream %lld) "
                "was written after the block was freed "
                "(TORCH_NEURONX_DEBUG_POISON_FREED)\n",
                b->device, i, (void *)b->ptr, b->size,
                b->stream != NULL ? (long long)trn_stream_id(b->stream) : 0LL);
        abort();
    }
}

// ---- free lists -------------------------------------------------------------

static free_list *free_list_of(dev_alloc *d, const block *b) {
    return &d->free[b->small][trn__stream_index(b->stream)];
}

// Index of the first cached block ordered at or after (size, ptr).
static size_t free_lower(const free_list *fl, size_t size, const char *ptr) {
    size_t lo = 0, hi = fl->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const block *m = fl->items[mid];
        if (m->size < size || (m->size == size && m->ptr < ptr))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void free_remove_at(dev_alloc *d, free_list *fl, size_t i) {
    d->cached_bytes -= fl->items[i]->size;
    memmove(&fl->items[i], &fl->items[i + 1], (fl->n - i - 1) * sizeof *fl->items);
    fl->n--;
}

static void free_remove(dev_alloc *d, free_list *fl, const block *b) {
    free_remove_at(d, fl, free_lower(fl, b->size, b->ptr));
}

// The smallest cached block of at least `size` (exactly `size` when blocks
// cannot be split), taken out of the list; NULL if none.
static block *free_take(dev_alloc *d, free_list *fl, size_t size, bool exact) {
    size_t i = free_lower(fl, size, NULL);
    if (i == fl->n || (exact && fl->items[i]->size != size)) return NULL;
    block *b = fl->items[i];
    free_remove_at(d, fl, i);
    return b;
}

// Cannot fail: the list's capacity covers all its blocks (see free_list).
static void free_put(dev_alloc *d, free_list *fl, block *b) {
    size_t i = free_lower(fl, b->size, b->ptr);
    memmove(&fl->items[i + 1], &fl->items[i], (fl->n - i) * sizeof *fl->items);
    fl->items[i] = b;
    fl->n++;
    d->cached_bytes += b->size;
    b->state = BLOCK_CACHED;
    if (b->map_size == 0 && !b->shared) MEM_POISON(b->ptr, b->size);
}

// Counts one more block in fl, growing its capacity to match first.
static bool free_add_block(free_list *fl) {
    if (fl->blocks + 1 > fl->cap) {
        size_t cap = fl->cap ? fl->cap * 2 : 16;
        block **grown = realloc(fl->items, cap * sizeof *grown);
        if (grown == NULL) return false;
        fl->items = grown;
        fl->cap = cap;
    }
    fl->blocks++;
    return true;
}

// ---- host segments ----------------------------------------------------------

static void *segment_alloc(size_t size, size_t *map_size) {
    *map_size = 0;
    if (trn__config_get()->protect) {
        long page = sysconf(_SC_PAGE_SIZE);
        size_t len = round_up(size, page > 0 ? (size_t)page : 4096);
        void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
        *map_size = len;
        return p;
    }
    void *p = NULL;
    if (posix_memalign(&p, ALIGNMENT, size) != 0) return NULL;
    MEM_POISON(p, size);
    return p;
}

// b is a whole segment (no neighbours).
static void segment_free(block *b) {
    if (b->map_size != 0) {
        munmap(b->ptr, b->map_size);
    } else {
        MEM_UNPOISON(b->ptr, b->size);
        free(b->ptr);
    }
}

// A new segment of `size` bytes as one block, registered; NULL if the host
// has no memory for it.
static block *segment_create(int device, size_t size, bool small, trn_stream *stream) {
    block *b = calloc(1, sizeof *b);
    if (b == NULL) return NULL;
    b->ptr = segment_alloc(size, &b->map_size);
    if (b->ptr == NULL) {
        free(b);
        return NULL;
    }
    b->size = size;
    b->device = device;
    b->small = small;
    b->stream = stream;
    dev_alloc *d = &g_dev[device];
    free_list *fl = free_list_of(d, b);
    if (!reg_reserve(1) || !free_add_block(fl)) {
        segment_free(b);
        free(b);
        return NULL;
    }
    if (poison_on(b)) {
        poison_fill(b);
        MEM_POISON(b->ptr, b->size);
    }
    reg_insert(b);  // reserved above
    stat_add(&d->stats.reserved_bytes, &d->stats.reserved_bytes_peak, size);
    stat_add(&d->stats.segments, &d->stats.segments_peak, 1);
    d->stats.num_segment_allocs++;
    observe(TRN_MEM_EVENT_SEGMENT_ALLOC, b, size);
    return b;
}

// Structs of merged blocks, kept for the next split: in a training loop most
// allocations split a block and most frees merge one, and recycling spares
// the host allocator a calloc/free pair on each.
#define SPARE_MAX 256
static block *g_spare[SPARE_MAX];
static size_t g_spare_n;

static block *block_new(void) {
    if (g_spare_n == 0) return calloc(1, sizeof(block));
    block *b = g_spare[--g_spare_n];
    memset(b, 0, sizeof *b);
    return b;
}

static void block_delete(block *b) {
    free(b->uses);
    if (g_spare_n < SPARE_MAX)
        g_spare[g_spare_n++] = b;
    else
        free(b);
}

// Splits b (just taken for a request of `size`) so that the rest of it
// becomes a cached block. Without host memory for the bookkeeping b simply
// stays whole, which wastes the rest but is correct.
static void block_split(dev_alloc *d, block *b, size_t size) {
    size_t rest = b->size - size;
    if (rest < MIN_BLOCK || trn__config_get()->protect) return;
    free_list *fl = free_list_of(d, b);
    block *r = block_new();
    if (r == NULL) return;
    if (!reg_reserve(1) || !free_add_block(fl)) {
        block_delete(r);
        return;
    }
    r->ptr = b->ptr + size;
    r->size = rest;
    r->device = b->device;
    r->small = b->small;
    r->stream = b->stream;
    r->free_seq = b->free_seq;  // its earlier users are b's
    r->prev = b;
    r->next = b->next;
    if (b->next != NULL) b->next->prev = r;
    b->next = r;
    b->size = size;
    reg_insert(r);  // reserved above
    free_put(d, fl, r);
}

// Merges n, the block after b, into b and frees n's struct; n has left the
// free list already.
static void block_absorb(free_list *fl, block *b, block *n) {
    reg_remove(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != NULL) n->next->prev = b;
    if (n->free_seq > b->free_seq) b->free_seq = n->free_seq;
    fl->blocks--;
    block_delete(n);
}

// Caches a freed block, merged with its cached neighbours.
static void block_cache(dev_alloc *d, block *b) {
    free_list *fl = free_list_of(d, b);
    b->free_seq = trn__stream_launched(b->stream);
    block *p = b->prev;
    if (p != NULL && p->state == BLOCK_CACHED) {
        free_remove(d, fl, p);
        block_absorb(fl, p, b);
        b = p;
    }
    block *n = b->next;
    if (n != NULL && n->state == BLOCK_CACHED) {
        free_remove(d, fl, n);
        block_absorb(fl, b, n);
    }
    free_put(d, fl, b);
}

// Puts a whole freed small block in its stream's quick bin; the bin's oldest
// block goes to the free list when the bin is full.
static void quick_put(dev_alloc *d, block *b) {
    quick_bin *q = &d->quick[trn__stream_index(b->stream)];
    if (q->n == QUICK_N) {
        block *old = q->items[0];
        memmove(&q->items[0], &q->items[1], (QUICK_N - 1) * sizeof *q->items);
        q->n--;
        d->cached_bytes -= old->size;
        block_cache(d, old);
    }
    b->free_seq = trn__stream_launched(b->stream);
    b->state = BLOCK_QUICK;
    q->items[q->n++] = b;
    d->cached_bytes += b->size;
    MEM_POISON(b->ptr, b->size);
}

// The newest block of exactly `size` in a stream's quick bin, taken out;
// NULL if none. The stream ordering is the free list's: the bin is the
// allocation stream's, and a block other streams used enters it only after
// their work finished (trn_mem_free waits, as for the free list).
static block *quick_take(dev_alloc *d, quick_bin *q, size_t size) {
    for (size_t i = q->n; i-- > 0;) {
        block *b = q->items[i];
        if (b->size != size) continue;
        memmove(&q->items[i], &q->items[i + 1], (q->n - i - 1) * sizeof *q->items);
        q->n--;
        d->cached_bytes -= b->size;
        return b;
    }
    return NULL;
}

// Moves a quick bin's blocks to their free list, merged.
static void quick_flush_bin(dev_alloc *d, quick_bin *q) {
    for (size_t i = 0; i < q->n; i++) {
        d->cached_bytes -= q->items[i]->size;
        block_cache(d, q->items[i]);
    }
    q->n = 0;
}

// Caches a freed block: whole into its quick bin, or merged into its free
// list. Protect mode keeps its exact reuse in the free lists (no bins there).
static void cache_freed(dev_alloc *d, block *b) {
    if (b->small && b->size <= QUICK_MAX_BLOCK && b->map_size == 0 && !trn__config_get()->protect)
        quick_put(d, b);
    else
        block_cache(d, b);
}

static void quarantine_pop(dev_alloc *d) {
    quarantine *qt = &d->quarantine;
    block *old = qt->items[qt->head];
    qt->head = (qt->head + 1) % QUARANTINE_N;
    qt->n--;
    d->cached_bytes -= old->size;
    poison_check(old);
    cache_freed(d, old);
}

// A freed, poisoned small block (poison mode) waits behind the others.
static void quarantine_put(dev_alloc *d, block *b) {
    quarantine *qt = &d->quarantine;
    if (qt->n == QUARANTINE_N) quarantine_pop(d);
    qt->items[(qt->head + qt->n) % QUARANTINE_N] = b;
    qt->n++;
    d->cached_bytes += b->size;
    MEM_POISON(b->ptr, b->size);
}

// Empties the quarantine and the quick bins into the free lists.
static void quick_flush(dev_alloc *d) {
    while (d->quarantine.n != 0) quarantine_pop(d);
    for (size_t s = 0; s < 1 + TRN_STREAM_POOL_SIZE; s++) quick_flush_bin(d, &d->quick[s]);
}

// Returns the device's whole cached segments to the host, except those whose
// stream may still be running work queued before they were freed. Caller
// holds g_mu and has usually waited for the device first. Returns the bytes
// released.
static uint64_t release_cached(int device) {
    dev_alloc *d = &g_dev[device];
    uint64_t released = 0;
    quick_flush(d);
    for (size_t pool = 0; pool < 2; pool++) {
        for (size_t s = 0; s < 1 + TRN_STREAM_POOL_SIZE; s++) {
            free_list *fl = &d->free[pool][s];
            size_t kept = 0;
            for (size_t i = 0; i < fl->n; i++) {
                block *b = fl->items[i];
                if (b->prev != NULL || b->next != NULL ||
                    trn__stream_completed(b->stream) < b->free_seq) {
                    fl->items[kept++] = b;
                    continue;
                }
                observe(TRN_MEM_EVENT_SEGMENT_FREE, b, b->size);
                segment_free(b);
                b->state = BLOCK_RELEASED;
                released += b->size;
                d->cached_bytes -= b->size;
                d->stats.reserved_bytes -= b->size;
                d->stats.segments--;
                d->stats.num_segment_frees++;
                fl->blocks--;
            }
            fl->n = kept;
        }
    }
    if (released != 0) reg_drop_released();
    return released;
}

// ---- allocation -------------------------------------------------------------

static trn_status oom_error(int device, size_t nbytes, bool host_failed) {
    const trn__config *cfg = trn__config_get();
    trn_counter_add(TRN_COUNTER_OOMS, device, 1);
    if (!host_failed && limit_of(device) < cfg->capacity) {
        const trn_mem_stats *st = &g_dev[device].stats;
        char want[32], alloc[32], resv[32], lim[32];
        trn__format_bytes(want, sizeof want, nbytes);
        trn__format_bytes(alloc, sizeof alloc, st->allocated_bytes);
        trn__format_bytes(resv, sizeof resv, st->reserved_bytes);
        trn__format_bytes(lim, sizeof lim, limit_of(device));
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "neuron:%d out of memory: tried to allocate %s; "
                              "%s allocated, %s reserved, per-process limit "
                              "%s (set_per_process_memory_fraction)",
                              device, want, alloc, resv, lim);
    }
    const trn_mem_stats *st = &g_dev[device].stats;
    char want[32], alloc[32], resv[32], cap[32];
    trn__format_bytes(want, sizeof want, nbytes);
    trn__format_bytes(alloc, sizeof alloc, st->allocated_bytes);
    trn__format_bytes(resv, sizeof resv, st->reserved_bytes);
    trn__format_bytes(cap, sizeof cap, cfg->capacity);
    if (host_failed)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "neuron:%d out of memory: tried to allocate %s; "
                              "%s allocated, %s reserved, capacity %s; the "
                              "host could not provide the memory (%s)",
                              device, want, alloc, resv, cap, strerror(ENOMEM));
    return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                          "neuron:%d out of memory: tried to allocate %s; %s "
                          "allocated, %s reserved, capacity %s "
                          "(TORCH_NEURONX_HBM_SIZE sets the capacity)",
                          device, want, alloc, resv, cap);
}

static trn_status capacity_check(void) {
    const trn__config *cfg = trn__config_get();
    if (cfg->capacity_error[0] != '\0')
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s", cfg->capacity_error);
    return TRN_SUCCESS;
}

// Reserves a segment for a rounded request the cache cannot serve: the
// pool's preferred size, else (past the limit, or refused by the host) one
// of just the request. *host_failed: a size within the limit was refused.
static block *segment_reserve(int device, size_t size, bool small, trn_stream *stream,
                              bool *host_failed) {
    const dev_alloc *d = &g_dev[device];
    const size_t limit = limit_of(device);
    const size_t want = trn__config_get()->protect ? size : trn__mem_segment_size(size);
    const size_t tries[2] = {want, size};
    for (int t = 0; t < (want != size ? 2 : 1); t++) {
        size_t seg = tries[t];
        if (seg > limit || d->stats.reserved_bytes > limit - seg) continue;
        block *b = segment_create(device, seg, small, stream);
        if (b != NULL) return b;
        *host_failed = true;
    }
    return NULL;
}

trn_status trn_mem_alloc(int device, size_t nbytes, trn_stream *stream, void **ptr) {
    if (ptr == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_mem_alloc: ptr is NULL");
    *ptr = NULL;
    trn_status st = trn_runtime_init();
    if (st == TRN_SUCCESS) st = trn_device_check(device);
    if (st == TRN_SUCCESS) st = capacity_check();
    if (st != TRN_SUCCESS) return st;
    if (stream == NULL) {
        st = trn_stream_get_current(device, &stream);
        if (st != TRN_SUCCESS) return st;
    } else if (trn_stream_device(stream) != device) {
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "cannot allocate on neuron:%d for a stream of "
                              "neuron:%d",
                              device, trn_stream_device(stream));
    }
    if (nbytes == 0) return TRN_SUCCESS;

    const size_t capacity = limit_of(device);
    const size_t size = nbytes > capacity ? SIZE_MAX : trn__mem_round_size(nbytes);
    const bool small = size < SMALL_SIZE;
    // Protect mode keeps one block per mapping: no splitting, exact reuse.
    const bool exact = trn__config_get()->protect;
    dev_alloc *d = &g_dev[device];
    free_list *fl = &d->free[small][trn__stream_index(stream)];
    bool flushed = false;

    trn__lock(&g_mu);
    block *b = NULL;
    quick_bin *q = small && !exact ? &d->quick[trn__stream_index(stream)] : NULL;
    if (q != NULL && size <= QUICK_MAX_BLOCK) b = quick_take(d, q, size);
    if (b == NULL) b = free_take(d, fl, size, exact);
    if (b == NULL && q != NULL && q->n != 0) {
        // Merged, the bin's blocks may hold the request: before a new
        // segment. (A miss does not flush: decode alternates sizes.)
        quick_flush_bin(d, q);
        b = free_take(d, fl, size, exact);
    }
    while (b == NULL) {
        bool host_failed = false;
        b = segment_reserve(device, size, small, stream, &host_failed);
        if (b != NULL) break;
        if (!flushed && d->cached_bytes > 0) {
            // Cached blocks may still be in use by queued work on their
            // streams; wait for it (without the lock, which tasks need)
            // before giving whole cached segments back.
            flushed = true;
            trn__unlock(&g_mu);
            trn__device_wait_idle(device);
            trn__lock(&g_mu);
            release_cached(device);
            d->stats.num_alloc_retries++;
            b = free_take(d, fl, size, exact);  // another thread may have freed one
            continue;
        }
        d->stats.num_ooms++;
        st = oom_error(device, nbytes, host_failed);
        if (g_observer != NULL)
            g_observer(g_observer_ctx, TRN_MEM_EVENT_OOM, device, NULL, nbytes,
                       trn_stream_id(stream));
        trn__unlock(&g_mu);
        trn_log(TRN_LOG_INFO, "alloc", "%s", trn_last_error());
        return st;
    }
    block_split(d, b, size);
    if (poison_on(b)) poison_check(b);
    b->state = BLOCK_ALLOCATED;
    b->wcached = false;
    b->wc_token = 0;
    b->requested = nbytes;
    if (b->map_size == 0 && !b->shared) {
        MEM_UNPOISON(b->ptr, nbytes);
        MEM_POISON((char *)b->ptr + nbytes, b->size - nbytes);
    }
    stat_add(&d->stats.allocated_bytes, &d->stats.allocated_bytes_peak, b->size);
    stat_add(&d->stats.requested_bytes, &d->stats.requested_bytes_peak, nbytes);
    stat_add(&d->stats.active_blocks, &d->stats.active_blocks_peak, 1);
    d->stats.num_allocs++;
    g_recent[recent_slot(b->ptr)] = b;
    publish(device);
    trn__unlock(&g_mu);
    *ptr = b->ptr;
    if (trn_log_enabled(TRN_LOG_DEBUG))
        trn_log(TRN_LOG_DEBUG, "alloc",
                "neuron:%d alloc %zu bytes at %p "
                "(block %zu, stream %lld)",
                device, nbytes, *ptr, size, (long long)trn_stream_id(stream));
    return TRN_SUCCESS;
}

// Message for a pointer that is not the start of an allocated block.
static trn_status bad_pointer(const char *what, const void *ptr) {
    block *b = reg_find_containing(ptr);
    if (b != NULL && b->ptr == (const char *)ptr && b->state != BLOCK_ALLOCATED)
        return trn__set_error(TRN_ERROR_INVALID_POINTER,
                              "%s: neuron:%d pointer %p was already freed%s", what, b->device, ptr,
                              strcmp(what, "trn_mem_free") == 0 ? " (double free)" : "");
    if (b != NULL && b->state == BLOCK_ALLOCATED)
        return trn__set_error(TRN_ERROR_INVALID_POINTER,
                              "%s: %p points %zu bytes into the neuron:%d "
                              "block at %p; pass the block's start",
                              what, ptr, (size_t)((const char *)ptr - b->ptr), b->device,
                              (void *)b->ptr);
    return trn__set_error(TRN_ERROR_INVALID_POINTER,
                          "%s: %p is not neuron device memory allocated by "
                          "trn_mem_alloc (or was already freed)",
                          what, ptr);
}

trn_status trn_mem_free(void *ptr) {
    if (ptr == NULL) return TRN_SUCCESS;
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;

    trn__lock(&g_mu);
    block **slot = &g_recent[recent_slot(ptr)];
    block *b = *slot != NULL && (*slot)->ptr == (char *)ptr ? *slot : reg_find_containing(ptr);
    if (*slot == b) *slot = NULL;
    if (b == NULL || b->ptr != (char *)ptr || b->state != BLOCK_ALLOCATED) {
        st = bad_pointer("trn_mem_free", ptr);
        trn__unlock(&g_mu);
        return st;
    }
    // Before the block can be handed out again: no packed copy of what it
    // held may be found by an operand that reuses its address.
    if (b->wcached) {
        b->wcached = false;
        trn__wcache_drop_range(b->ptr, b->size);
    }
    dev_alloc *d = &g_dev[b->device];
    d->stats.allocated_bytes -= b->size;
    d->stats.requested_bytes -= b->requested;
    d->stats.active_blocks--;
    d->stats.num_frees++;
    b->state = BLOCK_FREEING;
    if (b->shared) {
        // Never cached: unmapping is what lets the other processes' last
        // reference free the pages. Work queued on it must finish first.
        trn_stream **su = b->uses;
        size_t sn = b->n_uses;
        b->uses = NULL;
        trn__unlock(&g_mu);
        trn__stream_wait_idle(b->stream);
        for (size_t i = 0; i < sn; i++) trn__stream_wait_idle(su[i]);
        free(su);
        trn__lock(&g_mu);
        observe(TRN_MEM_EVENT_SEGMENT_FREE, b, b->size);
        munmap(b->ptr, b->map_size);
        close(b->shm_fd);
        b->state = BLOCK_RELEASED;
        d->stats.reserved_bytes -= b->size;
        d->stats.segments--;
        d->stats.num_segment_frees++;
        reg_drop_released();
        publish(d - g_dev);
        trn__unlock(&g_mu);
        return TRN_SUCCESS;
    }
    trn_stream **uses = b->uses;
    size_t n_uses = b->n_uses;
    b->uses = NULL;
    b->n_uses = b->cap_uses = 0;
    if (n_uses != 0) {
        // Other streams may still touch the block: let their current work
        // finish before the allocation stream can reuse it.
        trn__unlock(&g_mu);
        for (size_t i = 0; i < n_uses; i++) trn__stream_wait_idle(uses[i]);
        free(uses);
        trn__lock(&g_mu);
    }
    if (poison_on(b)) {
        // Once the work queued on its stream before the free (which may
        // still read it) has run.
        trn__unlock(&g_mu);
        trn__stream_wait_launched(b->stream);
        poison_fill(b);
        trn__lock(&g_mu);
    }
    if (poison_on(b) && b->small)
        quarantine_put(d, b);
    else
        cache_freed(d, b);
    publish(d - g_dev);
    trn__unlock(&g_mu);
    if (trn_log_enabled(TRN_LOG_DEBUG)) trn_log(TRN_LOG_DEBUG, "alloc", "free %p", ptr);
    return TRN_SUCCESS;
}

trn_status trn_mem_record_stream(void *ptr, trn_stream *stream) {
    if (ptr == NULL) return TRN_SUCCESS;
    if (stream == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_mem_record_stream: stream is NULL");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;

    trn__lock(&g_mu);
    block *b = reg_find_containing(ptr);
    if (b == NULL || b->state != BLOCK_ALLOCATED) {
        st = bad_pointer("trn_mem_record_stream", ptr);
    } else if (stream != b->stream) {
        bool known = false;
        for (size_t i = 0; i < b->n_uses && !known; i++) known = b->uses[i] == stream;
        if (!known && b->n_uses == b->cap_uses) {
            size_t cap = b->cap_uses ? b->cap_uses * 2 : 4;
            trn_stream **grown = realloc(b->uses, cap * sizeof *grown);
            if (grown == NULL) {
                st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                                    "trn_mem_record_stream: host out of memory");
            } else {
                b->uses = grown;
                b->cap_uses = cap;
            }
        }
        if (!known && st == TRN_SUCCESS) b->uses[b->n_uses++] = stream;
    }
    trn__unlock(&g_mu);
    return st;
}

trn_status trn_mem_empty_cache(int device) {
    trn_status st = trn__device_enter(device);
    if (st != TRN_SUCCESS || !trn_runtime_is_initialized()) return st;
    trn__device_wait_idle(device);
    trn__lock(&g_mu);
    uint64_t released = release_cached(device);
    publish(device);
    trn__unlock(&g_mu);
    trn_log(TRN_LOG_DEBUG, "alloc", "neuron:%d empty_cache released %llu bytes", device,
            (unsigned long long)released);
    return TRN_SUCCESS;
}

trn_status trn_mem_set_limit(int device, size_t bytes) {
    trn_status st = trn__device_enter(device);
    if (st == TRN_SUCCESS) st = capacity_check();
    if (st != TRN_SUCCESS) return st;
    size_t capacity = trn__config_get()->capacity;
    if (bytes > capacity)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "neuron:%d memory limit of %zu bytes exceeds the "
                              "capacity (%zu bytes)",
                              device, bytes, capacity);
    trn__lock(&g_mu);
    g_limit[device] = bytes;
    trn__unlock(&g_mu);
    __atomic_store_n(&trn_stats_page_get()->devices[device].mem_capacity,
                     (uint64_t)limit_of(device), __ATOMIC_RELAXED);
    trn_log(TRN_LOG_INFO, "alloc", "neuron:%d per-process memory limit %zu bytes", device,
            limit_of(device));
    return TRN_SUCCESS;
}

size_t trn_mem_get_limit(int device) {
    if (device < 0 || device >= TRN_MAX_DEVICES) return 0;
    trn__lock(&g_mu);
    size_t limit = limit_of(device);
    trn__unlock(&g_mu);
    return limit;
}

size_t trn_mem_snapshot(int device, trn_mem_block_info *out, size_t max) {
    trn__lock(&g_mu);
    // The snapshot shows blocks as freeing merged them (see quick_bin).
    if (device >= 0 && device < TRN_MAX_DEVICES) quick_flush(&g_dev[device]);
    size_t n = 0;
    // A segment's blocks are consecutive in the registry (address order).
    const block *seg = NULL;
    size_t seg_size = 0;
    for (size_t i = 0; i < g_reg_n; i++) {
        const block *b = g_reg[i];
        if (b->device != device || b->state == BLOCK_RELEASED) continue;
        if (b->prev == NULL) {
            seg = b;
            seg_size = 0;
            for (const block *m = b; m != NULL; m = m->next) seg_size += m->size;
        }
        if (out != NULL && n < max) {
            trn_mem_block_info *o = &out[n];
            o->ptr = b->ptr;
            o->size = b->size;
            o->allocated = b->state == BLOCK_ALLOCATED;
            o->requested = o->allocated ? b->requested : 0;
            o->device = b->device;
            o->stream = b->stream != NULL ? trn_stream_id(b->stream) : 0;
            o->segment = seg != NULL ? seg->ptr : b->ptr;
            o->segment_size = seg != NULL ? seg_size : b->size;
            o->small_pool = b->small;
        }
        n++;
    }
    trn__unlock(&g_mu);
    return n;
}

void trn_mem_set_observer(trn_mem_observer observer, void *ctx) {
    trn__lock(&g_mu);
    g_observer = observer;
    g_observer_ctx = ctx;
    trn__unlock(&g_mu);
}

// ---- statistics -------------------------------------------------------------

static trn_status stats_enter(int device, const void *out) {
    trn_status st = trn__device_enter(device);
    if (st == TRN_SUCCESS) st = capacity_check();
    if (st == TRN_SUCCESS && out == NULL)
        st =
            trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "memory statistics: output pointer is NULL");
    return st;
}

trn_status trn_mem_get_stats(int device, trn_mem_stats *stats) {
    trn_status st = stats_enter(device, stats);
    if (st != TRN_SUCCESS) return st;
    trn__lock(&g_mu);
    *stats = g_dev[device].stats;
    trn__unlock(&g_mu);
    stats->capacity = trn__config_get()->capacity;
    return TRN_SUCCESS;
}

trn_status trn_mem_reset_peak(int device) {
    trn_status st = stats_enter(device, "");
    if (st != TRN_SUCCESS) return st;
    trn__lock(&g_mu);
    trn_mem_stats *s = &g_dev[device].stats;
    s->allocated_bytes_peak = s->allocated_bytes;
    s->requested_bytes_peak = s->requested_bytes;
    s->reserved_bytes_peak = s->reserved_bytes;
    s->active_blocks_peak = s->active_blocks;
    s->segments_peak = s->segments;
    trn__unlock(&g_mu);
    return TRN_SUCCESS;
}

trn_status trn_mem_reset_accumulated(int device) {
    trn_status st = stats_enter(device, "");
    if (st != TRN_SUCCESS) return st;
    trn__lock(&g_mu);
    trn_mem_stats *s = &g_dev[device].stats;
    s->num_allocs = s->num_frees = 0;
    s->num_segment_allocs = s->num_segment_frees = 0;
    s->num_alloc_retries = s->num_ooms = 0;
    trn__unlock(&g_mu);
    return TRN_SUCCESS;
}

trn_status trn_mem_get_info(int device, size_t *free_bytes, size_t *total_bytes) {
    trn_status st = stats_enter(device, free_bytes);
    if (st == TRN_SUCCESS) st = stats_enter(device, total_bytes);
    if (st != TRN_SUCCESS) return st;
    size_t capacity = trn__config_get()->capacity;
    trn__lock(&g_mu);
    uint64_t reserved = g_dev[device].stats.reserved_bytes;
    trn__unlock(&g_mu);
    *free_bytes = reserved < capacity ? capacity - (size_t)reserved : 0;
    *total_bytes = capacity;
    return TRN_SUCCESS;
}

trn_status trn_mem_get_device(const void *ptr, int *device) {
    if (device == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_mem_get_device: device is NULL");
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    trn__lock(&g_mu);
    block *b = ptr != NULL ? reg_find_containing(ptr) : NULL;
    if (b != NULL && b->state == BLOCK_ALLOCATED)
        *device = b->device;
    else
        st = trn__set_error(TRN_ERROR_INVALID_POINTER, "%p is not neuron device memory", ptr);
    trn__unlock(&g_mu);
    return st;
}

uint64_t trn__mem_wcache_token(const void *ptr, uint64_t version) {
    static uint64_t last_token;  // guarded by g_mu
    trn__lock(&g_mu);
    block *b = ptr != NULL ? reg_find_containing(ptr) : NULL;
    uint64_t token = 0;
    if (b != NULL && b->state == BLOCK_ALLOCATED) {
        if (b->wc_token == 0 || b->wc_version != version) {
            b->wc_token = ++last_token;
            b->wc_version = version;
        }
        token = b->wc_token;
    }
    trn__unlock(&g_mu);
    return token;
}

bool trn__mem_wcache_record(const void *ptr, uint64_t token, void (*record)(void *ctx), void *ctx) {
    trn__lock(&g_mu);
    block *b = ptr != NULL ? reg_find_containing(ptr) : NULL;
    // Only while the allocation the token names is alive: under the lock
    // its free (which drops the block's entries) comes wholly before or
    // after the record.
    const bool alive = b != NULL && b->state == BLOCK_ALLOCATED && b->wc_token == token;
    if (alive) {
        b->wcached = true;
        record(ctx);
    }
    trn__unlock(&g_mu);
    return alive;
}

int trn__mem_device_of(const void *ptr) {
    trn__lock(&g_mu);
    block *b = ptr != NULL ? reg_find_containing(ptr) : NULL;
    int device = b != NULL && b->state == BLOCK_ALLOCATED ? b->device : -1;
    trn__unlock(&g_mu);
    return device;
}

bool trn_mem_protect_enabled(void) { return trn__config_get()->protect; }

// ---- debug protection ---------------------------------------------------------

void trn__access_add(trn__access_set *set, const void *ptr, size_t nbytes) {
    if (ptr == NULL || nbytes == 0) return;
    if (set->count < TRN__ACCESS_MAX) {
        set->ptr[set->count] = ptr;
        set->nbytes[set->count] = nbytes;
    }
    set->count++;  // past the capacity: begin reports it
}

trn_status trn__access_begin(trn__access_set *set) {
    set->begun = 0;
    if (set->count > TRN__ACCESS_MAX)
        return trn__set_error(TRN_ERROR_KERNEL,
                              "a kernel task touches %d memory ranges, more "
                              "than the %d its access set holds",
                              set->count, TRN__ACCESS_MAX);
    // Without protect mode there is nothing to open (and, begun 0, to close):
    // one config read per task instead of two per range.
    if (!trn__config_get()->protect) return TRN_SUCCESS;
    for (; set->begun < set->count; set->begun++) {
        trn_status st = trn__mem_access_begin(set->ptr[set->begun], set->nbytes[set->begun]);
        if (st != TRN_SUCCESS) {
            trn__access_end(set);
            return st;
        }
    }
    return TRN_SUCCESS;
}

void trn__access_end(trn__access_set *set) {
    for (; set->begun > 0; set->begun--)
        trn__mem_access_end(set->ptr[set->begun - 1], set->nbytes[set->begun - 1]);
}

trn_status trn__mem_access_begin(const void *ptr, size_t nbytes) {
    if (nbytes == 0 || !trn__config_get()->protect) return TRN_SUCCESS;
    trn_status st = TRN_SUCCESS;
    trn__lock(&g_mu);
    block *b = reg_find_containing(ptr);
    if (b == NULL) {
        // host memory: nothing to unprotect
    } else if (nbytes > b->size - (size_t)((const char *)ptr - b->ptr)) {
        st = trn__set_error(TRN_ERROR_INVALID_POINTER,
                            "kernel access of %zu bytes at %p runs past the "
                            "end of its %zu-byte neuron:%d block at %p",
                            nbytes, ptr, b->size, b->device, (void *)b->ptr);
    } else if (b->access++ == 0 && mprotect(b->ptr, b->map_size, PROT_READ | PROT_WRITE) != 0) {
        int err = errno;
        b->access--;
        st = trn__set_error(TRN_ERROR_SYSTEM, "mprotect of a neuron:%d block failed: %s", b->device,
                            strerror(err));
    }
    trn__unlock(&g_mu);
    return st;
}

void trn__mem_access_end(const void *ptr, size_t nbytes) {
    if (nbytes == 0 || !trn__config_get()->protect) return;
    trn__lock(&g_mu);
    block *b = reg_find_containing(ptr);
    // Re-protecting can only fail for reasons that unprotecting would have
    // hit first; the block then just stays readable, which is harmless.
    if (b != NULL && b->access > 0 && --b->access == 0)
        (void)mprotect(b->ptr, b->map_size, PROT_NONE);
    trn__unlock(&g_mu);
}

// ---- shared blocks (trn/ipc.h) ----------------------------------------------

// Registers a MAP_SHARED mapping of fd as an allocated block of the device.
static trn_status shared_block_add(int device, int fd, size_t nbytes, void **ptr) {
    trn_status st = trn_runtime_init();
    if (st == TRN_SUCCESS) st = trn_device_check(device);
    if (st == TRN_SUCCESS) st = capacity_check();
    if (st != TRN_SUCCESS) return st;
    if (nbytes == 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "shared device memory of 0 bytes");
    trn_stream *stream = NULL;
    st = trn_stream_get_current(device, &stream);
    if (st != TRN_SUCCESS) return st;
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return trn__set_error(TRN_ERROR_SYSTEM,
                              "shared device memory: bad "
                              "descriptor %d (%s)",
                              fd, strerror(errno));
    void *p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
    if (p == MAP_FAILED) {
        int err = errno;
        close(own);
        return trn__set_error(TRN_ERROR_SYSTEM,
                              "shared device memory: mmap "
                              "of %zu bytes failed (%s)",
                              nbytes, strerror(err));
    }
    block *b = calloc(1, sizeof *b);
    if (b != NULL) b->ptr = p;
    trn__lock(&g_mu);
    if (b == NULL || !reg_insert(b)) {
        trn__unlock(&g_mu);
        free(b);
        munmap(p, nbytes);
        close(own);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "shared device memory: host out of memory");
    }
    b->size = b->requested = b->map_size = nbytes;
    b->device = device;
    b->stream = stream;
    b->shared = true;
    b->shm_fd = own;
    b->state = BLOCK_ALLOCATED;
    dev_alloc *d = &g_dev[device];
    stat_add(&d->stats.reserved_bytes, &d->stats.reserved_bytes_peak, nbytes);
    stat_add(&d->stats.segments, &d->stats.segments_peak, 1);
    d->stats.num_segment_allocs++;
    stat_add(&d->stats.allocated_bytes, &d->stats.allocated_bytes_peak, nbytes);
    stat_add(&d->stats.requested_bytes, &d->stats.requested_bytes_peak, nbytes);
    stat_add(&d->stats.active_blocks, &d->stats.active_blocks_peak, 1);
    d->stats.num_allocs++;
    observe(TRN_MEM_EVENT_SEGMENT_ALLOC, b, nbytes);
    publish(device);
    trn__unlock(&g_mu);
    *ptr = p;
    trn_log(TRN_LOG_DEBUG, "ipc", "neuron:%d shared block of %zu bytes at %p", device, nbytes, p);
    return TRN_SUCCESS;
}

trn_status trn_ipc_alloc(int device, size_t nbytes, void **ptr) {
    if (ptr == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_ipc_alloc: ptr is NULL");
    *ptr = NULL;
    int fd = (int)syscall(SYS_memfd_create, "neuron-shared", 1u /* CLOEXEC */);
    if (fd < 0)
        return trn__set_error(TRN_ERROR_SYSTEM, "memfd_create failed (%s)", strerror(errno));
    if (ftruncate(fd, (off_t)nbytes) != 0) {
        int err = errno;
        close(fd);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "shared device memory "
                              "of %zu bytes: %s",
                              nbytes, strerror(err));
    }
    trn_status st = shared_block_add(device, fd, nbytes, ptr);
    close(fd);
    return st;
}

trn_status trn_ipc_import(int device, int fd, size_t nbytes, void **ptr) {
    if (ptr == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_ipc_import: ptr is NULL");
    *ptr = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < nbytes)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "shared device "
                              "memory: descriptor %d does not hold %zu bytes",
                              fd, nbytes);
    return shared_block_add(device, fd, nbytes, ptr);
}

trn_status trn_ipc_export(const void *ptr, int *fd, size_t *nbytes) {
    if (fd == NULL || nbytes == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_ipc_export: NULL output");
    trn__lock(&g_mu);
    block *b = ptr != NULL ? reg_find_containing(ptr) : NULL;
    if (b == NULL || !b->shared || b->ptr != (const char *)ptr || b->state != BLOCK_ALLOCATED) {
        trn__unlock(&g_mu);
        return trn__set_error(TRN_ERROR_INVALID_POINTER,
                              "%p is not the start of shared device memory", ptr);
    }
    *fd = fcntl(b->shm_fd, F_DUPFD_CLOEXEC, 0);
    *nbytes = b->size;
    trn__unlock(&g_mu);
    if (*fd < 0)
        return trn__set_error(TRN_ERROR_SYSTEM,
                              "dup of a shared block's "
                              "descriptor failed (%s)",
                              strerror(errno));
    return TRN_SUCCESS;
}

int trn_ipc_is_shared(const void *ptr) {
    trn__lock(&g_mu);
    block *b = ptr != NULL ? reg_find_containing(ptr) : NULL;
    int shared =
        b != NULL && b->shared && b->ptr == (const char *)ptr && b->state == BLOCK_ALLOCATED;
    trn__unlock(&g_mu);
    return shared;
}

// ---- fork (see fork.c) ----------------------------------------------------------

// The allocator's lock is held across fork, so the child's copy of the
// registry and free lists is never caught mid-update. Its blocks are the
// parent's, copied on write (shared blocks stay shared, as shared memory does).
void trn__mem_fork_prepare(void) { trn__lock(&g_mu); }
void trn__mem_fork_release(void) { trn__unlock(&g_mu); }
