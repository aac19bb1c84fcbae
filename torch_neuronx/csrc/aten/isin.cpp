// aten/isin.cpp - torch.isin on neuron (aten::isin, all four overloads that
// reach the backend: Tensor_Tensor, Tensor_Scalar, Scalar_Tensor, and the
// Tensor_Tensor out= form).
//
// PyTorch decides errors and shapes: each call first runs isin's structured
// meta function (it rejects bool/complex inputs as CPU does). Both inputs are then promoted to their common dtype and made
// contiguous here, and libtrn (trn/isin.h) does the membership test.
// assume_unique only lets CPU pick a faster algorithm; the answer is the
// same, so it is ignored.
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/isin_meta.h>
#include <torch/library.h>

#include "aten/meta.h"
#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/isin.h"

namespace neuron {
namespace {

using at::Scalar;
using at::Tensor;

// out (bool, the shape of elements) = isin(elements, test); both already on
// the same neuron device.
void run_isin(const Tensor &elements, const Tensor &test, bool invert, const Tensor &out) {
    TORCH_CHECK(elements.device() == test.device(),
                "isin: elements and test_elements must be on the same device, got ",
                elements.device(), " and ", test.device());
    const auto common = at::result_type(elements, test);
    auto dt = native_dtype(common);
    TORCH_CHECK(dt && trn_isin_supports(*dt), "isin: dtype ", common,
                " is not supported on neuron");
    Tensor el = elements.to(common).contiguous();
    Tensor te = test.to(common).contiguous();
    const bool direct = out.is_contiguous() && !out_aliases(out, el, te);
    Tensor dst = direct ? out : at::empty(out.sizes(), out.options());
    trn_isin_desc d{};
    d.dtype = *dt;
    d.invert = invert;
    d.n = el.numel();
    d.m = te.numel();
    d.elements = el.const_data_ptr();
    d.test_elements = te.const_data_ptr();
    d.out = static_cast<uint8_t *>(dst.data_ptr());
    TRN_CHECK(trn_isin_launch(current_trn_stream(out.device().index()), &d));
    if (!dst.is_same(out)) out.copy_(dst);
    tracking::record_executed("aten::isin");
}

Tensor isin_tt(const Tensor &elements, const Tensor &test, bool assume_unique, bool invert) {
    // PyTorch's structured meta function, called directly: at::isin on meta
    // tensors reaches a Python meta registration (17 of isin's 22 us, once
    // per generated token in generate()'s EOS test).
    MetaShape<at::meta::structured_isin_Tensor_Tensor> m;
    m.meta(elements, test, assume_unique, invert);
    Tensor out = m.output(0);
    run_isin(elements, test, invert, out);
    return out;
}

Tensor &isin_tt_out(const Tensor &elements, const Tensor &test, bool assume_unique, bool invert,
                    Tensor &out) {
    // PyTorch's meta function with out: dtype, device (the generated out=
    // wrapper's wording), resize; then TensorIterator's overlap rule.
    MetaShape<at::meta::structured_isin_Tensor_Tensor> meta(&out);
    meta.meta(elements, test, assume_unique, invert);
    check_out_overlap(out, elements, test);
    run_isin(elements, test, invert, out);
    return out;
}

Tensor isin_ts(const Tensor &elements, const Scalar &test, bool assume_unique, bool invert) {
    Tensor t = at::scalar_tensor(test, elements.options().dtype(at::result_type(elements, test)));
    return isin_tt(elements, t, assume_unique, invert);
}

Tensor isin_st(const Scalar &element, const Tensor &test, bool assume_unique, bool invert) {
    Tensor e = at::scalar_tensor(element, test.options().dtype(at::result_type(test, element)));
    return isin_tt(e, test, assume_unique, invert);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("isin.Tensor_Tensor", TORCH_FN(isin_tt));
    m.impl("isin.Tensor_Tensor_out", TORCH_FN(isin_tt_out));
    m.impl("isin.Tensor_Scalar", TORCH_FN(isin_ts));
    m.impl("isin.Scalar_Tensor", TORCH_FN(isin_st));
}

}  // namespace neuron
