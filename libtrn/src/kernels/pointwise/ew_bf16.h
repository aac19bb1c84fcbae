// ew_bf16.h - bfloat16 elementwise ops computed on the 16-bit data itself
// (autocast's activations: ResNet's relu / add, Llama's mul / silu), for
// elementwise.c. Internal to libtrn.
#ifndef TRN_EW_BF16_H
#define TRN_EW_BF16_H

#include "trn/elementwise.h"
#include "trn/scalar.h"

// An elementwise block function over n bfloat16 values (o, a, b as uint16_t).
typedef void (*trn__ew_bf16_block)(int n, void *o, const void *a, const void *b, const void *c,
                                   const trn_sc_ctx *ctx);

// The block function computing `op` straight on bfloat16 operands and result,
// bit for bit what the float path gives (widen, the trn/scalar.h function,
// trn_float_to_bf16), or NULL where there is none: relu, threshold_backward,
// add / sub with alpha +-1 (`alpha`: the op's params[0]), mul, div, silu,
// sigmoid, tanh, exp, the erf GELU, and silu / sigmoid / tanh / GELU backward.
trn__ew_bf16_block trn__ew_bf16_block_of(trn_ew_op op, double alpha);

#endif
