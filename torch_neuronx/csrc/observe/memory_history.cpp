// observe/memory_history.cpp - torch.neuron.memory._record_memory_history and
// _snapshot: a ring of allocator events (alloc, free_requested,
// free_completed, segment_alloc, segment_free, oom) with the Python stack of
// each allocation, and a snapshot of every reserved block, in the dict
// layout of torch.cuda.memory._snapshot() so PyTorch's memory visualizer and
// torch.cuda._memory_viz read it unchanged.
//
// Segments: libtrn splits host segments into blocks; trn_mem_snapshot lists
// a segment's blocks consecutively, each naming its segment.
#include <pybind11/pybind11.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/Export.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "runtime/bindings.h"
#include "observe/memory_history.h"
#include "runtime/device.h"

namespace py = pybind11;

// From torch/csrc/profiler/python/combined_traceback.h, which cannot be
// included here (it needs nlohmann/json, absent from the wheel's headers).
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback *> &);
TORCH_PYTHON_API void installCapturedTracebackPython();
}  // namespace torch

namespace neuron::memory_history {

std::atomic<bool> g_recording{false};

namespace {

struct Entry {
    const char *action;
    uintptr_t addr;
    size_t size;
    int device;
    int64_t stream;
    int64_t time_us;
    std::shared_ptr<torch::CapturedTraceback> frames;
};

struct Live {
    size_t size;
    std::shared_ptr<torch::CapturedTraceback> frames;
};

std::mutex g_mu;
std::deque<Entry> g_trace;
size_t g_max_entries = 0;  // 0: unbounded
bool g_cpp_frames = false;
std::unordered_map<uintptr_t, Live> g_live;

int64_t now_us() {
    using namespace std::chrono;
    return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

std::shared_ptr<torch::CapturedTraceback> gather() {
    return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, g_cpp_frames);
}

// Caller holds g_mu. Displaced entries are returned so their tracebacks are
// released after the lock (releasing Python frames may need the GIL).
void push(Entry e, std::vector<Entry> *dropped) {
    g_trace.push_back(std::move(e));
    while (g_max_entries != 0 && g_trace.size() > g_max_entries) {
        dropped->push_back(std::move(g_trace.front()));
        g_trace.pop_front();
    }
}

// libtrn's observer: segment events and OOMs, under libtrn's allocator lock
// (so no traceback gathering here).
void on_trn_event(void *, trn_mem_event event, int device, const void *ptr, size_t size,
                  int64_t stream) {
    const char *action = event == TRN_MEM_EVENT_SEGMENT_ALLOC  ? "segment_alloc"
                         : event == TRN_MEM_EVENT_SEGMENT_FREE ? "segment_free"
                                                               : "oom";
    std::vector<Entry> dropped;
    std::lock_guard<std::mutex> lock(g_mu);
    push({action, reinterpret_cast<uintptr_t>(ptr), size, device, stream, now_us(), nullptr},
         &dropped);
}

}  // namespace

void record_alloc(int device, void *ptr, size_t nbytes, int64_t stream) {
    auto frames = gather();
    std::vector<Entry> dropped;
    std::lock_guard<std::mutex> lock(g_mu);
    auto addr = reinterpret_cast<uintptr_t>(ptr);
    g_live[addr] = {nbytes, frames};
    push({"alloc", addr, nbytes, device, stream, now_us(), frames}, &dropped);
}

void record_free(void *ptr) {
    auto frames = gather();
    std::vector<Entry> dropped;
    Live live{};
    int device = 0;
    (void)trn_mem_get_device(ptr, &device);
    trn_clear_error();
    std::lock_guard<std::mutex> lock(g_mu);
    auto addr = reinterpret_cast<uintptr_t>(ptr);
    auto it = g_live.find(addr);
    if (it == g_live.end()) return;  // allocated before recording started
    live = std::move(it->second);
    g_live.erase(it);
    int64_t t = now_us();
    push({"free_requested", addr, live.size, device, 0, t, frames}, &dropped);
    push({"free_completed", addr, live.size, device, 0, t, frames}, &dropped);
}

namespace {

void set_recording(bool enabled, size_t max_entries, bool cpp_frames) {
    if (enabled) torch::installCapturedTracebackPython();
    std::deque<Entry> old_trace;
    std::unordered_map<uintptr_t, Live> old_live;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        g_max_entries = max_entries;
        g_cpp_frames = cpp_frames;
        if (!enabled) {
            old_trace.swap(g_trace);
            old_live.swap(g_live);
        }
    }
    trn_mem_set_observer(enabled ? &on_trn_event : nullptr, nullptr);
    g_recording.store(enabled);
}

py::dict snapshot() {
    // Copy under the lock, symbolize outside it.
    std::vector<Entry> trace;
    std::unordered_map<uintptr_t, Live> live;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        trace.assign(g_trace.begin(), g_trace.end());
        live = g_live;
    }
    std::vector<torch::CapturedTraceback *> to_symbolize;
    for (const Entry &e : trace)
        if (e.frames) to_symbolize.push_back(e.frames.get());
    for (const auto &kv : live)
        if (kv.second.frames) to_symbolize.push_back(kv.second.frames.get());
    std::vector<py::object> symbolized = torch::py_symbolize(to_symbolize);
    std::unordered_map<torch::CapturedTraceback *, py::object> frames_of;
    for (size_t i = 0; i < to_symbolize.size(); ++i) frames_of[to_symbolize[i]] = symbolized[i];
    auto frames = [&](const std::shared_ptr<torch::CapturedTraceback> &tb) -> py::object {
        if (!tb) return py::list();
        return frames_of.at(tb.get());
    };

