// weight_cache.c - the process-wide table of packed operand copies
// (weight_cache.h). Built once, not per CPU level: every level's kernels
// share one table and one budget.
#include "weight_cache.h"

#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "trn/log.h"

// Budget when TORCH_NEURONX_WEIGHT_CACHE_SIZE is unset: the small zoo models'
// weights (GPT-2's 51 MB tied lm head included) fit several times over; a
// model past it has its first weights packed and the rest computed as
// without a cache (no eviction: a budget smaller than a token's weights
// would otherwise repack every weight every token).
#define WCACHE_DEFAULT_BUDGET ((size_t)256 << 20)
// Recorded keys are small, but a stream of products by ever-new operands
// must not grow the table without bound.
#define WCACHE_MAX_ENTRIES 4096

struct trn__wcache_entry {
    trn__wcache_key key;
    uint64_t version;
    void *packed;  // NULL: recorded only (seen once), or being packed
    size_t bytes;  // of packed, counted in g_bytes from the pack's start
    int refs;      // holders (trn__wcache_acquire not yet released)
    bool packing, dead;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static size_t g_budget;
// Sorted by key.b: a lookup and the allocator's drop of a freed block are
// binary searches (the allocator calls in on every free).
static trn__wcache_entry **g_ent;
static size_t g_n, g_cap, g_bytes, g_packed;
static atomic_size_t g_count;  // g_n, read without the lock by drop_range
static uint64_t g_hits, g_packs, g_drops;

static void budget_read(void) {
    const char *v = getenv("TORCH_NEURONX_WEIGHT_CACHE_SIZE");
    g_budget = WCACHE_DEFAULT_BUDGET;
    if (v == NULL || *v == '\0') return;
    size_t bytes = 0;
    if (strcmp(v, "0") == 0) {
        g_budget = 0;
    } else if (trn__parse_size(v, &bytes)) {
        g_budget = bytes;
    } else {
        g_budget = 0;
        trn_log(TRN_LOG_WARNING, "matmul",
                "TORCH_NEURONX_WEIGHT_CACHE_SIZE='%s' is not a byte count (like '256M'): "
                "the weight cache is off",
                v);
    }
}

static size_t budget(void) {
    (void)pthread_once(&g_once, budget_read);
    return g_budget;
}

static bool key_eq(const trn__wcache_key *a, const trn__wcache_key *b) {
    return a->b == b->b && a->k == b->k && a->n == b->n && a->rs == b->rs && a->cs == b->cs &&
           a->dtype == b->dtype && a->fmt == b->fmt;
}

// First index whose operand address is >= p.
static size_t lower(const void *p) {
    size_t lo = 0, hi = g_n;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if ((uintptr_t)g_ent[mid]->key.b < (uintptr_t)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t find(const trn__wcache_key *key) {
    for (size_t i = lower(key->b); i < g_n && g_ent[i]->key.b == key->b; i++)
        if (key_eq(&g_ent[i]->key, key)) return i;
    return SIZE_MAX;
}

static void entry_free(trn__wcache_entry *e) {
    if (e->packed != NULL) g_packed--;
    g_bytes -= e->bytes;
    free(e->packed);
    free(e);
}

// Unlinks entry i; it is freed now or by its last holder.
static void remove_at(size_t i) {
    trn__wcache_entry *e = g_ent[i];
    memmove(g_ent + i, g_ent + i + 1, (g_n - i - 1) * sizeof *g_ent);
    g_n--;
    atomic_store_explicit(&g_count, g_n, memory_order_relaxed);
    g_drops++;
    e->dead = true;
    if (e->refs == 0) entry_free(e);
}

// Records key at version (not packed) at index i; false when full or out
// of memory (the caller then just computes without the cache).
static bool insert_at(size_t i, const trn__wcache_key *key, uint64_t version) {
    if (g_n >= WCACHE_MAX_ENTRIES) return false;
    if (g_n == g_cap) {
        const size_t cap = g_cap ? g_cap * 2 : 64;
        trn__wcache_entry **grown = realloc(g_ent, cap * sizeof *grown);
        if (grown == NULL) return false;
        g_ent = grown;
        g_cap = cap;
    }
    trn__wcache_entry *e = calloc(1, sizeof *e);
    if (e == NULL) return false;
    e->key = *key;
    e->version = version;
    memmove(g_ent + i + 1, g_ent + i, (g_n - i) * sizeof *g_ent);
    g_ent[i] = e;
    g_n++;
    atomic_store_explicit(&g_count, g_n, memory_order_relaxed);
    return true;
}

typedef struct record_ctx {
    const trn__wcache_key *key;
    uint64_t version;
} record_ctx;

// Called by trn__mem_wcache_record under the allocator's lock.
static void record_locked(void *ctx) {
    const record_ctx *r = ctx;
    trn__lock(&g_mu);
    if (find(r->key) == SIZE_MAX) (void)insert_at(lower(r->key->b), r->key, r->version);
    trn__unlock(&g_mu);
}

const void *trn__wcache_acquire(const trn__wcache_key *key, uint64_t version, size_t bytes,
                                trn__wcache_pack_fn pack, trn__wcache_entry **held) {
    *held = NULL;
    const size_t limit = budget();
    if (limit == 0 || bytes == 0 || bytes > limit) return NULL;
    trn__lock(&g_mu);
    size_t i = find(key);
    if (i == SIZE_MAX) {
        trn__unlock(&g_mu);
        // Only operands in the allocator's blocks, marked so that their
        // frees drop the entries, and only while the allocation `version`
        // names is alive: with worker threads the host may have freed it
        // before this kernel runs.
        record_ctx r = {key, version};
        (void)trn__mem_wcache_record(key->b, version, record_locked, &r);
        return NULL;
    }
    trn__wcache_entry *e = g_ent[i];
    if (e->version != version) {
        // Written in place since (or another tensor's version): the old
        // copy is never right again for this version; start over.
        remove_at(i);
        (void)insert_at(lower(key->b), key, version);
        trn__unlock(&g_mu);
        return NULL;
    }
    if (e->packed != NULL) {
        e->refs++;
        g_hits++;
        trn__unlock(&g_mu);
        *held = e;
        return e->packed;
    }
    if (e->packing || g_bytes + bytes > limit) {
        trn__unlock(&g_mu);
        return NULL;
    }
    // Seen twice at one version: pack, without the lock (the allocator's
    // frees wait on it), the bytes reserved meanwhile.
    e->packing = true;
    e->refs++;
    e->bytes = bytes;
    g_bytes += bytes;
    trn__unlock(&g_mu);
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (p != NULL) pack(key, p);
    trn__lock(&g_mu);
    e->packing = false;
    if (p == NULL) {
        g_bytes -= bytes;
        e->bytes = 0;
        e->refs--;
        if (e->dead && e->refs == 0) entry_free(e);
        trn__unlock(&g_mu);
        return NULL;
    }
    e->packed = p;
    g_packed++;
    g_packs++;
    trn__unlock(&g_mu);
    *held = e;  // even if dropped meanwhile: packed from what this call reads
    return p;
}

void trn__wcache_release(trn__wcache_entry *e) {
    if (e == NULL) return;
    trn__lock(&g_mu);
    if (--e->refs == 0 && e->dead) entry_free(e);
    trn__unlock(&g_mu);
}

void trn__wcache_invalidate(trn__wcache_entry *e) {
    trn__lock(&g_mu);
    if (!e->dead)
        for (size_t i = lower(e->key.b); i < g_n && g_ent[i]->key.b == e->key.b; i++)
            if (g_ent[i] == e) {
                remove_at(i);  // e->refs > 0: the holder's release frees it
                break;
            }
    trn__unlock(&g_mu);
}

void trn__wcache_drop_range(const void *lo, size_t nbytes) {
    if (atomic_load_explicit(&g_count, memory_order_relaxed) == 0) return;
    const uintptr_t end = (uintptr_t)lo + nbytes;
    trn__lock(&g_mu);
    const size_t i = lower(lo);
    while (i < g_n && (uintptr_t)g_ent[i]->key.b < end) remove_at(i);
    trn__unlock(&g_mu);
}

void trn_weight_cache_stats_get(trn_weight_cache_stats *out) {
    const size_t limit = budget();
    trn__lock(&g_mu);
    out->entries = g_n;
    out->packed = g_packed;
    out->bytes = g_bytes;
    out->budget = limit;
    out->hits = g_hits;
    out->packs = g_packs;
    out->drops = g_drops;
    trn__unlock(&g_mu);
}

void trn_weight_cache_clear(void) {
    trn__lock(&g_mu);
    while (g_n > 0) remove_at(g_n - 1);
    trn__unlock(&g_mu);
}

// fork.c: held across fork, so a child never inherits the table mid-update
// (a DataLoader worker's first product would wait on it forever).
void trn__wcache_fork_prepare(void) { trn__lock(&g_mu); }
void trn__wcache_fork_release(void) { trn__unlock(&g_mu); }
