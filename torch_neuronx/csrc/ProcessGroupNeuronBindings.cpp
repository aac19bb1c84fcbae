// ProcessGroupNeuronBindings.cpp - Python access to the neuron c10d backend.
// The class is bound on demand (_init_distributed), not at import: binding it
// needs torch.distributed's types, and _C loads while `import torch` runs.
#include <torch/csrc/utils/pybind.h>

#include "ProcessGroupNeuron.h"
#include "bindings.h"
#include "trn_check.h"

namespace py = pybind11;

static void init_distributed(py::module_ m) {
    if (py::hasattr(m, "ProcessGroupNeuron")) return;
    py::module_::import("torch.distributed");
    py::class_<neuron::ProcessGroupNeuron, c10d::Backend,
               c10::intrusive_ptr<neuron::ProcessGroupNeuron>>(
        m, "ProcessGroupNeuron")
        .def(py::init([](int rank, int size, int64_t timeout_ms, int region_fd,
                         py::object gloo) {
                 c10::intrusive_ptr<c10d::Backend> g;
                 if (!gloo.is_none())
                     g = gloo.cast<c10::intrusive_ptr<c10d::Backend>>();
                 py::gil_scoped_release no_gil;
                 return c10::make_intrusive<neuron::ProcessGroupNeuron>(
                     rank, size, timeout_ms, region_fd, g);
             }),
             py::arg("rank"), py::arg("size"), py::arg("timeout_ms"),
             py::arg("region_fd"), py::arg("gloo"))
        .def_property_readonly("transport",
                               &neuron::ProcessGroupNeuron::transport);
}

static neuron::BindingsRegistrar reg_dist([](py::module_ &m) {
    m.def("_trn_comm_region_create", [](int size) {
        int fd = -1;
        TRN_CHECK(trn_comm_region_create(size, &fd));
        return fd;
    });
    m.def("_init_distributed", [m]() { init_distributed(m); });
});
