// test_memory.c - the caching allocator: size parsing and rounding, reuse
// from the cache, stream-ordered reuse, statistics, zero-size requests,
// capacity OOM (message and recovery), host OOM, empty_cache, invalid and
// double frees, interior-pointer lookup, record_stream, blocks split from
// segments and merged back, fragmentation, the segment-size fallback under a
// limit, threads, quick bins, pinned host memory.
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "internal.h"
#include "test.h"

// Sanitizers reserve huge address ranges, so an address-space limit breaks
// them rather than the allocator.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TEST_SANITIZER 1
#endif
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static void test_parse_and_round(void) {
    size_t n = 0;
    CHECK(trn__parse_size("16G", &n));
    CHECK_U64(n, 16 * GiB);
    CHECK(trn__parse_size("512M", &n));
    CHECK_U64(n, 512 * MiB);
    CHECK(trn__parse_size("4096K", &n));
    CHECK_U64(n, 4 * MiB);
    CHECK(trn__parse_size("123", &n));
    CHECK_U64(n, 123);
    CHECK(trn__parse_size("2gib", &n));
    CHECK_U64(n, 2 * GiB);
    CHECK(trn__parse_size("1T", &n));
    CHECK_U64(n, 1024 * GiB);
    CHECK(trn__parse_size(" 8MB ", &n));
    CHECK_U64(n, 8 * MiB);
    CHECK(!trn__parse_size("", &n));
    CHECK(!trn__parse_size("G", &n));
    CHECK(!trn__parse_size("-1G", &n));
    CHECK(!trn__parse_size("1.5G", &n));
    CHECK(!trn__parse_size("12Q", &n));
    CHECK(!trn__parse_size("99999999999999999999", &n));
    CHECK(!trn__parse_size("99999999999T", &n));
    CHECK(!trn__parse_size(NULL, &n));

    char buf[32];
    trn__format_bytes(buf, sizeof buf, 0);
    CHECK_STR(buf, "0 bytes");
    trn__format_bytes(buf, sizeof buf, 1023);
    CHECK_STR(buf, "1023 bytes");
    trn__format_bytes(buf, sizeof buf, 1536);
    CHECK_STR(buf, "1.50 KiB");
    trn__format_bytes(buf, sizeof buf, 10 * MiB);
    CHECK_STR(buf, "10.00 MiB");
    trn__format_bytes(buf, sizeof buf, GiB);
    CHECK_STR(buf, "1.00 GiB");

    CHECK_U64(trn__mem_round_size(1), 512);
    CHECK_U64(trn__mem_round_size(512), 512);
    CHECK_U64(trn__mem_round_size(513), 1024);
    CHECK_U64(trn__mem_round_size(MiB - 1), MiB);
    CHECK_U64(trn__mem_round_size(MiB), MiB);
    CHECK_U64(trn__mem_round_size(MiB + 1), MiB + 512);
    CHECK_U64(trn__mem_round_size(16 * MiB + 1), 16 * MiB + 512);
    CHECK_U64(trn__mem_round_size(GiB), GiB);
    // Segments: 2 MiB for the small pool, 20 MiB below 10 MiB, else the
    // request rounded up to 2 MiB.
    CHECK_U64(trn__mem_segment_size(512), 2 * MiB);
    CHECK_U64(trn__mem_segment_size(MiB - 512), 2 * MiB);
    CHECK_U64(trn__mem_segment_size(MiB), 20 * MiB);
    CHECK_U64(trn__mem_segment_size(10 * MiB - 512), 20 * MiB);
    CHECK_U64(trn__mem_segment_size(10 * MiB), 10 * MiB);
    CHECK_U64(trn__mem_segment_size(10 * MiB + 512), 12 * MiB);
    CHECK_U64(trn__mem_segment_size(GiB), GiB);
}

static trn_mem_stats stats(int device) {
    trn_mem_stats s;
    memset(&s, 0xff, sizeof s);
    CHECK_OK(trn_mem_get_stats(device, &s));
    return s;
}

