// conv.c - owns the convolution kernels declared in trn/conv.h: descriptor
// validation, plans (oneDNN convolution primitive + reorders between the
// caller's strided tensors and the blocked float32 layouts oneDNN prefers,
// cached by geometry, see dnnl_common.h) and their execution.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_layout.h"
#include "conv_move.h"
#include "dnnl_common.h"
#include "h16_stage.h"
#include "../kit/bf16_store.h"
#include "../kit/launch.h"
#include "trn/conv.h"
#include "trn/conv_backward.h"
#include "trn/parallel.h"

typedef enum conv_kind { CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS } conv_kind;
// conv_key.kind of the float32 move of trn_conv_backward_launch's plan.
#define CONV_MOVE_KEY 3
typedef enum slot { S_INPUT, S_WEIGHT, S_BIAS, S_OUTPUT, S_COUNT } slot;

typedef struct conv_args {
    trn_conv_desc d;
    conv_kind kind;
    int64_t lo[S_COUNT], span[S_COUNT];  // bytes each tensor touches
} conv_args;

_Static_assert(sizeof(conv_args) <= TRN_TASK_MAX_ARGS, "conv args too large");

bool trn_conv_supports(trn_dtype dtype) {
    return dtype == TRN_DTYPE_F32 || dtype == TRN_DTYPE_BF16 || dtype == TRN_DTYPE_F16;
}

// ---- plans ---------------------------------------------------------------------------

enum { CONV_NATIVE = 1, CONV_NATIVE_AMX = 2 };  // conv_key.native: bfloat16 as bfloat16

typedef struct conv_key {
    int64_t kind, dtype, native, spatial, has_bias;
    int64_t accum;      // forward: add to the output (a "sum" post-op), no bias
    int64_t dst_plain;  // forward: compute in the output's own layout (no reorder)
    int64_t n, c_in, c_out, groups;
    int64_t in_size[3], out_size[3], kernel[3], stride[3], padding[3], dilation[3];
    int64_t input_strides[5], weight_strides[5], output_strides[5], bias_stride;
    // Backward: the output gradient is given in nChw16c (conv_blk), its
    // batch stride in elements; 0: as output_strides say.
    int64_t out_blk_ns;
    // Backward weights of 16-bit data: the weight (and bias) gradient is
    // written as float32 (wgrad_halves' partial sums).
    int64_t wei_f32;
} conv_key;

// An output gradient already in nChw16c (trn_conv_backward_launch moves it
// once for both backward convolutions): `ptr` at the piece's first element,
// `ns` elements from one batch item to the next.
typedef struct conv_blk {
    char *ptr;
    int64_t ns;
} conv_blk;

typedef struct operand {
    bool used, is_output;
    int arg;  // DNNL_ARG_* of the convolution
    dnnl_memory_desc_t user_md, comp_md;
    dnnl_primitive_t reorder;  // user <-> comp, NULL when equal or `blocked16`
    dnnl_memory_desc_t reorder_scratch_md;
    size_t temp_size;
    // user (4-d, dense H x W planes) <-> comp nChw16c of the same type:
    // conv_layout_move instead of `reorder`.
    bool blocked16;
    int64_t dims[4], n_stride, c_stride;
} operand;

typedef struct conv_plan {
    operand op[S_COUNT];
    dnnl_primitive_t prim;
    dnnl_memory_desc_t scratch_md;
    size_t scratch_size;
} conv_plan;

static void plan_destroy(conv_plan *p) {
    if (p == NULL) return;
    for (int i = 0; i < S_COUNT; i++)
        if (p->op[i].reorder) dnnl_primitive_destroy(p->op[i].reorder);
    if (p->prim) dnnl_primitive_destroy(p->prim);
    free(p);
}

static void note_scratch(conv_plan *p, const_dnnl_primitive_desc_t pd, dnnl_memory_desc_t *md) {
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (smd == NULL) return;
    *md = *smd;
    size_t sz = dnnl_memory_desc_get_size(smd);
    if (sz > p->scratch_size) p->scratch_size = sz;
}

static dnnl_data_type_t dnnl_type(trn_dtype t) {
    return t == TRN_DTYPE_BF16 ? dnnl_bf16 : t == TRN_DTYPE_F16 ? dnnl_f16 : dnnl_f32;
}

// Forward and input-gradient convolutions of 2-d images whose channel
// counts are multiples of 16 compute on nChw16c activations. With that
// layout oneDNN 2.6 picks its direct kernels (jit:avx512_core, jit_1x1),
// the ones PyTorch CPU's oneDNN runs for these shapes: they add each block
// of 16 reduction channels to the output in memory, so their float32 error
// is CPU's (test_numerics_vs_f64: ratio 1.00 in every such case) and they
// need none of the channel blocks below. Left to choose ("any"), oneDNN 2.6
// takes brgconv on channels-last data, which keeps each output in a
// register over the whole reduction (up to 5x CPU's error); the channel
// blocks that fix that cost 15-25 % of a ResNet convolution (an ic=16
// brgconv per block, a sum post-op, and a transposing copy at the end).
// 1x1 kernels (jit_1x1) choose how much of a long reduction they keep in
// registers from the problem size, so a batch piece of the 2-thread split
// had 2.3x CPU's error on a 256-channel 1x1 forward: a 1x1 convolution
// qualifies only where its reduction is short anyway (no blocks needed).
static bool conv_ch16_direct(int64_t kind, int64_t spatial, int64_t groups, int64_t c_in,
                             int64_t c_out, int64_t kvol) {
    if (kind == CONV_BWD_WEIGHTS || spatial != 2 || groups != 1 || c_in % 16 != 0 ||
        c_out % 16 != 0)
        return false;
    return kvol > 1 || (kind == CONV_FWD ? c_in : c_out) <= 128;  // CONV_RED_BLOCK, below
}

// User and compute descriptors of the four tensors ("any" layouts except the
// nChw16c of conv_ch16_direct); the data tensors are computed in cdt (the
// bias stays float32).
static trn_status init_mds(const conv_key *k, conv_plan *p, dnnl_data_type_t cdt) {
    trn_status st = TRN_SUCCESS;
    const int sp = (int)k->spatial, nd = 2 + sp;
    const dnnl_data_type_t udt = dnnl_type((trn_dtype)k->dtype);
    // On a CPU whose AMX tiles oneDNN uses, its bfloat16 kernels that use
    // them (brgconv) take their own layouts, and nChw16c would hold it to the
    // vdpbf16ps direct kernel: 8x64x56x56 3x3 forward ran at 40 G MAC/s
    // there against 230 for PyTorch CPU (Sapphire Rapids, one core). So
    // bfloat16 on AMX lets oneDNN choose. The float32 error argument above
    // does not carry over: the float32 sum's error is far below the result's
    // rounding to bfloat16.
    const bool amx_bf16 = cdt == dnnl_bf16 && k->native == CONV_NATIVE_AMX;
    const dnnl_format_tag_t act_tag = conv_ch16_direct(k->kind, k->spatial, k->groups, k->c_in,
                                                       k->c_out, k->kernel[0] * k->kernel[1]) &&
                                              !k->dst_plain && !amx_bf16
                                          ? dnnl_nChw16c
                                          : dnnl_format_tag_any;
    // A stem (fewer than 16 input channels, e.g. RGB) forward with an
    // nChw16c output: oneDNN's direct kernels read the plain NCHW input as it
    // is, where "any" took brgconv on channels-last data and paid a
    // transposing reorder of the whole (large) output: ResNet's 3 -> 32 stem
    // on 32x32 images ran 1.7-1.8x faster (float32 and bfloat16).
    const bool stem16 = k->kind == CONV_FWD && sp == 2 && k->groups == 1 && k->c_in < 16 &&
                        k->c_out % 16 == 0 && !k->dst_plain && !amx_bf16;
    dnnl_dims_t dims, strides;

    dims[0] = k->n, dims[1] = k->c_in;
    memcpy(dims + 2, k->in_size, sp * sizeof(int64_t));
    memcpy(strides, k->input_strides, (size_t)nd * sizeof(int64_t));
    TRN_DNNL_TRY(dnnl_memory_desc_init_by_strides(&p->op[S_INPUT].user_md, nd, dims, udt, strides),
                 "convolution input layout");
    TRN_DNNL_TRY(dnnl_memory_desc_init_by_tag(&p->op[S_INPUT].comp_md, nd, dims, cdt, act_tag),
                 "convolution input layout");

    dims[1] = k->c_out;
    memcpy(dims + 2, k->out_size, sp * sizeof(int64_t));
    memcpy(strides, k->output_strides, (size_t)nd * sizeof(int64_t));
    TRN_DNNL_TRY(dnnl_memory_desc_init_by_strides(&p->op[S_OUTPUT].user_md, nd, dims, udt, strides),
                 "convolution output layout");
    if (k->out_blk_ns) {
        // nChw16c with the whole tensor's batch stride (a channel piece of
        // it has a longer one than its own dense layout), computed as is.
        TRN_DNNL_TRY(
            dnnl_memory_desc_init_by_tag(&p->op[S_OUTPUT].user_md, nd, dims, udt, dnnl_nChw16c),
            "convolution output layout");
        p->op[S_OUTPUT].user_md.format_desc.blocking.strides[0] = k->out_blk_ns;
        p->op[S_OUTPUT].comp_md = p->op[S_OUTPUT].user_md;
    } else if (k->dst_plain)
        p->op[S_OUTPUT].comp_md = p->op[S_OUTPUT].user_md;
    else
        TRN_DNNL_TRY(dnnl_memory_desc_init_by_tag(&p->op[S_OUTPUT].comp_md, nd, dims, cdt,
                                                  stem16 ? dnnl_nChw16c : act_tag),
                     "convolution output layout");

    // Weights: (g, oc/g, ic/g, k...) when grouped; PyTorch's oc dim splits.
    int wnd;
    if (k->groups > 1) {
        const int64_t g = k->groups, ocg = k->c_out / g;
        wnd = 3 + sp;
        dims[0] = g, dims[1] = ocg, dims[2] = k->c_in / g;
        strides[0] = k->weight_strides[0] * ocg, strides[1] = k->weight_strides[0];
        strides[2] = k->weight_strides[1];
        memcpy(dims + 3, k->kernel, sp * sizeof(int64_t));
        memcpy(strides + 3, k->weight_strides + 2, sp * sizeof(int64_t));
    } else {
        wnd = 2 + sp;
        dims[0] = k->c_out, dims[1] = k->c_in;
        memcpy(dims + 2, k->kernel, sp * sizeof(int64_t));
        memcpy(strides, k->weight_strides, (size_t)wnd * sizeof(int64_t));
    }
    const dnnl_data_type_t wdt = k->wei_f32 ? dnnl_f32 : udt;
    TRN_DNNL_TRY(
        dnnl_memory_desc_init_by_strides(&p->op[S_WEIGHT].user_md, wnd, dims, wdt, strides),
        "convolution weight layout");
    TRN_DNNL_TRY(dnnl_memory_desc_init_by_tag(&p->op[S_WEIGHT].comp_md, wnd, dims,
                                              k->wei_f32 ? dnnl_f32 : cdt, dnnl_format_tag_any),
                 "convolution weight layout");

    if (k->has_bias) {
        dims[0] = k->c_out;
        strides[0] = k->bias_stride;
        TRN_DNNL_TRY(
            dnnl_memory_desc_init_by_strides(&p->op[S_BIAS].user_md, 1, dims, wdt, strides),
            "convolution bias layout");
        TRN_DNNL_TRY(
            dnnl_memory_desc_init_by_tag(&p->op[S_BIAS].comp_md, 1, dims, dnnl_f32, dnnl_a),
            "convolution bias layout");
    }
fail:
    return st;
}

