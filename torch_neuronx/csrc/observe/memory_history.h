// observe/memory_history.h - the allocator's hooks into the memory-history recorder
// (observe/memory_history.cpp). Both are one relaxed load when recording is off.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace neuron::memory_history {

extern std::atomic<bool> g_recording;

void record_alloc(int device, void *ptr, size_t nbytes, int64_t stream);
void record_free(void *ptr);

inline void on_alloc(int device, void *ptr, size_t nbytes, int64_t stream) {
    if (g_recording.load(std::memory_order_relaxed) && ptr != nullptr)
        record_alloc(device, ptr, nbytes, stream);
}
inline void on_free(void *ptr) {
    if (g_recording.load(std::memory_order_relaxed) && ptr != nullptr) record_free(ptr);
}

}  // namespace neuron::memory_history
