// aten/histc.cpp - torch.histc on neuron (aten::histc and histc.out) through
// libtrn's histogram kernel (trn/histc.h).
//
// The checks and the range rule are CPU's (its messages too): bins > 0;
// min == max takes the data's extrema, equal extrema widen by 1 each way;
// the range must be finite and ordered. The range is taken in the input's
// dtype, as CPU does. Integer inputs, which CPU rejects and CUDA counts
// (Hugging Face's grouped-experts path calls histc on expert ids), are
// counted with CUDA's rule; the result has the input's dtype.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>

#include "observe/op_tracking.h"
#include "runtime/device.h"
#include "trn/histc.h"

namespace neuron {
namespace {

using at::Scalar;
using at::Tensor;

// A Scalar as the input's dtype would hold it, then as double.
double in_dtype(const Scalar &s, at::ScalarType t) {
    return at::scalar_tensor(s, at::dtype(at::kDouble)).to(t).item<double>();
}

void run_histc(const Tensor &self, int64_t bins, const Scalar &min, const Scalar &max,
               Tensor &out) {
    TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins,
                " for dimension 0");
    auto dt = native_dtype(self.scalar_type());
    TORCH_CHECK(dt && trn_histc_supports(*dt), "torch.histc: dtype ", self.scalar_type(),
                " is not supported on neuron");
    TORCH_CHECK(out.scalar_type() == self.scalar_type(),
                "torch.histogram: input tensor and hist tensor should have the same dtype, but got "
                "input ",
                self.scalar_type(), " and hist ", out.scalar_type());
    TORCH_CHECK(out.device() == self.device(), "torch.histc: out is on ", out.device(),
                ", input on ", self.device());
    const at::ScalarType st = self.scalar_type();
    double lo = in_dtype(min, st), hi = in_dtype(max, st);
    if (lo == hi && self.numel() > 0) {  // an empty input keeps the given range
        lo = self.min().item<double>();
        hi = self.max().item<double>();
    }
    if (lo == hi) {
        lo -= 1;
        hi += 1;
    }
    TORCH_CHECK(!(std::isinf(lo) || std::isinf(hi) || std::isnan(lo) || std::isnan(hi)),
                "torch.histc: range of [", lo, ", ", hi, "] is not finite");
    TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
    at::native::resize_output(out, {bins});
    const Tensor in = self.contiguous();
    const bool direct = out.is_contiguous();
    Tensor dst = direct ? out : at::empty({bins}, out.options());
    trn_histc_desc d{};
    d.dtype = *dt;
    d.n = in.numel();
    d.bins = bins;
    d.lo = lo;
    d.hi = hi;
    d.input = in.const_data_ptr();
    d.out = dst.data_ptr();
    TRN_CHECK(trn_histc_launch(current_trn_stream(self.device().index()), &d));
    if (!direct) out.copy_(dst);
    tracking::record_executed("aten::histc");
}

Tensor histc(const Tensor &self, int64_t bins, const Scalar &min, const Scalar &max) {
    Tensor out = at::empty({0}, self.options());
    run_histc(self, bins, min, max, out);
    return out;
}

Tensor &histc_out(const Tensor &self, int64_t bins, const Scalar &min, const Scalar &max,
                  Tensor &out) {
    run_histc(self, bins, min, max, out);
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("histc", TORCH_FN(histc));
    m.impl("histc.out", TORCH_FN(histc_out));
}

}  // namespace neuron