static trn_status fwd_desc(const conv_key *k, conv_plan *p, dnnl_prop_kind_t prop,
                           dnnl_convolution_desc_t *cd) {
    trn_status st = TRN_SUCCESS;
    dnnl_dims_t stride, dil, pad;
    for (int i = 0; i < k->spatial; i++) {
        stride[i] = k->stride[i];
        dil[i] = k->dilation[i] - 1;
        pad[i] = k->padding[i];
    }
    TRN_DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(
                     cd, prop, dnnl_convolution_direct, &p->op[S_INPUT].comp_md,
                     &p->op[S_WEIGHT].comp_md, k->has_bias ? &p->op[S_BIAS].comp_md : NULL,
                     &p->op[S_OUTPUT].comp_md, stride, dil, pad, pad),
                 "convolution forward descriptor");
fail:
    return st;
}

// Whether `o` moves between its user layout and nChw16c by conv_layout_move:
// a 4-d bfloat16 tensor (the compute type), channels a multiple of
// 16, each (n, c) plane dense in the user layout, comp exactly nChw16c.
static trn_status check_blocked16(operand *o, dnnl_data_type_t cdt) {
    trn_status st = TRN_SUCCESS;
    const dnnl_memory_desc_t *u = &o->user_md;
    o->blocked16 = false;
    // float32 stays with oneDNN's `jit:blk` reorders: as fast as these moves
    // on ResNet's planes and faster on 32x32 ones (one-image weight-gradient
    // blocks), where 16 rows 4 KiB apart share L1 sets.
    if (u->ndims != 4 || u->data_type != cdt || cdt != dnnl_bf16) goto fail;
    if (u->format_kind != dnnl_blocked || u->format_desc.blocking.inner_nblks != 0) goto fail;
    const dnnl_dim_t *dims = u->dims, *str = u->format_desc.blocking.strides;
    if (dims[1] % CONV_LAYOUT_BLOCK != 0 || u->offset0 != 0) goto fail;
    if (dims[3] > 1 && str[3] != 1) goto fail;
    if (dims[2] > 1 && str[2] != (dims[3] > 1 ? dims[3] : 1)) goto fail;
    dnnl_memory_desc_t blk;
    TRN_DNNL_TRY(dnnl_memory_desc_init_by_tag(&blk, 4, dims, cdt, dnnl_nChw16c),
                 "convolution layout");
    if (!dnnl_memory_desc_equal(&blk, &o->comp_md)) goto fail;
    o->blocked16 = true;
    memcpy(o->dims, dims, sizeof o->dims);
    o->n_stride = str[0], o->c_stride = str[1];
fail:
    return st;
}

// A plan computing in cdt; with native_only, refused (TRN_ERROR_UNSUPPORTED)
// when oneDNN offers only a reference implementation.
static trn_status plan_build_as(const conv_key *k, dnnl_data_type_t cdt, bool native_only,
                                conv_plan **out) {
    trn_status st = TRN_SUCCESS;
    dnnl_engine_t engine;
    dnnl_primitive_attr_t attr = NULL, conv_attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL, hint = NULL, rpd = NULL;
    conv_plan *p = calloc(1, sizeof *p);
    if (p == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "out of host memory for a conv plan");
    if ((st = trn__dnnl_engine(&engine)) != TRN_SUCCESS) goto fail;
    if ((st = init_mds(k, p, cdt)) != TRN_SUCCESS) goto fail;
    TRN_DNNL_TRY(dnnl_primitive_attr_create(&attr), "convolution plan");
    TRN_DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
                 "convolution plan");
    // The convolution's own attributes: a running sum adds to the output.
    TRN_DNNL_TRY(dnnl_primitive_attr_clone(&conv_attr, attr), "convolution plan");
    if (k->accum) {
        TRN_DNNL_TRY(dnnl_post_ops_create(&ops), "convolution accumulation");
        TRN_DNNL_TRY(dnnl_post_ops_append_sum(ops, 1.0f), "convolution accumulation");
        TRN_DNNL_TRY(dnnl_primitive_attr_set_post_ops(conv_attr, ops), "convolution accumulation");
    }

    dnnl_convolution_desc_t cd;
    dnnl_dims_t stride, dil, pad;
    for (int i = 0; i < k->spatial; i++) {
        stride[i] = k->stride[i];
        dil[i] = k->dilation[i] - 1;
        pad[i] = k->padding[i];
    }
    // Per slot: used, is_output, convolution argument, pd query.
    struct {
        bool used, out;
        int arg;
        dnnl_query_t q;
    } role[S_COUNT];
    memset(role, 0, sizeof role);
    switch ((conv_kind)k->kind) {
    case CONV_FWD:
        if ((st = fwd_desc(k, p, dnnl_forward_inference, &cd)) != TRN_SUCCESS) goto fail;
        TRN_DNNL_TRY(dnnl_primitive_desc_create(&pd, &cd, conv_attr, engine, NULL),
                     "convolution forward");
        role[S_INPUT] = (__typeof__(role[0])){true, false, DNNL_ARG_SRC, dnnl_query_src_md};
        role[S_WEIGHT] =
            (__typeof__(role[0])){true, false, DNNL_ARG_WEIGHTS, dnnl_query_weights_md};
        role[S_BIAS] =
            (__typeof__(role[0])){k->has_bias != 0, false, DNNL_ARG_BIAS, dnnl_query_weights_md};
        role[S_OUTPUT] = (__typeof__(role[0])){true, true, DNNL_ARG_DST, dnnl_query_dst_md};
        break;
    case CONV_BWD_DATA:
        if ((st = fwd_desc(k, p, dnnl_forward_training, &cd)) != TRN_SUCCESS) goto fail;
        TRN_DNNL_TRY(dnnl_primitive_desc_create(&hint, &cd, NULL, engine, NULL),
                     "convolution forward (hint for backward data)");
        TRN_DNNL_TRY(dnnl_dilated_convolution_backward_data_desc_init(
                         &cd, dnnl_convolution_direct, &p->op[S_INPUT].comp_md,
                         &p->op[S_WEIGHT].comp_md, &p->op[S_OUTPUT].comp_md, stride, dil, pad, pad),
                     "convolution backward data descriptor");
        TRN_DNNL_TRY(dnnl_primitive_desc_create(&pd, &cd, attr, engine, hint),
                     "convolution backward data");
        role[S_INPUT] =
            (__typeof__(role[0])){true, true, DNNL_ARG_DIFF_SRC, dnnl_query_diff_src_md};
        role[S_WEIGHT] =
            (__typeof__(role[0])){true, false, DNNL_ARG_WEIGHTS, dnnl_query_weights_md};
        role[S_OUTPUT] =
            (__typeof__(role[0])){true, false, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md};
        break;
    case CONV_BWD_WEIGHTS: {
        // The forward hint takes weights of the data's type (float32
        // gradients of bfloat16 data are a backward-only combination).
        const dnnl_memory_desc_t wmd = p->op[S_WEIGHT].comp_md;
        p->op[S_WEIGHT].comp_md.data_type = cdt;
        st = fwd_desc(k, p, dnnl_forward_training, &cd);
        p->op[S_WEIGHT].comp_md = wmd;
        if (st != TRN_SUCCESS) goto fail;
        TRN_DNNL_TRY(dnnl_primitive_desc_create(&hint, &cd, NULL, engine, NULL),
                     "convolution forward (hint for backward weights)");
        TRN_DNNL_TRY(dnnl_dilated_convolution_backward_weights_desc_init(
                         &cd, dnnl_convolution_direct, &p->op[S_INPUT].comp_md,
                         &p->op[S_WEIGHT].comp_md, k->has_bias ? &p->op[S_BIAS].comp_md : NULL,
                         &p->op[S_OUTPUT].comp_md, stride, dil, pad, pad),
                     "convolution backward weights descriptor");
        TRN_DNNL_TRY(dnnl_primitive_desc_create(&pd, &cd, attr, engine, hint),
                     "convolution backward weights");
        role[S_INPUT] = (__typeof__(role[0])){true, false, DNNL_ARG_SRC, dnnl_query_src_md};
        role[S_WEIGHT] =
            (__typeof__(role[0])){true, true, DNNL_ARG_DIFF_WEIGHTS, dnnl_query_diff_weights_md};
        role[S_BIAS] = (__typeof__(role[0])){k->has_bias != 0, true, DNNL_ARG_DIFF_BIAS,
                                             dnnl_query_diff_weights_md};
        role[S_OUTPUT] =
            (__typeof__(role[0])){true, false, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md};
        break;
    }
    }
    // A native attempt accepts only a kernel known to be optimized: the
    // float32 staging plan it would otherwise fall back to is always fast.
    if (native_only && trn__dnnl_impl_of(pd) != TRN__DNNL_IMPL_OPTIMIZED) {
        st = trn__set_error(TRN_ERROR_UNSUPPORTED, "no native oneDNN convolution for this dtype");
        goto fail;
    }
    for (int i = 0; i < S_COUNT; i++) {
        operand *o = &p->op[i];
        o->used = role[i].used;
        if (!o->used) continue;
        o->is_output = role[i].out;
        o->arg = role[i].arg;
        // The bias is the second "weights" of forward and backward weights.
        const dnnl_memory_desc_t *md =
            dnnl_primitive_desc_query_md(pd, role[i].q, i == S_BIAS ? 1 : 0);
        if (md == NULL) {
            st = trn__set_error(TRN_ERROR_KERNEL,
                                "oneDNN: dnnl_primitive_desc_query_md returned no layout "
                                "for convolution tensor %d",
                                i);
            goto fail;
        }
        o->comp_md = *md;
        if (dnnl_memory_desc_equal(&o->user_md, &o->comp_md)) continue;
        o->temp_size = dnnl_memory_desc_get_size(&o->comp_md);
        if ((st = check_blocked16(o, cdt)) != TRN_SUCCESS) goto fail;
        if (o->blocked16) continue;
        const dnnl_memory_desc_t *from = o->is_output ? &o->comp_md : &o->user_md;
        const dnnl_memory_desc_t *to = o->is_output ? &o->user_md : &o->comp_md;
        TRN_DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine, attr),
                     "convolution layout reorder");
        note_scratch(p, rpd, &o->reorder_scratch_md);
        TRN_DNNL_TRY(dnnl_primitive_create(&o->reorder, rpd), "convolution layout reorder");
        dnnl_primitive_desc_destroy(rpd);
        rpd = NULL;
    }
    note_scratch(p, pd, &p->scratch_md);
    TRN_DNNL_TRY(dnnl_primitive_create(&p->prim, pd), "convolution");