static void test_alloc_reuse_stats(void) {
    // Protect mode keeps one block per segment, reused for its size only.
    const bool prot = trn_mem_protect_enabled();
    void *p = NULL, *q = NULL;
    CHECK_OK(trn_mem_alloc(0, 1000, NULL, &p));
    CHECK(p != NULL);
    CHECK_INT((uintptr_t)p % 64, 0);
    if (!trn_mem_protect_enabled()) memset(p, 1, 1000);  // host-addressable
    trn_mem_stats s = stats(0);
    CHECK_U64(s.allocated_bytes, 1024);
    CHECK_U64(s.requested_bytes, 1000);
    CHECK_U64(s.reserved_bytes, prot ? 1024 : 2 * MiB);  // a small segment
    CHECK_U64(s.active_blocks, 1);
    CHECK_U64(s.segments, 1);
    CHECK_U64(s.num_allocs, 1);
    CHECK_U64(s.num_segment_allocs, 1);
    CHECK_U64(s.capacity, GiB);

    CHECK_OK(trn_mem_free(p));
    s = stats(0);
    CHECK_U64(s.allocated_bytes, 0);
    CHECK_U64(s.requested_bytes, 0);
    CHECK_U64(s.reserved_bytes, prot ? 1024 : 2 * MiB);  // cached
    CHECK_U64(s.active_blocks, 0);
    CHECK_U64(s.allocated_bytes_peak, 1024);
    CHECK_U64(s.num_frees, 1);

    // Same rounded size, same stream: the cached block comes back.
    CHECK_OK(trn_mem_alloc(0, 600, NULL, &q));
    CHECK(q == p);
    s = stats(0);
    CHECK_U64(s.num_segment_allocs, 1);
    CHECK_U64(s.requested_bytes, 600);
    CHECK_U64(s.requested_bytes_peak, 1000);
    CHECK_OK(trn_mem_free(q));

    // A larger request is split from the cached rest of the segment: the
    // freed block waits in its quick bin for its own size (protect mode:
    // only the same size takes a block).
    CHECK_OK(trn_mem_alloc(0, 2000, NULL, &q));
    CHECK(prot ? q != p : q == (char *)p + 1024);
    CHECK_U64(stats(0).allocated_bytes, 2048);
    CHECK_OK(trn_mem_free(q));

    // Stream-ordered: a block cached for the default stream is not handed to
    // another stream, even for the same size.
    trn_stream *other;
    CHECK_OK(trn_stream_create(0, 0, &other));
    CHECK_OK(trn_mem_alloc(0, 1000, other, &q));
    CHECK(q != p);
    CHECK_OK(trn_mem_free(q));
    trn_stream *def;
    CHECK_OK(trn_stream_get_default(0, &def));
    CHECK_OK(trn_mem_alloc(0, 1000, def, &q));
    CHECK(q == p);
    CHECK_OK(trn_mem_free(q));
    // The current stream is the default for NULL.
    CHECK_OK(trn_stream_set_current(other));
    void *r;
    CHECK_OK(trn_mem_alloc(0, 1000, NULL, &r));
    CHECK(r != p);
    CHECK_OK(trn_mem_free(r));
    CHECK_OK(trn_stream_set_current(def));
    trn_stream *dev1;
    CHECK_OK(trn_stream_get_default(1, &dev1));
    CHECK_STATUS(trn_mem_alloc(0, 16, dev1, &r), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "stream of neuron:1");
    CHECK_STATUS(trn_mem_alloc(0, 16, NULL, NULL), TRN_ERROR_INVALID_ARGUMENT);

    // Zero-size: NULL and success, no accounting.
    uint64_t allocs = stats(0).num_allocs;
    r = &r;
    CHECK_OK(trn_mem_alloc(0, 0, NULL, &r));
    CHECK(r == NULL);
    CHECK_U64(stats(0).num_allocs, allocs);
    CHECK_OK(trn_mem_free(NULL));

    // Peaks and counters reset.
    CHECK_OK(trn_mem_reset_peak(0));
    s = stats(0);
    CHECK_U64(s.allocated_bytes_peak, 0);
    CHECK_U64(s.reserved_bytes_peak, s.reserved_bytes);
    CHECK_OK(trn_mem_reset_accumulated(0));
    s = stats(0);
    CHECK_U64(s.num_allocs, 0);
    CHECK_U64(s.num_frees, 0);
    CHECK_U64(s.num_segment_allocs, 0);

    size_t free_b = 0, total = 0;
    CHECK_OK(trn_mem_get_info(0, &free_b, &total));
    CHECK_U64(total, GiB);
    CHECK_U64(free_b, GiB - s.reserved_bytes);

    // empty_cache hands every cached block back.
    uint64_t segments = s.segments;
    // Protect mode: 1 KiB and 2 KiB on the default stream, 1 KiB on `other`;
    // else one small segment per stream.
    CHECK_U64(segments, prot ? 3 : 2);
    CHECK_OK(trn_mem_empty_cache(0));
    s = stats(0);
    CHECK_U64(s.reserved_bytes, 0);
    CHECK_U64(s.segments, 0);
    CHECK_U64(s.num_segment_frees, segments);
    CHECK_STATUS(trn_mem_empty_cache(7), TRN_ERROR_INVALID_DEVICE);
    CHECK_STATUS(trn_mem_get_stats(0, NULL), TRN_ERROR_INVALID_ARGUMENT);
}

