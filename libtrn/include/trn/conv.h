// trn/conv.h - 1-d/2-d/3-d convolution: forward, backward data and backward
// weights (+ bias gradient), with groups, stride, padding and dilation.
//
// Owns: the convolution kernels (libtrn/src/kernels/blas/conv.c), run by oneDNN.
// The C++ layer maps aten::convolution_overrideable and
// convolution_backward_overrideable onto these (non-transposed only).
//
// One descriptor serves all three directions; the tensor slots keep their
// forward names and their role depends on the launch:
//              reads                          writes
//   forward    input, weight, bias (if set)   output
//   bwd data   output (= grad_output), weight input  (= grad_input)
//   bwd wts    input, output (= grad_output)  weight (= grad_weight),
//                                             bias (= grad_bias, if set)
// Layout: strides are in ELEMENTS, any values (NCW/NCHW/NCDHW order of dims,
// so channels-last tensors are described by their strides, no copy). oneDNN
// picks its preferred blocked layouts internally and reorders to and from
// them. Weight dims are (c_out, c_in / groups, kernel...), PyTorch's.
// Padding is symmetric (PyTorch's `padding`); dilation is PyTorch's (1 = none).
//
// Compute: float32; float16 is converted to float32 by the reorders and
// rounded once on store. bfloat16 runs natively (bfloat16 products summed in
// float32, rounded once on store) where trn_matmul_bf16_native() is true
// (trn/blas.h: the CPU has AVX512-BF16 and the switch is on) and oneDNN has an
// optimized kernel for the geometry; otherwise it is staged as float16 is.
// Other dtypes: TRN_ERROR_UNSUPPORTED.
#ifndef TRN_CONV_H
#define TRN_CONV_H

#include <stdbool.h>
#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_conv_desc {
    trn_dtype dtype;                             // of every tensor
    int spatial;                                 // 1, 2 or 3
    int64_t n, c_in, c_out, groups;              // groups divides c_in and c_out
    int64_t in_size[3], out_size[3], kernel[3];  // first `spatial` entries
    int64_t stride[3], padding[3], dilation[3];
    void *input;
    int64_t input_strides[5];  // n, c_in, in_size...
    void *weight;
    int64_t weight_strides[5];  // c_out, c_in / groups, kernel...
    void *bias;                 // c_out elements, or NULL
    int64_t bias_stride;
    void *output;
    int64_t output_strides[5];  // n, c_out, out_size...
} trn_conv_desc;

bool trn_conv_supports(trn_dtype dtype);

// Validate the descriptor (shapes must agree: out_size is PyTorch's output
// size for in_size, kernel, stride, padding, dilation) and enqueue the work.
trn_status trn_conv_forward_launch(trn_stream *stream, const trn_conv_desc *desc);
trn_status trn_conv_backward_data_launch(trn_stream *stream, const trn_conv_desc *desc);
trn_status trn_conv_backward_weights_launch(trn_stream *stream, const trn_conv_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
