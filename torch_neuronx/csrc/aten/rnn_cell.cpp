// aten/rnn_cell.cpp - the fused recurrent cells PyTorch selects for a
// PrivateUse1 device (nn.LSTM / nn.GRU / nn.LSTMCell / nn.GRUCell call
// _thnn_fused_lstm_cell / _thnn_fused_gru_cell after two matmuls per step):
// forward, _thnn_fused_lstm_cell_backward_impl (autograd's
// _thnn_fused_lstm_cell_backward is a composite over it) and
// _thnn_fused_gru_cell_backward, run by libtrn's rnn_cell kernels
// (trn/rnn_cell.h). nn.RNN (tanh / relu) needs no fused op.
//
// Checks and messages follow PyTorch's fused-cell kernels (checkSizes,
// check*BackwardSizes); operands are made contiguous (a native copy). The
// CPU has no kernel for these ops, so there is no fallback: a dtype libtrn
// lacks is an error, as it is on CUDA.
#include <ATen/Functions.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/rnn_cell.h"
#include "runtime/trn_check.h"

namespace neuron {
namespace {

using at::Tensor;

Tensor opt(const std::optional<Tensor> &t) { return t.value_or(Tensor()); }

void *ptr_or_null(const Tensor &t) { return t.defined() ? t.data_ptr() : nullptr; }

Tensor contig(const Tensor &t) { return t.defined() ? t.contiguous() : t; }

trn_dtype cell_dtype(const char *op, const Tensor &t) {
    auto d = native_dtype(t.scalar_type());
    TORCH_CHECK(d && trn_rnn_cell_supports(*d), op, " not implemented for '",
                c10::toString(t.scalar_type()),
                "' (neuron supports float16, bfloat16, float32 "
                "and float64)");
    return *d;
}

// Every defined operand: on input_gates' neuron device, with its dtype.
void check_same(const char *op, const Tensor &ref, std::initializer_list<Tensor> ts) {
    for (const Tensor &t : ts) {
        if (!t.defined()) continue;
        TORCH_CHECK(t.device() == ref.device(), op, ": expected all tensors on ", ref.device(),
                    ", but found one on ", t.device());
        TORCH_CHECK(t.scalar_type() == ref.scalar_type(), op,
                    ": expected all tensors to have "
                    "dtype ",
                    ref.scalar_type(), ", but found ", t.scalar_type());
    }
}

// PyTorch's checkSizes for the fused forward: gates [batch, factor hidden]
// (input and hidden alike), biases [factor hidden] (both or neither),
// prev_hidden [batch, hidden].
void check_forward_sizes(const char *op, const Tensor &ig, const Tensor &hg, const Tensor &bi,
                         const Tensor &bh, int64_t factor, const Tensor &prev) {
    TORCH_CHECK(ig.dim() == 2, op, ": expected input_gates to be 2-dimensional, got ", ig.dim());
    TORCH_CHECK(hg.sizes().equals(ig.sizes()), op, ": hidden_gates has size ", hg.sizes(),
                " but input_gates has size ", ig.sizes());
    TORCH_CHECK(bi.defined() == bh.defined(), op,
                ": input_bias and hidden_bias must both be given or both be None");
    if (bi.defined()) {
        TORCH_CHECK(bi.dim() == 1 && bi.size(0) == ig.size(1), op, ": input_bias has size ",
                    bi.sizes(), ", expected [", ig.size(1), "]");
        TORCH_CHECK(bh.sizes().equals(bi.sizes()), op, ": hidden_bias has size ", bh.sizes(),
                    ", expected [", ig.size(1), "]");
    }
    TORCH_CHECK(ig.size(1) % factor == 0, op, ": input_gates' size 1 (", ig.size(1),
                ") is not a multiple of ", factor);
    TORCH_CHECK(prev.dim() == 2 && prev.size(0) == ig.size(0) &&
                    prev.size(1) * factor == ig.size(1),
                op, ": prev_hidden has size ", prev.sizes(), ", expected [", ig.size(0), ", ",
                ig.size(1) / factor, "]");
}

std::tuple<Tensor, Tensor, Tensor> lstm_cell(const Tensor &input_gates, const Tensor &hidden_gates,
                                             const Tensor &cx,
                                             const std::optional<Tensor> &input_bias,
                                             const std::optional<Tensor> &hidden_bias) {
    static const char op[] = "_thnn_fused_lstm_cell";
    const Tensor bi = opt(input_bias), bh = opt(hidden_bias);
    check_same(op, input_gates, {hidden_gates, cx, bi, bh});
    check_forward_sizes(op, input_gates, hidden_gates, bi, bh, 4, cx);
    trn_lstm_cell_desc d{};
    d.dtype = cell_dtype(op, input_gates);
    const Tensor ig = input_gates.contiguous(), hg = hidden_gates.contiguous(), c = cx.contiguous();
    const Tensor bic = contig(bi), bhc = contig(bh);
    Tensor hy = at::empty(cx.sizes(), c.options());
    Tensor cy = at::empty(cx.sizes(), c.options());
    Tensor workspace = at::empty(input_gates.sizes(), ig.options());
    d.batch = cx.size(0);
    d.hidden = cx.size(1);
    d.input_gates = ig.data_ptr();
    d.hidden_gates = hg.data_ptr();
    d.input_bias = ptr_or_null(bic);
    d.hidden_bias = ptr_or_null(bhc);
    d.cx = c.data_ptr();
    d.hy = hy.data_ptr();
    d.cy = cy.data_ptr();
    d.workspace = workspace.data_ptr();
    TRN_CHECK(trn_lstm_cell_launch(current_trn_stream(cx.device().index()), &d));
    tracking::record_executed("aten::_thnn_fused_lstm_cell");
    return {hy, cy, workspace};
}

std::tuple<Tensor, Tensor, Tensor> lstm_cell_backward(const std::optional<Tensor> &grad_hy_opt,
                                                      const std::optional<Tensor> &grad_cy_opt,
                                                      const Tensor &cx, const Tensor &cy,
                                                      const Tensor &workspace, bool has_bias) {
    static const char op[] = "_thnn_fused_lstm_cell_backward_impl";
    const Tensor grad_hy = opt(grad_hy_opt), grad_cy = opt(grad_cy_opt);
    if (!grad_hy.defined() && !grad_cy.defined())
        return {};  // nothing flows back (PyTorch returns undefined gradients too)
    const Tensor &g = grad_hy.defined() ? grad_hy : grad_cy;
    check_same(op, workspace, {grad_hy, grad_cy, cx, cy});
    TORCH_CHECK(g.dim() == 2, op, ": expected the output gradients to be 2-dimensional, got ",
                g.dim());
    for (auto [t, name] :
         {std::pair{grad_hy, "grad_hy"}, {grad_cy, "grad_cy"}, {cx, "cx"}, {cy, "cy"}})
        TORCH_CHECK(!t.defined() || t.sizes().equals(g.sizes()), op, ": ", name, " has size ",
                    t.sizes(), ", expected ", g.sizes());
    TORCH_CHECK(workspace.dim() == 2 && workspace.size(0) == g.size(0) &&
                    workspace.size(1) == 4 * g.size(1),
                op, ": workspace has size ", workspace.sizes(), ", expected [", g.size(0), ", ",
                4 * g.size(1), "]");
    trn_lstm_cell_backward_desc d{};
    d.dtype = cell_dtype(op, workspace);
    const Tensor gh = contig(grad_hy), gc = contig(grad_cy), c = cx.contiguous(),
                 cyc = cy.contiguous(), ws = workspace.contiguous();
    Tensor grad_gates = at::empty(workspace.sizes(), ws.options());
    Tensor grad_cx = at::empty(cx.sizes(), ws.options());
    Tensor grad_bias = has_bias ? at::empty({workspace.size(1)}, ws.options()) : Tensor();
    d.batch = g.size(0);
    d.hidden = g.size(1);
    d.grad_hy = ptr_or_null(gh);
    d.grad_cy = ptr_or_null(gc);
    d.cx = c.data_ptr();
    d.cy = cyc.data_ptr();
    d.workspace = ws.data_ptr();
    d.grad_gates = grad_gates.data_ptr();
    d.grad_cx = grad_cx.data_ptr();
    d.grad_bias = ptr_or_null(grad_bias);
    TRN_CHECK(trn_lstm_cell_backward_launch(current_trn_stream(workspace.device().index()), &d));
    tracking::record_executed("aten::_thnn_fused_lstm_cell_backward_impl");
    return {grad_gates, grad_cx, grad_bias};
}

std::tuple<Tensor, Tensor> gru_cell(const Tensor &input_gates, const Tensor &hidden_gates,
                                    const Tensor &hx, const std::optional<Tensor> &input_bias,
                                    const std::optional<Tensor> &hidden_bias) {
    static const char op[] = "_thnn_fused_gru_cell";
    const Tensor bi = opt(input_bias), bh = opt(hidden_bias);
    check_same(op, input_gates, {hidden_gates, hx, bi, bh});
    check_forward_sizes(op, input_gates, hidden_gates, bi, bh, 3, hx);
    trn_gru_cell_desc d{};
    d.dtype = cell_dtype(op, input_gates);
    const Tensor ig = input_gates.contiguous(), hg = hidden_gates.contiguous(), h = hx.contiguous();
    const Tensor bic = contig(bi), bhc = contig(bh);
    Tensor hy = at::empty(hx.sizes(), h.options());
    Tensor workspace = at::empty({hx.size(0), 5 * hx.size(1)}, h.options());
    d.batch = hx.size(0);
    d.hidden = hx.size(1);
    d.input_gates = ig.data_ptr();
    d.hidden_gates = hg.data_ptr();
    d.input_bias = ptr_or_null(bic);
    d.hidden_bias = ptr_or_null(bhc);
    d.hx = h.data_ptr();
    d.hy = hy.data_ptr();
    d.workspace = workspace.data_ptr();
    TRN_CHECK(trn_gru_cell_launch(current_trn_stream(hx.device().index()), &d));
    tracking::record_executed("aten::_thnn_fused_gru_cell");
    return {hy, workspace};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>
gru_cell_backward(const Tensor &grad_hy, const Tensor &workspace, bool has_bias) {
    static const char op[] = "_thnn_fused_gru_cell_backward";
    check_same(op, workspace, {grad_hy});
    TORCH_CHECK(grad_hy.dim() == 2, op, ": expected grad_hy to be 2-dimensional, got ",
                grad_hy.dim());
    TORCH_CHECK(workspace.dim() == 2 && workspace.size(0) == grad_hy.size(0) &&
                    workspace.size(1) == 5 * grad_hy.size(1),
                op, ": workspace has size ", workspace.sizes(), ", expected [", grad_hy.size(0),
                ", ", 5 * grad_hy.size(1), "]");
    trn_gru_cell_backward_desc d{};
    d.dtype = cell_dtype(op, workspace);
    const Tensor go = grad_hy.contiguous(), ws = workspace.contiguous();
    const int64_t batch = grad_hy.size(0), hidden = grad_hy.size(1);
    Tensor gi = at::empty({batch, 3 * hidden}, ws.options());
    Tensor gh = at::empty({batch, 3 * hidden}, ws.options());
    Tensor ghx = at::empty(grad_hy.sizes(), ws.options());
    Tensor gbi, gbh;
    if (has_bias) {
        gbi = at::empty({3 * hidden}, ws.options());
        gbh = at::empty({3 * hidden}, ws.options());
    }
    d.batch = batch;
    d.hidden = hidden;
    d.grad_hy = go.data_ptr();
    d.workspace = ws.data_ptr();
    d.grad_input_gates = gi.data_ptr();
    d.grad_hidden_gates = gh.data_ptr();
    d.grad_hx = ghx.data_ptr();
    d.grad_input_bias = ptr_or_null(gbi);
    d.grad_hidden_bias = ptr_or_null(gbh);
    TRN_CHECK(trn_gru_cell_backward_launch(current_trn_stream(workspace.device().index()), &d));
    tracking::record_executed("aten::_thnn_fused_gru_cell_backward");
    return {gi, gh, ghx, gbi, gbh};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_thnn_fused_lstm_cell", TORCH_FN(lstm_cell));
    m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstm_cell_backward));
    m.impl("_thnn_fused_gru_cell", TORCH_FN(gru_cell));
    m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gru_cell_backward));
}

}  // namespace
}  // namespace neuron