fail:
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (conv_attr) dnnl_primitive_attr_destroy(conv_attr);
    if (ops) dnnl_post_ops_destroy(ops);
    if (st != TRN_SUCCESS) {
        plan_destroy(p);
        return st;
    }
    *out = p;
    return TRN_SUCCESS;
}

// bfloat16 runs as bfloat16 where the native bfloat16 switch allows it
// (trn__dnnl_bf16_native: an AVX512-BF16 CPU, not turned off) and oneDNN has
// an optimized kernel for the geometry (2x the float32 rate, and no staging
// copies); otherwise, and for float16, the operands are staged to float32.
static trn_status plan_build(const conv_key *k, conv_plan **out) {
    if (k->native && plan_build_as(k, dnnl_bf16, true, out) == TRN_SUCCESS) return TRN_SUCCESS;
    return plan_build_as(k, dnnl_f32, false, out);
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static trn_status exec(dnnl_primitive_t prim, dnnl_stream_t s, int n, const dnnl_exec_arg_t *a,
                       const char *what) {
    trn_status st = TRN_SUCCESS;
    TRN_DNNL_TRY(dnnl_primitive_execute(prim, s, n, a), what);
fail:
    return st;
}

static void move_blocked16(const operand *o, void *user, void *comp, bool to_blocked) {
    conv_layout_move(user, o->n_stride, o->c_stride, comp, o->dims[0], o->dims[1],
                     o->dims[2] * o->dims[3], to_blocked);
}

static trn_status plan_execute(const conv_plan *p, const trn_conv_desc *d) {
    trn_status st;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    if ((st = trn__dnnl_engine(&engine)) != TRN_SUCCESS) return st;
    if ((st = trn__dnnl_stream(&stream)) != TRN_SUCCESS) return st;
    size_t off[S_COUNT + 1], total = 0;
    for (int i = 0; i < S_COUNT; i++) {
        off[i] = total;
        total += align64(p->op[i].temp_size);
    }
    off[S_COUNT] = total;
    total += align64(p->scratch_size);
    char *ws;
    if ((st = trn__dnnl_workspace(total, (void **)&ws)) != TRN_SUCCESS) return st;

    void *ptrs[S_COUNT] = {d->input, d->weight, d->bias, d->output};
    dnnl_memory_t user[S_COUNT] = {NULL}, comp[S_COUNT] = {NULL}, rscratch[S_COUNT] = {NULL};
    dnnl_memory_t scratch = NULL;
    for (int i = 0; i < S_COUNT; i++) {
        const operand *o = &p->op[i];
        if (!o->used) continue;
        TRN_DNNL_TRY(dnnl_memory_create(&user[i], &o->user_md, engine, ptrs[i]),
                     "convolution tensor");
        if (o->reorder || o->blocked16) {
            TRN_DNNL_TRY(dnnl_memory_create(&comp[i], &o->comp_md, engine, ws + off[i]),
                         "convolution staging buffer");
            if (o->reorder_scratch_md.ndims > 0)
                TRN_DNNL_TRY(dnnl_memory_create(&rscratch[i], &o->reorder_scratch_md, engine,
                                                ws + off[S_COUNT]),
                             "convolution scratchpad");
        }
    }
    if (p->scratch_md.ndims > 0)
        TRN_DNNL_TRY(dnnl_memory_create(&scratch, &p->scratch_md, engine, ws + off[S_COUNT]),
                     "convolution scratchpad");

    for (int i = 0; i < S_COUNT; i++) {
        const operand *o = &p->op[i];
        if (!o->used || o->is_output) continue;
        if (o->blocked16) {
            move_blocked16(o, ptrs[i], ws + off[i], true);
            continue;
        }
        if (!o->reorder) continue;
        dnnl_exec_arg_t a[3] = {
            {DNNL_ARG_FROM, user[i]}, {DNNL_ARG_TO, comp[i]}, {DNNL_ARG_SCRATCHPAD, rscratch[i]}};
        if ((st = exec(o->reorder, stream, rscratch[i] ? 3 : 2, a, "convolution input reorder")) !=
            TRN_SUCCESS)
            goto fail;
    }
    {
        dnnl_exec_arg_t a[S_COUNT + 1];
        int n = 0;
        for (int i = 0; i < S_COUNT; i++) {
            if (!p->op[i].used) continue;
            a[n].arg = p->op[i].arg;
            a[n].memory = comp[i] ? comp[i] : user[i];
            n++;
        }
        if (scratch) {
            a[n].arg = DNNL_ARG_SCRATCHPAD;
            a[n].memory = scratch;
            n++;
        }
        if ((st = exec(p->prim, stream, n, a, "convolution")) != TRN_SUCCESS) goto fail;
    }
    // The outputs' conv_layout_move reads what the convolution wrote.
    TRN_DNNL_TRY(dnnl_stream_wait(stream), "convolution");
    for (int i = 0; i < S_COUNT; i++) {
        const operand *o = &p->op[i];
        if (!o->used || !o->is_output) continue;
        if (o->blocked16) {
            move_blocked16(o, ptrs[i], ws + off[i], false);
            continue;
        }
        if (!o->reorder) continue;
        dnnl_exec_arg_t a[3] = {
            {DNNL_ARG_FROM, comp[i]}, {DNNL_ARG_TO, user[i]}, {DNNL_ARG_SCRATCHPAD, rscratch[i]}};
        if ((st = exec(o->reorder, stream, rscratch[i] ? 3 : 2, a, "convolution output reorder")) !=
            TRN_SUCCESS)
            goto fail;
    }
    TRN_DNNL_TRY(dnnl_stream_wait(stream), "convolution");
fail:
    for (int i = 0; i < S_COUNT; i++) {
        if (user[i]) dnnl_memory_destroy(user[i]);
        if (comp[i]) dnnl_memory_destroy(comp[i]);
        if (rscratch[i]) dnnl_memory_destroy(rscratch[i]);
    }
    if (scratch) dnnl_memory_destroy(scratch);
    return st;
}

// ---- task ------------------------------------------------------------------------------

// Backward weights with an empty batch: the gradients are zero.
static void zero_strided(trn_dtype dt, void *base, int nd, const int64_t *sizes,
                         const int64_t *strides) {
    const size_t es = trn_dtype_size(dt);
    int64_t idx[5] = {0}, total = 1;
    for (int i = 0; i < nd; i++) total *= sizes[i];
    for (int64_t t = 0; t < total; t++) {
        int64_t off = 0;
        for (int i = 0; i < nd; i++) off += idx[i] * strides[i];
        memset((char *)base + off * (int64_t)es, 0, es);  // +0.0 in every float type
        for (int i = nd - 1; i >= 0; i--) {
            if (++idx[i] < sizes[i]) break;
            idx[i] = 0;
        }
    }
}

// One oneDNN convolution of `d` (plan looked up or built, then run) on the
// calling thread's oneDNN stream; accum / dst_plain as in conv_key. With
// `blk`, the output gradient is read from there where oneDNN has an
// optimized kernel for it (the plan is cached either way: a plan without a
// primitive says "none"), else from d->output as usual.
// wei_f32: a backward-weights call writes float32 gradients (conv_key).
static trn_status conv_run_plan_w(conv_kind kind, const trn_conv_desc *d, bool accum,
                                  bool dst_plain, const conv_blk *blk, bool wei_f32) {
    const trn_conv_desc *orig = d;
    conv_key key;
    memset(&key, 0, sizeof key);
    key.kind = kind;
    key.wei_f32 = wei_f32;
    key.accum = accum;
    key.dst_plain = dst_plain;
    key.dtype = d->dtype;
    // Part of the key: plans built before the switch changed are not reused.
    // 2: native on AMX (its own layouts, init_mds).
    key.native = d->dtype == TRN_DTYPE_BF16 && trn__dnnl_bf16_native()
                     ? (trn__dnnl_amx() ? CONV_NATIVE_AMX : CONV_NATIVE)
                     : 0;
    key.spatial = d->spatial;
    key.has_bias = d->bias != NULL;
    key.n = d->n, key.c_in = d->c_in, key.c_out = d->c_out, key.groups = d->groups;
    const int sp = d->spatial;
    const size_t sb = (size_t)sp * sizeof(int64_t), tb = (size_t)(sp + 2) * sizeof(int64_t);
    memcpy(key.in_size, d->in_size, sb);
    memcpy(key.out_size, d->out_size, sb);
    memcpy(key.kernel, d->kernel, sb);
    memcpy(key.stride, d->stride, sb);
    memcpy(key.padding, d->padding, sb);
    memcpy(key.dilation, d->dilation, sb);
    memcpy(key.input_strides, d->input_strides, tb);
    memcpy(key.weight_strides, d->weight_strides, tb);
    memcpy(key.output_strides, d->output_strides, tb);
    key.bias_stride = d->bias ? d->bias_stride : 0;
    trn_conv_desc db;
    if (blk != NULL) {
        key.out_blk_ns = blk->ns;
        memset(key.output_strides, 0, sizeof key.output_strides);
        db = *d;
        db.output = blk->ptr;
        d = &db;
    }

    conv_plan *plan = trn__plan_find(&key, sizeof key), *own = NULL;
    if (plan == NULL) {
        trn_status st;
        if (blk != NULL) {
            // Only the kernels the plain path would run (bfloat16 native,
            // float32), as is: otherwise (a strided piece oneDNN's direct
            // kernels refuse, say) the plain path runs.
            st = TRN_ERROR_UNSUPPORTED;
            if (d->dtype == TRN_DTYPE_F32 || key.native)
                st = plan_build_as(&key, dnnl_type((trn_dtype)d->dtype), true, &own);
            if (st != TRN_SUCCESS) {
                trn_clear_error();
                own = calloc(1, sizeof *own);
                if (own == NULL)
                    return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                                          "out of host memory for a conv plan");
            }
            st = TRN_SUCCESS;
        } else {
            st = plan_build(&key, &own);
        }
        if (st != TRN_SUCCESS) return st;
        plan = trn__plan_insert(&key, sizeof key, own);
        if (plan == own) {
            own = NULL;
        } else if (plan != NULL) {
            plan_destroy(own);
            own = NULL;
        } else {
            plan = own;
        }
    }
    trn_status st;
    if (plan->prim == NULL)  // no kernel for the blocked output gradient
        st = conv_run_plan_w(kind, orig, accum, dst_plain, NULL, wei_f32);
    else
        st = plan_execute(plan, d);
    plan_destroy(own);
    return st;
}

