// runtime/module.cpp - torch_neuronx._C: the Python bindings. Loading it registers
// every kernel, the guard, allocators, hooks and fallbacks (static
// registrars in the other files); the functions below expose runtime state
// to the Python package. Each one converts, checks and calls libtrn.
#include <optional>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <vector>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>
#include <trn/bf16_path.h>
#include <trn/cpu.h>

#include "runtime/generator.h"
#include "runtime/bindings.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"

namespace py = pybind11;

namespace neuron::tracking {
// observe/op_tracking.cpp, for tests only (not in its header, which every
// kernel includes): another thread takes the op log's lock and holds it for
// `ms`; returns once it is held.
void hold_lock_for_test(int ms);
}  // namespace neuron::tracking

namespace neuron {
// aten/elementwise.cpp, for tests only: `a`'s TensorImpl use count before and
// while each functional elementwise builder holds it.
std::vector<int64_t> ew_operand_use_counts_for_test(const at::Tensor &a, const at::Tensor &b);
int64_t ew_launch_use_count_probe_for_test(bool arm);
}  // namespace neuron

namespace neuron {

// Filled by static BindingsRegistrar objects in other files before
// PYBIND11_MODULE runs (static initialisers of the same .so run first).
static std::vector<BindingsFn> &bindings_list() {
    static std::vector<BindingsFn> list;
    return list;
}

BindingsRegistrar::BindingsRegistrar(BindingsFn fn) { bindings_list().push_back(fn); }

namespace {

py::dict device_properties(int index) {
    check_device(static_cast<c10::DeviceIndex>(index));
    trn_device_props props{};
    TRN_CHECK(trn_device_get_props(index, &props));
    py::dict d;
    d["name"] = std::string(props.name);
    d["total_memory"] = props.total_memory;
    d["core_count"] = props.core_count;
    return d;
}

py::dict memory_stats(int index) {
    check_device(static_cast<c10::DeviceIndex>(index));
    trn_mem_stats s{};
    TRN_CHECK(trn_mem_get_stats(index, &s));
    py::dict d;
#define NEURON_STAT(field) d[#field] = s.field
    NEURON_STAT(allocated_bytes);
    NEURON_STAT(allocated_bytes_peak);
    NEURON_STAT(requested_bytes);
    NEURON_STAT(requested_bytes_peak);
    NEURON_STAT(reserved_bytes);
    NEURON_STAT(reserved_bytes_peak);
    NEURON_STAT(active_blocks);
    NEURON_STAT(active_blocks_peak);
    NEURON_STAT(segments);
    NEURON_STAT(segments_peak);
    NEURON_STAT(num_allocs);
    NEURON_STAT(num_frees);
    NEURON_STAT(num_segment_allocs);
    NEURON_STAT(num_segment_frees);
    NEURON_STAT(num_alloc_retries);
    NEURON_STAT(num_ooms);
    NEURON_STAT(capacity);
#undef NEURON_STAT
    return d;
}

py::object default_generator_object(int index) {
    const at::Generator &gen = default_generator(static_cast<c10::DeviceIndex>(index));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
}

}  // namespace
}  // namespace neuron

