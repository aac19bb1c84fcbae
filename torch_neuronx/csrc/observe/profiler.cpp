// observe/profiler.cpp - device activity in PyTorch's profilers.
//
// Two routes, because torch offers two:
//  * torch.profiler / profile(use_kineto=True): a Kineto child profiler
//    (REGISTER_PRIVATEUSE1_PROFILER, PyTorch 2.13). Its session turns libtrn's
//    trace records (trn/trace.h) into Kineto activities: CONCURRENT_KERNEL per
//    kernel and GPU_MEMCPY per copy, on the device's row and the stream's
//    track, linked to the CPU op that launched them through Kineto's
//    correlation ids. PyTorch maps these activity types to the PrivateUse1
//    device once the backend is renamed, so key_averages() gets device times
//    and export_chrome_trace() writes the kernels.
//  * torch.autograd.profiler.profile(use_device="neuron") without Kineto
//    (KINETO_PRIVATEUSE1_FALLBACK): ProfilerStubs with timing events, which
//    give each op its device time.
// While a session runs, a RecordFunction callback labels launches with the
// innermost aten op, its input shapes and bytes (libtrn has no op names).
#define USE_KINETO 1
#include <ATen/record_function.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>
#include <torch/csrc/profiler/util.h>

#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <TraceSpan.h>
#include <libkineto.h>
#include <output_base.h>

#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "runtime/device.h"

namespace neuron {
namespace {

using libkineto::ActivityType;

// ---- labels: the innermost aten op of each launch ---------------------------

std::string shapes_of(const at::RecordFunction &fn, uint64_t *bytes) {
    std::ostringstream out;
    out << "[";
    bool first = true;
    for (const c10::IValue &v : fn.inputs()) {
        if (!first) out << ", ";
        first = false;
        if (v.isTensor() && v.toTensor().defined()) {
            const at::Tensor &t = v.toTensor();
            out << t.sizes() << " " << c10::toString(t.scalar_type());
            *bytes += t.numel() * t.element_size();
        } else {
            out << "[]";
        }
    }
    out << "]";
    return out.str();
}

std::unique_ptr<at::RecordFunctionGuard> no_guard;

std::unique_ptr<at::ObserverContext> label_enter(const at::RecordFunction &fn) {
    std::string name = fn.name();
    if (name.rfind("aten::", 0) == 0) name = "trn::" + name.substr(6);
    uint64_t bytes = 0;
    std::string detail = fn.needsInputs() ? shapes_of(fn, &bytes) : "";
    trn_trace_push(TRN_ACTIVITY_KERNEL, name.c_str(), detail.c_str(), 0, bytes);
    return nullptr;
}

void label_exit(const at::RecordFunction &, at::ObserverContext *) { trn_trace_pop(); }

std::mutex g_label_mu;
at::CallbackHandle g_label_handle = 0;
int g_label_users = 0;

void labels_on() {
    std::lock_guard<std::mutex> lock(g_label_mu);
    if (g_label_users++ == 0)
        g_label_handle = at::addGlobalCallback(at::RecordFunctionCallback(label_enter, label_exit)
                                                   .needsInputs(true)
                                                   .scopes({at::RecordScope::FUNCTION}));
}

void labels_off() {
    std::lock_guard<std::mutex> lock(g_label_mu);
    if (g_label_users > 0 && --g_label_users == 0 && g_label_handle != 0) {
        at::removeCallback(g_label_handle);
        g_label_handle = 0;
    }
}

// ---- the Kineto child profiler ------------------------------------------------

// Activities handed to Kineto's logger must outlive the session (the logger
// may keep pointers until PyTorch has read the trace); they are replaced when
// the next session starts.
std::mutex g_keep_mu;
std::deque<libkineto::GenericTraceActivity> g_kept;
std::unique_ptr<libkineto::TraceSpan> g_span;

thread_local std::vector<uint64_t> tl_correlations;

class NeuronSession final : public libkineto::IActivityProfilerSession {
public:
    void start() override {
        labels_on();
        trn_trace_start(0);
        running_ = true;
        status_ = libkineto::TraceStatus::RECORDING;
    }
    void stop() override {
        if (!running_) return;
        trn_trace_stop();
        labels_off();
        running_ = false;
        status_ = libkineto::TraceStatus::PROCESSING;
    }
    ~NeuronSession() override { stop(); }

    std::vector<std::string> errors() override {
        uint64_t dropped = trn_trace_dropped();
        if (dropped == 0) return {};
        return {std::to_string(dropped) + " neuron activities dropped (trace buffer full)"};
    }

    void pushCorrelationId(uint64_t id) override {
        tl_correlations.push_back(id);
        trn_trace_set_correlation(id);
    }
    void popCorrelationId() override {
        if (!tl_correlations.empty()) tl_correlations.pop_back();
        trn_trace_set_correlation(tl_correlations.empty() ? 0 : tl_correlations.back());
    }

