// foreach_adam_chain.h - the float32 Adam / AdamW step of PyTorch's foreach
// path (torch.optim.Adam / AdamW's default, _multi_tensor_adam) recognised
// in a chain (trn/foreach_chain.h) and run as one loop over the elements.
//
// The chunk-major chain keeps a 16 Ki-element chunk of every list in L2,
// but each of its 7-8 ops still passes over the chunk: ~25 list passes
// through L2 and each op's own loads and stores, 1.3-1.6 ns a parameter,
// where the step's memory traffic (read param, grad, exp_avg, exp_avg_sq;
// write three) is ~1 ns at this core's bandwidth. Here every element goes
// through all ops in registers. Each op keeps its own formula, evaluated in
// the same order with the same float32 roundings (libtrn builds with
// -std=c11, so no contraction into fma happens in either form), so the
// results are the bits of the ops run one after another.
//
// The ops it takes, with P params, G grads, M exp_avg, V exp_avg_sq, D the
// denominator (an out-of-place list; scratch when nobody reads it later):
//   [_foreach_mul_(P, s0)]            AdamW's decoupled weight decay
//   _foreach_lerp_(M, G, w)           w a scalar
//   _foreach_mul_(V, s2)
//   _foreach_addcmul_(V, G, G, s3)
//   D = _foreach_sqrt(V)
//   _foreach_div_(D, s5)              scalar or one scalar per tensor
//   _foreach_add_(D, s6, alpha)
//   _foreach_addcdiv_(P, M, D, s7)    scalar or one scalar per tensor
// Included by foreach.c only (its chain code calls these).
#ifndef TRN_FOREACH_ADAM_CHAIN_H
#define TRN_FOREACH_ADAM_CHAIN_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "trn/foreach.h"

// The chain's op index of each step (wd: -1 when there is no weight decay).
typedef struct adam_chain {
    int wd, lerp, mul_v, addcmul, sqrt, div, add, addcdiv;
} adam_chain;

static int adam_op_is(const trn_foreach_desc *d, trn_foreach_op op) {
    return d->op == op && d->dtype == TRN_DTYPE_F32;
}

// Whether ops[0 .. nops - 1] are the step above over the same positions,
// with P, G, M, V and D five distinct tensors at every position. The chain
// is already known fusable (equal counts and element counts, distinct
// operands disjoint).
static int adam_chain_match(const trn_foreach_desc *ops, int64_t nops, adam_chain *m) {
    if (nops != 7 && nops != 8) return 0;
    const int o = nops == 8;
    *m = (adam_chain){o ? 0 : -1, o, o + 1, o + 2, o + 3, o + 4, o + 5, o + 6};
    if ((o && !adam_op_is(&ops[m->wd], TRN_FOREACH_MUL)) ||
        !adam_op_is(&ops[m->lerp], TRN_FOREACH_LERP) ||
        !adam_op_is(&ops[m->mul_v], TRN_FOREACH_MUL) ||
        !adam_op_is(&ops[m->addcmul], TRN_FOREACH_ADDCMUL) ||
        !adam_op_is(&ops[m->sqrt], TRN_FOREACH_SQRT) ||
        !adam_op_is(&ops[m->div], TRN_FOREACH_DIV) || !adam_op_is(&ops[m->add], TRN_FOREACH_ADD) ||
        !adam_op_is(&ops[m->addcdiv], TRN_FOREACH_ADDCDIV))
        return 0;
    for (int64_t t = 0; t < ops[0].count; t++) {
        // An empty position is no work (its data pointers may be NULL).
        if (ops[0].tensors[t].n == 0) continue;
        const trn_foreach_tensor *lerp = &ops[m->lerp].tensors[t];
        const trn_foreach_tensor *mv = &ops[m->mul_v].tensors[t];
        const trn_foreach_tensor *acm = &ops[m->addcmul].tensors[t];
        const trn_foreach_tensor *sq = &ops[m->sqrt].tensors[t];
        const trn_foreach_tensor *dv = &ops[m->div].tensors[t];
        const trn_foreach_tensor *ad = &ops[m->add].tensors[t];
        const trn_foreach_tensor *acd = &ops[m->addcdiv].tensors[t];
        const void *P = acd->out, *G = lerp->b, *M = lerp->out, *V = mv->out, *D = sq->out;
        if (o) {
            const trn_foreach_tensor *wd = &ops[m->wd].tensors[t];
            if (wd->out != P || wd->a != P || wd->b != NULL || wd->c != NULL) return 0;
        }
        if (lerp->a != M || G == NULL || lerp->c != NULL) return 0;
        if (mv->a != V || mv->b != NULL || mv->c != NULL) return 0;
        if (acm->out != V || acm->a != V || acm->b != G || acm->c != G) return 0;
        if (sq->a != V || sq->b != NULL || sq->c != NULL) return 0;
        if (dv->out != D || dv->a != D || dv->b != NULL || dv->c != NULL) return 0;
        if (ad->out != D || ad->a != D || ad->b != NULL || ad->c != NULL) return 0;
        if (acd->a != P || acd->b != M || acd->c != D) return 0;
        if (P == NULL || M == NULL || V == NULL || D == NULL) return 0;
        const void *all[5] = {P, G, M, V, D};
        for (int i = 0; i < 5; i++)
            for (int j = i + 1; j < 5; j++)
                if (all[i] == all[j]) return 0;
    }
    return 1;
}

// Whether list p is an operand of op k at any position.
static int adam_op_touches(const trn_foreach_desc *d, const void *p, int64_t t) {
    const trn_foreach_tensor *x = &d->tensors[t];
    return x->out == p || x->a == p || x->b == p || x->c == p;
}