PYBIND11_MODULE(_C, m) {
    using namespace neuron;
    m.doc() = "OpenNeuron native extension (libtrn runtime bindings)";
    m.def("_device_count", [] { return trn_device_count(); });
    m.def("_check_device",
          [](int i) { guarded([&] { check_device(static_cast<c10::DeviceIndex>(i)); }); });
    m.def("_get_device", [] { return trn_device_get_current(); });
    m.def("_set_device", [](int i) {
        guarded([&] {
            check_device(static_cast<c10::DeviceIndex>(i));
            TRN_CHECK(trn_device_set_current(i));
        });
    });
    m.def("_init", [] { guarded([] { TRN_CHECK(trn_runtime_init()); }); });
    m.def("_is_initialized", [] { return trn_runtime_is_initialized(); });
    // The kernels' CPU level (libtrn/src/runtime/cpu_level.c).
    m.def("_cpu_capability", [] { return std::string(trn_cpu_capability()); });
    m.def("_cpu_levels", [] {
        std::vector<std::string> names;
        for (int i = 0; i < trn_cpu_level_count(); i++) names.emplace_back(trn_cpu_level_name(i));
        return names;
    });
    m.def("_cpu_level_error", [] {
        return std::string(trn_cpu_level_status() == TRN_SUCCESS ? "" : trn_last_error());
    });
    m.def("_is_in_bad_fork", [] { return trn_runtime_in_bad_fork(); });
    m.def("_synchronize", [](int i) {
        guarded([&] {
            check_device(static_cast<c10::DeviceIndex>(i));
            py::gil_scoped_release release;
            TRN_CHECK(trn_device_synchronize(i));
        });
    });
    m.def("_get_device_properties",
          [](int i) { return guarded([&] { return device_properties(i); }); });
    m.def("_memory_stats", [](int i) { return guarded([&] { return memory_stats(i); }); });
    m.def("_stream_async_enabled", [] { return trn_stream_async_enabled(); });
    m.def("_num_threads", [] { return trn_parallel_threads(); });
    m.def("_float64_native", [] { return trn_float64_native() != 0; });
    // Tests and benchmarks: which bfloat16 matmul path runs (trn/blas.h);
    // True / False force one, None restores the default.
    m.def("_matmul_bf16_native", [] { return trn_matmul_bf16_native(); });
    m.def(
        "_set_matmul_bf16_native",
        [](std::optional<bool> native) {
            if (native)
                trn_matmul_set_bf16_native(*native);
            else
                trn_matmul_set_bf16_default();
        },
        pybind11::arg("native"));
    m.def("_memory_protect_enabled", [] { return trn_mem_protect_enabled(); });
    // Streams as (stream_id, device_index, device_type), torch.Stream's fields.
    m.def("_current_stream", [](int i) {
        return guarded([&] {
            c10::Stream s = to_c10_stream(current_trn_stream(static_cast<c10::DeviceIndex>(i)));
            return py::make_tuple(s.id(), s.device_index(), static_cast<int>(s.device_type()));
        });
    });
    m.def("_default_stream", [](int i) {
        return guarded([&] {
            check_device(static_cast<c10::DeviceIndex>(i));
            trn_stream *st = nullptr;
            TRN_CHECK(trn_stream_get_default(i, &st));
            c10::Stream s = to_c10_stream(st);
            return py::make_tuple(s.id(), s.device_index(), static_cast<int>(s.device_type()));
        });
    });
    m.def("_set_stream", [](int64_t id, int i) {
        guarded([&] {
            check_device(static_cast<c10::DeviceIndex>(i));
            trn_stream *st = nullptr;
            TRN_CHECK(trn_stream_from_id(i, id, &st));
            TRN_CHECK(trn_stream_set_current(st));
        });
    });
    m.def("_get_default_generator",
          [](int i) { return guarded([&] { return default_generator_object(i); }); });
    m.def("_executed_ops", [] { return tracking::executed_ops(); });
    m.def("_op_log_hold_for_test", &tracking::hold_lock_for_test,
          py::call_guard<py::gil_scoped_release>());
    m.def("_ew_operand_use_counts_for_test", [](const at::Tensor &a, const at::Tensor &b) {
        return guarded([&] { return ew_operand_use_counts_for_test(a, b); });
    });
    m.def("_ew_launch_use_count_probe_for_test", [](bool arm) {
        return guarded([&] { return ew_launch_use_count_probe_for_test(arm); });
    });
    m.def("_fallback_ops", [] { return tracking::fallback_ops(); });
    m.def("_clear_op_tracking", [] { tracking::clear(); });
    for (BindingsFn fn : neuron::bindings_list()) fn(m);
}
