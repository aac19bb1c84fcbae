// aten/amp.cpp - GradScaler's ops on neuron: _amp_foreach_non_finite_check_
// and_unscale_ and _amp_update_scale_, run by libtrn's amp kernels
// (trn/amp.h). Checks and messages follow ATen's CPU kernels; the scale
// tensors stay on the device and are read by the kernels in stream order,
// so neither op synchronizes.
#include <ATen/Functions.h>
#include <torch/library.h>

#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/amp.h"

namespace neuron {
namespace {

using at::Tensor;

void check_scalar_float(const Tensor &t, const char *name) {
    TORCH_CHECK(t.numel() == 1, name, " must be a 1-element tensor.");
    TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be a float tensor.");
    TORCH_CHECK(t.device().type() == kNeuron, name, " must be a neuron tensor.");
}

void amp_unscale(at::TensorList grads, Tensor &found_inf, const Tensor &inv_scale) {
    check_scalar_float(inv_scale, "inv_scale");
    check_scalar_float(found_inf, "found_inf");
    for (const Tensor &g : grads) {
        TORCH_CHECK(g.device() == found_inf.device(),
                    "scaled_grads, found_inf and inv_scale must be on the same device, got ",
                    g.device(), " and ", found_inf.device());
        TORCH_CHECK(g.layout() == at::kStrided, "One of scaled_grads was not a strided tensor.");
        TORCH_CHECK(at::isFloatingType(g.scalar_type()),
                    "_amp_foreach_non_finite_check_and_unscale_: scaled_grads must be floating ",
                    "point, got ", g.scalar_type());
        auto d = native_dtype(g.scalar_type());
        TORCH_CHECK(d.has_value(), "_amp_foreach_non_finite_check_and_unscale_: dtype ",
                    g.scalar_type(), " is not supported on neuron");
        // A non-contiguous grad is unscaled in a contiguous copy, written back.
        Tensor work = g.is_contiguous() ? g : g.contiguous();
        trn_amp_unscale_desc desc{};
        desc.dtype = *d;
        desc.n = work.numel();
        desc.data = work.data_ptr();
        desc.inv_scale = inv_scale.const_data_ptr<float>();
        desc.found_inf = found_inf.data_ptr<float>();
        TRN_CHECK(trn_amp_unscale_launch(current_trn_stream(g.device().index()), &desc));
        if (!work.is_same(g)) const_cast<Tensor &>(g).copy_(work);
    }
    tracking::record_executed("aten::_amp_foreach_non_finite_check_and_unscale_");
}

Tensor &amp_update_scale(Tensor &scale, Tensor &growth_tracker, const Tensor &found_inf,
                         double growth_factor, double backoff_factor, int64_t growth_interval) {
    TORCH_CHECK(growth_tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
    TORCH_CHECK(growth_tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
    TORCH_CHECK(growth_tracker.device().type() == kNeuron,
                "growth_tracker must be a neuron tensor.");
    check_scalar_float(scale, "current_scale");
    check_scalar_float(found_inf, "found_inf");
    trn_amp_update_scale_desc d{};
    d.scale = scale.data_ptr<float>();
    d.growth_tracker = growth_tracker.data_ptr<int32_t>();
    d.found_inf = found_inf.const_data_ptr<float>();
    d.growth_factor = growth_factor;
    d.backoff_factor = backoff_factor;
    d.growth_interval = growth_interval;
    TRN_CHECK(trn_amp_update_scale_launch(current_trn_stream(scale.device().index()), &d));
    tracking::record_executed("aten::_amp_update_scale_");
    return scale;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_amp_foreach_non_finite_check_and_unscale_", TORCH_FN(amp_unscale));
    m.impl("_amp_update_scale_", TORCH_FN(amp_update_scale));
}

}  // namespace neuron