// Marks the Adam steps in a fusable chain of nops ops (scratch: the flags
// chain_scratch_check left): seg_len[k] = 7 or 8 where one starts at op k,
// else 0. A chain can hold more than one step (steps back to back) or other
// ops around it (clip_grad_norm_'s _foreach_mul_ of the grads, zero_grad's
// _foreach_zero_). A step is taken only where running it from memory gives
// what the op-by-op chain gives: its operands are no scratch output of
// another op (those live in the chain's scratch slots), and a scratch D is
// touched by no op outside the step (nothing fills its slot). Returns the
// number of steps.
static int64_t adam_chain_find(const trn_foreach_desc *ops, int64_t nops,
                               const unsigned char *scratch, unsigned char *seg_len,
                               adam_chain *segs) {
    int64_t n = 0;
    memset(seg_len, 0, (size_t)nops);
    for (int64_t k = 0; k < nops;) {
        int64_t len = 0;
        if (k + 8 <= nops && adam_chain_match(ops + k, 8, &segs[k]))
            len = 8;
        else if (k + 7 <= nops && adam_chain_match(ops + k, 7, &segs[k]))
            len = 7;
        const adam_chain *m = &segs[k];
        for (int64_t t = 0; len > 0 && t < ops[0].count; t++) {
            if (ops[0].tensors[t].n == 0) continue;
            const trn_foreach_desc *s = ops + k;
            const void *lists[5] = {s[m->addcdiv].tensors[t].out, s[m->lerp].tensors[t].b,
                                    s[m->lerp].tensors[t].out, s[m->mul_v].tensors[t].out,
                                    s[m->sqrt].tensors[t].out};
            const int d_scratch = scratch[k + m->sqrt] != 0;
            for (int64_t j = 0; j < nops && len > 0; j++) {
                if (j >= k && j < k + len) continue;
                for (int i = 0; i < 5 && len > 0; i++)
                    if ((scratch[j] && ops[j].tensors[t].out == lists[i]) ||
                        (i == 4 && d_scratch && adam_op_touches(&ops[j], lists[4], t)))
                        len = 0;
            }
        }
        if (len > 0) {
            seg_len[k] = (unsigned char)len;
            n++;
            k += len;
        } else {
            k++;
        }
    }
    return n;
}

// Op k's scalar for position t, as chunk_f reads it.
static float adam_scalar(const trn_foreach_desc *d, const double *override, const int *has,
                         int64_t t) {
    return (float)(*has ? *override : d->tensors[t].scalar);
}

// Elements [begin, end) of position t. overrides[k] / has[k]: op k's scalar
// tensor value and whether it has one (read once per chain, before any op
// runs, as the chain reads them); store_d: whether D is stored (0 when it
// lives in scratch).
static void adam_chain_run(const adam_chain *m, const trn_foreach_desc *ops,
                           const double *overrides, const int *has, int store_d, int64_t t,
                           int64_t begin, int64_t end) {
#define ADAM_S(k) adam_scalar(&ops[k], &overrides[k], &has[k], t)
    const int wd = m->wd >= 0;
    const float s0 = wd ? ADAM_S(m->wd) : 1.0f;
    const float w = ADAM_S(m->lerp), s2 = ADAM_S(m->mul_v), s3 = ADAM_S(m->addcmul);
    const float s5 = ADAM_S(m->div), s6 = ADAM_S(m->add), s7 = ADAM_S(m->addcdiv);
#undef ADAM_S
    const float a6 = (float)ops[m->add].alpha;
    const trn_foreach_tensor *lerp = &ops[m->lerp].tensors[t];
    float *restrict P = (float *)ops[m->addcdiv].tensors[t].out + begin;
    const float *restrict G = (const float *)lerp->b + begin;
    float *restrict M = (float *)lerp->out + begin;
    float *restrict V = (float *)ops[m->mul_v].tensors[t].out + begin;
    float *restrict D = (float *)ops[m->sqrt].tensors[t].out + begin;
    const int64_t n = end - begin;
    // One loop per (weight decay, lerp branch, D stored) so that each
    // vectorises without per-element tests; the bodies are the ops' formulas.
#define ADAM_BODY(WD, LOW, STORE_D)                                                                \
    for (int64_t i = 0; i < n; i++) {                                                              \
        float p = P[i];                                                                            \
        const float g = G[i];                                                                      \
        float mm = M[i], v = V[i];                                                                 \
        if (WD) p = p * s0;                                                                        \
        mm = LOW ? mm + w * (g - mm) : g - (g - mm) * (1.0f - w);                                  \
        v = v * s2;                                                                                \
        v = v + s3 * g * g;                                                                        \
        float d = sqrtf(v);                                                                        \
        d = d / s5;                                                                                \
        d = fmaf(a6, s6, d);                                                                       \
        p = p + s7 * (mm / d);                                                                     \
        P[i] = p;                                                                                  \
        M[i] = mm;                                                                                 \
        V[i] = v;                                                                                  \
        if (STORE_D) D[i] = d;                                                                     \
    }
    const int low = fabsf(w) < 0.5f;
    const int key = wd * 4 + low * 2 + (store_d != 0);
    switch (key) {
    case 0: ADAM_BODY(0, 0, 0) break;
    case 1: ADAM_BODY(0, 0, 1) break;
    case 2: ADAM_BODY(0, 1, 0) break;
    case 3: ADAM_BODY(0, 1, 1) break;
    case 4: ADAM_BODY(1, 0, 0) break;
    case 5: ADAM_BODY(1, 0, 1) break;
    case 6: ADAM_BODY(1, 1, 0) break;
    default: ADAM_BODY(1, 1, 1) break;
    }
#undef ADAM_BODY
}

#endif
