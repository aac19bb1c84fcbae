// observe/op_tracking.cpp - per-invocation op logs. Names are interned so a long
// training loop stores 4 bytes per invocation, not a string.
#include "observe/op_tracking.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace neuron::tracking {
namespace {

struct Log {
    std::mutex mutex;
    std::unordered_map<std::string, uint32_t> ids;
    std::vector<std::string> names;
    std::vector<uint32_t> executed, fallback;
    std::unordered_set<std::string> warned;

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

Log &log() {
    static Log *instance = new Log();  // never destroyed: used at exit too
    return *instance;
}

}  // namespace

void record_executed(const std::string &op) {
    Log &l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.executed.push_back(l.intern(op));
}

void record_fallback(const std::string &op) {
    Log &l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.fallback.push_back(l.intern(op));
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