static void test_oom(void) {
    const bool prot = trn_mem_protect_enabled();
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_OK(trn_mem_reset_accumulated(0));
    void *a, *b, *big = NULL;
    CHECK_OK(trn_mem_alloc(0, 10 * MiB, NULL, &a));
    CHECK_OK(trn_mem_alloc(0, 2 * MiB, NULL, &b));
    CHECK_OK(trn_mem_free(b));  // 2 MiB cached
    CHECK_STATUS(trn_mem_alloc(0, GiB, NULL, &big), TRN_ERROR_OUT_OF_MEMORY);
    CHECK(big == NULL);
    // The cache was flushed before giving up.
    CHECK_STR(trn_last_error(), "neuron:0 out of memory: tried to allocate 1.00 GiB; 10.00 MiB "
                                "allocated, 10.00 MiB reserved, capacity 1.00 GiB "
                                "(TORCH_NEURONX_HBM_SIZE sets the capacity)");
    trn_mem_stats s = stats(0);
    CHECK_U64(s.num_ooms, 1);
    CHECK_U64(s.num_alloc_retries, 1);
    CHECK_U64(s.reserved_bytes, 10 * MiB);

    // Cached bytes are reported as reserved when nothing could be flushed
    // (the rest of b's 20 MiB segment cannot go back while b lives).
    CHECK_OK(trn_mem_alloc(0, 2 * MiB, NULL, &b));
    CHECK_STATUS(trn_mem_alloc(0, GiB, NULL, &big), TRN_ERROR_OUT_OF_MEMORY);
    CHECK_CONTAINS(trn_last_error(), prot ? "12.00 MiB allocated, 12.00 MiB reserved"
                                          : "12.00 MiB allocated, 30.00 MiB reserved");
    CHECK_OK(trn_mem_free(b));
    // Larger than the capacity altogether.
    CHECK_STATUS(trn_mem_alloc(0, SIZE_MAX, NULL, &big), TRN_ERROR_OUT_OF_MEMORY);
    CHECK_CONTAINS(trn_last_error(), "neuron:0 out of memory: tried to allocate");
    CHECK_STATUS(trn_mem_alloc(0, GiB + 1, NULL, &big), TRN_ERROR_OUT_OF_MEMORY);

    // The process stays usable: after freeing, the same request fits, with
    // a cache flush to make room.
    CHECK_OK(trn_mem_free(a));
    CHECK_OK(trn_mem_reset_accumulated(0));
    CHECK_OK(trn_mem_alloc(0, GiB, NULL, &big));
    CHECK(big != NULL);
    s = stats(0);
    CHECK_U64(s.num_alloc_retries, 1);
    CHECK_U64(s.reserved_bytes, GiB);
    CHECK_U64(s.allocated_bytes, GiB);
    // The other device has its own capacity.
    void *other;
    CHECK_OK(trn_mem_alloc(1, 512 * MiB, NULL, &other));
    CHECK_OK(trn_mem_free(other));
    CHECK_OK(trn_mem_free(big));
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_OK(trn_mem_empty_cache(1));
    CHECK_U64(stats(0).reserved_bytes, 0);
}

static void test_bad_pointers(void) {
    void *p;
    int local = 0;
    CHECK_OK(trn_mem_alloc(0, 256, NULL, &p));
    trn_mem_stats before = stats(0);
    CHECK_STATUS(trn_mem_free(&local), TRN_ERROR_INVALID_POINTER);
    CHECK_CONTAINS(trn_last_error(), "is not neuron device memory");
    CHECK_STATUS(trn_mem_free((char *)p + 16), TRN_ERROR_INVALID_POINTER);
    CHECK_CONTAINS(trn_last_error(), "points 16 bytes into the neuron:0 block");
    trn_mem_stats after = stats(0);
    CHECK_U64(after.num_frees, before.num_frees);
    CHECK_U64(after.allocated_bytes, before.allocated_bytes);

    int dev = -1;
    CHECK_OK(trn_mem_get_device(p, &dev));
    CHECK_INT(dev, 0);
    dev = -1;
    CHECK_OK(trn_mem_get_device((char *)p + 511, &dev));  // inside the block
    CHECK_INT(dev, 0);
    CHECK_STATUS(trn_mem_get_device((char *)p + 512, &dev), TRN_ERROR_INVALID_POINTER);
    CHECK_STATUS(trn_mem_get_device(&local, &dev), TRN_ERROR_INVALID_POINTER);
    CHECK_CONTAINS(trn_last_error(), "is not neuron device memory");
    CHECK_STATUS(trn_mem_get_device(NULL, &dev), TRN_ERROR_INVALID_POINTER);
    CHECK_STATUS(trn_mem_get_device(p, NULL), TRN_ERROR_INVALID_ARGUMENT);
    void *q;
    CHECK_OK(trn_mem_alloc(1, 3 * MiB, NULL, &q));
    CHECK_OK(trn_mem_get_device((char *)q + 2 * MiB, &dev));
    CHECK_INT(dev, 1);
    CHECK_OK(trn_mem_free(q));

    CHECK_OK(trn_mem_free(p));
    CHECK_STATUS(trn_mem_free(p), TRN_ERROR_INVALID_POINTER);
    CHECK_CONTAINS(trn_last_error(), "double free");
    CHECK_STATUS(trn_mem_get_device(p, &dev), TRN_ERROR_INVALID_POINTER);
    CHECK_STATUS(trn_mem_record_stream(p, NULL), TRN_ERROR_INVALID_ARGUMENT);
    trn_stream *s;
    CHECK_OK(trn_stream_get_default(0, &s));
    CHECK_STATUS(trn_mem_record_stream(p, s), TRN_ERROR_INVALID_POINTER);
    CHECK_CONTAINS(trn_last_error(), "already freed");
    CHECK_STATUS(trn_mem_record_stream(&local, s), TRN_ERROR_INVALID_POINTER);
    CHECK_OK(trn_mem_record_stream(NULL, s));
    CHECK_U64(stats(0).num_frees, before.num_frees + 1);
    // Released blocks are unknown afterwards, still without UB.
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_STATUS(trn_mem_free(p), TRN_ERROR_INVALID_POINTER);
}

