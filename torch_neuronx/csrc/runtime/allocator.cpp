// runtime/allocator.cpp - c10 allocators backed by libtrn: the device caching
// allocator (what torch.empty(..., device="neuron") and
// torch.accelerator.memory_* reach) and the pinned host allocator.
// Policy (caching, capacity, stats) lives in libtrn; this file adapts it.
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <cstdio>

#include "aten/eager_group.h"
#include "observe/memory_history.h"
#include "runtime/device.h"

namespace neuron {
namespace {

void device_delete(void *ptr) {
    memory_history::on_free(ptr);
    // A deleter cannot throw: report and carry on, as CUDA's allocator does.
    if (trn_mem_free(ptr) != TRN_SUCCESS) {
        std::fprintf(stderr, "[neuron] warning: freeing device memory failed: %s\n",
                     trn_last_error());
        trn_clear_error();
    }
}

void fill_stat(c10::CachingAllocator::StatArray &array, uint64_t current, uint64_t peak,
               uint64_t allocated, uint64_t freed) {
    // libtrn keeps one pool per device, reported as the aggregate.
    auto &s = array[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    s.current = static_cast<int64_t>(current);
    s.peak = static_cast<int64_t>(peak);
    s.allocated = static_cast<int64_t>(allocated);
    s.freed = static_cast<int64_t>(freed);
}

struct NeuronDeviceAllocator final : public c10::DeviceAllocator {
    c10::DataPtr allocate(size_t nbytes) override {
        c10::DeviceIndex dev = current_device();
        check_device(dev);
        eager_group::release_dead_storages(nbytes);
        void *ptr = nullptr;
        TRN_CHECK(trn_mem_alloc(dev, nbytes, nullptr, &ptr));
        // The stream is looked up only while history records (a TLS read and
        // a libtrn call on every allocation otherwise).
        if (memory_history::g_recording.load(std::memory_order_relaxed))
            memory_history::on_alloc(dev, ptr, nbytes, trn_stream_id(current_trn_stream(dev)));
        return {ptr, ptr, &device_delete, c10::Device(kNeuron, dev)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &device_delete; }

    // Used by storage resize and clone: a device-to-device byte copy on the
    // current stream, ordered with every later use of either block.
    void copy_data(void *dest, const void *src, std::size_t count) const override {
        if (count == 0) return;
        int dev = 0;
        TRN_CHECK(trn_mem_get_device(dest, &dev));
        int64_t n = static_cast<int64_t>(count), one = 1;
        trn_copy_desc desc{1, &n, dest, &one, TRN_DTYPE_U8, src, &one, TRN_DTYPE_U8};
        TRN_CHECK(trn_copy_launch(current_trn_stream(static_cast<c10::DeviceIndex>(dev)), &desc));
    }

    bool initialized() override { return trn_runtime_is_initialized(); }
    void emptyCache(c10::MempoolId_t) override {
        if (!trn_runtime_is_initialized()) return;
        for (int d = 0; d < trn_device_count(); ++d) TRN_CHECK(trn_mem_empty_cache(d));
    }
    void recordStream(const c10::DataPtr &ptr, c10::Stream stream) override {
        if (ptr.get() != nullptr)
            TRN_CHECK(trn_mem_record_stream(ptr.get(), to_trn_stream(stream)));
    }
    c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex dev) override {
        check_device(dev);
        trn_mem_stats s{};
        TRN_CHECK(trn_mem_get_stats(dev, &s));
        c10::CachingDeviceAllocator::DeviceStats out;
        fill_stat(out.allocated_bytes, s.allocated_bytes, s.allocated_bytes_peak, 0, 0);
        fill_stat(out.requested_bytes, s.requested_bytes, s.requested_bytes_peak, 0, 0);
        fill_stat(out.reserved_bytes, s.reserved_bytes, s.reserved_bytes_peak, 0, 0);
        fill_stat(out.active_bytes, s.allocated_bytes, s.allocated_bytes_peak, 0, 0);
        fill_stat(out.allocation, s.active_blocks, s.active_blocks_peak, s.num_allocs, s.num_frees);
        fill_stat(out.active, s.active_blocks, s.active_blocks_peak, s.num_allocs, s.num_frees);
        fill_stat(out.segment, s.segments, s.segments_peak, s.num_segment_allocs,
                  s.num_segment_frees);
        out.num_alloc_retries = static_cast<int64_t>(s.num_alloc_retries);
        out.num_ooms = static_cast<int64_t>(s.num_ooms);
        out.num_device_alloc = static_cast<int64_t>(s.num_segment_allocs);
        out.num_device_free = static_cast<int64_t>(s.num_segment_frees);
        return out;
    }
    void resetAccumulatedStats(c10::DeviceIndex dev) override {
        check_device(dev);
        TRN_CHECK(trn_mem_reset_accumulated(dev));
    }
    void resetPeakStats(c10::DeviceIndex dev) override {
        check_device(dev);
        TRN_CHECK(trn_mem_reset_peak(dev));
    }
    std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex dev) override {
        check_device(dev);
        size_t free_bytes = 0, total = 0;
        TRN_CHECK(trn_mem_get_info(dev, &free_bytes, &total));
        return {free_bytes, total};
    }
};

NeuronDeviceAllocator g_device_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator);

void host_delete(void *ptr) {
    if (trn_host_free(ptr) != TRN_SUCCESS) {
        std::fprintf(stderr, "[neuron] warning: freeing pinned memory failed: %s\n",
                     trn_last_error());
        trn_clear_error();
    }
}

// Pinned memory is plain host memory registered with libtrn: copies from it
// are still synchronous (see aten/copy.cpp), so there are no events to track
// and nothing to cache.
struct NeuronHostAllocator final : public at::HostAllocator {
    c10::DataPtr allocate(size_t nbytes) override {
        void *ptr = nullptr;
        if (nbytes != 0) TRN_CHECK(trn_host_alloc(nbytes, &ptr));
        return {ptr, ptr, &host_delete, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &host_delete; }
    void copy_data(void *dest, const void *src, std::size_t count) const override {
        default_copy_data(dest, src, count);
    }
    bool record_event(void *, void *, c10::Stream) override { return true; }
    void empty_cache() override {}
    at::HostStats get_stats() override { return {}; }
    void reset_accumulated_stats() override {}
    void reset_peak_stats() override {}
};

NeuronHostAllocator g_host_allocator;
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_host_allocator);

}  // namespace

at::Allocator *device_allocator() { return &g_device_allocator; }

}  // namespace neuron
