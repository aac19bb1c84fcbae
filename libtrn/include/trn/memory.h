// trn/memory.h - device memory: a caching allocator per device, bounded by
// the emulated HBM capacity, plus pinned host memory.
//
// Capacity per device: TORCH_NEURONX_HBM_SIZE ("16G", "512M", "4096K" or a
// byte count); default: the smaller of 16 GiB and physical RAM divided by the
// device count.
//
// Caching (PyTorch's CUDA caching allocator's design): the allocator reserves
// host segments and hands out blocks split from them. Requests round up to
// 512 B; those under 1 MiB come from the small pool (2 MiB segments), the
// others from the large pool (20 MiB segments below 10 MiB, else a segment
// of the request rounded up to 2 MiB). A request takes the smallest cached
// block of its pool that holds it, on the same stream (stream-ordered reuse),
// and the rest of that block stays cached; a freed block merges with the
// cached blocks beside it. Only whole segments go back to the host. When a
// request would exceed capacity the allocator first tries a segment of just
// the request, then releases its cache, then fails with
// TRN_ERROR_OUT_OF_MEMORY and a message giving the request, the allocated and
// reserved bytes and the capacity. The process stays usable after an OOM.
//
// Registry: every block is known, so freeing a pointer that was never
// allocated (TRN_ERROR_INVALID_POINTER) or freeing twice is reported, never
// undefined behaviour.
//
// Debug protection (TORCH_NEURONX_DEBUG_PROTECT_MEMORY=1, read at init): every
// block is its own mmap (a segment of one block, reused only for its exact
// size), kept PROT_NONE except while a libtrn kernel or copy
// accesses it, so host code that reads device memory directly faults at once.
#ifndef TRN_MEMORY_H
#define TRN_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_mem_stats {
    // current / peak values (peaks reset by trn_mem_reset_peak)
    uint64_t allocated_bytes, allocated_bytes_peak;  // handed to users, rounded
    uint64_t requested_bytes, requested_bytes_peak;  // as requested
    uint64_t reserved_bytes, reserved_bytes_peak;    // allocated + cached
    uint64_t active_blocks, active_blocks_peak;      // blocks handed out
    uint64_t segments, segments_peak;                // host segments
    // cumulative counts (reset by trn_mem_reset_accumulated)
    uint64_t num_allocs, num_frees;                  // user alloc / free calls
    uint64_t num_segment_allocs, num_segment_frees;  // host malloc / free calls
    uint64_t num_alloc_retries;                      // cache flushes to fit
    uint64_t num_ooms;
    uint64_t capacity;  // bytes
} trn_mem_stats;

// Allocates nbytes on the device for use on `stream` (NULL: the device's
// current stream). nbytes == 0 gives *ptr == NULL and TRN_SUCCESS. Memory is
// 64-byte aligned and uninitialised.
trn_status trn_mem_alloc(int device, size_t nbytes, trn_stream *stream, void **ptr);
// Returns a block to its device's cache. NULL is a no-op. An unknown pointer
// or a second free gives TRN_ERROR_INVALID_POINTER and changes nothing.
trn_status trn_mem_free(void *ptr);
// Marks that `stream` also uses the block holding ptr, so it is not reused
// before that stream's current work completes.
trn_status trn_mem_record_stream(void *ptr, trn_stream *stream);
// Releases every wholly cached segment of the device back to the host, after
// waiting for the device's streams.
trn_status trn_mem_empty_cache(int device);

trn_status trn_mem_get_stats(int device, trn_mem_stats *stats);
trn_status trn_mem_reset_peak(int device);
trn_status trn_mem_reset_accumulated(int device);
// free = capacity - reserved; total = capacity.
trn_status trn_mem_get_info(int device, size_t *free_bytes, size_t *total_bytes);

// Per-process limit on the device's reserved bytes
// (torch.neuron.set_per_process_memory_fraction): a request that would take
// reserved memory past it first empties the cache, then fails with
// TRN_ERROR_OUT_OF_MEMORY. 0 removes the limit (the capacity applies).
// A limit above the capacity is TRN_ERROR_INVALID_ARGUMENT.
trn_status trn_mem_set_limit(int device, size_t bytes);
// The effective limit: the per-process limit if set, else the capacity.
size_t trn_mem_get_limit(int device);

// One block of a segment (allocated, or cached for reuse).
typedef struct trn_mem_block_info {
    void *ptr;
    size_t size;       // rounded size
    size_t requested;  // as requested by its current user (0 when cached)
    int device;
    int64_t stream;   // trn_stream_id of the allocation stream
    bool allocated;   // false: cached (free for reuse)
    bool small_pool;  // its segment is in the small pool
    void *segment;    // the segment holding the block, and its size
    size_t segment_size;
} trn_mem_block_info;
// Copies up to max of the device's blocks (by address, so a segment's blocks
// are consecutive) into out and
// returns how many there are (may exceed max).
size_t trn_mem_snapshot(int device, trn_mem_block_info *out, size_t max);

// Allocator events for memory-history recorders. The observer runs with the
// allocator's lock held: it must be quick and must not call the allocator.
typedef enum trn_mem_event {
    TRN_MEM_EVENT_SEGMENT_ALLOC = 0,  // a segment was reserved from the host
    TRN_MEM_EVENT_SEGMENT_FREE = 1,   // a cached segment went back to the host
    TRN_MEM_EVENT_OOM = 2,            // a request failed (size = request)
} trn_mem_event;
typedef void (*trn_mem_observer)(void *ctx, trn_mem_event event, int device, const void *ptr,
                                 size_t size, int64_t stream);
// Installs (or, with NULL, removes) the single observer.
void trn_mem_set_observer(trn_mem_observer observer, void *ctx);

// Device that owns ptr; ptr may point anywhere inside a live block.
// TRN_ERROR_INVALID_POINTER if it is not device memory.
trn_status trn_mem_get_device(const void *ptr, int *device);
// Whether debug protection (see above) is on.
bool trn_mem_protect_enabled(void);

// Pinned (page-locked in spirit) host memory, for async host<->device copies.
// trn_host_is_pinned accepts interior pointers.
trn_status trn_host_alloc(size_t nbytes, void **ptr);
trn_status trn_host_free(void *ptr);
bool trn_host_is_pinned(const void *ptr);

#ifdef __cplusplus
}
#endif
#endif
