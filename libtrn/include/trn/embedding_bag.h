// trn/embedding_bag.h - embedding_bag forward (sum / mean / max bags, per
// sample weights, padding index) and its backwards (dense weight gradient,
// per-sample-weight gradient).
//
// Owned by the embedding-bag family (libtrn/src/kernels/nn/embedding_bag.c).
// The C++ layer (torch_neuronx/csrc/aten/embedding_bag.cpp) checks shapes and
// dtypes with PyTorch's rules and hands over contiguous operands.
//
// Bags: bag b holds indices [offsets[b], end_b) with end_b = offsets[b + 1]
// when b + 1 < num_offsets, else num_indices (so include_last_offset is
// num_offsets == num_bags + 1). Indices equal to padding_idx (>= 0; -1 for
// none) contribute nothing and are not counted. An empty bag gives zeros.
//
// Dtypes: weight / per-sample weights / output / grads F16, BF16, F32 or F64
// (all the same); indices and offsets I32 or I64 (the same). Sums are float32
// for 16-bit and float32 data, double for float64, rounded once on store.
// Indices or offsets out of range fail the task with
// TRN_ERROR_INVALID_ARGUMENT (the caller synchronizes to report it).
#ifndef TRN_EMBEDDING_BAG_H
#define TRN_EMBEDDING_BAG_H

#include <stdint.h>

#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum trn_embedding_bag_mode {
    TRN_EMBEDDING_BAG_SUM = 0,  // PyTorch's mode numbers
    TRN_EMBEDDING_BAG_MEAN = 1,
    TRN_EMBEDDING_BAG_MAX = 2,
} trn_embedding_bag_mode;

typedef struct trn_embedding_bag_desc {
    trn_dtype dtype, index_dtype;
    trn_embedding_bag_mode mode;
    int64_t num_weights, dim, num_indices, num_offsets, num_bags;
    int64_t padding_idx;             // -1: none
    int scale_grad_by_freq;          // backward: divide by the index's count
    const void *weight;              // forward: [num_weights, dim]
    const void *indices, *offsets;   // [num_indices], [num_offsets]
    const void *per_sample_weights;  // [num_indices] (SUM only) or NULL
    void *output;                    // forward: [num_bags, dim]
    int64_t *offset2bag;             // forward: [num_indices] bag of each index (-1
                                     // after the last bag), or NULL; backward: read
    int64_t *bag_size;               // forward: [num_bags] counted indices, or NULL
    int64_t *max_indices;            // forward, MAX: [num_bags, dim] row of each max
                                     // (-1 for an empty bag); backward, MAX: read
    const void *grad;                // backward: [num_bags, dim]
    void *grad_weight;               // backward: [num_weights, dim] (overwritten)
    void *grad_per_sample_weights;   // backward: [num_indices], needs weight (SUM)
} trn_embedding_bag_desc;

trn_status trn_embedding_bag_launch(trn_stream *stream, const trn_embedding_bag_desc *desc);
// Writes grad_weight and / or grad_per_sample_weights (whichever is set).
trn_status trn_embedding_bag_backward_launch(trn_stream *stream,
                                             const trn_embedding_bag_desc *desc);

// Whether the dtype pair is supported; never sets an error.
int trn_embedding_bag_supports(trn_dtype dtype, trn_dtype index_dtype);

#ifdef __cplusplus
}
#endif
#endif