    void processTrace(libkineto::ActivityLogger &logger) override {
        processTrace(logger, nullptr, 0, INT64_MAX);
    }
    void processTrace(libkineto::ActivityLogger &logger,
                      libkineto::getLinkedActivityCallback linked, int64_t start,
                      int64_t end) override {
        // Kernels still queued when the profiler stopped finish first.
        for (int d = 0; d < trn_device_count(); ++d)
            if (trn_runtime_is_initialized()) (void)trn_device_synchronize(d);
        std::vector<trn_activity> acts(trn_trace_pending());
        acts.resize(trn_trace_drain(acts.data(), acts.size()));
        std::lock_guard<std::mutex> lock(g_keep_mu);
        g_kept.clear();
        g_span = std::make_unique<libkineto::TraceSpan>(start, end, "neuron");
        std::set<std::pair<int, int64_t>> streams;
        for (const trn_activity &a : acts) {
            auto s = static_cast<int64_t>(a.start_ns), e = static_cast<int64_t>(a.end_ns);
            if (s < start || e > end) continue;
            ActivityType type = a.kind == TRN_ACTIVITY_MEMCPY   ? ActivityType::GPU_MEMCPY
                                : a.kind == TRN_ACTIVITY_MEMSET ? ActivityType::GPU_MEMSET
                                : a.kind == TRN_ACTIVITY_COLLECTIVE
                                    ? ActivityType::COLLECTIVE_COMM
                                    : ActivityType::CONCURRENT_KERNEL;
            auto &act = g_kept.emplace_back(*g_span, type, a.name);
            act.startTime = s;
            act.endTime = e > s ? e : s + 1;  // a zero-length slice vanishes
            act.id = static_cast<int32_t>(a.correlation);
            act.device = a.device;
            act.resource = static_cast<int32_t>(a.stream);
            act.threadId = static_cast<int32_t>(a.stream);
            if (linked && a.correlation != 0)
                act.linked = linked(static_cast<int32_t>(a.correlation));
            act.flow.id = static_cast<uint32_t>(a.correlation);
            act.flow.type = libkineto::kLinkAsyncCpuGpu;
            act.flow.start = false;
            // Quoted: the unquoted form formats through fmt, which libtorch
            // does not export.
            act.addMetadataQuoted("device", std::to_string(a.device));
            act.addMetadataQuoted("stream", std::to_string(a.stream));
            act.addMetadataQuoted("correlation", std::to_string(a.correlation));
            act.addMetadataQuoted("bytes", std::to_string(a.bytes));
            if (a.detail[0] != '\0') act.addMetadataQuoted("input shapes", a.detail);
            streams.insert({a.device, a.stream});
            logger.handleGenericActivity(act);
        }
        for (const auto &[device, stream] : streams)
            logger.handleResourceInfo(
                {stream, stream, device, "neuron stream " + std::to_string(stream)}, start);
        for (int d = 0; d < trn_device_count(); ++d)
            logger.handleDeviceInfo({d, d + 1000000, "neuron", "neuron:" + std::to_string(d)},
                                    start);
    }

    std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }
    std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
    std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

private:
    bool running_ = false;
};

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
public:
    const std::string &name() const override { return name_; }
    const std::set<ActivityType> &availableActivities() const override { return types_; }
    std::unique_ptr<libkineto::IActivityProfilerSession>
    configure(const std::set<ActivityType> &activity_types, const libkineto::Config &) override {
        for (ActivityType t : activity_types)
            if (types_.count(t)) return std::make_unique<NeuronSession>();
        return nullptr;
    }
    std::unique_ptr<libkineto::IActivityProfilerSession>
    configure(int64_t, int64_t, const std::set<ActivityType> &activity_types,
              const libkineto::Config &config) override {
        return configure(activity_types, config);
    }

private:
    std::string name_{"neuron"};
    std::set<ActivityType> types_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                  ActivityType::GPU_MEMSET, ActivityType::PRIVATEUSE1_RUNTIME};
};

REGISTER_PRIVATEUSE1_PROFILER(NeuronActivityProfiler);

// ---- ProfilerStubs: device time per op without Kineto ---------------------------

struct NeuronStubs final : public torch::profiler::impl::ProfilerStubs {
    void record(c10::DeviceIndex *device, torch::profiler::impl::ProfilerVoidEventStub *event,
                int64_t *cpu_ns) const override {
        c10::DeviceIndex dev = current_device();
        if (device != nullptr) *device = dev;
        trn_event *ev = nullptr;
        TRN_CHECK(trn_event_create(TRN_EVENT_TIMING, &ev));
        *event = std::shared_ptr<void>(
            ev, [](void *p) { trn_event_destroy(static_cast<trn_event *>(p)); });
        if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
        TRN_CHECK(trn_event_record(ev, current_trn_stream(dev)));
    }
    float elapsed(const torch::profiler::impl::ProfilerVoidEventStub *a,
                  const torch::profiler::impl::ProfilerVoidEventStub *b) const override {
        auto *ea = static_cast<trn_event *>(a->get());
        auto *eb = static_cast<trn_event *>(b->get());
        TRN_CHECK(trn_event_synchronize(ea));
        TRN_CHECK(trn_event_synchronize(eb));
        double ms = 0;
        TRN_CHECK(trn_event_elapsed_ms(ea, eb, &ms));
        // PyTorch reports microseconds.
        return static_cast<float>(ms * 1000.0);
    }
    void mark(const char *name) const override {
        trn_log(TRN_LOG_DEBUG, "profiler", "mark %s", name);
    }
    void rangePush(const char *) const override {}
    void rangePop() const override {}
    bool enabled() const override { return true; }
    void onEachDevice(std::function<void(int)> op) const override {
        for (int d = 0; d < trn_device_count(); ++d) {
            c10::DeviceGuard guard(c10::Device(kNeuron, static_cast<c10::DeviceIndex>(d)));
            op(d);
        }
    }
    void synchronize() const override {
        if (!trn_runtime_is_initialized()) return;
        for (int d = 0; d < trn_device_count(); ++d) TRN_CHECK(trn_device_synchronize(d));
    }
};

NeuronStubs g_stubs;

struct RegisterStubs {
    RegisterStubs() { torch::profiler::impl::registerPrivateUse1Methods(&g_stubs); }
} g_register_stubs;

}  // namespace
}  // namespace neuron