typedef struct slow_args {
    atomic_int *flag;
} slow_args;

static trn_status slow_task(void *args) {
    const slow_args *a = args;
    usleep(50000);
    atomic_store(a->flag, 1);
    return TRN_SUCCESS;
}

static void test_record_stream(void) {
    trn_stream *def, *side;
    CHECK_OK(trn_stream_get_default(0, &def));
    CHECK_OK(trn_stream_create(0, 0, &side));
    CHECK(side != def);
    void *p;
    CHECK_OK(trn_mem_alloc(0, 4096, def, &p));
    atomic_int flag = 0;
    slow_args a = {&flag};
    CHECK_OK(trn_stream_launch(side, slow_task, &a, sizeof a));
    CHECK_OK(trn_mem_record_stream(p, side));
    CHECK_OK(trn_mem_record_stream(p, side));  // recording twice is fine
    CHECK_OK(trn_mem_record_stream(p, def));   // its own stream: no-op
    CHECK_OK(trn_mem_free(p));
    // The block may be reused by `def` right away, so freeing had to wait
    // for the side stream's work.
    CHECK_INT(atomic_load(&flag), 1);
    void *q;
    CHECK_OK(trn_mem_alloc(0, 4096, def, &q));
    CHECK(q == p);
    CHECK_OK(trn_mem_free(q));
    CHECK_OK(trn_stream_synchronize(side));

    // A block freed while its own stream still uses it survives empty_cache
    // until that work is done (empty_cache waits for the device).
    atomic_store(&flag, 0);
    CHECK_OK(trn_mem_alloc(0, 8192, side, &p));
    CHECK_OK(trn_stream_launch(side, slow_task, &a, sizeof a));
    CHECK_OK(trn_mem_free(p));
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_INT(atomic_load(&flag), 1);
    CHECK_U64(stats(0).reserved_bytes, 0);
}

