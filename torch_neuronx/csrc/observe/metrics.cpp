// observe/metrics.cpp - Python bindings of libtrn's logging, counters, metrics,
// stats page and per-process memory limit (torch_neuronx.metrics,
// torch_neuronx.logging, torch.neuron.set_per_process_memory_fraction).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Exceptions.h>

#include <algorithm>

#include "runtime/bindings.h"
#include "runtime/device.h"

namespace py = pybind11;

namespace neuron {
namespace {

trn_log_level to_level(int level) { return static_cast<trn_log_level>(std::clamp(level, 0, 3)); }

py::dict counters(int device) {
    py::dict out;
    for (int c = 0; c < TRN_COUNTER_COUNT; ++c) {
        auto counter = static_cast<trn_counter>(c);
        out[trn_counter_name(counter)] = trn_counter_get(counter, device);
    }
    return out;
}

py::list metrics() {
    size_t n = trn_metrics_list(nullptr, 0);
    std::vector<trn_metric_info> infos(n);
    n = std::min(n, trn_metrics_list(infos.data(), n));
    py::list out;
    for (size_t i = 0; i < n; ++i) {
        const trn_metric_info &m = infos[i];
        out.append(py::make_tuple(std::string(m.name), m.is_counter, m.count, m.sum, m.min, m.max));
    }
    return out;
}

BindingsRegistrar reg([](py::module_ &m) {
    m.def("_log", [](int level, const std::string &component, const std::string &message) {
        trn_log_message(to_level(level), component.c_str(), message.c_str());
    });
    m.def("_log_enabled", [](int level) { return trn_log_enabled(to_level(level)); });
    m.def("_log_level", [] { return static_cast<int>(trn_log_get_level()); });
    m.def("_set_log_level", [](int level) { trn_log_set_level(to_level(level)); });
    m.def("_log_stack_trace_enabled", [] { return trn_log_stack_trace_enabled(); });
    m.def("_counters", &counters, py::arg("device") = TRN_ALL_DEVICES);
    m.def("_counter_add", [](const std::string &name, int device, uint64_t delta) {
        for (int c = 0; c < TRN_COUNTER_COUNT; ++c)
            if (name == trn_counter_name(static_cast<trn_counter>(c))) {
                trn_counter_add(static_cast<trn_counter>(c), device, delta);
                return;
            }
        throw py::value_error("unknown counter '" + name + "'");
    });
    m.def("_named_counter_add", [](const std::string &name, int64_t delta) {
        trn_named_counter_add(name.c_str(), delta);
    });
    m.def("_metric_record",
          [](const std::string &name, double value) { trn_metric_record(name.c_str(), value); });
    m.def("_metrics", &metrics);
    m.def("_metrics_reset", [] { trn_metrics_reset(); });
    m.def("_stats_page_path", [] { return std::string(trn_stats_page_path()); });
    m.def("_set_memory_limit", [](int device, size_t bytes) {
        guarded([&] {
            check_device(static_cast<c10::DeviceIndex>(device));
            TRN_CHECK(trn_mem_set_limit(device, bytes));
        });
    });
    m.def("_memory_limit", [](int device) {
        return guarded([&] {
            check_device(static_cast<c10::DeviceIndex>(device));
            return trn_mem_get_limit(device);
        });
    });
});

}  // namespace
}  // namespace neuron