static trn_status conv_run_plan(conv_kind kind, const trn_conv_desc *d, bool accum, bool dst_plain,
                                const conv_blk *blk) {
    return conv_run_plan_w(kind, d, accum, dst_plain, blk, false);
}

// ---- blocked reduction (float32) -------------------------------------------------
// oneDNN 2.6's float32 convolutions keep each output in a register over the
// whole reduction (c_in x kernel for forward, c_out x kernel for the input
// gradient, batch x output plane for the weight gradient): one running sum
// whose rounding error grows with its length (forward of a 256-channel 3x3
// convolution: 4x PyTorch CPU's error against float64). PyTorch's oneDNN
// adds blocks of 16 input channels to the output. So float32 convolutions
// reduce in blocks here too, each block a convolution of its own:
// forward: input-channel blocks accumulated by a "sum" post-op into a dense
// channels-last float32 buffer (the layout the kernels compute in, so no
// reorder between blocks), copied to the output at the end; input
// gradient: output-channel blocks, each after the first into a scratch
// buffer added to the output; weight gradient: blocks of batch items
// (about CONV_W_BLOCK terms: one item of a plane of 1024 or more), added the
// same way. Each block is a oneDNN call with its own reorders, so blocks
// are no smaller than the accuracy needs: 1024-term blocks keep the weight
// gradient at or below CPU's error (about half of it on ResNet's 16x16
// stage) and take 3-10 % less time there than 256-term blocks (one image
// of a 16x16 plane per oneDNN call). Groups > 1 run unblocked (their reductions are short),
// and so do the conv_ch16_direct shapes (their kernels block as CPU's do).
#define CONV_RED_BLOCK 128  // reduction terms a block aims at
#define CONV_CH_BLOCK 16    // channel blocks are multiples of this
#define CONV_W_BLOCK 1024   // weight gradient: batch x plane terms a block aims at

static int64_t kernel_volume(const trn_conv_desc *d) {
    int64_t v = 1;
    for (int i = 0; i < d->spatial; i++) v *= d->kernel[i];
    return v;
}

static int64_t out_plane(const trn_conv_desc *d) {
    int64_t v = 1;
    for (int i = 0; i < d->spatial; i++) v *= d->out_size[i];
    return v;
}

// Channels per block of a reduction over `channels` x kvol terms; 0: no blocks.
static int64_t channel_block(int64_t channels, int64_t kvol) {
    if (channels * kvol <= CONV_RED_BLOCK) return 0;
    int64_t b = CONV_RED_BLOCK / kvol;
    // Whole 16-channel blocks (oneDNN's blocked layouts) unless the kernel
    // is so large (7x7) that 16 channels would make long sums again.
    if (b >= CONV_CH_BLOCK)
        b = b / CONV_CH_BLOCK * CONV_CH_BLOCK;
    else if (kvol * CONV_CH_BLOCK <= 2 * CONV_RED_BLOCK)
        b = CONV_CH_BLOCK;
    else if (b < 1)
        b = 1;
    return b >= channels ? 0 : b;
}

// Dense strides of [n, c, sizes...] (channels_last: c innermost).
static void dense_strides(const trn_conv_desc *d, int64_t c, const int64_t *sizes,
                          bool channels_last, int64_t *st) {
    const int sp = d->spatial;
    int64_t acc = channels_last ? c : 1;
    for (int i = sp - 1; i >= 0; i--) {
        st[2 + i] = acc;
        acc *= sizes[i];
    }
    if (channels_last) {
        st[1] = 1;
    } else {
        st[1] = acc;
        acc *= c;
    }
    st[0] = acc;
}

static void *offset_f32(void *p, int64_t elems) {
    return p == NULL ? NULL : (void *)((float *)p + elems);
}

static trn_status fwd_blocked(const trn_conv_desc *d, int64_t cb) {
    const int nd = 2 + d->spatial;
    int64_t ysz[5] = {d->n, d->c_out}, yst[5];
    memcpy(ysz + 2, d->out_size, (size_t)d->spatial * sizeof(int64_t));
    dense_strides(d, d->c_out, d->out_size, true, yst);
    float *y = NULL;
    trn_status st =
        trn__dnnl_accum_buffer((size_t)(d->n * d->c_out * out_plane(d)) * 4, (void **)&y);
    if (st != TRN_SUCCESS) return st;
    for (int64_t c0 = 0; c0 < d->c_in; c0 += cb) {
        trn_conv_desc q = *d;
        q.c_in = d->c_in - c0 < cb ? d->c_in - c0 : cb;
        q.input = offset_f32(d->input, c0 * d->input_strides[1]);
        q.weight = offset_f32(d->weight, c0 * d->weight_strides[1]);
        if (c0 > 0) q.bias = NULL;
        q.output = y;
        memcpy(q.output_strides, yst, sizeof yst);
        if ((st = conv_run_plan(CONV_FWD, &q, c0 > 0, true, NULL)) != TRN_SUCCESS) return st;
    }
    conv_move_f32(d->output, d->output_strides, y, yst, nd, ysz, false);
    return TRN_SUCCESS;
}

static trn_status bwd_data_blocked(const trn_conv_desc *d, int64_t cb) {
    const int nd = 2 + d->spatial;
    int64_t xsz[5] = {d->n, d->c_in}, tst[5];
    memcpy(xsz + 2, d->in_size, (size_t)d->spatial * sizeof(int64_t));
    dense_strides(d, d->c_in, d->in_size, false, tst);
    float *tmp = NULL;
    int64_t in_plane = 1;
    for (int i = 0; i < d->spatial; i++) in_plane *= d->in_size[i];
    trn_status st = trn__dnnl_accum_buffer((size_t)(d->n * d->c_in * in_plane) * 4, (void **)&tmp);
    if (st != TRN_SUCCESS) return st;
    for (int64_t c0 = 0; c0 < d->c_out; c0 += cb) {
        trn_conv_desc q = *d;
        q.c_out = d->c_out - c0 < cb ? d->c_out - c0 : cb;
        q.output = offset_f32(d->output, c0 * d->output_strides[1]);
        q.weight = offset_f32(d->weight, c0 * d->weight_strides[0]);
        if (c0 > 0) {
            q.input = tmp;
            memcpy(q.input_strides, tst, sizeof tst);
        }
        if ((st = conv_run_plan(CONV_BWD_DATA, &q, false, false, NULL)) != TRN_SUCCESS) return st;
        if (c0 > 0) conv_move_f32(d->input, d->input_strides, tmp, tst, nd, xsz, true);
    }
    return TRN_SUCCESS;
}

// Elements of a float32 weight gradient (its bias follows in a block buffer).
static int64_t wgrad_weight_elems(const trn_conv_desc *d) {
    return d->c_out * d->c_in * kernel_volume(d);
}

// Adds one batch block's gradient (dense weight with strides `tst`, then
// c_out bias values) into the weight and bias. Serial and pooled runs both
// add their blocks through here in block order: that shared order is what
// makes the bits the same at every thread count.
static void wgrad_block_add(const trn_conv_desc *d, const float *t, const int64_t *tst,
                            int64_t wn) {
    int64_t wsz[5] = {d->c_out, d->c_in}, one = 1;
    memcpy(wsz + 2, d->kernel, (size_t)d->spatial * sizeof(int64_t));
    conv_move_f32(d->weight, d->weight_strides, t, tst, 2 + d->spatial, wsz, true);
    if (d->bias) conv_move_f32(d->bias, &d->bias_stride, t + wn, &one, 1, &d->c_out, true);
}

static trn_status bwd_weights_blocked(const trn_conv_desc *d, int64_t nb, const conv_blk *blk) {
    int64_t tst[5];
    dense_strides(d, d->c_in, d->kernel, false, tst);
    const int64_t wn = wgrad_weight_elems(d);
    float *tmp = NULL;
    trn_status st = trn__dnnl_accum_buffer((size_t)(wn + d->c_out) * 4, (void **)&tmp);
    if (st != TRN_SUCCESS) return st;
    for (int64_t b = 0; b < d->n; b += nb) {
        trn_conv_desc q = *d;
        q.n = d->n - b < nb ? d->n - b : nb;
        q.input = offset_f32(d->input, b * d->input_strides[0]);
        q.output = offset_f32(d->output, b * d->output_strides[0]);
        if (b > 0) {
            q.weight = tmp;
            memcpy(q.weight_strides, tst, sizeof tst);
            if (d->bias) q.bias = tmp + wn, q.bias_stride = 1;
        }
        conv_blk qb = {NULL, 0};
        if (blk != NULL) qb = (conv_blk){blk->ptr + b * blk->ns * 4, blk->ns};
        if ((st = conv_run_plan(CONV_BWD_WEIGHTS, &q, false, false, blk ? &qb : NULL)) !=
            TRN_SUCCESS)
            return st;
        if (b > 0) wgrad_block_add(d, tmp, tst, wn);
    }
    return TRN_SUCCESS;
}

// Batch items per block of a float32 weight gradient that runs in batch
// blocks (about CONV_W_BLOCK reduction terms each); 0: one call.
// A reduction of at least 2 x CONV_W_HALF_MIN terms runs as two blocks or
// more even when one would hold it: oneDNN's one call sums every batch item
// into one chain per weight, where PyTorch CPU's two-thread call sums two
// halves (its oneDNN splits the batch between the threads). On the Intel host
// (session 32) 8 x 8 x 8 x 8 gradients were 1.6-2.5x CPU's error unsplit.
#define CONV_W_HALF_MIN 256
static int64_t wgrad_block_items(const trn_conv_desc *d) {
    if (d->dtype != TRN_DTYPE_F32 || d->groups != 1 || d->n <= 0) return 0;
    const int64_t plane = out_plane(d) > 0 ? out_plane(d) : 1;
    int64_t nb = CONV_W_BLOCK / plane > 1 ? CONV_W_BLOCK / plane : 1;
    if (nb >= d->n && d->n >= 2 && d->n * plane >= 2 * CONV_W_HALF_MIN) nb = (d->n + 1) / 2;
    return nb < d->n ? nb : 0;
}

// One convolution of `d` on the calling thread, float32 reductions blocked.
static trn_status conv_run_one(conv_kind kind, const trn_conv_desc *d, const conv_blk *blk) {
    if (d->dtype == TRN_DTYPE_F32 && d->groups == 1 && d->n > 0 &&
        !conv_ch16_direct(kind, d->spatial, d->groups, d->c_in, d->c_out, kernel_volume(d))) {
        const int64_t kvol = kernel_volume(d);
        int64_t cb;
        if (kind == CONV_FWD && (cb = channel_block(d->c_in, kvol)) > 0) return fwd_blocked(d, cb);
        if (kind == CONV_BWD_DATA && (cb = channel_block(d->c_out, kvol)) > 0)
            return bwd_data_blocked(d, cb);
        const int64_t nb = kind == CONV_BWD_WEIGHTS ? wgrad_block_items(d) : 0;
        if (nb > 0) return bwd_weights_blocked(d, nb, blk);
    }
    return conv_run_plan(kind, d, false, false, blk);
}

