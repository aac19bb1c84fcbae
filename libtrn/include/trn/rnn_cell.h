// trn/rnn_cell.h - fused LSTM and GRU cell kernels (the pointwise part of one
// recurrent step) and their backward.
//
// Owned by the recurrent family (libtrn/src/kernels/nn/rnn_cell.c). The C++
// layer (torch_neuronx/csrc/aten/rnn_cell.cpp) runs the two matrix products
// of a step (x W_ih^T and h W_hh^T, no bias) with the BLAS kernels and hands
// their results here as `input_gates` / `hidden_gates`, with the biases
// separate: this is the contract of PyTorch's _thnn_fused_lstm_cell /
// _thnn_fused_gru_cell. All operands are contiguous, row-major, one row per
// batch item.
//
// Gate order follows PyTorch: LSTM gates are i, f, g, o (each `hidden` wide);
// GRU gates are r, z, n. Dtypes: F16, BF16, F32 or F64, every operand the
// same; arithmetic is float32 for 16-bit and float32 data and double for
// float64 (bias gradients, sums over the batch, are accumulated in double).
#ifndef TRN_RNN_CELL_H
#define TRN_RNN_CELL_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_lstm_cell_desc {
    trn_dtype dtype;
    int64_t batch, hidden;
    const void *input_gates, *hidden_gates;  // [batch, 4 hidden]
    const void *input_bias, *hidden_bias;    // [4 hidden] each, or NULL (0)
    const void *cx;                          // [batch, hidden]
    void *hy, *cy;                           // [batch, hidden]
    void *workspace;                         // [batch, 4 hidden]
} trn_lstm_cell_desc;

// gates = input_gates + hidden_gates + input_bias + hidden_bias;
// i, f, o = sigmoid(gates i, f, o), g = tanh(gates g); cy = f cx + i g;
// hy = o tanh(cy). The workspace keeps the activated gates i, f, g, o per
// row (the layout _thnn_fused_lstm_cell_backward_impl reads).
trn_status trn_lstm_cell_launch(trn_stream *stream, const trn_lstm_cell_desc *desc);

typedef struct trn_lstm_cell_backward_desc {
    trn_dtype dtype;
    int64_t batch, hidden;
    const void *grad_hy, *grad_cy;  // [batch, hidden] each, or NULL (0)
    const void *cx, *cy;            // [batch, hidden]
    const void *workspace;          // [batch, 4 hidden] from the forward
    void *grad_gates;               // [batch, 4 hidden]: d loss / d gates
    void *grad_cx;                  // [batch, hidden]
    void *grad_bias;                // [4 hidden] or NULL: grad_gates summed over the batch
} trn_lstm_cell_backward_desc;

trn_status trn_lstm_cell_backward_launch(trn_stream *stream,
                                         const trn_lstm_cell_backward_desc *desc);

typedef struct trn_gru_cell_desc {
    trn_dtype dtype;
    int64_t batch, hidden;
    const void *input_gates, *hidden_gates;  // [batch, 3 hidden]
    const void *input_bias, *hidden_bias;    // [3 hidden] each, or NULL (0)
    const void *hx;                          // [batch, hidden]
    void *hy;                                // [batch, hidden]
    void *workspace;                         // [batch, 5 hidden]
} trn_gru_cell_desc;

// r = sigmoid(i_r + h_r + biases), z = sigmoid(i_z + h_z + biases),
// n = tanh(i_n + b_in + r (h_n + b_hn)), hy = n + z (hx - n). The workspace
// keeps r, z, n, hx and h_n + b_hn per row (what
// _thnn_fused_gru_cell_backward reads).
trn_status trn_gru_cell_launch(trn_stream *stream, const trn_gru_cell_desc *desc);

typedef struct trn_gru_cell_backward_desc {
    trn_dtype dtype;
    int64_t batch, hidden;
    const void *grad_hy;                         // [batch, hidden]
    const void *workspace;                       // [batch, 5 hidden] from the forward
    void *grad_input_gates, *grad_hidden_gates;  // [batch, 3 hidden]
    void *grad_hx;                               // [batch, hidden]
    void *grad_input_bias, *grad_hidden_bias;    // [3 hidden] each, or NULL: the gate
                                                 // gradients summed over the batch
} trn_gru_cell_backward_desc;

trn_status trn_gru_cell_backward_launch(trn_stream *stream, const trn_gru_cell_backward_desc *desc);

// Whether the dtype is supported; never sets an error.
int trn_rnn_cell_supports(trn_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
