// distributed/bindings.cpp - Python access to the neuron c10d backend.
// The class is bound on demand (_init_distributed), not at import: binding it
// needs torch.distributed's types, and _C loads while `import torch` runs.
#include <torch/csrc/utils/pybind.h>

#include "distributed/process_group.h"
#include "runtime/bindings.h"
#include "runtime/trn_check.h"

namespace py = pybind11;

namespace {
// dist.split_group deep-copies the parent backend's `options`; c10d's base
// Options cannot be copied from Python, so the backend hands out this one.
struct NeuronOptions : c10d::Backend::Options {
    explicit NeuronOptions(const c10d::Backend::Options &o) : Options(o) {}
};
}  // namespace

static void init_distributed(py::module_ m) {
    if (py::hasattr(m, "ProcessGroupNeuron")) return;
    py::module_::import("torch.distributed");
    py::class_<neuron::ProcessGroupNeuron, c10d::Backend,
               c10::intrusive_ptr<neuron::ProcessGroupNeuron>>
        pg(m, "ProcessGroupNeuron");
    py::class_<NeuronOptions, c10d::Backend::Options, c10::intrusive_ptr<NeuronOptions>>(pg,
                                                                                         "Options")
        .def("__copy__",
             [](const NeuronOptions &o) { return c10::make_intrusive<NeuronOptions>(o); })
        .def("__deepcopy__", [](const NeuronOptions &o, py::dict) {
            return c10::make_intrusive<NeuronOptions>(o);
        });
    pg.def(py::init([](int rank, int size, int64_t timeout_ms, int region_fd, py::object gloo) {
               c10::intrusive_ptr<c10d::Backend> g;
               if (!gloo.is_none()) g = gloo.cast<c10::intrusive_ptr<c10d::Backend>>();
               py::gil_scoped_release no_gil;
               return c10::make_intrusive<neuron::ProcessGroupNeuron>(rank, size, timeout_ms,
                                                                      region_fd, g);
           }),
           py::arg("rank"), py::arg("size"), py::arg("timeout_ms"), py::arg("region_fd"),
           py::arg("gloo"))
        .def_property_readonly("transport", &neuron::ProcessGroupNeuron::transport)
        // new_group calls this on the ranks left out of a sub-group once the
        // parent can split (ncclCommSplit needs every rank of the parent).
        // A neuron sub-group's region is set up by its members alone, so
        // the others have nothing to take part in.
        .def("perform_nocolor_split", [](neuron::ProcessGroupNeuron &, py::object /*device*/) {})
        .def_property_readonly("options", [](neuron::ProcessGroupNeuron &self) {
            return c10::make_intrusive<NeuronOptions>(*self.getBackendOptions());
        });
    // Splits reuse the Python rendezvous that sets up the world's region;
    // the module is looked up per call so no Python object outlives exit.
    neuron::ProcessGroupNeuron::split_factory = [](const c10::intrusive_ptr<c10d::Store> &store,
                                                   int rank, int size,
                                                   std::chrono::milliseconds timeout) {
        py::gil_scoped_acquire gil;
        py::object made =
            py::module_::import("torch_neuronx.distributed")
                .attr("_split_backend")(store, rank, size, static_cast<int64_t>(timeout.count()));
        return made.cast<c10::intrusive_ptr<c10d::Backend>>();
    };
}

static neuron::BindingsRegistrar reg_dist([](py::module_ &m) {
    m.def("_trn_comm_region_create", [](int size) {
        int fd = -1;
        TRN_CHECK(trn_comm_region_create(size, &fd));
        return fd;
    });
    m.def("_init_distributed", [m]() { init_distributed(m); });
});