// oneDNN would run each convolution on an OpenMP team of its own, next to
// libtrn's pool on the same cores; its kernels meet at spinning barriers, so
// when a team thread is descheduled (the pool's threads or any other load
// hold the core) the others spin out whole time slices: on 2 loaded cores a
// 0.4 M-MAC weight gradient took 7.5 ms instead of 0.03 ms, a 600 M-MAC
// convolution 50-100 ms instead of 20-26 ms single-threaded. So oneDNN runs
// single-threaded, and a large convolution is cut into independent pieces
// that run on libtrn's pool: along the batch (forward, input gradient) or
// along output channels (weight gradient; forward/input gradient of a
// single image: output/input channels).
#define CONV_SPLIT_MIN_MACS ((int64_t)1 << 21)
#define CONV_SPLIT_PER_THREAD 2

typedef enum conv_axis { AXIS_BATCH, AXIS_C_OUT, AXIS_C_IN } conv_axis;

typedef struct conv_split {
    trn_conv_desc d;
    conv_kind kind;
    conv_axis axis;
    int64_t step, extent;
    conv_blk blk;  // ptr NULL: none
    trn__split_error error;
} conv_split;

static void *byte_offset(const void *p, int64_t elems, size_t es) {
    return p == NULL ? NULL : (void *)((uintptr_t)p + (uintptr_t)(elems * (int64_t)es));
}

static void split_piece(void *ctx, int64_t p0, int64_t p1) {
    conv_split *sp = ctx;
    const size_t es = trn_dtype_size(sp->d.dtype);
    const int saved = trn__dnnl_serial_begin();
    for (int64_t p = p0; p < p1; p++) {
        if (trn__split_failed(&sp->error)) break;
        trn_conv_desc d = sp->d;
        const int64_t lo = p * sp->step;
        const int64_t n = sp->extent - lo < sp->step ? sp->extent - lo : sp->step;
        if (n <= 0) break;
        conv_blk pb = sp->blk;
        if (sp->axis == AXIS_BATCH) {
            d.n = n;
            d.input = byte_offset(d.input, lo * d.input_strides[0], es);
            d.output = byte_offset(d.output, lo * d.output_strides[0], es);
            if (pb.ptr) pb.ptr = byte_offset(pb.ptr, lo * pb.ns, es);
        } else if (sp->axis == AXIS_C_OUT) {
            // Channel block lo / 16 of nChw16c starts lo x plane elements in.
            if (pb.ptr) pb.ptr = byte_offset(pb.ptr, lo * out_plane(&d), es);
            d.c_out = n;
            d.output = byte_offset(d.output, lo * d.output_strides[1], es);
            d.weight = byte_offset(d.weight, lo * d.weight_strides[0], es);
            d.bias = byte_offset(d.bias, lo * d.bias_stride, es);
        } else {
            d.c_in = n;
            d.input = byte_offset(d.input, lo * d.input_strides[1], es);
            d.weight = byte_offset(d.weight, lo * d.weight_strides[1], es);
        }
        trn_clear_error();
        trn_status st = conv_run_one(sp->kind, &d, pb.ptr ? &pb : NULL);
        if (st != TRN_SUCCESS) {
            trn__split_error_record(&sp->error, st);
            break;
        }
    }
    trn__dnnl_serial_end(saved);
}

// A float32 weight gradient in batch blocks, the blocks spread over the
// pool. Split along output channels instead (as other weight gradients),
// every piece reordered all of the input to its kernel's layout again and
// ran each block as a half-width oneDNN call: at 2 threads the ResNet
// stage-1 and stem weight gradients took 6-15 % more CPU time than at one.
// Here each block is the one-thread path's call, block 0 into the weight,
// block k into a buffer of its own, and the buffers are added to the weight
// in block order afterwards: the additions bwd_weights_blocked makes, so
// the bits are the one-thread bits at any thread count. The buffers hold a
// weight per block, so large weights with many blocks keep the channel
// split (CONV_W_PART_MAX bytes at most; ResNet's largest is 0.26 MiB).
#define CONV_W_PART_MAX ((int64_t)4 << 20)
typedef struct wgrad_split {
    trn_conv_desc d;
    int64_t nb, wn;
    int64_t tst[5];
    float *part;   // block k > 0: wn + c_out floats at (k - 1) * (wn + c_out)
    conv_blk blk;  // ptr NULL: none
    trn__split_error error;
} wgrad_split;

static void wgrad_piece(void *ctx, int64_t p0, int64_t p1) {
    wgrad_split *ws = ctx;
    const trn_conv_desc *d = &ws->d;
    const int saved = trn__dnnl_serial_begin();
    for (int64_t p = p0; p < p1; p++) {
        if (trn__split_failed(&ws->error)) break;
        const int64_t b = p * ws->nb;
        trn_conv_desc q = *d;
        q.n = d->n - b < ws->nb ? d->n - b : ws->nb;
        q.input = offset_f32(d->input, b * d->input_strides[0]);
        q.output = offset_f32(d->output, b * d->output_strides[0]);
        if (p > 0) {
            float *t = ws->part + (p - 1) * (ws->wn + d->c_out);
            q.weight = t;
            memcpy(q.weight_strides, ws->tst, sizeof ws->tst);
            if (d->bias) q.bias = t + ws->wn, q.bias_stride = 1;
        }
        conv_blk qb = {NULL, 0};
        if (ws->blk.ptr != NULL) qb = (conv_blk){ws->blk.ptr + b * ws->blk.ns * 4, ws->blk.ns};
        trn_clear_error();
        const trn_status st =
            conv_run_plan(CONV_BWD_WEIGHTS, &q, false, false, qb.ptr ? &qb : NULL);
        if (st != TRN_SUCCESS) {
            trn__split_error_record(&ws->error, st);
            break;
        }
    }
    trn__dnnl_serial_end(saved);
}

// `nb` items per block, `blocks` blocks, `part_bytes` the buffers of blocks
// 1.. (conv_run sized them against CONV_W_PART_MAX).
static trn_status wgrad_blocks_parallel(const trn_conv_desc *d, int64_t nb, int64_t blocks,
                                        int64_t part_bytes, const conv_blk *blk) {
    wgrad_split *ws = calloc(1, sizeof *ws);
    if (ws == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "out of host memory for a convolution split");
    ws->d = *d;
    ws->nb = nb;
    ws->wn = wgrad_weight_elems(d);
    dense_strides(d, d->c_in, d->kernel, false, ws->tst);
    if (blk != NULL) ws->blk = *blk;
    ws->part = malloc((size_t)part_bytes);
    if (ws->part == NULL) {
        free(ws);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "out of host memory for weight-gradient blocks");
    }
    trn_parallel_for(blocks, 1, wgrad_piece, ws);
    trn_status st = trn__split_error_raise(&ws->error);
    for (int64_t k = 1; st == TRN_SUCCESS && k < blocks; k++)
        wgrad_block_add(d, ws->part + (k - 1) * (ws->wn + d->c_out), ws->tst, ws->wn);
    free(ws->part);
    free(ws);
    return st;
}

static int64_t conv_macs(const trn_conv_desc *d) {
    int64_t m = d->n * d->c_out * (d->c_in / d->groups);
    for (int i = 0; i < d->spatial; i++) m *= d->out_size[i] * d->kernel[i];
    return m;
}

// A native bfloat16 weight gradient (non-AMX kernels) in two batch halves,
// each a full-width oneDNN call writing float32 sums into a buffer of its
// own; the halves are added in float32 and rounded once to the caller's
// type. Split along output channels instead (the pool split of other
// weight gradients), each piece reordered all of the input again and ran a
// narrower kernel: ResNet's 64 -> 64 8 x 8 gradient took 1.19x its
// one-thread CPU time at two threads in 4 pieces, the stride-2 ones
// 1.4-1.5x. The halves are fixed by the shape (never by the pool size), so
// the bits are the same at every thread count; each half sums in float32 as
// the one call did, and the one extra float32 addition is far below the
// bfloat16 rounding that follows.
#define CONV_HALVES 2
typedef struct wgrad_halves {
    trn_conv_desc d;
    int64_t half, wn;
    int64_t tst[5];
    float *part;   // half h: wn + c_out floats at h * (wn + c_out)
    conv_blk blk;  // ptr NULL: none
    trn__split_error error;
} wgrad_halves;

// Whether `d` (backward weights) runs as wgrad_halves: native bfloat16 off
// AMX (whose kernels choose their own layouts), a batch to halve, at least
// CONV_SPLIT_MIN_MACS per half, the two float32 buffers within
// CONV_W_PART_MAX, and at least CONV_W_BLOCK batch x plane terms per weight:
// the partial sums cost about 1 ns per weight element (two reorders to the
// dense buffers, the addition, the rounding), which on 4 x 4 planes (512
// terms) made one thread 6-11 % slower than one full-batch call for a 0-18 %
// gain at two threads.
static bool wgrad_halves_fit(const trn_conv_desc *d) {
    if (d->dtype != TRN_DTYPE_BF16 || !trn__dnnl_bf16_native() || trn__dnnl_amx() ||
        d->groups != 1 || d->n < CONV_HALVES)
        return false;
    const int64_t part = CONV_HALVES * (wgrad_weight_elems(d) + d->c_out) * 4;
    return conv_macs(d) >= CONV_HALVES * CONV_SPLIT_MIN_MACS && part <= CONV_W_PART_MAX &&
           d->n * out_plane(d) >= CONV_W_BLOCK;
}

static void wgrad_half_piece(void *ctx, int64_t p0, int64_t p1) {
    wgrad_halves *wh = ctx;
    const trn_conv_desc *d = &wh->d;
    const size_t es = trn_dtype_size(d->dtype);
    const int saved = trn__dnnl_serial_begin();
    for (int64_t p = p0; p < p1; p++) {
        if (trn__split_failed(&wh->error)) break;
        const int64_t b = p * wh->half;
        trn_conv_desc q = *d;
        q.n = d->n - b < wh->half ? d->n - b : wh->half;
        q.input = byte_offset(d->input, b * d->input_strides[0], es);
        q.output = byte_offset(d->output, b * d->output_strides[0], es);
        float *t = wh->part + p * (wh->wn + d->c_out);
        q.weight = t;
        memcpy(q.weight_strides, wh->tst, sizeof wh->tst);
        if (d->bias) q.bias = t + wh->wn, q.bias_stride = 1;
        conv_blk qb = {NULL, 0};
        if (wh->blk.ptr != NULL)
            qb = (conv_blk){byte_offset(wh->blk.ptr, b * wh->blk.ns, es), wh->blk.ns};
        trn_clear_error();
        const trn_status st =
            conv_run_plan_w(CONV_BWD_WEIGHTS, &q, false, false, qb.ptr ? &qb : NULL, true);
        if (st != TRN_SUCCESS) {
            trn__split_error_record(&wh->error, st);
            break;
        }
    }
    trn__dnnl_serial_end(saved);
}

