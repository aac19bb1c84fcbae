// compile/nki.cpp - Python bindings of the NKI compiler (trn/nki.h).
//
// Owns: torch_neuronx._C._NkiProgram and _nki_compile. Converts and checks
// only: the `nki` package traces a kernel into program text; libtrn checks,
// renders, compiles and runs it. Host runs (nki.simulate, NumPy and CPU
// tensors) pass raw addresses; device runs queue on the current stream.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "compile/nki_program.h"
#include "runtime/bindings.h"
#include "runtime/device.h"
#include "runtime/trn_check.h"
#include "trn/nki.h"

namespace py = pybind11;

namespace neuron {
namespace {

void register_nki(py::module_ &m) {
    py::class_<NkiProgram, std::shared_ptr<NkiProgram>>(m, "_NkiProgram")
        .def_property_readonly(
            "source", [](const NkiProgram &p) { return std::string(trn_nki_program_source(p.p)); })
        .def_property_readonly(
            "cache_key",
            [](const NkiProgram &p) { return std::string(trn_nki_program_cache_key(p.p)); })
        .def_property_readonly(
            "from_cache", [](const NkiProgram &p) { return trn_nki_program_from_cache(p.p) != 0; })
        .def_property_readonly(
            "compile_seconds",
            [](const NkiProgram &p) { return trn_nki_program_compile_seconds(p.p); })
        .def_property_readonly("arg_count",
                               [](const NkiProgram &p) { return trn_nki_program_arg_count(p.p); })
        .def("output_covered",
             [](const NkiProgram &p, int arg) {
                 return trn_nki_program_output_covered(p.p, arg) != 0;
             })
        .def("run_host",
             [](const NkiProgram &p, const std::vector<uintptr_t> &addrs) {
                 guarded([&] {
                     TORCH_CHECK(static_cast<int>(addrs.size()) == trn_nki_program_arg_count(p.p),
                                 "nki: the kernel binds ", trn_nki_program_arg_count(p.p),
                                 " HBM tensors, got ", addrs.size());
                     std::vector<void *> ptrs(addrs.size());
                     for (size_t i = 0; i < addrs.size(); i++)
                         ptrs[i] = reinterpret_cast<void *>(addrs[i]);
                     trn_status st;
                     {
                         py::gil_scoped_release nogil;
                         st = trn_nki_run(p.p, ptrs.data());
                     }
                     TRN_CHECK(st);
                 });
             })
        .def("launch", [](const NkiProgram &p, const std::vector<at::Tensor> &tensors) {
            guarded([&] {
                TORCH_CHECK(static_cast<int>(tensors.size()) == trn_nki_program_arg_count(p.p),
                            "nki: the kernel binds ", trn_nki_program_arg_count(p.p),
                            " HBM tensors, got ", tensors.size());
                std::vector<void *> ptrs(tensors.size());
                c10::DeviceIndex dev = 0;
                for (size_t i = 0; i < tensors.size(); i++) {
                    const at::Tensor &t = tensors[i];
                    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "nki: argument ",
                                i, " is on ", t.device(), "; a device run takes neuron tensors");
                    if (i == 0) dev = t.device().index();
                    TORCH_CHECK(t.device().index() == dev,
                                "nki: arguments on different neuron devices");
                    ptrs[i] = t.data_ptr();
                }
                TRN_CHECK(trn_nki_launch(p.p, current_trn_stream(dev), ptrs.data()));
            });
        });
    m.def("_nki_compile", [](const std::string &ir, const std::string &include_dir,
                             const std::optional<std::string> &cache_dir,
                             const std::optional<std::string> &debug_dir, const std::string &name,
                             double lock_timeout_s, int64_t cache_max_bytes) {
        return guarded([&] {
            auto prog = std::make_shared<NkiProgram>();
            trn_compile_options o{};  // C compiler settings: the graph compiler's defaults
            o.include_dir = include_dir.c_str();
            o.cache_dir = cache_dir ? cache_dir->c_str() : nullptr;
            o.debug_dir = debug_dir ? debug_dir->c_str() : nullptr;
            o.name = name.c_str();
            o.lock_timeout_s = lock_timeout_s;
            o.cache_max_bytes = cache_max_bytes;
            trn_status st;
            {
                py::gil_scoped_release nogil;
                st = trn_nki_compile(ir.c_str(), &o, &prog->p);
            }
            TRN_CHECK(st);
            return prog;
        });
    });
}

BindingsRegistrar reg_nki(register_nki);

}  // namespace
}  // namespace neuron
