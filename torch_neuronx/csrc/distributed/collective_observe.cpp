// distributed/collective_observe.cpp - the profiler record, counters and DEBUG log line
// of each neuron collective (see distributed/collective_observe.h).
#include "distributed/collective_observe.h"

#include <cstdio>
#include <set>
#include <sstream>

#include "runtime/device.h"

namespace neuron {

namespace {

uint64_t bytes_of(const at::Tensor &t) {
    return t.defined() ? static_cast<uint64_t>(t.numel()) * t.element_size() : 0;
}

}  // namespace

CollectiveRecord collective_describe(const char *name, int device, int rank, int size,
                                     const char *transport, const std::vector<at::Tensor> &tensors,
                                     const std::vector<at::Tensor> &outputs) {
    CollectiveRecord rec;
    rec.name = name;
    rec.device = device;
    // Only what the profiler or the log will use is worked out.
    bool traced = trn_trace_active(), logged = trn_log_enabled(TRN_LOG_DEBUG);
    // Counted even without a profiler (metrics): the message size is cheap.
    std::set<const void *> written;
    uint64_t out_bytes = 0, in_bytes = 0;
    for (const auto &t : outputs) {
        out_bytes += bytes_of(t);
        if (t.defined() && t.numel()) written.insert(t.data_ptr());
    }
    for (const auto &t : tensors)
        if (t.defined() && !(t.numel() && written.count(t.data_ptr()))) in_bytes += bytes_of(t);
    // NCCL-tests' convention: all_gather counts what it gathers,
    // reduce_scatter what it reduces.
    rec.bytes = out_bytes > in_bytes ? out_bytes : in_bytes;
    if (!traced && !logged) return rec;
    if (device >= 0)
        rec.stream = trn_stream_id(current_trn_stream(static_cast<c10::DeviceIndex>(device)));
    rec.correlation = trn_trace_get_correlation();
    std::ostringstream d;
    const at::Tensor *first = !outputs.empty()   ? &outputs[0]
                              : !tensors.empty() ? &tensors[0]
                                                 : nullptr;
    if (first != nullptr && first->defined())
        d << c10::getDtypeNames(first->scalar_type()).first << " " << first->sizes() << ", ";
    d << "rank " << rank << " of " << size << ", " << transport;
    rec.detail = d.str();
    return rec;
}

void collective_started(CollectiveRecord &rec) { rec.start_ns = trn_trace_now_ns(); }

void collective_finished(const CollectiveRecord &rec, bool ok) {
    uint64_t end_ns = trn_trace_now_ns();
    if (ok) {
        trn_counter_add(TRN_COUNTER_COLLECTIVES, rec.device, 1);
        trn_counter_add(TRN_COUNTER_COLLECTIVE_BYTES, rec.device, rec.bytes);
    }
    if (trn_trace_active()) {
        trn_activity a{};
        a.kind = TRN_ACTIVITY_COLLECTIVE;
        a.device = rec.device;
        a.stream = rec.stream;
        a.start_ns = rec.start_ns;
        a.end_ns = end_ns;
        a.correlation = rec.correlation;
        a.bytes = rec.bytes;
        std::snprintf(a.name, sizeof a.name, "%s", rec.name);
        std::snprintf(a.detail, sizeof a.detail, "%s", rec.detail.c_str());
        trn_trace_record(&a);
    }
    if (trn_log_enabled(TRN_LOG_DEBUG))
        trn_log(TRN_LOG_DEBUG, "collective", "%s %llu bytes (%s) on neuron:%d: %s in %.3f ms",
                rec.name, static_cast<unsigned long long>(rec.bytes), rec.detail.c_str(),
                rec.device, ok ? "done" : "failed",
                static_cast<double>(end_ns - rec.start_ns) / 1e6);
}

}  // namespace neuron