// dst (bfloat16, strides ds) = round(src) for a dense float32 src of shape
// sizes[nd]; one contiguous run where dst is dense in the same order.
static void store_bf16(void *dst, const int64_t *ds, const float *src, int nd,
                       const int64_t *sizes) {
    int64_t total = 1;
    bool dense = true;
    for (int i = nd - 1; i >= 0; i--) {
        if (sizes[i] != 1 && ds[i] != total) dense = false;
        total *= sizes[i];
    }
    if (dense) {
        trn__bf16_store_run(dst, (const char *)src, total);
        return;
    }
    int64_t idx[5] = {0};
    uint16_t *o = dst;
    for (int64_t t = 0; t < total; t++) {
        int64_t off = 0;
        for (int i = 0; i < nd; i++) off += idx[i] * ds[i];
        o[off] = trn_float_to_bf16(src[t]);
        for (int i = nd - 1; i >= 0; i--) {
            if (++idx[i] < sizes[i]) break;
            idx[i] = 0;
        }
    }
}

static trn_status wgrad_halves_run(const trn_conv_desc *d, const conv_blk *blk) {
    wgrad_halves *wh = calloc(1, sizeof *wh);
    if (wh == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "out of host memory for a convolution split");
    wh->d = *d;
    wh->half = (d->n + CONV_HALVES - 1) / CONV_HALVES;
    wh->wn = wgrad_weight_elems(d);
    dense_strides(d, d->c_in, d->kernel, false, wh->tst);
    if (blk != NULL) wh->blk = *blk;
    const int64_t each = wh->wn + d->c_out;
    wh->part = malloc((size_t)(CONV_HALVES * each) * 4);
    if (wh->part == NULL) {
        free(wh);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "out of host memory for weight-gradient halves");
    }
    const int64_t pieces = (d->n + wh->half - 1) / wh->half;
    trn_parallel_for(pieces, 1, wgrad_half_piece, wh);
    trn_status st = trn__split_error_raise(&wh->error);
    if (st == TRN_SUCCESS) {
        for (int64_t h = 1; h < pieces; h++)
            conv_move_run(wh->part, wh->part + h * each, each, true);
        int64_t wsz[5] = {d->c_out, d->c_in};
        memcpy(wsz + 2, d->kernel, (size_t)d->spatial * sizeof(int64_t));
        store_bf16(d->weight, d->weight_strides, wh->part, 2 + d->spatial, wsz);
        if (d->bias) store_bf16(d->bias, &d->bias_stride, wh->part + wh->wn, 1, &d->c_out);
    }
    free(wh->part);
    free(wh);
    return st;
}

static trn_status conv_run(const conv_args *a, const conv_blk *blk) {
    const trn_conv_desc *d = &a->d;
    if (a->kind == CONV_BWD_WEIGHTS && d->n == 0) {
        int64_t wsz[5] = {d->c_out, d->c_in / d->groups};
        memcpy(wsz + 2, d->kernel, (size_t)d->spatial * sizeof(int64_t));
        zero_strided(d->dtype, d->weight, 2 + d->spatial, wsz, d->weight_strides);
        if (d->bias) zero_strided(d->dtype, d->bias, 1, &d->c_out, &d->bias_stride);
        return TRN_SUCCESS;
    }
    dnnl_engine_t engine;  // loads oneDNN, which finds its OpenMP runtime
    trn_status st = trn__dnnl_engine(&engine);
    if (st != TRN_SUCCESS) return st;
    if (!trn__dnnl_can_serialize()) return conv_run_one(a->kind, d, blk);  // oneDNN threads it
    const int threads = trn_parallel_threads();
    const int64_t macs = conv_macs(d);
    int64_t want = (int64_t)threads * CONV_SPLIT_PER_THREAD;
    if (macs / CONV_SPLIT_MIN_MACS < want) want = macs / CONV_SPLIT_MIN_MACS;
    conv_axis axis = AXIS_BATCH;
    int64_t extent = 0;
    if (a->kind != CONV_BWD_WEIGHTS && d->n >= 2) {
        axis = AXIS_BATCH, extent = d->n;
    } else if (d->groups == 1) {
        axis = a->kind == CONV_BWD_DATA ? AXIS_C_IN : AXIS_C_OUT;
        extent = axis == AXIS_C_IN ? d->c_in : d->c_out;
    }
    if (a->kind == CONV_BWD_WEIGHTS && wgrad_halves_fit(d)) return wgrad_halves_run(d, blk);
    if (a->kind == CONV_BWD_WEIGHTS && threads > 1 && want > 1) {
        const int64_t nb = wgrad_block_items(d);
        const int64_t blocks = nb > 0 ? (d->n + nb - 1) / nb : 0;
        const int64_t part = (blocks - 1) * (wgrad_weight_elems(d) + d->c_out) * 4;
        if (nb > 0 && blocks >= threads && part <= CONV_W_PART_MAX)
            return wgrad_blocks_parallel(d, nb, blocks, part, blk);
    }
    if (want > extent) want = extent;
    if (threads <= 1 || want <= 1) {
        const int saved = trn__dnnl_serial_begin();
        st = conv_run_one(a->kind, d, blk);
        trn__dnnl_serial_end(saved);
        return st;
    }
    conv_split *sp = calloc(1, sizeof *sp);
    if (sp == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "out of host memory for a convolution split");
    sp->d = *d;
    sp->kind = a->kind;
    sp->axis = axis;
    sp->extent = extent;
    if (blk != NULL) sp->blk = *blk;
    int64_t step = (extent + want - 1) / want;
    // Channel pieces are whole 16-channel blocks (oneDNN's blocked layouts):
    // 8-channel pieces of a 32-channel weight gradient ran slower than one.
    if (axis != AXIS_BATCH) step = (step + 15) / 16 * 16;
    sp->step = step;
    const int64_t pieces = (extent + step - 1) / step;
    if (pieces <= 1) {
        free(sp);
        const int saved = trn__dnnl_serial_begin();
        st = conv_run_one(a->kind, d, blk);
        trn__dnnl_serial_end(saved);
        return st;
    }
    trn_parallel_for(pieces, 1, split_piece, sp);
    st = trn__split_error_raise(&sp->error);
    free(sp);
    return st;
}

// Begins access to a's tensors but `skip` (S_COUNT: none); *begun: how many
// slots were passed, for access_end.
static trn_status access_begin(const conv_args *a, int skip, int *begun) {
    const void *ptrs[S_COUNT] = {a->d.input, a->d.weight, a->d.bias, a->d.output};
    trn_status st = TRN_SUCCESS;
    for (*begun = 0; *begun < S_COUNT; (*begun)++) {
        const int i = *begun;
        if (a->span[i] == 0 || i == skip) continue;
        st = trn__mem_access_begin(trn__offset_ptr(ptrs[i], a->lo[i]), (size_t)a->span[i]);
        if (st != TRN_SUCCESS) break;
    }
    return st;
}

static void access_end(const conv_args *a, int skip, int begun) {
    const void *ptrs[S_COUNT] = {a->d.input, a->d.weight, a->d.bias, a->d.output};
    for (int i = 0; i < begun; i++)
        if (a->span[i] != 0 && i != skip)
            trn__mem_access_end(trn__offset_ptr(ptrs[i], a->lo[i]), (size_t)a->span[i]);
}

// ---- float16 (h16_stage.h) ----------------------------------------------------------------
// A float16 convolution runs as the float32 one on float32 copies of its
// tensors (each in its own dim order, so channels-last stays channels-last),
// its results rounded to float16 once. oneDNN's own staging (its
// `simple:any` float16 reorders, about 20 ns an element) made a 64 -> 64
// 3x3 forward on 8 x 32 x 32 images 20x slower than float32.

typedef struct f16_slot {
    int nd;
    int64_t sizes[5], dense[5], off;
} f16_slot;

// The shape, strides and pointer of tensor `s` of `d`.
static int slot_of(trn_conv_desc *d, int s, int64_t *sizes, int64_t **strides, void ***ptr) {
    const int sp = d->spatial;
    const size_t sb = (size_t)sp * sizeof(int64_t);
    switch (s) {
    case S_INPUT:
        sizes[0] = d->n, sizes[1] = d->c_in;
        memcpy(sizes + 2, d->in_size, sb);
        *strides = d->input_strides, *ptr = &d->input;
        return 2 + sp;
    case S_WEIGHT:
        sizes[0] = d->c_out, sizes[1] = d->c_in / d->groups;
        memcpy(sizes + 2, d->kernel, sb);
        *strides = d->weight_strides, *ptr = &d->weight;
        return 2 + sp;
    case S_BIAS:
        sizes[0] = d->c_out;
        *strides = &d->bias_stride, *ptr = &d->bias;
        return 1;
    default:
        sizes[0] = d->n, sizes[1] = d->c_out;
        memcpy(sizes + 2, d->out_size, sb);
        *strides = d->output_strides, *ptr = &d->output;
        return 2 + sp;
    }
}

// Places tensor `s` of `d` at *total (elements) of the staging buffer.
static void f16_slot_place(trn_conv_desc *d, int s, f16_slot *o, int64_t *total) {
    int64_t *strides;
    void **ptr;
    o->nd = slot_of(d, s, o->sizes, &strides, &ptr);
    o->off = *total;
    *total += (trn__f16_dense_like(o->nd, o->sizes, strides, o->dense) + 15) / 16 * 16;
}

// Points tensor `s` of q (float32 now) at its copy; widens the float16
// data there when `in`.
static void f16_slot_bind(trn_conv_desc *q, int s, const f16_slot *o, float *buf, bool in,
                          trn_dtype dt) {
    int64_t sizes[5], *strides;
    void **ptr;
    slot_of(q, s, sizes, &strides, &ptr);
    if (in) trn__h16_widen_nd(dt, o->nd, o->sizes, *ptr, strides, buf + o->off, o->dense);
    *ptr = buf + o->off;
    memcpy(strides, o->dense, (size_t)o->nd * sizeof(int64_t));
}

static void f16_slot_store(const trn_conv_desc *d, int s, const f16_slot *o, const float *buf) {
    int64_t sizes[5], *strides;
    void **ptr;
    trn_conv_desc copy = *d;
    slot_of(&copy, s, sizes, &strides, &ptr);
    trn__h16_narrow_nd(d->dtype, o->nd, o->sizes, buf + o->off, o->dense, *ptr, strides);
}

