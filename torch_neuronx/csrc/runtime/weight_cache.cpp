// runtime/weight_cache.cpp - torch_neuronx._C's view of libtrn's packed-
// weight cache (trn/weight_cache.h): its counters, and a clear for tests
// and for callers that want the host memory back.
#include <pybind11/pybind11.h>

#include "runtime/bindings.h"
#include "trn/weight_cache.h"

namespace neuron {
namespace {

namespace py = pybind11;

py::dict weight_cache_stats() {
    trn_weight_cache_stats s{};
    trn_weight_cache_stats_get(&s);
    py::dict d;
    d["entries"] = s.entries;
    d["packed"] = s.packed;
    d["bytes"] = s.bytes;
    d["budget"] = s.budget;
    d["hits"] = s.hits;
    d["packs"] = s.packs;
    d["drops"] = s.drops;
    return d;
}

BindingsRegistrar reg([](py::module_ &m) {
    m.def("_weight_cache_stats", [] { return guarded(weight_cache_stats); });
    m.def("_weight_cache_clear", [] { guarded([] { trn_weight_cache_clear(); }); });
});

}  // namespace
}  // namespace neuron