// Blocks split from segments and merged back: the layout inside a segment,
// best fit, cached neighbours merging, and the snapshot's segment fields.
static void test_split_merge(void) {
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_U64(stats(0).reserved_bytes, 0);
    void *a, *b, *c, *d;
    CHECK_OK(trn_mem_alloc(0, 1000, NULL, &a));
    CHECK_OK(trn_mem_alloc(0, 3000, NULL, &b));
    CHECK_OK(trn_mem_alloc(0, 512, NULL, &c));
    trn_mem_stats s = stats(0);
    CHECK_U64(s.allocated_bytes, 1024 + 3072 + 512);
    if (trn_mem_protect_enabled()) {
        CHECK_U64(s.segments, 3);  // one mapping per block
        CHECK_U64(s.reserved_bytes, 1024 + 3072 + 512);
        CHECK_OK(trn_mem_free(a));
        CHECK_OK(trn_mem_free(b));
        CHECK_OK(trn_mem_free(c));
        CHECK_OK(trn_mem_empty_cache(0));
        CHECK_U64(stats(0).reserved_bytes, 0);
        return;
    }
    // One small segment, tiled in request order.
    CHECK_U64(s.segments, 1);
    CHECK_U64(s.reserved_bytes, 2 * MiB);
    CHECK(b == (char *)a + 1024);
    CHECK(c == (char *)b + 3072);

    // A hole between allocated blocks waits in its quick bin for its size,
    // and once the bins are flushed (a snapshot flushes them) it is the best
    // fit for what it holds.
    CHECK_OK(trn_mem_free(b));
    CHECK_OK(trn_mem_alloc(0, 3000, NULL, &d));
    CHECK(d == b);
    CHECK_OK(trn_mem_free(d));
    CHECK(trn_mem_snapshot(0, NULL, 0) > 0);
    CHECK_OK(trn_mem_alloc(0, 2048, NULL, &d));
    CHECK(d == b);
    CHECK_OK(trn_mem_free(d));  // merges with the 1 KiB left after it
    // Freeing a merges it with the hole: 4 KiB at a, no new segment.
    CHECK_OK(trn_mem_free(a));
    CHECK(trn_mem_snapshot(0, NULL, 0) > 0);
    CHECK_OK(trn_mem_alloc(0, 4096, NULL, &d));
    CHECK(d == a);
    CHECK_OK(trn_mem_free(d));
    CHECK_OK(trn_mem_free(c));  // the whole segment is one cached block again
    trn_mem_block_info info[8];
    CHECK_U64(trn_mem_snapshot(0, info, 8), 1);
    CHECK(info[0].ptr == a && info[0].segment == a);
    CHECK_U64(info[0].size, 2 * MiB);
    CHECK_U64(info[0].segment_size, 2 * MiB);
    CHECK(!info[0].allocated && info[0].small_pool);
    CHECK_U64(stats(0).num_segment_allocs - s.num_segment_allocs, 0);

    // Large pool: 1.5 MiB requests share a 20 MiB segment and occupy just
    // their size (no size classes).
    void *x, *y;
    CHECK_OK(trn_mem_alloc(0, 3 * MiB / 2, NULL, &x));
    CHECK_OK(trn_mem_alloc(0, 3 * MiB / 2, NULL, &y));
    CHECK(y == (char *)x + 3 * MiB / 2);
    s = stats(0);
    CHECK_U64(s.allocated_bytes, 3 * MiB);
    CHECK_U64(s.reserved_bytes, 22 * MiB);
    CHECK_U64(s.segments, 2);
    size_t n = trn_mem_snapshot(0, info, 8);
    CHECK_U64(n, 4);  // the small segment; x, y and the rest of theirs
    size_t yi = 0;
    for (size_t i = 0; i < n; i++)
        if (info[i].ptr == y) yi = i;
    CHECK(info[yi].allocated && !info[yi].small_pool);
    CHECK(info[yi].segment == x);
    CHECK_U64(info[yi].segment_size, 20 * MiB);
    CHECK_U64(info[yi].requested, 3 * MiB / 2);
    CHECK(!info[yi + 1].allocated && info[yi + 1].segment == x);
    CHECK_U64(info[yi + 1].size, 17 * MiB);
    // empty_cache keeps a segment that is partly in use.
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_U64(stats(0).reserved_bytes, 20 * MiB);
    CHECK_OK(trn_mem_free(x));
    CHECK_OK(trn_mem_free(y));
    CHECK_OK(trn_mem_empty_cache(0));
    s = stats(0);
    CHECK_U64(s.reserved_bytes, 0);
    CHECK_U64(s.segments, 0);
    CHECK_U64(trn_mem_snapshot(0, NULL, 0), 0);
}

// Holes left by interleaved frees serve requests that fit them; larger
// requests take fresh space; freeing everything leaves whole segments.
static void test_fragmentation(void) {
    CHECK_OK(trn_mem_empty_cache(0));
    void *p[8], *big, *hole;
    for (int i = 0; i < 8; i++) CHECK_OK(trn_mem_alloc(0, 256 * KiB, NULL, &p[i]));
    const bool prot = trn_mem_protect_enabled();
    CHECK_U64(stats(0).segments, prot ? 8 : 1);  // 8 x 256 KiB fill 2 MiB
    for (int i = 0; i < 8; i += 2) CHECK_OK(trn_mem_free(p[i]));
    CHECK_OK(trn_mem_alloc(0, 512 * KiB, NULL, &big));  // no hole holds it
    for (int i = 0; i < 8; i++) CHECK(big != p[i]);
    CHECK_U64(stats(0).segments, prot ? 9 : 2);
    CHECK_OK(trn_mem_alloc(0, 200 * KiB, NULL, &hole));
    if (!prot) CHECK(hole == p[0]);  // best fit: smallest, then lowest
    trn_mem_stats s = stats(0);
    CHECK_U64(s.allocated_bytes, 4 * 256 * KiB + 512 * KiB + 200 * KiB);
    CHECK_OK(trn_mem_free(hole));
    CHECK_OK(trn_mem_free(big));
    for (int i = 1; i < 8; i += 2) CHECK_OK(trn_mem_free(p[i]));
    s = stats(0);
    CHECK_U64(s.allocated_bytes, 0);
    if (!prot) {
        CHECK_U64(trn_mem_snapshot(0, NULL, 0), 2);  // each segment whole
    }
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_U64(stats(0).reserved_bytes, 0);
}

// Under a limit a preferred segment would pass, a segment of just the
// request is reserved instead.
static void test_segment_fallback(void) {
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_OK(trn_mem_set_limit(0, 4 * MiB));
    void *p, *q;
    CHECK_OK(trn_mem_alloc(0, 3 * MiB / 2, NULL, &p));  // not 20 MiB
    CHECK_U64(stats(0).reserved_bytes, 3 * MiB / 2);
    CHECK_OK(trn_mem_alloc(0, 1000, NULL, &q));  // a 2 MiB small segment fits
    CHECK_U64(stats(0).reserved_bytes,
              trn_mem_protect_enabled() ? 3 * MiB / 2 + 1024 : 7 * MiB / 2);
    CHECK_OK(trn_mem_free(q));
    CHECK_OK(trn_mem_free(p));
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_OK(trn_mem_set_limit(0, MiB));
    CHECK_OK(trn_mem_alloc(0, 1000, NULL, &q));  // 1 KiB alone
    CHECK_U64(stats(0).reserved_bytes, 1024);
    CHECK_OK(trn_mem_free(q));
    CHECK_OK(trn_mem_set_limit(0, 0));
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_U64(stats(0).reserved_bytes, 0);
}

