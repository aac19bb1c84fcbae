// compile/compiler.cpp - Python bindings of the graph compiler (trn/compiler.h).
//
// Owns: torch_neuronx._C._CompilerGraph / _CompiledProgram / _CompiledRun.
// Converts and checks only: the Python backend (torch_neuronx/_compile)
// translates an FX graph into these builder calls; every decision (fusion,
// memory, code) is libtrn's. Buffers are passed as tensors' data pointers.
// An NKI kernel call is an extern step (trn/graph_extern.h) whose context is
// the compiled NKI program: the graph, then every program compiled from it,
// holds a reference so the program outlives every run. torch._grouped_mm is
// one too: its context is the product's descriptor (sizes and strides; offs
// is an argument buffer, read when the kernel runs, so changing group sizes
// never reach the host). torch._scaled_mm too (descriptor: sizes, strides,
// scale kinds; operands, scales and bias are argument buffers). sort, topk, cumsum/cumprod and histc (a MoE
// router's top-k, token permutation, expert counts and offsets) are extern
// steps of the same kind: the context is the eager kernel's descriptor
// (trn/sort.h, trn/reduce.h, trn/histc.h) with its stride arrays, so
// compiled results are eager's bits.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include "compile/nki_program.h"
#include "runtime/bindings.h"
#include "runtime/device.h"
#include "trn/compiler.h"
#include "trn/graph_extern.h"
#include "trn/grouped_mm.h"
#include "trn/histc.h"
#include "trn/metrics.h"
#include "trn/reduce.h"
#include "trn/scaled_mm.h"
#include "trn/sort.h"
#include "runtime/trn_check.h"

namespace py = pybind11;