// Which tensors of a convolution of `kind` it reads and writes.
static void f16_roles(const trn_conv_desc *d, conv_kind kind, bool *in, bool *out) {
    for (int i = 0; i < S_COUNT; i++) in[i] = out[i] = false;
    switch (kind) {
    case CONV_FWD:
        in[S_INPUT] = in[S_WEIGHT] = true, in[S_BIAS] = d->bias != NULL, out[S_OUTPUT] = true;
        break;
    case CONV_BWD_DATA: in[S_OUTPUT] = in[S_WEIGHT] = true, out[S_INPUT] = true; break;
    case CONV_BWD_WEIGHTS:
        in[S_INPUT] = in[S_OUTPUT] = true, out[S_WEIGHT] = true, out[S_BIAS] = d->bias != NULL;
        break;
    }
}

static trn_status conv_f16_run(const conv_args *a) {
    conv_args q = *a;
    q.d.dtype = TRN_DTYPE_F32;
    bool in[S_COUNT], out[S_COUNT];
    f16_roles(&a->d, a->kind, in, out);
    f16_slot sl[S_COUNT];
    int64_t total = 0;
    for (int i = 0; i < S_COUNT; i++)
        if (in[i] || out[i]) f16_slot_place(&q.d, i, &sl[i], &total);
    float *buf = NULL;
    trn_status st = trn__dnnl_stage_buffer((size_t)total * sizeof(float), (void **)&buf);
    if (st != TRN_SUCCESS) return st;
    for (int i = 0; i < S_COUNT; i++)
        if (in[i] || out[i]) f16_slot_bind(&q.d, i, &sl[i], buf, in[i], a->d.dtype);
    if ((st = conv_run(&q, NULL)) != TRN_SUCCESS) return st;
    for (int i = 0; i < S_COUNT; i++)
        if (out[i]) f16_slot_store(&a->d, i, &sl[i], buf);
    return TRN_SUCCESS;
}

// float16: float32 kernels on widened copies. bfloat16 off its native path
// (trn__dnnl_bf16_native, dnnl_common.c) keeps the plan's staging into
// oneDNN's blocked float32 layouts: through these plain copies (then
// reordered by oneDNN) ResNet-18's bf16 step ran 0-25 % slower (session 32).
static bool conv_f16_staged(const conv_args *a) {
    return a->d.dtype == TRN_DTYPE_F16 && a->d.n > 0;
}

static trn_status conv_task(void *args) {
    const conv_args *a = args;
    int begun;
    trn_status st = access_begin(a, S_COUNT, &begun);
    if (st == TRN_SUCCESS) st = conv_f16_staged(a) ? conv_f16_run(a) : conv_run(a, NULL);
    access_end(a, S_COUNT, begun);
    return st;
}

// ---- both backward convolutions in one task (trn/conv_backward.h) ---------------------------
// The input- and weight-gradient convolutions both read the output gradient
// in nChw16c: run apart, each moves it there on its own (a bfloat16 32 x 32
// x 16 x 16 gradient: 0.5 MiB read and written twice; a float32 weight
// gradient in batch blocks moved it block by block, with a oneDNN reorder
// per block). Here it is moved once, into a buffer of its own, and both run
// on the moved copy: the same kernels on the same bits, so the results are
// those of the two launches. Other geometries run the two convolutions one
// after the other.

typedef struct conv_bwd_args {
    conv_args data, weights;
} conv_bwd_args;

_Static_assert(sizeof(conv_bwd_args) <= TRN_TASK_MAX_ARGS, "conv backward args too large");

// Whether both backward convolutions of `d` (the input-gradient descriptor)
// compute on an nChw16c output gradient that conv_layout_move can make:
// float32 or bfloat16 computed natively, a 2-d conv_ch16_direct geometry,
// and each (n, c) plane of the output gradient dense.
static bool bwd_shares_blocked(const trn_conv_desc *d) {
    // Not native bfloat16 on AMX: its convolutions choose their own layouts
    // (init_mds), and an nChw16c output gradient would hold them to the
    // non-AMX kernels.
    const bool dt = d->dtype == TRN_DTYPE_F32 ||
                    (d->dtype == TRN_DTYPE_BF16 && trn__dnnl_bf16_native() && !trn__dnnl_amx());
    if (!dt || d->spatial != 2 || d->n <= 0) return false;
    if (!conv_ch16_direct(CONV_BWD_DATA, d->spatial, d->groups, d->c_in, d->c_out,
                          kernel_volume(d)))
        return false;
    const int64_t h = d->out_size[0], w = d->out_size[1];
    if (w > 1 && d->output_strides[3] != 1) return false;
    if (h > 1 && d->output_strides[2] != (w > 1 ? w : 1)) return false;
    return true;
}

// The moved output gradient's buffer: per thread, grow-only, freed when the
// thread exits (the workspace and accumulation buffer are taken: the
// convolutions' pieces on this thread use them).
static pthread_key_t blk_key;
static pthread_once_t blk_once = PTHREAD_ONCE_INIT;
static int blk_key_status;

typedef struct blk_buffer {
    void *ptr;
    size_t size;
} blk_buffer;

static void blk_buffer_free(void *p) {
    blk_buffer *b = p;
    free(b->ptr);
    free(b);
}

static void blk_key_create(void) { blk_key_status = pthread_key_create(&blk_key, blk_buffer_free); }

static trn_status bwd_blk_buffer(size_t bytes, void **out) {
    pthread_once(&blk_once, blk_key_create);
    if (blk_key_status != 0)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "convolution backward: no thread key");
    blk_buffer *b = pthread_getspecific(blk_key);
    if (b == NULL) {
        if ((b = calloc(1, sizeof *b)) == NULL || pthread_setspecific(blk_key, b) != 0) {
            free(b);
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                                  "out of host memory for a convolution buffer");
        }
    }
    if (b->size < bytes) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes) != 0)
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                                  "out of host memory for a convolution buffer (%zu bytes)", bytes);
        free(b->ptr);
        b->ptr = p;
        b->size = bytes;
    }
    *out = b->ptr;
    return TRN_SUCCESS;
}

// float32 moves by oneDNN's reorder (`jit:blk`, a plan cached under
// CONV_MOVE_KEY): on a cold 32 x 32 x 16 x 16 gradient it ran 2-3x faster than
// 4-byte register transposes (16 rows per tile from 16 planes in memory).
static trn_status move_f32(const trn_conv_desc *d, int64_t b0, int64_t n, char *blk) {
    trn_status st = TRN_SUCCESS;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    if ((st = trn__dnnl_engine(&engine)) != TRN_SUCCESS) return st;
    if ((st = trn__dnnl_stream(&stream)) != TRN_SUCCESS) return st;
    conv_key key;
    memset(&key, 0, sizeof key);
    key.kind = CONV_MOVE_KEY, key.dtype = d->dtype, key.spatial = 2, key.n = n,
    key.c_out = d->c_out;
    memcpy(key.out_size, d->out_size, 2 * sizeof(int64_t));
    memcpy(key.output_strides, d->output_strides, 4 * sizeof(int64_t));
    conv_plan *plan = trn__plan_find(&key, sizeof key), *own = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_memory_t from = NULL, to = NULL;
    if (plan == NULL) {
        if ((own = calloc(1, sizeof *own)) == NULL)
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "out of host memory for a conv plan");
        operand *o = &own->op[S_OUTPUT];
        const dnnl_dims_t dims = {n, d->c_out, d->out_size[0], d->out_size[1]};
        dnnl_dims_t strides;
        memcpy(strides, d->output_strides, 4 * sizeof(int64_t));
        TRN_DNNL_TRY(dnnl_memory_desc_init_by_strides(&o->user_md, 4, dims, dnnl_f32, strides),
                     "convolution output gradient layout");
        TRN_DNNL_TRY(dnnl_memory_desc_init_by_tag(&o->comp_md, 4, dims, dnnl_f32, dnnl_nChw16c),
                     "convolution output gradient layout");
        TRN_DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, &o->user_md, engine, &o->comp_md,
                                                        engine, NULL),
                     "convolution output gradient reorder");
        TRN_DNNL_TRY(dnnl_primitive_create(&o->reorder, rpd),
                     "convolution output gradient reorder");
        plan = trn__plan_insert(&key, sizeof key, own);
        if (plan == own)
            own = NULL;
        else if (plan == NULL)
            plan = own;
    }
    const operand *o = &plan->op[S_OUTPUT];
    TRN_DNNL_TRY(dnnl_memory_create(&from, &o->user_md, engine,
                                    (float *)d->output + b0 * d->output_strides[0]),
                 "convolution output gradient");
    TRN_DNNL_TRY(dnnl_memory_create(&to, &o->comp_md, engine, blk), "convolution output gradient");
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    TRN_DNNL_TRY(dnnl_primitive_execute(o->reorder, stream, 2, a), "convolution output gradient");
    TRN_DNNL_TRY(dnnl_stream_wait(stream), "convolution output gradient");
fail:
    if (from) dnnl_memory_destroy(from);
    if (to) dnnl_memory_destroy(to);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    plan_destroy(own);
    return st;
}

typedef struct bwd_move {
    const trn_conv_desc *d;
    char *blk;
    trn__split_error error;
} bwd_move;

static void bwd_move_piece(void *ctx, int64_t b0, int64_t b1) {
    bwd_move *m = ctx;
    const trn_conv_desc *d = m->d;
    const int64_t hw = out_plane(d), ns = d->output_strides[0], cs = d->output_strides[1];
    const int64_t at = b0 * d->c_out * hw;
    if (d->dtype != TRN_DTYPE_F32) {
        conv_layout_move((uint16_t *)d->output + b0 * ns, ns, cs, (uint16_t *)m->blk + at, b1 - b0,
                         d->c_out, hw, true);
        return;
    }
    const int saved = trn__dnnl_serial_begin();
    trn_clear_error();
    const trn_status st = move_f32(d, b0, b1 - b0, m->blk + at * 4);
    if (st != TRN_SUCCESS) trn__split_error_record(&m->error, st);
    trn__dnnl_serial_end(saved);
}

static trn_status conv_bwd_run(const conv_bwd_args *b) {
    const trn_conv_desc *d = &b->data.d;
    trn_status st;
    if (!bwd_shares_blocked(d)) {
        st = conv_run(&b->data, NULL);
        return st != TRN_SUCCESS ? st : conv_run(&b->weights, NULL);
    }
    const int64_t item = d->c_out * out_plane(d);
    const size_t es = trn_dtype_size(d->dtype);
    char *buf = NULL;
    if ((st = bwd_blk_buffer((size_t)(d->n * item) * es, (void **)&buf)) != TRN_SUCCESS) return st;
    bwd_move *m = calloc(1, sizeof *m);
    if (m == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                              "out of host memory for a convolution backward");
    m->d = d, m->blk = buf;
    // Pieces of at least ~64 KiB.
    const int64_t grain = item * (int64_t)es >= 65536 ? 1 : 65536 / (item * (int64_t)es);
    trn_parallel_for(d->n, grain, bwd_move_piece, m);
    st = trn__split_error_raise(&m->error);
    free(m);
    if (st != TRN_SUCCESS) return st;
    const conv_blk blk = {buf, item};
    st = conv_run(&b->data, &blk);
    return st != TRN_SUCCESS ? st : conv_run(&b->weights, &blk);
}