// Threads allocating and freeing mixed sizes at once: every block is its
// own memory (a tag written at both ends survives until its free), and the
// statistics come back to zero.
#define STRESS_THREADS 4
#define STRESS_ROUNDS 400
#define STRESS_LIVE 16

static void *stress_thread(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    const bool prot = trn_mem_protect_enabled();
    void *live[STRESS_LIVE] = {0};
    size_t len[STRESS_LIVE] = {0};
    for (int r = 0; r < STRESS_ROUNDS; r++) {
        int i = (int)(rand_r(&seed) % STRESS_LIVE);
        if (live[i] != NULL) {
            unsigned char tag = (unsigned char)(i + 1);
            if (!prot) {
                CHECK_INT(((unsigned char *)live[i])[0], tag);
                CHECK_INT(((unsigned char *)live[i])[len[i] - 1], tag);
            }
            CHECK_OK(trn_mem_free(live[i]));
            live[i] = NULL;
            continue;
        }
        // Mostly small, some large-pool and some own-segment requests.
        unsigned k = (unsigned)rand_r(&seed) % 16;
        len[i] = k < 12   ? 1 + (size_t)rand_r(&seed) % (64 * KiB)
                 : k < 15 ? MiB + (size_t)rand_r(&seed) % (3 * MiB)
                          : 10 * MiB + (size_t)rand_r(&seed) % MiB;
        CHECK_OK(trn_mem_alloc(0, len[i], NULL, &live[i]));
        if (!prot) {
            ((unsigned char *)live[i])[0] = (unsigned char)(i + 1);
            ((unsigned char *)live[i])[len[i] - 1] = (unsigned char)(i + 1);
        }
    }
    for (int i = 0; i < STRESS_LIVE; i++) CHECK_OK(trn_mem_free(live[i]));
    return NULL;
}