namespace neuron {
namespace {

using I64s = std::vector<int64_t>;

struct Graph {
    trn_graph *g = nullptr;
    std::vector<std::shared_ptr<NkiProgram>> nki;           // extern calls' kernels
    std::vector<std::shared_ptr<trn_grouped_mm_desc>> gmm;  // grouped_mm calls' descriptors
    std::vector<std::shared_ptr<void>> ctx;  // other extern calls' contexts (sort, scan)
    Graph() { TRN_CHECK(trn_graph_create(&g)); }
    ~Graph() { trn_graph_free(g); }
};

struct Program {
    trn_program *p = nullptr;
    std::vector<std::shared_ptr<NkiProgram>> nki;  // outlive p's runs: freed after it
    std::vector<std::shared_ptr<trn_grouped_mm_desc>> gmm;
    std::vector<std::shared_ptr<void>> ctx;
    ~Program() { trn_program_free(p); }
};

// An NKI call's extern step: queues the kernel on the run's stream (the
// buffers are the kernel's arguments, then its outputs, as it binds them).
trn_status launch_nki(void *ctx, trn_stream *s, void *const *bufs, int n) {
    const auto *p = static_cast<const trn_nki_program *>(ctx);
    if (n != trn_nki_program_arg_count(p)) return TRN_ERROR_INVALID_ARGUMENT;
    return trn_nki_launch(p, s, bufs);
}

// A grouped_mm extern step: buffers A, B, (offs,) then C.
trn_status launch_grouped_mm(void *ctx, trn_stream *s, void *const *bufs, int n) {
    trn_grouped_mm_desc d = *static_cast<const trn_grouped_mm_desc *>(ctx);
    const bool offs = d.layout != TRN_GMM_3D_3D;
    if (n != (offs ? 4 : 3)) return TRN_ERROR_INVALID_ARGUMENT;
    d.a = bufs[0];
    d.b = bufs[1];
    d.offs = offs ? static_cast<const int32_t *>(bufs[2]) : nullptr;
    d.c = bufs[n - 1];
    return trn_grouped_mm_launch(s, &d);
}

// A _scaled_grouped_mm extern step: buffers A, B, scale_a, scale_b, (offs,)
// then C.
trn_status launch_scaled_grouped_mm(void *ctx, trn_stream *s, void *const *bufs, int n) {
    trn_scaled_grouped_mm_desc d = *static_cast<const trn_scaled_grouped_mm_desc *>(ctx);
    const bool offs = d.layout == TRN_GMM_2D_3D;
    if (n != (offs ? 6 : 5)) return TRN_ERROR_INVALID_ARGUMENT;
    d.a = bufs[0];
    d.b = bufs[1];
    d.scale_a = static_cast<const float *>(bufs[2]);
    d.scale_b = static_cast<const float *>(bufs[3]);
    d.offs = offs ? static_cast<const int32_t *>(bufs[4]) : nullptr;
    d.c = bufs[n - 1];
    return trn_scaled_grouped_mm_launch(s, &d);
}

// A _scaled_mm extern step: buffers A, B, scale_a, scale_b, (bias,) then C.
trn_status launch_scaled_mm(void *ctx, trn_stream *s, void *const *bufs, int n) {
    trn_scaled_mm_desc d = *static_cast<const trn_scaled_mm_desc *>(ctx);
    const bool bias = d.bias_stride >= 0;
    if (n != (bias ? 6 : 5)) return TRN_ERROR_INVALID_ARGUMENT;
    d.a = bufs[0];
    d.b = bufs[1];
    if (d.scale_a_count == 0) {  // MX: e8m0 block scales
        d.mx_scale_a = static_cast<const uint8_t *>(bufs[2]);
        d.mx_scale_b = static_cast<const uint8_t *>(bufs[3]);
    } else {
        d.scale_a = static_cast<const float *>(bufs[2]);
        d.scale_b = static_cast<const float *>(bufs[3]);
    }
    d.bias = bias ? bufs[4] : nullptr;
    if (!bias) d.bias_stride = 0;  // -1 marked "no bias" in the context
    d.c = bufs[n - 1];
    return trn_scaled_mm_launch(s, &d);
}

// A sort or topk extern step: buffers input, then values and indices. The
// descriptor's stride arrays point into the context, which outlives runs.
struct SortCall {
    trn_sort_desc d{};
    bool topk = false;
    I64s outer, in_os, val_os, idx_os;
};

trn_status launch_sort(void *ctx, trn_stream *s, void *const *bufs, int n) {
    const auto *c = static_cast<const SortCall *>(ctx);
    if (n != 3) return TRN_ERROR_INVALID_ARGUMENT;
    trn_sort_desc d = c->d;
    d.in = bufs[0];
    d.values = bufs[1];
    d.indices = static_cast<int64_t *>(bufs[2]);
    return c->topk ? trn_topk_launch(s, &d) : trn_sort_launch(s, &d);
}

// A cumsum / cumprod extern step: buffers input, then output.
struct ScanCall {
    trn_scan_desc d{};
    I64s outer, in_os, out_os;
};

trn_status launch_scan(void *ctx, trn_stream *s, void *const *bufs, int n) {
    const auto *c = static_cast<const ScanCall *>(ctx);
    if (n != 2) return TRN_ERROR_INVALID_ARGUMENT;
    trn_scan_desc d = c->d;
    d.in = bufs[0];
    d.out = bufs[1];
    return trn_scan_launch(s, &d);
}

// A histc extern step: buffers input (contiguous), then the bins.
trn_status launch_histc(void *ctx, trn_stream *s, void *const *bufs, int n) {
    if (n != 2) return TRN_ERROR_INVALID_ARGUMENT;
    trn_histc_desc d = *static_cast<const trn_histc_desc *>(ctx);
    d.input = bufs[0];
    d.out = bufs[1];
    return trn_histc_launch(s, &d);
}

// Splits (sizes, strides) of one operand into the scanned/sorted dim and
// the others, in order.
void split_dim(const I64s &sizes, const I64s &strides, int64_t dim, I64s *outer_sizes,
               I64s *outer_strides, int64_t *len, int64_t *stride) {
    for (size_t i = 0; i < sizes.size(); i++) {
        if ((int64_t)i == dim) {
            if (len) *len = sizes[i];
            *stride = strides[i];
        } else {
            if (outer_sizes) outer_sizes->push_back(sizes[i]);
            outer_strides->push_back(strides[i]);
        }
    }
}

// A program that gathers or scatters can fail on an index value: its run is
// waited for, so the error is raised at the op, as eager index ops do
// (IndexError for indexing, index_select and embedding, RuntimeError for
// gather and scatter: the kernel's status says which).
// `launched`: a failed launch's status (under NEURON_LAUNCH_BLOCKING=1 it
// carries the kernel's error), raised the same way.
void check_indices(const Program &prog, trn_stream *s, trn_status launched = TRN_SUCCESS) {
    if (!trn_program_checks_indices(prog.p)) {
        TRN_CHECK(launched);
        return;
    }
    trn_status st = launched != TRN_SUCCESS ? launched : trn_stream_synchronize(s);
    if (st == TRN_ERROR_INVALID_ARGUMENT) {
        std::string msg = trn_last_error();
        trn_clear_error();
        TORCH_CHECK_INDEX(false, msg);
    }
    if (st == TRN_ERROR_KERNEL) {
        std::string msg = trn_last_error();
        trn_clear_error();
        TORCH_CHECK(false, msg);
    }
    TRN_CHECK(st);
}

struct Run {
    std::shared_ptr<Program> prog;
    trn_run *r = nullptr;
    int device = 0;
    ~Run() {
        if (r == nullptr) return;
        trn_stream *s = nullptr;
        if (trn_stream_get_current(device, &s) == TRN_SUCCESS) trn_run_finish(r, s);
    }
};

// Where one output of a compiled graph comes from (CompiledGraph._plan_fast).
struct OutputSource {
    enum Kind { NONE, EXPORT, INPUT, ARG, CONST } kind = NONE;
    int index = 0;      // export / input node / argument number
    py::object value;   // CONST
    bool view = false;  // a view of the export or input
    I64s sizes, strides;
    int64_t offset = 0;
};

struct Call {
    std::shared_ptr<Program> prog;
    std::vector<int> in_args;  // argument number of each input node
    std::vector<int> in_nodes, ex_nodes;
    std::vector<I64s> ex_sizes, ex_strides;
    std::vector<at::ScalarType> ex_dtypes;
    std::vector<OutputSource> outputs;
    int64_t ws_size = 0;
    int device = 0;

