// trn/flex_attention.h - block-sparse flash attention with a compiled score
// and mask modification (PyTorch's FlexAttention), forward and backward.
//
// Owned by libtrn/src/kernels/nn/flex_attention.c (the kernels) and
// libtrn/src/compiler/jit/flex_mods.c (building the modification functions
// from C source); the adapter is torch_neuronx/csrc/aten/flex_attention.cpp,
// the Python front end torch_neuronx/_flex_attention.py.
//
// With s = scale * q[b,h,i,:] . k[b,g(h),j,:] (g(h) = h / (heads / kv_heads)):
//   s' = score_mod(s, b, h, i, j)               (every visited key)
//   s' = -inf where !mask_mod(b, h, i, j)       (keys of partial blocks only)
//   out[b,h,i,:] = sum_j softmax_j(s') v[b,g(h),j,:],  lse = logsumexp_j(s')
// Keys are visited block by block as a BlockMask lists them: for query block
// m = i / q_block, the kv_num_blocks[b,h,m] blocks kv_indices[b,h,m,:] are
// partial (mask_mod is applied), the full_kv_num_blocks[b,h,m] blocks
// full_kv_indices[b,h,m,:] are full (mask_mod is known true); every other
// block is skipped without being computed. Key block n covers keys
// [n * kv_block, (n + 1) * kv_block). The block tensors are int32,
// contiguous, [mask_batch, mask_heads, ...] with mask_batch (mask_heads) 1
// or batch (heads): 1 broadcasts.
//
// The modifications are C functions (made from the score_mod / mask_mod
// graphs; see trn_flex_mods_compile) applied to a tile of scores stored
// transposed: st[j * ld + i] holds query i0 + i, key j0 + j. score_fn applies
// score_mod and, when `masked`, mask_mod; grad_fn turns the gradient with
// respect to the modified scores (dst, same layout) into the gradient with
// respect to the raw scores st, in place; NULL grad_fn: score_mod's
// derivative is 1. They read the captured tensors through `buffers`.
//
// Dtypes: q, k, v, out, dout, dq, dk, dv are F32, F16 or BF16, all the same;
// arithmetic is float32, results are rounded once on store. lse and max are
// float32 [batch, heads, q_len], contiguous, natural log. A row whose keys
// are all masked gives out 0, lse -inf and max -inf (as PyTorch). Layout:
// [batch, heads, rows, dim] with any strides for the first three dims and a
// contiguous last dim.
#ifndef TRN_FLEX_ATTENTION_H
#define TRN_FLEX_ATTENTION_H

#include <stdint.h>

#include "trn/compiler.h"
#include "trn/dtype.h"
#include "trn/status.h"
#include "trn/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TRN_FLEX_MAX_BUFFERS = 6 };

// The tensors score_mod and mask_mod capture (score_mod's first): data,
// sizes and element strides (up to 4 dims; sizes let a negative index count
// from the end, as in PyTorch) and the bytes each spans from data.
typedef struct trn_flex_buffers {
    int count;
    const void *data[TRN_FLEX_MAX_BUFFERS];
    int64_t sizes[TRN_FLEX_MAX_BUFFERS][4];
    int64_t strides[TRN_FLEX_MAX_BUFFERS][4];
    int64_t nbytes[TRN_FLEX_MAX_BUFFERS];
} trn_flex_buffers;

typedef void (*trn_flex_score_fn)(const trn_flex_buffers *bufs, int64_t b, int64_t h, int64_t i0,
                                  int64_t ni, int64_t j0, int64_t nj, float *st, int64_t ld,
                                  int masked);
typedef void (*trn_flex_grad_fn)(const trn_flex_buffers *bufs, int64_t b, int64_t h, int64_t i0,
                                 int64_t ni, int64_t j0, int64_t nj, const float *st, float *dst,
                                 int64_t ld);

typedef struct trn_flex_attention_desc {
    trn_dtype dtype;
    int64_t batch, heads, kv_heads, q_len, kv_len, head_dim, v_dim;
    const void *q;
    int64_t q_strides[3];  // batch, head, row (elements)
    const void *k;
    int64_t k_strides[3];
    const void *v;
    int64_t v_strides[3];
    void *out;
    int64_t out_strides[3];
    float *lse;  // NULL: not wanted (forward)
    float *max;  // NULL: not wanted
    double scale;
    // The block structure (see above).
    int64_t q_block, kv_block;
    int64_t mask_batch, mask_heads, mask_q_blocks, mask_kv_blocks;
    const int32_t *kv_num_blocks, *kv_indices;
    const int32_t *full_kv_num_blocks, *full_kv_indices;  // NULL: no full blocks
    trn_flex_score_fn score_fn;                           // required
    trn_flex_grad_fn grad_fn;                             // backward; NULL: identity
    trn_flex_buffers buffers;
} trn_flex_attention_desc;

typedef struct trn_flex_attention_backward_desc {
    trn_flex_attention_desc fwd;  // the forward's inputs, out and lse (read only)
    const void *dout;             // [batch, heads, q_len, v_dim]
    int64_t dout_strides[3];
    const float *dlse;  // gradient of lse, contiguous [batch, heads, q_len]; NULL: 0
    void *dq, *dk, *dv;
    int64_t dq_strides[3], dk_strides[3], dv_strides[3];
} trn_flex_attention_backward_desc;

// Whether dtype is supported; sets no error.
int trn_flex_attention_supports(trn_dtype dtype);
trn_status trn_flex_attention_launch(trn_stream *stream, const trn_flex_attention_desc *desc);
trn_status trn_flex_attention_backward_launch(trn_stream *stream,
                                              const trn_flex_attention_backward_desc *desc);

// ---- the modification functions ------------------------------------------------
// Compiles (or loads from the disk cache, as the graph compiler does) a C
// translation unit that defines `int trn_flex_abi = 1;`, `flex_score` (a
// trn_flex_score_fn) and optionally `flex_grad` (a trn_flex_grad_fn).
typedef struct trn_flex_mods trn_flex_mods;
trn_status trn_flex_mods_compile(const char *source, const trn_compile_options *opts,
                                 trn_flex_mods **out);
void trn_flex_mods_free(trn_flex_mods *m);
trn_flex_score_fn trn_flex_mods_score(const trn_flex_mods *m);
trn_flex_grad_fn trn_flex_mods_grad(const trn_flex_mods *m);  // NULL if not defined
int trn_flex_mods_from_cache(const trn_flex_mods *m);

#ifdef __cplusplus
}
#endif
#endif