    py::list segments;
    py::list device_traces;
    int count = trn_device_count();
    for (int d = 0; d < count; ++d) {
        size_t n = trn_runtime_is_initialized() ? trn_mem_snapshot(d, nullptr, 0) : 0;
        std::vector<trn_mem_block_info> blocks(n);
        n = n ? std::min(n, trn_mem_snapshot(d, blocks.data(), n)) : 0;
        py::dict seg;
        py::list seg_blocks;
        size_t allocated = 0, requested = 0;
        auto close_segment = [&] {
            if (seg_blocks.size() == 0) return;
            seg["allocated_size"] = allocated;
            seg["active_size"] = allocated;
            seg["requested_size"] = requested;
            seg["blocks"] = seg_blocks;
            segments.append(seg);
        };
        for (size_t i = 0; i < n; ++i) {
            const trn_mem_block_info &b = blocks[i];
            if (i == 0 || b.segment != blocks[i - 1].segment) {
                close_segment();
                seg = py::dict();
                seg_blocks = py::list();
                allocated = requested = 0;
                seg["device"] = d;
                seg["address"] = reinterpret_cast<uintptr_t>(b.segment);
                seg["total_size"] = b.segment_size;
                seg["stream"] = b.stream;
                seg["segment_type"] = b.small_pool ? "small" : "large";
                seg["segment_pool_id"] = py::make_tuple(0, 0);
                seg["is_expandable"] = false;
                seg["frames"] = py::list();
            }
            auto addr = reinterpret_cast<uintptr_t>(b.ptr);
            py::dict block;
            block["address"] = addr;
            block["size"] = b.size;
            block["requested_size"] = b.allocated ? b.requested : 0;
            block["state"] = b.allocated ? "active_allocated" : "inactive";
            auto it = live.find(addr);
            block["frames"] =
                b.allocated && it != live.end() ? frames(it->second.frames) : py::list();
            seg_blocks.append(block);
            if (b.allocated) {
                allocated += b.size;
                requested += b.requested;
            }
        }
        close_segment();
        py::list events;
        for (const Entry &e : trace) {
            if (e.device != d) continue;
            py::dict ev;
            ev["action"] = e.action;
            ev["addr"] = e.addr;
            ev["size"] = e.size;
            ev["stream"] = e.stream;
            ev["time_us"] = e.time_us;
            ev["frames"] = frames(e.frames);
            events.append(ev);
        }
        device_traces.append(events);
    }
    py::dict out;
    out["segments"] = segments;
    out["device_traces"] = device_traces;
    py::dict settings;
    settings["PYTORCH_NO_NEURON_MEMORY_CACHING"] = false;
    out["allocator_settings"] = settings;
    return out;
}

BindingsRegistrar reg([](py::module_ &m) {
    m.def("_record_memory_history", [](bool enabled, size_t max_entries, bool cpp_frames) {
        set_recording(enabled, max_entries, cpp_frames);
    });
    m.def("_memory_snapshot", [] { return snapshot(); });
});

}  // namespace
}  // namespace neuron::memory_history