    std::vector<at::Tensor> run(const std::vector<at::Tensor> &inputs) {
        TORCH_CHECK(inputs.size() == in_nodes.size(), "compiled graph: ", inputs.size(),
                    " inputs, expected ", in_nodes.size());
        for (const auto &t : inputs)
            TORCH_CHECK(t.defined() && t.device().type() == c10::DeviceType::PrivateUse1,
                        "compiled graph: an input is not a neuron tensor");
        const auto dev =
            c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
        std::vector<at::Tensor> out;
        out.reserve(ex_nodes.size());
        for (size_t i = 0; i < ex_nodes.size(); i++)
            out.push_back(at::empty_strided(ex_sizes[i], ex_strides[i],
                                            at::TensorOptions().dtype(ex_dtypes[i]).device(dev)));
        at::Tensor ws;
        if (ws_size > 0)
            ws = at::empty({ws_size}, at::TensorOptions().dtype(at::kByte).device(dev));
        trn_run *r = nullptr;
        TRN_CHECK(trn_run_create(prog->p, ws_size > 0 ? ws.data_ptr() : nullptr, &r));
        trn_stream *s = current_trn_stream(static_cast<c10::DeviceIndex>(device));
        trn_status st = TRN_SUCCESS;
        for (size_t i = 0; i < inputs.size() && st == TRN_SUCCESS; i++)
            st = trn_run_set_buffer(r, in_nodes[i], inputs[i].data_ptr());
        for (size_t i = 0; i < out.size() && st == TRN_SUCCESS; i++)
            st = trn_run_set_buffer(r, ex_nodes[i], out[i].data_ptr());
        int host = -1;
        trn_status cont = TRN_SUCCESS;
        if (st == TRN_SUCCESS) cont = trn_run_continue(r, s, &host);
        // The run (and its address array) is released by a task after the launched work.
        trn_status fin = trn_run_finish(r, s);
        TRN_CHECK(st);
        if (cont != TRN_SUCCESS) check_indices(*prog, s, cont);
        TRN_CHECK(fin);
        TORCH_CHECK(host < 0, "compiled graph: stopped at host step ", host,
                    " in a call without host steps");
        check_indices(*prog, s);
        trn_counter_add(TRN_COUNTER_COMPILED_LAUNCHES, device, 1);
        return out;
    }

    // The whole call as AOTAutograd makes it (boxed: a list of arguments,
    // emptied here so inputs are released early): inputs picked from the
    // arguments, the run, and every output from its source, views made here.
    // In C++ because the same in Python cost 3-90 us per graph call
    // (GPT-2's backward returns 26 views).
    py::list call(const py::list &args) {
        const Py_ssize_t n_args = static_cast<Py_ssize_t>(args.size());
        std::vector<at::Tensor> inputs;
        inputs.reserve(in_args.size());
        for (int i : in_args) {
            TORCH_CHECK(i < n_args, "compiled graph: ", n_args, " arguments, expected more than ",
                        i);
            PyObject *o = PyList_GET_ITEM(args.ptr(), i);
            TORCH_CHECK(THPVariable_Check(o), "compiled graph: argument ", i, " is not a tensor");
            inputs.push_back(THPVariable_Unpack(o));
        }
        std::vector<at::Tensor> ex = run(inputs);
        py::list out(outputs.size());
        for (size_t i = 0; i < outputs.size(); i++) {
            const OutputSource &o = outputs[i];
            switch (o.kind) {
            case OutputSource::NONE: out[i] = py::none(); continue;
            case OutputSource::ARG:
                TORCH_CHECK(o.index < n_args, "compiled graph: no argument ", o.index);
                out[i] = args[o.index];
                continue;
            case OutputSource::CONST: out[i] = o.value; continue;
            default: break;
            }
            at::Tensor t = o.kind == OutputSource::EXPORT ? ex[o.index] : inputs[o.index];
            if (o.view) t = t.as_strided(o.sizes, o.strides, t.storage_offset() + o.offset);
            out[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(t)));
        }
        if (PyList_SetSlice(args.ptr(), 0, n_args, nullptr) != 0) throw py::error_already_set();
        return out;
    }
};

const int64_t *opt_ptr(const std::optional<I64s> &v) { return v ? v->data() : nullptr; }

void *tensor_ptr(const at::Tensor &t) {
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "compiled graph: buffer on ",
                t.device(), ", expected a neuron tensor");
    return t.data_ptr();
}

