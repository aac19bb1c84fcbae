// observe/op_tracking.cpp - per-invocation op logs. Names are interned so a long
// training loop stores 4 bytes per invocation, not a string.
#include "observe/op_tracking.h"

#include <c10/util/Exception.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "trn/fork.h"
#include "trn/status.h"

namespace neuron::tracking {
namespace {

struct Log {
    std::mutex mutex;
    std::unordered_map<std::string, uint32_t> ids;
    std::vector<std::string> names;
    std::vector<uint32_t> executed, fallback;
    std::unordered_set<std::string> warned;
    // Recently interned names by address (direct-mapped, under mutex): a
    // decode step records ~200 small ops per token, and the map lookup
    // (two integer divisions, a node chase, a string compare) was most of
    // record_executed's time there. A hit is checked against the name, so
    // an address reused for another string (a caller's temporary) interns
    // that string afresh.
    struct Slot {
        const char *ptr = nullptr;
        uint32_t id = 0;
    };
    std::array<Slot, 64> by_addr{};

    uint32_t intern(const char *op) {
        const auto a = reinterpret_cast<uintptr_t>(op);
        Slot &slot = by_addr[(a ^ (a >> 6) ^ (a >> 12)) % by_addr.size()];
        if (slot.ptr == op && std::strcmp(names[slot.id].c_str(), op) == 0) return slot.id;
        const uint32_t id = intern(std::string(op));
        slot = Slot{op, id};
        return id;
    }

    uint32_t intern(const std::string &op) {
        auto it = ids.find(op);
        if (it != ids.end()) return it->second;
        auto id = static_cast<uint32_t>(names.size());
        names.push_back(op);
        ids.emplace(op, id);
        return id;
    }
    std::vector<std::string> expand(const std::vector<uint32_t> &log) {
        std::vector<std::string> out;
        out.reserve(log.size());
        for (uint32_t id : log) out.push_back(names[id]);
        return out;
    }
};

Log *g_log;

void log_lock() { g_log->mutex.lock(); }
void log_unlock() { g_log->mutex.unlock(); }

Log &log() {
    // Never destroyed: used at exit too. Every native op takes its lock, a
    // leaf (nothing else is taken under it), with the GIL released: held
    // across fork by the runtime's handlers, or a child forked while another
    // thread records an op waits on it forever at its first op.
    static Log *instance = [] {
        g_log = new Log();
        TORCH_CHECK(trn_fork_add_leaf_lock(log_lock, log_unlock) == TRN_SUCCESS,
                    "neuron op log: ", trn_last_error());
        return g_log;
    }();
    return *instance;
}

}  // namespace

void record_executed(const std::string &op) {
    Log &l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.executed.push_back(l.intern(op));
}

void record_executed(const char *op) {
    Log &l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.executed.push_back(l.intern(op));
}

void record_fallback(const std::string &op) {
    Log &l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.fallback.push_back(l.intern(op));
}

void hold_lock_for_test(int ms) {
    Log &l = log();
    std::promise<void> held;
    auto f = held.get_future();
    std::thread([&l, ms, h = std::move(held)]() mutable {
        std::lock_guard<std::mutex> lock(l.mutex);
        h.set_value();
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }).detach();
    f.wait();
}

std::vector<std::string> executed_ops() {
    Log &l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    return l.expand(l.executed);
}

std::vector<std::string> fallback_ops() {
    Log &l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    return l.expand(l.fallback);
}

void clear() {
    Log &l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.executed.clear();
    l.fallback.clear();
}

void warn_fallback_once(const std::string &op, const std::string &why) {
    {
        Log &l = log();
        std::lock_guard<std::mutex> lock(l.mutex);
        if (!l.warned.insert(op).second) return;
    }
    TORCH_WARN("neuron: ", op, " ", why,
               "; it runs on the CPU (inputs copied to the host, results back), "
               "which is slower. Shown once per op; "
               "torch_neuronx.get_fallback_ops() lists every fallback.");
}

bool fallback_only_for_unimplemented() {
    const char *v = std::getenv("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS");
    return v != nullptr &&
           (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0 || std::strcmp(v, "True") == 0);
}

void native_failed(const std::string &op, const c10::Error &error) {
    if (fallback_only_for_unimplemented())
        TORCH_CHECK_NOT_IMPLEMENTED(false, "neuron kernel for ", op,
                                    " failed: ", error.what_without_backtrace(),
                                    " (CPU fallback disabled by "
                                    "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1)");
    record_fallback(op);
    warn_fallback_once(op, std::string("could not run natively (") +
                               error.what_without_backtrace() + ")");
}

}  // namespace neuron::tracking