static void test_threads(void) {
    CHECK_OK(trn_mem_empty_cache(0));
    pthread_t t[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++)
        CHECK_INT(pthread_create(&t[i], NULL, stress_thread, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < STRESS_THREADS; i++) CHECK_INT(pthread_join(t[i], NULL), 0);
    trn_mem_stats s = stats(0);
    CHECK_U64(s.allocated_bytes, 0);
    CHECK_U64(s.requested_bytes, 0);
    CHECK_U64(s.active_blocks, 0);
    CHECK_OK(trn_mem_empty_cache(0));
    s = stats(0);
    CHECK_U64(s.reserved_bytes, 0);
    CHECK_U64(s.segments, 0);
    CHECK_U64(trn_mem_snapshot(0, NULL, 0), 0);
}

// Quick bins: a small block freed whole is reused by the next request of
// its size on its stream, counted as cached (reserved, not allocated)
// meanwhile; double frees, OOM flushes, empty_cache (from another thread
// too), the snapshot and other streams see it as a cached block.
#define QUICK_THREADS 2
#define QUICK_ROUNDS 3000

static void *quick_thread(void *arg) {
    const unsigned char tag = (unsigned char)(uintptr_t)arg;
    const bool prot = trn_mem_protect_enabled();
    for (int r = 0; r < QUICK_ROUNDS; r++) {
        void *p, *q;
        CHECK_OK(trn_mem_alloc(0, 1000, NULL, &p));
        CHECK_OK(trn_mem_alloc(0, 2500, NULL, &q));
        if (!prot) {
            ((unsigned char *)p)[999] = tag;
            ((unsigned char *)q)[2499] = tag;
            CHECK_INT(((unsigned char *)p)[999], tag);
            CHECK_INT(((unsigned char *)q)[2499], tag);
        }
        CHECK_OK(trn_mem_free(p));
        CHECK_OK(trn_mem_free(q));
    }
    return NULL;
}

static void *empty_cache_thread(void *arg) {
    (void)arg;
    CHECK_OK(trn_mem_empty_cache(0));
    return NULL;
}

static void test_quick_bins(void) {
    const bool prot = trn_mem_protect_enabled();
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_OK(trn_mem_reset_accumulated(0));
    void *a, *b, *c;
    CHECK_OK(trn_mem_alloc(0, 1000, NULL, &a));
    CHECK_OK(trn_mem_alloc(0, 3000, NULL, &b));
    CHECK_OK(trn_mem_free(a));
    trn_mem_stats s = stats(0);
    CHECK_U64(s.allocated_bytes, 3072);
    CHECK_U64(s.requested_bytes, 3000);
    CHECK_U64(s.active_blocks, 1);
    CHECK_U64(s.reserved_bytes, prot ? 1024 + 3072 : 2 * MiB);
    // Same rounded size: the freed block itself.
    CHECK_OK(trn_mem_alloc(0, 1010, NULL, &c));
    CHECK(c == a);
    CHECK_U64(stats(0).allocated_bytes, 1024 + 3072);
    CHECK_OK(trn_mem_free(c));
    // A block in a bin is freed already.
    CHECK_STATUS(trn_mem_free(a), TRN_ERROR_INVALID_POINTER);
    CHECK_CONTAINS(trn_last_error(), "double free");
    CHECK_U64(stats(0).num_frees, 2);
    if (!prot) {
        // The snapshot shows a as a cached block, and merged with the
        // rest of the segment once b goes too.
        trn_mem_block_info info[4];
        CHECK_U64(trn_mem_snapshot(0, info, 4), 3);
        CHECK(info[0].ptr == a && !info[0].allocated && info[0].size == 1024);
        CHECK(info[1].ptr == b && info[1].allocated);
        CHECK_OK(trn_mem_free(b));
        CHECK_U64(trn_mem_snapshot(0, info, 4), 1);
        CHECK_U64(info[0].size, 2 * MiB);
    } else {
        CHECK_OK(trn_mem_free(b));
    }

    // Another stream's request of the same size does not take the block.
    trn_stream *side;
    CHECK_OK(trn_stream_create(0, 0, &side));
    CHECK_OK(trn_mem_alloc(0, 4096, NULL, &a));
    CHECK_OK(trn_mem_free(a));
    CHECK_OK(trn_mem_alloc(0, 4096, side, &c));
    CHECK(c != a);
    CHECK_OK(trn_mem_free(c));
    CHECK_OK(trn_stream_synchronize(side));

    // OOM under a limit: a full small segment whose blocks sit in bins
    // (and the free list) goes back to the host to fit a large request.
    CHECK_OK(trn_mem_empty_cache(0));
    CHECK_OK(trn_mem_set_limit(0, 4 * MiB));
    CHECK_OK(trn_mem_reset_accumulated(0));
    void *blocks[32];
    for (int i = 0; i < 32; i++) CHECK_OK(trn_mem_alloc(0, 64 * KiB, NULL, &blocks[i]));
    for (int i = 0; i < 32; i++) CHECK_OK(trn_mem_free(blocks[i]));
    CHECK_U64(stats(0).allocated_bytes, 0);
    CHECK_OK(trn_mem_alloc(0, 3 * MiB, NULL, &a));
    s = stats(0);
    CHECK_U64(s.num_alloc_retries, 1);
    CHECK_U64(s.num_ooms, 0);
    CHECK_U64(s.reserved_bytes, 3 * MiB);
    CHECK_OK(trn_mem_free(a));
    CHECK_OK(trn_mem_set_limit(0, 0));

    // Two threads reusing the same sizes at once; then empty_cache from
    // another thread releases what sits in the bins.
    pthread_t t[QUICK_THREADS];
    for (int i = 0; i < QUICK_THREADS; i++)
        CHECK_INT(pthread_create(&t[i], NULL, quick_thread, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < QUICK_THREADS; i++) CHECK_INT(pthread_join(t[i], NULL), 0);
    s = stats(0);
    CHECK_U64(s.allocated_bytes, 0);
    CHECK_U64(s.active_blocks, 0);
    CHECK(s.reserved_bytes > 0);
    pthread_t e;
    CHECK_INT(pthread_create(&e, NULL, empty_cache_thread, NULL), 0);
    CHECK_INT(pthread_join(e, NULL), 0);
    s = stats(0);
    CHECK_U64(s.reserved_bytes, 0);
    CHECK_U64(s.segments, 0);
    CHECK_U64(trn_mem_snapshot(0, NULL, 0), 0);
}

static void test_pinned(void) {
    void *h = NULL;
    CHECK_OK(trn_host_alloc(100, &h));
    CHECK(h != NULL);
    CHECK(trn_host_is_pinned(h));
    CHECK(trn_host_is_pinned((char *)h + 99));
    CHECK(!trn_host_is_pinned((char *)h + 100));
    CHECK(!trn_host_is_pinned(&h));
    CHECK(!trn_host_is_pinned(NULL));
    memset(h, 0, 100);
    void *h2;
    CHECK_OK(trn_host_alloc(1 << 20, &h2));
    CHECK(trn_host_is_pinned((char *)h2 + 12345));
    CHECK_STATUS(trn_host_free((char *)h + 1), TRN_ERROR_INVALID_POINTER);
    CHECK_OK(trn_host_free(h));
    CHECK(!trn_host_is_pinned(h));
    CHECK_STATUS(trn_host_free(h), TRN_ERROR_INVALID_POINTER);
    CHECK_OK(trn_host_free(h2));
    CHECK_OK(trn_host_free(NULL));
    h = &h;
    CHECK_OK(trn_host_alloc(0, &h));
    CHECK(h == NULL);
    CHECK_STATUS(trn_host_alloc(8, NULL), TRN_ERROR_INVALID_ARGUMENT);
    // Device memory is not pinned host memory.
    void *d;
    CHECK_OK(trn_mem_alloc(0, 64, NULL, &d));
    CHECK(!trn_host_is_pinned(d));
    CHECK_OK(trn_mem_free(d));
}

// In a child (own environment read): a capacity that cannot be parsed.
static void child_bad_capacity(void) {
    setenv("TORCH_NEURONX_HBM_SIZE", "12Q", 1);
    void *p;
    CHECK_STATUS(trn_mem_alloc(0, 64, NULL, &p), TRN_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(trn_last_error(), "TORCH_NEURONX_HBM_SIZE='12Q' is invalid");
    trn_mem_stats s;
    CHECK_STATUS(trn_mem_get_stats(0, &s), TRN_ERROR_INVALID_ARGUMENT);
}

// In a child: the host refuses memory (address-space limit) although the
// emulated capacity would allow it; that is an OOM too, after a flush.
static void child_host_oom(void) {
#ifndef TEST_SANITIZER
    setenv("TORCH_NEURONX_HBM_SIZE", "64G", 1);
    struct rlimit lim = {(rlim_t)2 * GiB, (rlim_t)2 * GiB};
    CHECK_INT(setrlimit(RLIMIT_AS, &lim), 0);
    void *p, *big = NULL;
    CHECK_STATUS(trn_mem_alloc(0, 4 * GiB, NULL, &big), TRN_ERROR_OUT_OF_MEMORY);
    CHECK_CONTAINS(trn_last_error(), "tried to allocate 4.00 GiB");
    CHECK_CONTAINS(trn_last_error(), "the host could not provide the memory");
    CHECK_OK(trn_mem_alloc(0, MiB, NULL, &p));
    CHECK_OK(trn_mem_free(p));
    CHECK_STATUS(trn_mem_alloc(0, 4 * GiB, NULL, &big), TRN_ERROR_OUT_OF_MEMORY);
    trn_mem_stats s = stats(0);
    CHECK_U64(s.num_alloc_retries, 1);  // the cached MiB was flushed first
    CHECK_U64(s.num_ooms, 2);
    CHECK_U64(s.reserved_bytes, 0);
    CHECK_OK(trn_mem_alloc(0, MiB, NULL, &p));  // still usable
    CHECK_OK(trn_mem_free(p));
#endif
}

static void in_child(void (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        fflush(NULL);
        _exit(test_failed == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK_INT(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// Under ASan the allocator poisons device memory outside the requested bytes
// of allocated blocks (memory.c), so a kernel's overrun of a tensor is
// reported even inside one segment (make fuzz-asan relies on it).
static void test_asan_poison(void) {
#if defined(__SANITIZE_ADDRESS__)
    if (trn_mem_protect_enabled()) return;  // mapped blocks are not poisoned
    void *p = NULL;
    CHECK_OK(trn_mem_alloc(0, 1000, NULL, &p));
    CHECK(!__asan_address_is_poisoned(p));
    CHECK(!__asan_address_is_poisoned((char *)p + 999));
    CHECK(__asan_address_is_poisoned((char *)p + 1000));  // the rounding slack
    CHECK(__asan_address_is_poisoned((char *)p + 1023));
    // The rest of the segment is cached, not handed out: poisoned.
    CHECK(__asan_address_is_poisoned((char *)p + 1024));
    CHECK(__asan_address_is_poisoned((char *)p + 4096));
    CHECK_OK(trn_mem_free(p));
    // A block handed out again is open exactly up to its new request.
    void *q = NULL;
    CHECK_OK(trn_mem_alloc(0, 200, NULL, &q));
    CHECK(!__asan_address_is_poisoned((char *)q + 199));
    CHECK(__asan_address_is_poisoned((char *)q + 200));
    CHECK_OK(trn_mem_free(q));
    CHECK_OK(trn_mem_empty_cache(0));
#endif
}

int main(void) {
    unsetenv("NEURON_RT_VISIBLE_CORES");
    unsetenv("NEURON_RT_NUM_CORES");
    // Children first: they must read the environment before this process
    // initialises the runtime (a fork after that is unusable by design).
    in_child(child_bad_capacity);
    in_child(child_host_oom);
    setenv("TORCH_NEURONX_HBM_SIZE", "1G", 1);
    test_parse_and_round();
    test_alloc_reuse_stats();
    test_oom();
    test_bad_pointers();
    test_record_stream();
    test_split_merge();
    test_fragmentation();
    test_segment_fallback();
    test_threads();
    test_quick_bins();
    test_pinned();
    test_asan_poison();
    return TEST_REPORT();
}
