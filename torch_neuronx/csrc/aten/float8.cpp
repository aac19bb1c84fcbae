// aten/float8.cpp - see float8.h: float8 abs, eq/ne and amax/amin through
// float32 on the device, each recorded as the op it implements.
#include "aten/float8.h"

#include <ATen/native/Resize.h>

#include "observe/op_tracking.h"

namespace neuron {

bool is_float8(at::ScalarType t) {
    switch (t) {
    case at::kFloat8_e4m3fn:
    case at::kFloat8_e5m2:
    case at::kFloat8_e4m3fnuz:
    case at::kFloat8_e5m2fnuz:
    case at::kFloat8_e8m0fnu: return true;
    default: return false;
    }
}

namespace {
bool on_neuron(const at::Tensor &t) { return t.device().type() == c10::DeviceType::PrivateUse1; }
}  // namespace

// PyTorch CPU's float8 abs is `x < 0 ? -x : x`: -0 and NaNs (also a
// negative NaN) stay as they are, and a negative value loses its sign bit.
// So: compare the widened values, clear the sign bit of the bytes where
// negative.
bool float8_abs_out(const at::Tensor &a, at::Tensor &result) {
    const at::ScalarType t = a.scalar_type();
    if (!is_float8(t) || t == at::kFloat8_e8m0fnu || result.scalar_type() != t || !on_neuron(a))
        return false;
    at::Tensor negative = a.to(at::kFloat).lt(0);
    at::Tensor bytes = a.contiguous().view(at::kByte);
    at::Tensor cleared = at::bitwise_and(bytes, 0x7F);
    at::Tensor r = at::where(negative, cleared, bytes).view(t);
    at::native::resize_output(result, a.sizes());
    result.copy_(r);
    tracking::record_executed("aten::abs");
    return true;
}

bool float8_compare(bool equal, at::Tensor &out, const at::Tensor &a, const at::Tensor &b) {
    const at::ScalarType t = a.scalar_type();
    if (!is_float8(t) || b.scalar_type() != t || !on_neuron(a) || !on_neuron(b)) return false;
    if (out.defined() && out.scalar_type() != at::kBool) return false;
    at::Tensor wa = a.to(at::kFloat), wb = b.to(at::kFloat);
    if (out.defined()) {
        if (equal)
            at::eq_out(out, wa, wb);
        else
            at::ne_out(out, wa, wb);
    } else {
        out = equal ? at::eq(wa, wb) : at::ne(wa, wb);
    }
    tracking::record_executed(equal ? "aten::eq" : "aten::ne");
    return true;
}

bool float8_extreme(bool is_max, const at::Tensor &self, at::IntArrayRef dim, bool keepdim,
                    at::Tensor &result) {
    if (!is_float8(self.scalar_type()) || !on_neuron(self)) return false;
    at::Tensor wide = self.to(at::kFloat);
    at::Tensor r = is_max ? at::amax(wide, dim, keepdim) : at::amin(wide, dim, keepdim);
    if (!result.defined())
        result = at::empty(r.sizes(), self.options());
    else
        at::native::resize_output(result, r.sizes());
    result.copy_(r);
    tracking::record_executed(is_max ? "aten::amax" : "aten::amin");
    return true;
}

}  // namespace neuron
