// aten/float8.h - the float8 dtypes' arithmetic on neuron, for the ops
// PyTorch CPU computes on them (abs, eq/ne, and amax/amin, which CPU lacks).
//
// Owner: aten/float8.cpp. The conversions themselves are libtrn's copy
// kernel (trn/convert.h); these ops widen to float32 on the device, run the
// float32 kernel and narrow back, which is exact (the extremes of 8-bit
// values are 8-bit values; comparisons of the widened values are the
// comparisons PyTorch makes); abs clears sign bits where the widened value
// is negative, which is what PyTorch's `x < 0 ? -x : x` gives. The element-wise and reduction
// files call in here before they would fall back.
#pragma once

#include <ATen/ATen.h>

namespace neuron {

bool is_float8(at::ScalarType t);

// abs.out for a float8 input (not e8m0fnu, which PyTorch CPU rejects);
// false when the call is not one it handles (the caller goes on).
bool float8_abs_out(const at::Tensor &a, at::Tensor &result);

// eq/ne of two float8 tensors of one dtype into a new or given bool tensor;
// false when not handled (mixed dtypes promote, or error, as on CPU).
bool float8_compare(bool equal, at::Tensor &out, const at::Tensor &a, const at::Tensor &b);

// amax/amin of a float8 tensor; nullopt-like false when not handled.
bool float8_extreme(bool is_max, const at::Tensor &self, at::IntArrayRef dim, bool keepdim,
                    at::Tensor &result);

}  // namespace neuron