void register_compiler(py::module_ &m) {
    py::class_<Graph, std::shared_ptr<Graph>>(m, "_CompilerGraph")
        .def(py::init([] { return guarded([] { return std::make_shared<Graph>(); }); }))
        .def("input",
             [](Graph &g, int dt, const I64s &sizes, const I64s &strides) {
                 return guarded([&] {
                     int id;
                     TRN_CHECK(trn_graph_input(g.g, (trn_dtype)dt, (int)sizes.size(), sizes.data(),
                                               strides.data(), &id));
                     return id;
                 });
             })
        .def("const",
             [](Graph &g, int dt, double f, int64_t i, const I64s &sizes) {
                 return guarded([&] {
                     int id;
                     TRN_CHECK(trn_graph_const(g.g, (trn_dtype)dt, f, i, (int)sizes.size(),
                                               sizes.data(), &id));
                     return id;
                 });
             })
        .def("pointwise",
             [](Graph &g, int op, int compute, int out, const std::vector<int> &in,
                const std::vector<double> &params) {
                 return guarded([&] {
                     int id;
                     double p[4] = {0, 0, 0, 0};
                     for (size_t i = 0; i < params.size() && i < 4; i++) p[i] = params[i];
                     TRN_CHECK(trn_graph_pointwise(g.g, (trn_ew_op)op, (trn_dtype)compute,
                                                   (trn_dtype)out, (int)in.size(), in.data(), p,
                                                   &id));
                     return id;
                 });
             })
        .def("cast",
             [](Graph &g, int in, int dt) {
                 return guarded([&] {
                     int id;
                     TRN_CHECK(trn_graph_cast(g.g, in, (trn_dtype)dt, &id));
                     return id;
                 });
             })
        .def("view",
             [](Graph &g, int in, const I64s &sizes, const I64s &strides, int64_t offset) {
                 return guarded([&] {
                     int id;
                     TORCH_CHECK(sizes.size() == strides.size(),
                                 "view: sizes and strides differ in length");
                     TRN_CHECK(trn_graph_view(g.g, in, (int)sizes.size(), sizes.data(),
                                              strides.data(), offset, &id));
                     return id;
                 });
             })
        .def("reduce",
             [](Graph &g, int op, int in, int out, uint32_t mask) {
                 return guarded([&] {
                     int id;
                     TRN_CHECK(trn_graph_reduce(g.g, (trn_graph_reduce_op)op, in, (trn_dtype)out,
                                                mask, &id));
                     return id;
                 });
             })
        .def("matmul",
             [](Graph &g, int a, int b, double alpha) {
                 return guarded([&] {
                     int id;
                     TRN_CHECK(trn_graph_matmul(g.g, a, b, alpha, &id));
                     return id;
                 });
             })
        .def("conv",
             [](Graph &g, int kind, int x, int y, int bias, const I64s &stride, const I64s &pad,
                const I64s &dil, int64_t groups, const I64s &out_sizes) {
                 return guarded([&] {
                     int id;
                     TORCH_CHECK(stride.size() == pad.size() && pad.size() == dil.size(),
                                 "conv: parameter lengths differ");
                     TRN_CHECK(trn_graph_conv(g.g, (trn_conv_kind)kind, x, y, bias,
                                              (int)stride.size(), stride.data(), pad.data(),
                                              dil.data(), groups, (int)out_sizes.size(),
                                              out_sizes.data(), &id));
                     return id;
                 });
             })
        .def("iota",
             [](Graph &g, int dt, const I64s &sizes, const I64s &coef, int64_t offset, double start,
                double step) {
                 return guarded([&] {
                     int id;
                     TORCH_CHECK(sizes.size() == coef.size(),
                                 "iota: sizes and coefficients differ in length");
                     TRN_CHECK(trn_graph_iota(g.g, (trn_dtype)dt, (int)sizes.size(), sizes.data(),
                                              coef.data(), offset, start, step, &id));
                     return id;
                 });
             })
        .def("gather",
             [](Graph &g, int src, const std::vector<int> &idx, const std::vector<int> &src_dims,
                const std::vector<int> &out_to_src, int wrap, int err) {
                 return guarded([&] {
                     int id;
                     TORCH_CHECK(idx.size() == src_dims.size(),
                                 "gather: indices and dims differ in length");
                     TRN_CHECK(trn_graph_gather(g.g, src, (int)idx.size(), idx.data(),
                                                src_dims.data(), out_to_src.data(), wrap,
                                                (trn_graph_index_error)err, &id));
                     return id;
                 });
             })
        .def("scatter",
             [](Graph &g, int self, int index, int src, int dim,
                const std::vector<int> &out_to_self, int accumulate, int wrap, int err) {
                 return guarded([&] {
                     int id;
                     TRN_CHECK(trn_graph_scatter(g.g, self, index, src, dim, out_to_self.data(),
                                                 accumulate, wrap, (trn_graph_index_error)err,
                                                 &id));
                     return id;
                 });
             })
        .def("host_call",
             [](Graph &g, const std::vector<int> &args) {
                 return guarded([&] {
                     int step;
                     TRN_CHECK(trn_graph_host_call(g.g, (int)args.size(), args.data(), &step));
                     return step;
                 });
             })
        .def("nki_call",
             [](Graph &g, std::shared_ptr<NkiProgram> prog, const std::vector<int> &args,
                int n_results) {
                 return guarded([&] {
                     TORCH_CHECK(prog && prog->p, "nki_call: no NKI program");
                     TORCH_CHECK(static_cast<int>(args.size()) + n_results ==
                                     trn_nki_program_arg_count(prog->p),
                                 "nki_call: the kernel binds ", trn_nki_program_arg_count(prog->p),
                                 " HBM tensors, got ", args.size(), " arguments and ", n_results,
                                 " results");
                     int call;
                     TRN_CHECK(trn_graph_extern_call(g.g, (int)args.size(), args.data(), launch_nki,
                                                     prog->p, &call));
                     g.nki.push_back(std::move(prog));
                     return call;
                 });
             })
        .def("grouped_mm_call",
             [](Graph &g, const std::vector<int> &args, int dt, int layout, const I64s &gmnk,
                const I64s &a_strides, const I64s &b_strides, const I64s &c_strides) {
                 return guarded([&] {
                     TORCH_CHECK(layout >= TRN_GMM_2D_3D && layout <= TRN_GMM_2D_2D,
                                 "grouped_mm_call: bad layout ", layout);
                     TORCH_CHECK(args.size() == (layout == TRN_GMM_3D_3D ? 2u : 3u),
                                 "grouped_mm_call: A, B and offs (none for 3d x 3d)");
                     TORCH_CHECK(gmnk.size() == 4 && a_strides.size() == 3 &&
                                     b_strides.size() == 3 && c_strides.size() == 3,
                                 "grouped_mm_call: (G, m, n, k) and three strides per operand");
                     TORCH_CHECK(trn_grouped_mm_supports((trn_dtype)dt),
                                 "grouped_mm_call: dtype not supported");
                     auto d = std::make_shared<trn_grouped_mm_desc>();
                     d->dtype = (trn_dtype)dt;
                     d->layout = (trn_gmm_layout)layout;
                     d->groups = gmnk[0];
                     d->m = gmnk[1];
                     d->n = gmnk[2];
                     d->k = gmnk[3];
                     for (int i = 0; i < 3; i++) {
                         d->a_strides[i] = a_strides[i];
                         d->b_strides[i] = b_strides[i];
                         d->c_strides[i] = c_strides[i];
                     }
                     int call;
                     TRN_CHECK(trn_graph_extern_call(g.g, (int)args.size(), args.data(),
                                                     launch_grouped_mm, d.get(), &call));
                     g.gmm.push_back(std::move(d));
                     return call;
                 });
             })
        .def("scaled_grouped_mm_call",
             [](Graph &g, const std::vector<int> &args, int a_dt, int b_dt, int out_dt, int layout,
                const I64s &gmnk, const I64s &a_strides, const I64s &b_strides) {
                 return guarded([&] {
                     TORCH_CHECK(layout == TRN_GMM_2D_3D || layout == TRN_GMM_3D_3D,
                                 "scaled_grouped_mm_call: 2d x 3d or 3d x 3d");
                     TORCH_CHECK(args.size() == (layout == TRN_GMM_2D_3D ? 5u : 4u),
                                 "scaled_grouped_mm_call: A, B, scale_a, scale_b (and offs)");
                     TORCH_CHECK(gmnk.size() == 4 && a_strides.size() == 3 && b_strides.size() == 3,
                                 "scaled_grouped_mm_call: (G, m, n, k) and three strides each");
                     auto d = std::make_shared<trn_scaled_grouped_mm_desc>();
                     d->a_dtype = (trn_dtype)a_dt;
                     d->b_dtype = (trn_dtype)b_dt;
                     d->out_dtype = (trn_dtype)out_dt;
                     d->layout = (trn_gmm_layout)layout;
                     d->groups = gmnk[0];
                     d->m = gmnk[1];
                     d->n = gmnk[2];
                     d->k = gmnk[3];
                     for (int i = 0; i < 3; i++) {
                         d->a_strides[i] = a_strides[i];
                         d->b_strides[i] = b_strides[i];
                     }
                     int call;
                     TRN_CHECK(trn_graph_extern_call(g.g, (int)args.size(), args.data(),
                                                     launch_scaled_grouped_mm, d.get(), &call));
                     g.ctx.push_back(std::move(d));
                     return call;
                 });
             })
        .def("scaled_mm_call",
             [](Graph &g, const std::vector<int> &args, int a_dt, int b_dt, int out_dt,
                const I64s &mnk, const I64s &a_strides, const I64s &b_strides,
                const I64s &c_strides, bool mx, const I64s &scale_counts, const I64s &scale_strides,
                int bias_dt, int64_t bias_stride) {
                 return guarded([&] {
                     const bool bias = bias_stride >= 0;
                     TORCH_CHECK(args.size() == (bias ? 5u : 4u),
                                 "scaled_mm_call: A, B, scale_a, scale_b (and bias)");
                     TORCH_CHECK(mnk.size() == 3 && a_strides.size() == 2 &&
                                     b_strides.size() == 2 && c_strides.size() == 2,
                                 "scaled_mm_call: (m, n, k) and two strides per operand");
                     TORCH_CHECK(trn_scaled_mm_supports((trn_dtype)a_dt, (trn_dtype)b_dt,
                                                        (trn_dtype)out_dt),
                                 "scaled_mm_call: dtypes not supported");
                     TORCH_CHECK(scale_counts.size() == 2 && scale_strides.size() == 2 &&
                                     (mx || (scale_counts[0] >= 1 && scale_counts[1] >= 1)),
                                 "scaled_mm_call: two scale counts and strides");
                     auto d = std::make_shared<trn_scaled_mm_desc>();
                     d->a_dtype = (trn_dtype)a_dt;
                     d->b_dtype = (trn_dtype)b_dt;
                     d->out_dtype = (trn_dtype)out_dt;
                     d->m = mnk[0];
                     d->n = mnk[1];
                     d->k = mnk[2];
                     for (int i = 0; i < 2; i++) {
                         d->a_strides[i] = a_strides[i];
                         d->b_strides[i] = b_strides[i];
                         d->c_strides[i] = c_strides[i];
                     }
                     // scale_a_count 0 marks MX for the launch (the buffers are e8m0 scales)
                     d->scale_a_count = mx ? 0 : scale_counts[0];
                     d->scale_b_count = mx ? 0 : scale_counts[1];
                     d->scale_a_stride = scale_strides[0];
                     d->scale_b_stride = scale_strides[1];
                     d->bias_dtype = (trn_dtype)bias_dt;
                     d->bias_stride = bias ? bias_stride : -1;
                     int call;
                     TRN_CHECK(trn_graph_extern_call(g.g, (int)args.size(), args.data(),
                                                     launch_scaled_mm, d.get(), &call));
                     g.ctx.push_back(std::move(d));
                     return call;
                 });
             })
        .def(
            "sort_call",
            [](Graph &g, int in, int dt, bool topk, const I64s &sizes, const I64s &in_strides,
               const I64s &val_strides, const I64s &idx_strides, int64_t dim, bool descending,
               int64_t k, bool sorted) {
                return guarded([&] {
                    const size_t nd = sizes.size();
                    TORCH_CHECK(nd >= 1 && nd <= TRN_MAX_DIMS && in_strides.size() == nd &&
                                    val_strides.size() == nd && idx_strides.size() == nd,
                                "sort_call: sizes and three strides of 1..", TRN_MAX_DIMS, " dims");
                    TORCH_CHECK(dim >= 0 && dim < (int64_t)nd, "sort_call: bad dim ", dim);
                    TORCH_CHECK(trn_sort_supports((trn_dtype)dt), "sort_call: dtype not supported");
                    auto c = std::make_shared<SortCall>();
                    c->topk = topk;
                    trn_sort_desc &d = c->d;
                    split_dim(sizes, in_strides, dim, &c->outer, &c->in_os, &d.len, &d.in_stride);
                    split_dim(sizes, val_strides, dim, nullptr, &c->val_os, nullptr, &d.val_stride);
                    split_dim(sizes, idx_strides, dim, nullptr, &c->idx_os, nullptr, &d.idx_stride);
                    TORCH_CHECK(k >= 0 && k <= d.len, "sort_call: k out of range");
                    d.dtype = (trn_dtype)dt;
                    d.descending = descending;
                    d.outer_ndim = (int)c->outer.size();
                    d.outer_sizes = c->outer.data();
                    d.in_outer_strides = c->in_os.data();
                    d.val_outer_strides = c->val_os.data();
                    d.idx_outer_strides = c->idx_os.data();
                    d.k = k;
                    d.sorted = sorted;
                    int call;
                    TRN_CHECK(trn_graph_extern_call(g.g, 1, &in, launch_sort, c.get(), &call));
                    g.ctx.push_back(std::move(c));
                    return call;
                });
            })
        .def("scan_call",
             [](Graph &g, int in, int dt, int op, const I64s &sizes, const I64s &in_strides,
                const I64s &out_strides, int64_t dim) {
                 return guarded([&] {
                     const size_t nd = sizes.size();
                     TORCH_CHECK(nd >= 1 && nd <= TRN_MAX_DIMS && in_strides.size() == nd &&
                                     out_strides.size() == nd,
                                 "scan_call: sizes and two strides of 1..", TRN_MAX_DIMS, " dims");
                     TORCH_CHECK(dim >= 0 && dim < (int64_t)nd, "scan_call: bad dim ", dim);
                     TORCH_CHECK(op == TRN_SCAN_CUMSUM || op == TRN_SCAN_CUMPROD,
                                 "scan_call: bad op ", op);
                     TORCH_CHECK(trn_scan_supports((trn_scan_op)op, (trn_dtype)dt),
                                 "scan_call: dtype not supported");
                     auto c = std::make_shared<ScanCall>();
                     trn_scan_desc &d = c->d;
                     split_dim(sizes, in_strides, dim, &c->outer, &c->in_os, &d.len, &d.in_stride);
                     split_dim(sizes, out_strides, dim, nullptr, &c->out_os, nullptr,
                               &d.out_stride);
                     d.op = (trn_scan_op)op;
                     d.dtype = (trn_dtype)dt;
                     d.outer_ndim = (int)c->outer.size();
                     d.outer_sizes = c->outer.data();
                     d.in_outer_strides = c->in_os.data();
                     d.out_outer_strides = c->out_os.data();
                     int call;
                     TRN_CHECK(trn_graph_extern_call(g.g, 1, &in, launch_scan, c.get(), &call));
                     g.ctx.push_back(std::move(c));
                     return call;
                 });
             })
        .def("histc_call",
             [](Graph &g, int in, int dt, int64_t n, int64_t bins, double lo, double hi) {
                 return guarded([&] {
                     TORCH_CHECK(trn_histc_supports((trn_dtype)dt),
                                 "histc_call: dtype not supported");
                     TORCH_CHECK(n >= 0 && bins >= 1 && std::isfinite(lo) && std::isfinite(hi) &&
                                     lo < hi,
                                 "histc_call: bad size, bins or range");
                     auto d = std::make_shared<trn_histc_desc>();
                     d->dtype = (trn_dtype)dt;
                     d->n = n;
                     d->bins = bins;
                     d->lo = lo;
                     d->hi = hi;
                     int call;
                     TRN_CHECK(trn_graph_extern_call(g.g, 1, &in, launch_histc, d.get(), &call));
                     g.ctx.push_back(std::move(d));
                     return call;
                 });
             })
        .def("extern_result",
             [](Graph &g, int call, int dt, const I64s &sizes, const I64s &strides) {
                 return guarded([&] {
                     int id;
                     TORCH_CHECK(sizes.size() == strides.size(),
                                 "extern_result: sizes and strides differ in length");
                     TRN_CHECK(trn_graph_extern_result(g.g, call, (trn_dtype)dt, (int)sizes.size(),
                                                       sizes.data(), strides.data(), &id));
                     return id;
                 });
             })
        .def("host_result",
             [](Graph &g, int step, int dt, const I64s &sizes, const I64s &strides) {
                 return guarded([&] {
                     int id;
                     TRN_CHECK(trn_graph_host_result(g.g, step, (trn_dtype)dt, (int)sizes.size(),
                                                     sizes.data(), strides.data(), &id));
                     return id;
                 });
             })
        .def("export",
             [](Graph &g, int node, const std::optional<I64s> &strides) {
                 guarded([&] { TRN_CHECK(trn_graph_export(g.g, node, opt_ptr(strides))); });
             })
        .def("store",
             [](Graph &g, int input, int src) {
                 return guarded([&] {
                     int id;
                     TRN_CHECK(trn_graph_store(g.g, input, src, &id));
                     return id;
                 });
             })
        .def("set_layout",
             [](Graph &g, int node, const I64s &strides) {
                 guarded([&] { TRN_CHECK(trn_graph_set_layout(g.g, node, strides.data())); });
             })
        .def("set_label",
             [](Graph &g, int node, const std::string &label) {
                 guarded([&] { TRN_CHECK(trn_graph_set_label(g.g, node, label.c_str())); });
             })
        .def("node_count", [](Graph &g) { return trn_graph_node_count(g.g); })
        .def("compile",
             [](Graph &g, const std::string &include_dir,
                const std::optional<std::string> &cache_dir,
                const std::optional<std::string> &debug_dir, const std::string &name, int opt_level,
                const std::string &cc_flags, double lock_timeout_s, int64_t cache_max_bytes) {
                 return guarded([&] {
                     auto prog = std::make_shared<Program>();
                     prog->nki = g.nki;
                     prog->gmm = g.gmm;
                     prog->ctx = g.ctx;
                     trn_compile_options o{include_dir.c_str(),
                                           cache_dir ? cache_dir->c_str() : nullptr,
                                           debug_dir ? debug_dir->c_str() : nullptr,
                                           name.c_str(),
                                           opt_level,
                                           cc_flags.c_str(),
                                           lock_timeout_s,
                                           cache_max_bytes};
                     trn_status st;
                     {
                         py::gil_scoped_release nogil;
                         st = trn_program_compile(g.g, &o, &prog->p);
                     }
                     TRN_CHECK(st);
                     return prog;
                 });
             });

    py::class_<Program, std::shared_ptr<Program>>(m, "_CompiledProgram")
        .def_property_readonly("workspace_size",
                               [](Program &p) { return trn_program_workspace_size(p.p); })
        .def_property_readonly("kernel_count",
                               [](Program &p) { return trn_program_kernel_count(p.p); })
        .def_property_readonly("extern_count",
                               [](Program &p) { return trn_program_extern_count(p.p); })
        .def_property_readonly("from_cache",
                               [](Program &p) { return trn_program_from_cache(p.p) != 0; })
        .def_property_readonly("compile_seconds",
                               [](Program &p) { return trn_program_compile_seconds(p.p); })
        .def_property_readonly("source",
                               [](Program &p) { return std::string(trn_program_source(p.p)); })
        .def_property_readonly("cache_key",
                               [](Program &p) { return std::string(trn_program_cache_key(p.p)); })
        .def_property_readonly("object",
                               [](Program &p) {
                                   size_t n = 0;
                                   const void *bytes = trn_program_object(p.p, &n);
                                   return py::bytes(static_cast<const char *>(bytes),
                                                    bytes ? n : 0);
                               })
        .def_property_readonly("checks_indices",
                               [](Program &p) { return trn_program_checks_indices(p.p) != 0; });

    py::class_<Run, std::shared_ptr<Run>>(m, "_CompiledRun")
        .def(py::init(
            [](std::shared_ptr<Program> prog, const std::optional<at::Tensor> &ws, int device) {
                return guarded([&] {
                    auto run = std::make_shared<Run>();
                    run->prog = prog;
                    run->device = device;
                    TRN_CHECK(trn_run_create(prog->p, ws ? tensor_ptr(*ws) : nullptr, &run->r));
                    return run;
                });
            }))
        .def("set",
             [](Run &r, int node, const at::Tensor &t) {
                 guarded([&] { TRN_CHECK(trn_run_set_buffer(r.r, node, tensor_ptr(t))); });
             })
        .def("set_many",
             [](Run &r, const std::vector<int> &nodes, const std::vector<at::Tensor> &ts) {
                 guarded([&] {
                     TORCH_CHECK(nodes.size() == ts.size(), "set_many: lengths differ");
                     for (size_t i = 0; i < nodes.size(); i++)
                         TRN_CHECK(trn_run_set_buffer(r.r, nodes[i], tensor_ptr(ts[i])));
                 });
             })
        .def("cont",
             [](Run &r) {
                 return guarded([&] {
                     int host = -1;
                     trn_stream *s = current_trn_stream(static_cast<c10::DeviceIndex>(r.device));
                     const trn_status st = trn_run_continue(r.r, s, &host);
                     if (st != TRN_SUCCESS) check_indices(*r.prog, s, st);
                     return host;
                 });
             })
        .def("finish", [](Run &r) {
            guarded([&] {
                trn_run *run = r.r;
                r.r = nullptr;
                trn_stream *s = current_trn_stream(static_cast<c10::DeviceIndex>(r.device));
                TRN_CHECK(trn_run_finish(run, s));
                check_indices(*r.prog, s);
            });
        });

    // A whole run of a program without host steps in one call: allocates the
    // exported buffers and the workspace, launches every step and returns the
    // exported tensors (in the order given at construction). The specs are
    // fixed per compiled graph, so a call converts only the input tensors.
    py::class_<Call, std::shared_ptr<Call>>(m, "_CompiledCall")
        .def(py::init([](std::shared_ptr<Program> prog, std::vector<int> in_args,
                         std::vector<int> in_nodes, std::vector<int> ex_nodes,
                         std::vector<I64s> ex_sizes, std::vector<I64s> ex_strides,
                         std::vector<py::object> ex_dtypes, int64_t ws_size, int device,
                         const py::list &plan) {
            return guarded([&] {
                auto c = std::make_shared<Call>();
                TORCH_CHECK(
                    ex_nodes.size() == ex_sizes.size() && ex_sizes.size() == ex_strides.size() &&
                        ex_strides.size() == ex_dtypes.size() && in_args.size() == in_nodes.size(),
                    "_CompiledCall: spec lengths differ");
                c->prog = std::move(prog);
                c->in_args = std::move(in_args);
                c->in_nodes = std::move(in_nodes);
                c->ex_nodes = std::move(ex_nodes);
                c->ex_sizes = std::move(ex_sizes);
                c->ex_strides = std::move(ex_strides);
                for (auto &d : ex_dtypes) {
                    TORCH_CHECK(THPDtype_Check(d.ptr()),
                                "_CompiledCall: export dtypes must be torch dtypes");
                    c->ex_dtypes.push_back(reinterpret_cast<THPDtype *>(d.ptr())->scalar_type);
                }
                c->ws_size = ws_size;
                c->device = device;
                // plan: per output None or (kind, index or value, None or (sizes, strides, offset)),
                // kind "ex" (export), "in" (input node), "arg" (argument), "const" (value).
                for (const auto &item : plan) {
                    OutputSource o;
                    if (!item.is_none()) {
                        auto t = item.cast<py::tuple>();
                        TORCH_CHECK(t.size() == 3,
                                    "_CompiledCall: a plan entry is (kind, index, view)");
                        const auto kind = t[0].cast<std::string>();
                        if (kind == "const") {
                            o.kind = OutputSource::CONST;
                            o.value = py::reinterpret_borrow<py::object>(t[1]);
                        } else {
                            o.kind = kind == "ex"    ? OutputSource::EXPORT
                                     : kind == "in"  ? OutputSource::INPUT
                                     : kind == "arg" ? OutputSource::ARG
                                                     : OutputSource::NONE;
                            TORCH_CHECK(o.kind != OutputSource::NONE,
                                        "_CompiledCall: unknown output kind ", kind);
                            o.index = t[1].cast<int>();
                            const size_t limit = o.kind == OutputSource::EXPORT ? c->ex_nodes.size()
                                                 : o.kind == OutputSource::INPUT
                                                     ? c->in_nodes.size()
                                                     : SIZE_MAX;
                            TORCH_CHECK(o.index >= 0 && static_cast<size_t>(o.index) < limit,
                                        "_CompiledCall: output index ", o.index, " out of range");
                        }
                        if (!t[2].is_none() && o.kind != OutputSource::CONST &&
                            o.kind != OutputSource::ARG) {
                            auto v = t[2].cast<py::tuple>();
                            o.view = true;
                            o.sizes = v[0].cast<I64s>();
                            o.strides = v[1].cast<I64s>();
                            o.offset = v[2].cast<int64_t>();
                        }
                    }
                    c->outputs.push_back(std::move(o));
                }
                return c;
            });
        }))
        .def("__call__",
             [](Call &c, const py::list &args) { return guarded([&] { return c.call(args); }); })
        .def("run", [](Call &c, const std::vector<at::Tensor> &inputs) {
            return guarded([&] { return c.run(inputs); });
        });

    m.def("_ew_op_ids", [] {
        py::dict d;
        for (int i = 0; i < TRN_EW_OP_COUNT; i++) d[py::str(trn_ew_op_name((trn_ew_op)i))] = i;
        return d;
    });
    m.def("_compiler_version", [] { return std::string(TRN_COMPILER_VERSION); });
    // The disk cache's trust checks (libtrn decides; Python only reports):
    // "" when `dir` may be used, else why not.
    m.def("_compile_cache_check_dir", [](const std::string &dir) {
        return trn_compile_cache_check_dir(dir.c_str()) == TRN_SUCCESS
                   ? std::string()
                   : std::string(trn_last_error());
    });
    m.def("_compile_cache_store", [](const std::string &dir, const std::string &key,
                                     const py::bytes &data) {
        const std::string bytes = data;
        TRN_CHECK(trn_compile_cache_store(dir.c_str(), key.c_str(), bytes.data(), bytes.size()));
    });
    m.def("_compile_cache_evict",
          [](const std::string &dir, int64_t max_bytes, const std::optional<std::string> &keep) {
              int64_t removed = 0;
              TRN_CHECK(trn_compile_cache_evict(dir.c_str(), max_bytes,
                                                keep ? keep->c_str() : nullptr, &removed));
              return removed;
          });
    m.def("_compile_cache_mac", [](const std::string &label, const py::bytes &data) {
        const std::string bytes = data;
        char out[65];
        TRN_CHECK(trn_compile_cache_mac(label.c_str(), bytes.data(), bytes.size(), out));
        return std::string(out);
    });
}

BindingsRegistrar reg_compiler(register_compiler);

}  // namespace
}  // namespace neuron
