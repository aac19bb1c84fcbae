// aten/eager_group_metrics.cpp - what Adaptive Eager shows (see
// eager_group_impl.h): its counters in torch_neuronx.metrics, the log of
// recent groups, and the _C._eager_fusion_* bindings behind
// torch_neuronx/eager_fusion.py.
#include <chrono>

#include <pybind11/stl.h>

#include "aten/eager_group_impl.h"
#include "aten/foreach_chain.h"
#include "runtime/bindings.h"
#include "trn/metrics.h"

namespace neuron::eager_group::detail {

namespace {

struct LogRecord {
    int n_ops;
    End end;
    bool fused;
    std::string ops;
};
std::deque<LogRecord> g_log;  // under group_mu()
constexpr size_t kLogMax = 256;

}  // namespace

void count(const char *name, int64_t n) { trn_named_counter_add(name, n); }

void count_end(End why) {
    // One counter name per reason, built once.
    static const auto *names = [] {
        auto *v = new std::array<std::string, static_cast<size_t>(End::Count)>;
        for (size_t i = 0; i < v->size(); i++)
            (*v)[i] = std::string("EagerGroupEnd.") + end_name(static_cast<End>(i));
        return v;
    }();
    count((*names)[static_cast<size_t>(why)].c_str());
}

void log_group(const Group &g, End why, bool fused) {
    LogRecord rec{static_cast<int>(g.ops.size()), why, fused, ""};
    for (size_t i = 0; i < g.ops.size(); i++) rec.ops.append(i ? "," : "").append(g.ops[i].name);
    g_log.push_back(std::move(rec));
    if (g_log.size() > kLogMax) g_log.pop_front();
}

namespace {

void flush_now(End why) {
    foreach_chain::flush(nullptr);  // held foreach ops too: flush() promises nothing stays queued
    std::lock_guard<std::recursive_mutex> lk(group_mu());
    flush(why);
}

BindingsRegistrar reg([](pybind11::module_ &m) {
    m.def(
        "_eager_fusion_set_enabled",
        [](bool on) {
            guarded([&] {
                if (!on) flush_now(End::Off);
                g_enabled.store(on ? 1 : 0);
            });
        },
        "Switches Adaptive Eager Execution on or off (an open group runs first).");
    m.def(
        "_eager_fusion_set_adaptive",
        [](int mode) {
            TORCH_CHECK(mode >= kAdaptiveOff && mode <= kAdaptiveDecline,
                        "eager fusion: adaptive mode must be 0, 1 or 2, got ", mode);
            g_adaptive.store(mode);
        },
        "0: a compiled pattern always runs fused; 1: timed fused against unfused first "
        "(default); 2: as 1, every trial declines (tests).");
    m.def("_eager_fusion_adaptive", [] { return g_adaptive.load(); });
    m.def(
        "_eager_fusion_python_exiting", [] { python_exiting(); },
        "From atexit: the compile thread no longer asks Python for its settings.");
    m.def(
        "_eager_fusion_open_record_ns",
        [] {
            std::lock_guard<std::recursive_mutex> lk(group_mu());
            return open_group().empty() ? int64_t{-1} : open_group().record_ns;
        },
        "The open group's recording time so far in ns (what a fused trial adds to its run); "
        "-1 with no group open (tests).");
    m.def("_eager_fusion_switched_on", [] { return switched_on(); });
    m.def("_eager_fusion_active", [] { return fusion_on(); });
    m.def(
        "_eager_fusion_flush", [] { guarded([] { flush_now(End::Sync); }); },
        "Runs the open group, if any.");
    m.def(
        "_eager_fusion_wait",
        [](double timeout_s) {
            pybind11::gil_scoped_release nogil;
            std::unique_lock<std::mutex> lk(cache().mu);
            return cache().cv.wait_for(lk, std::chrono::duration<double>(timeout_s),
                                       [] { return cache().compiling == 0; });
        },
        "Waits until no fused group is compiling; False on timeout.");
    m.def("_eager_fusion_stats", [] {
        std::lock_guard<std::recursive_mutex> glk(group_mu());  // before cache().mu, as flush
        int lone = 0;
        for (const auto &kv : start_sigs().single)
            lone += kv.second >= 2 && start_sigs().multi.count(kv.first) == 0;
        std::lock_guard<std::mutex> lk(cache().mu);
        int ready = 0, failed = 0, fuse = 0, declined = 0;
        for (const auto &kv : cache().map) {
            ready += kv.second->state == Entry::Ready;
            failed += kv.second->state == Entry::Failed;
            fuse += kv.second->choice.load() == Entry::Fuse;
            declined += kv.second->choice.load() == Entry::Unfuse;
        }
        pybind11::dict d;
        d["patterns"] = cache().map.size();
        d["ready"] = ready;
        d["failed"] = failed;
        d["compiling"] = cache().compiling;
        d["chosen_fused"] = fuse;
        d["declined"] = declined;
        d["lone_starts"] = lone;
        return d;
    });
    m.def("_eager_fusion_log", [] {
        std::lock_guard<std::recursive_mutex> lk(group_mu());
        pybind11::list out;
        for (const LogRecord &r : g_log)
            out.append(pybind11::make_tuple(r.n_ops, end_name(r.end), r.fused, r.ops));
        return out;
    });
    m.def("_eager_fusion_clear_log", [] {
        std::lock_guard<std::recursive_mutex> lk(group_mu());
        g_log.clear();
    });
    m.def(
        "_eager_fusion_clear_cache",
        [] {
            guarded([] {
                flush_now(End::Sync);
                pybind11::gil_scoped_release nogil;  // the compile thread may need it
                std::unique_lock<std::mutex> lk(cache().mu);
                cache().cv.wait(lk, [] { return cache().compiling == 0; });
                // Programs stay loaded (a run may still hold one on a stream);
                // only the map forgets them.
                cache().map.clear();
                lk.unlock();
                std::lock_guard<std::recursive_mutex> glk(group_mu());
                start_sigs() = StartSigs{};
                lone_forget_all();
            });
        },
        "Forgets every fused pattern (tests: see compiles happen again).");
});

}  // namespace

}  // namespace neuron::eager_group::detail