// Both backward convolutions of float16 (or widened bfloat16) tensors on float32 copies; the
// output gradient is copied once for both.
static trn_status conv_bwd_f16_run(const conv_bwd_args *b) {
    const trn_dtype dt = b->data.d.dtype;
    conv_bwd_args q = *b;
    q.data.d.dtype = q.weights.d.dtype = TRN_DTYPE_F32;
    f16_slot ds[S_COUNT], ws[S_COUNT];
    int64_t total = 0;
    f16_slot_place(&q.data.d, S_OUTPUT, &ds[S_OUTPUT], &total);
    f16_slot_place(&q.data.d, S_WEIGHT, &ds[S_WEIGHT], &total);
    f16_slot_place(&q.data.d, S_INPUT, &ds[S_INPUT], &total);
    f16_slot_place(&q.weights.d, S_INPUT, &ws[S_INPUT], &total);
    f16_slot_place(&q.weights.d, S_WEIGHT, &ws[S_WEIGHT], &total);
    const bool bias = b->weights.d.bias != NULL;
    if (bias) f16_slot_place(&q.weights.d, S_BIAS, &ws[S_BIAS], &total);
    ws[S_OUTPUT] = ds[S_OUTPUT];
    float *buf = NULL;
    trn_status st = trn__dnnl_stage_buffer((size_t)total * sizeof(float), (void **)&buf);
    if (st != TRN_SUCCESS) return st;
    f16_slot_bind(&q.data.d, S_OUTPUT, &ds[S_OUTPUT], buf, true, dt);
    f16_slot_bind(&q.data.d, S_WEIGHT, &ds[S_WEIGHT], buf, true, dt);
    f16_slot_bind(&q.data.d, S_INPUT, &ds[S_INPUT], buf, false, dt);
    f16_slot_bind(&q.weights.d, S_OUTPUT, &ws[S_OUTPUT], buf, false, dt);
    f16_slot_bind(&q.weights.d, S_INPUT, &ws[S_INPUT], buf, true, dt);
    f16_slot_bind(&q.weights.d, S_WEIGHT, &ws[S_WEIGHT], buf, false, dt);
    if (bias) f16_slot_bind(&q.weights.d, S_BIAS, &ws[S_BIAS], buf, false, dt);
    if ((st = conv_bwd_run(&q)) != TRN_SUCCESS) return st;
    f16_slot_store(&b->data.d, S_INPUT, &ds[S_INPUT], buf);
    f16_slot_store(&b->weights.d, S_WEIGHT, &ws[S_WEIGHT], buf);
    if (bias) f16_slot_store(&b->weights.d, S_BIAS, &ws[S_BIAS], buf);
    return TRN_SUCCESS;
}

static trn_status conv_bwd_task(void *args) {
    const conv_bwd_args *b = args;
    int begun_d, begun_w = 0;
    // The output gradient is one tensor: its access is begun once.
    trn_status st = access_begin(&b->data, S_COUNT, &begun_d);
    if (st == TRN_SUCCESS) st = access_begin(&b->weights, S_OUTPUT, &begun_w);
    if (st == TRN_SUCCESS)
        st = b->data.d.dtype == TRN_DTYPE_F16 ? conv_bwd_f16_run(b) : conv_bwd_run(b);
    access_end(&b->weights, S_OUTPUT, begun_w);
    access_end(&b->data, S_COUNT, begun_d);
    return st;
}

// ---- launch ------------------------------------------------------------------------------

#define BAD(...) trn__set_error(TRN_ERROR_INVALID_ARGUMENT, __VA_ARGS__)

// Validates `desc` and fills `a`; *empty: nothing to compute.
static trn_status prepare(trn_stream *stream, const trn_conv_desc *desc, conv_kind kind,
                          const char *fn, conv_args *out, bool *empty) {
    *empty = false;
    if (stream == NULL || desc == NULL) return BAD("%s: stream or descriptor is NULL", fn);
    const trn_conv_desc *d = desc;
    if ((unsigned)d->dtype >= TRN_DTYPE_COUNT || !trn_conv_supports(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              trn_dtype_name(d->dtype));
    if (d->spatial < 1 || d->spatial > 3)
        return BAD("%s: spatial dims must be 1..3, got %d", fn, d->spatial);
    if (d->n < 0 || d->c_in <= 0 || d->c_out <= 0 || d->groups <= 0 || d->c_in % d->groups != 0 ||
        d->c_out % d->groups != 0)
        return BAD("%s: bad sizes (n %lld, c_in %lld, c_out %lld, groups %lld)", fn,
                   (long long)d->n, (long long)d->c_in, (long long)d->c_out, (long long)d->groups);
    for (int i = 0; i < d->spatial; i++) {
        if (d->kernel[i] <= 0 || d->stride[i] <= 0 || d->dilation[i] <= 0 || d->padding[i] < 0 ||
            d->in_size[i] < 0)
            return BAD("%s: bad kernel/stride/dilation/padding in spatial dim %d", fn, i);
        const int64_t ext = d->dilation[i] * (d->kernel[i] - 1) + 1;
        const int64_t out = (d->in_size[i] + 2 * d->padding[i] - ext) / d->stride[i] + 1;
        if (d->in_size[i] + 2 * d->padding[i] < ext || out != d->out_size[i])
            return BAD("%s: output size %lld of spatial dim %d does not match the input "
                       "size %lld (expected %lld)",
                       fn, (long long)d->out_size[i], i, (long long)d->in_size[i], (long long)out);
    }
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;

    conv_args a;
    memset(&a, 0, sizeof a);
    a.d = *d;
    a.kind = kind;
    if (kind == CONV_BWD_DATA) a.d.bias = NULL;
    const int nd = 2 + d->spatial;
    int64_t isz[5] = {d->n, d->c_in}, osz[5] = {d->n, d->c_out},
            wsz[5] = {d->c_out, d->c_in / d->groups};
    int64_t in_numel = d->n * d->c_in, out_numel = d->n * d->c_out;
    for (int i = 0; i < d->spatial; i++) {
        isz[2 + i] = d->in_size[i];
        osz[2 + i] = d->out_size[i];
        wsz[2 + i] = d->kernel[i];
        in_numel *= d->in_size[i];
        out_numel *= d->out_size[i];
    }
    // Nothing to compute: forward/backward-data on an empty batch.
    if (kind != CONV_BWD_WEIGHTS && (in_numel == 0 || out_numel == 0)) {
        *empty = true;
        return TRN_SUCCESS;
    }
    if (kind == CONV_BWD_WEIGHTS && d->n > 0 && (in_numel == 0 || out_numel == 0))
        return BAD("%s: empty spatial size", fn);
    const size_t es = trn_dtype_size(d->dtype);
    const void *ptrs[S_COUNT] = {a.d.input, a.d.weight, a.d.bias, a.d.output};
    const int64_t *sizes[S_COUNT] = {isz, wsz, &d->c_out, osz};
    const int64_t *strides[S_COUNT] = {d->input_strides, d->weight_strides, &d->bias_stride,
                                       d->output_strides};
    const int ndims[S_COUNT] = {nd, nd, 1, nd};
    for (int i = 0; i < S_COUNT; i++) {
        if (i == S_BIAS && ptrs[i] == NULL) continue;
        if ((i == S_INPUT || i == S_OUTPUT) && d->n == 0) continue;
        if ((i == S_INPUT || i == S_OUTPUT) && kind == CONV_BWD_WEIGHTS && d->n == 0) continue;
        if (ptrs[i] == NULL) return BAD("%s: tensor %d pointer is NULL", fn, i);
        if (!trn__view_span(ndims[i], sizes[i], strides[i], es, &a.lo[i], &a.span[i]))
            return BAD("%s: strides of tensor %d overflow the address space", fn, i);
    }
    *out = a;
    return TRN_SUCCESS;
}

static trn_status launch(trn_stream *stream, const trn_conv_desc *desc, conv_kind kind,
                         const char *fn) {
    conv_args a;
    bool empty;
    trn_status st = prepare(stream, desc, kind, fn, &a, &empty);
    if (st != TRN_SUCCESS || empty) return st;
    return trn_stream_launch(stream, conv_task, &a, sizeof a);
}

trn_status trn_conv_forward_launch(trn_stream *stream, const trn_conv_desc *desc) {
    return launch(stream, desc, CONV_FWD, "trn_conv_forward_launch");
}
trn_status trn_conv_backward_data_launch(trn_stream *stream, const trn_conv_desc *desc) {
    return launch(stream, desc, CONV_BWD_DATA, "trn_conv_backward_data_launch");
}
trn_status trn_conv_backward_weights_launch(trn_stream *stream, const trn_conv_desc *desc) {
    return launch(stream, desc, CONV_BWD_WEIGHTS, "trn_conv_backward_weights_launch");
}

trn_status trn_conv_backward_launch(trn_stream *stream, const trn_conv_desc *data,
                                    const trn_conv_desc *weights) {
    static const char fn[] = "trn_conv_backward_launch";
    conv_bwd_args b;
    memset(&b, 0, sizeof b);
    bool empty_data, empty_weights;
    trn_status st = prepare(stream, data, CONV_BWD_DATA, fn, &b.data, &empty_data);
    if (st != TRN_SUCCESS) return st;
    if ((st = prepare(stream, weights, CONV_BWD_WEIGHTS, fn, &b.weights, &empty_weights)) !=
        TRN_SUCCESS)
        return st;
    const trn_conv_desc *x = &b.data.d, *y = &b.weights.d;
    const size_t sb = (size_t)x->spatial * sizeof(int64_t);
    if (x->dtype != y->dtype || x->spatial != y->spatial || x->n != y->n || x->c_in != y->c_in ||
        x->c_out != y->c_out || x->groups != y->groups || memcmp(x->in_size, y->in_size, sb) ||
        memcmp(x->out_size, y->out_size, sb) || memcmp(x->kernel, y->kernel, sb) ||
        memcmp(x->stride, y->stride, sb) || memcmp(x->padding, y->padding, sb) ||
        memcmp(x->dilation, y->dilation, sb) || x->output != y->output ||
        memcmp(x->output_strides, y->output_strides, sb + 2 * sizeof(int64_t)))
        return BAD("%s: the two descriptors must describe one convolution and one output "
                   "gradient",
                   fn);
    if (empty_data || empty_weights) {
        if (!empty_data) st = trn_stream_launch(stream, conv_task, &b.data, sizeof b.data);
        if (st == TRN_SUCCESS && !empty_weights)
            st = trn_stream_launch(stream, conv_task, &b.weights, sizeof b.weights);
        return st;
    }
    return trn_stream_launch(stream, conv_bwd_task, &b, sizeof b);
}
