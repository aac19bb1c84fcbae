// trn/conv_backward.h - the input and weight gradients of one convolution in
// one launch.
//
// Owns: trn_conv_backward_launch (libtrn/src/kernels/blas/conv.c). Kept out
// of trn.h so that only its caller (torch_neuronx/csrc/aten/conv.cpp)
// depends on it.
//
// `data` is what trn_conv_backward_data_launch takes (writes input = the
// input gradient), `weights` what trn_conv_backward_weights_launch takes
// (writes weight = the weight gradient, bias = the bias gradient if set);
// both describe the same convolution and the same output gradient (output
// pointer and strides). The results are those of the two launches; where
// both convolutions read the output gradient in oneDNN's nChw16c layout
// (2-d float32 or bfloat16, channel counts multiples of 16), it is moved
// there once instead of once per convolution (and, for a float32 weight
// gradient in batch blocks, once per block).
#ifndef TRN_CONV_BACKWARD_H
#define TRN_CONV_BACKWARD_H

#include "trn/conv.h"

#ifdef __cplusplus
extern "C" {
#endif

trn_status trn_conv_backward_launch(trn_stream *stream, const trn_conv_desc *data,
                                    const trn_conv_desc *weights);

#ifdef __cplusplus
}
#endif

#endif
