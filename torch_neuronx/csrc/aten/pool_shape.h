// aten/pool_shape.h - PyTorch's pooling output-size rule, shared by the 2-d
// (aten/pool.cpp) and 3-d / adaptive (aten/pool3d.cpp) pooling adapters.
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>

namespace neuron {

// PyTorch's pooling_output_shape (floor or ceil mode, last window must start
// inside the input or left padding), with its argument checks.
inline int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil,
                        bool ceil) {
    TORCH_CHECK(stride != 0, "stride should not be zero");
    TORCH_CHECK(pad >= 0, "pad must be non-negative, but got pad: ", pad);
    TORCH_CHECK(pad <= ((k - 1) * dil + 1) / 2,
                "pad should be at most half of effective kernel size, but got pad=", pad,
                ", kernel_size=", k, " and dilation=", dil);
    const int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil ? stride - 1 : 0);
    int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
    if (ceil && (out - 1) * stride >= in + pad) --out;
    return out;
}

}  // namespace neuron
