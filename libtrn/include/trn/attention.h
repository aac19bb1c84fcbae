// trn/attention.h - fused scaled dot-product attention, forward and backward.
//
// Owned by libtrn/src/kernels/nn/attention.c; the C++ adapter is
// torch_neuronx/csrc/aten/attention.cpp (aten::_scaled_dot_product_fused_
// attention_overrideable and its backward, chosen through PyTorch's
// _fused_sdp_choice stub as CPU chooses its flash kernel).
//
// out[b,h,i,:] = sum_j softmax_j(scale * q[b,h,i,:] . k[b,g(h),j,:] + mask[b,h,i,j])
//                * dropout_ij * v[b,g(h),j,:]
// with g(h) = h / (heads / kv_heads) (grouped-query attention when
// kv_heads < heads). The softmax is computed online over tiles of keys
// (flash-attention style): the [q_len, kv_len] score matrix is never stored,
// so memory is O(tile) per thread whatever the sequence length. The forward
// also writes the row logsumexp, from which the backward recomputes the
// probabilities tile by tile.
//
// Dtypes: q, k, v, out (and dout, dq, dk, dv) are F32, F16 or BF16, all the
// same; arithmetic is float32 and results are rounded once on store. The
// mask is BOOL (false = masked out) or a floating additive bias (F32, F16,
// BF16). logsumexp is float32.
//
// Layout: q/k/v/out/dout are [batch, heads, rows, dim] with any element
// strides for the first three dims and a contiguous last dim. The mask has
// four strides over [batch, heads, q_len, kv_len]; 0 broadcasts. dq/dk/dv and
// dmask are contiguous. is_causal keeps keys j <= i (top-left aligned, as
// PyTorch). A row whose keys are all masked gives 0 (and logsumexp -inf).
//
// Dropout: keep element (b,h,i,j) iff a splitmix64 hash of (seed, its flat
// index) falls below 1 - dropout_p; kept probabilities are scaled by
// 1 / (1 - dropout_p). The backward regenerates the same mask from the seed.
#ifndef TRN_ATTENTION_H
#define TRN_ATTENTION_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_attention_desc {
    trn_dtype dtype;
    int64_t batch, heads, kv_heads, q_len, kv_len, head_dim, v_dim;
    const void *q;
    int64_t q_strides[3];  // batch, head, row (elements)
    const void *k;
    int64_t k_strides[3];
    const void *v;
    int64_t v_strides[3];
    const void *mask;  // NULL: none
    trn_dtype mask_dtype;
    int64_t mask_strides[4];
    void *out;
    int64_t out_strides[3];
    float *lse;  // [batch, heads, q_len], contiguous
    double scale;
    int causal;
    double dropout_p;
    uint64_t seed;
    // Optional (NULL: none), float32, trn_attention_probs_floats() of them:
    // the forward writes the softmax probabilities there and the backward
    // reads them instead of recomputing the scores and their exponentials.
    // Only where the keys fit one tile and without dropout (else the count
    // is 0 and the pointer is ignored); the layout is the kernel's own.
    float *probs;
} trn_attention_desc;

typedef struct trn_attention_backward_desc {
    trn_attention_desc fwd;  // the forward's inputs, out and lse (read only)
    const void *dout;        // [batch, heads, q_len, v_dim]
    int64_t dout_strides[3];
    void *dq, *dk, *dv;  // shapes of q, k, v; NULL: not wanted
    void *dmask;         // contiguous [batch, heads, q_len, kv_len] of dtype; NULL
    // Batch, head, row strides (elements; rows contiguous) of dq / dk / dv.
    // All three zero: contiguous. Each must describe a dense tensor (a
    // permutation of the dims): [B, L, H, E] storage seen as [B, H, L, E],
    // as CPU's flash kernel returns, makes the model's transpose back free.
    int64_t dq_strides[3], dk_strides[3], dv_strides[3];
} trn_attention_backward_desc;

// Whether dtype (and mask dtype, when has_mask) are supported; sets no error.
int trn_attention_supports(trn_dtype dtype, int has_mask, trn_dtype mask_dtype);
trn_status trn_attention_launch(trn_stream *stream, const trn_attention_desc *desc);
// Floats of desc->probs for these sizes; 0 where probabilities are not kept
// (more than 64 keys, or dropout).
int64_t trn_attention_probs_floats(const trn_attention_desc *desc);
trn_status trn_attention_backward_launch(trn_stream *stream,
                                         const trn_attention_backward_desc *desc);

#ifdef __cplusplus
}
#endif
#endif
