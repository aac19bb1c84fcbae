// check.c - the NeuronCore's rules, checked on the traced program before any
// C is written. Every message names the kernel, the instruction (its API
// name) and the kernel source line it was traced from.
//
// Owns: operand derivation (flat offsets), bounds by interval arithmetic over
// loop and program-id ranges (masked instructions are checked per element at
// run time instead: their mask is what keeps them in bounds), partition and
// matmul limits, which memories an instruction may touch, SBUF/PSUM capacity
// with per-scope liveness, and the scratch layout of one instance.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "nki_impl.h"

#define PMAX 128
#define PSUM_BANK 2048  // bytes per partition per bank
#define PSUM_BANKS 8
#define MM_STAT_FMAX 128
#define MM_MOV_FMAX 512

typedef struct range {
    int64_t lo, hi;
} range;

static int64_t sbuf_capacity(int target) {
    // bytes per partition: v2 192 KiB, v3 224 KiB, v4 256 KiB
    return target == 2 ? 192 * 1024 : target == 4 ? 256 * 1024 : 224 * 1024;
}

static trn_status fail_at(const nki_prog *p, const char *what, const char *loc, const char *fmt,
                          ...) __attribute__((format(printf, 4, 5)));
static trn_status fail_at(const nki_prog *p, const char *what, const char *loc, const char *fmt,
                          ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "nki kernel '%s': %s at %s: %s", p->name,
                          what, loc ? loc : "?", msg);
}

static range affine_range(const nki_affine *a, const range *vars) {
    range r = {a->c, a->c};
    for (int i = 0; i < a->n; i++) {
        range v = vars[a->var[i]];
        int64_t x = a->coef[i] * v.lo, y = a->coef[i] * v.hi;
        r.lo += x < y ? x : y;
        r.hi += x < y ? y : x;
    }
    return r;
}

static void affine_add(nki_affine *dst, const nki_affine *src, int64_t mul) {
    dst->c += src->c * mul;
    for (int i = 0; i < src->n; i++) {
        int k = 0;
        while (k < dst->n && dst->var[k] != src->var[i]) k++;
        if (k == dst->n) {
            if (dst->n == NKI_MAXT) continue;  // cannot happen: the tracer caps terms
            dst->var[k] = src->var[i];
            dst->coef[k] = 0;
            dst->n++;
        }
        dst->coef[k] += src->coef[i] * mul;
    }
}

static int64_t numel(const nki_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
    return n;
}

static int64_t free_count(const nki_operand *o) {
    int64_t n = 1;
    for (int j = 1; j < o->nd; j++) n *= o->count[j];
    return n;
}

static nki_kind root_kind(const nki_prog *p, const nki_operand *o) {
    return p->t[p->t[o->tid].root].kind;
}

static bool on_chip(nki_kind k) { return k == NKI_SBUF || k == NKI_PSUM; }

// Fills o->flat and o->stride; checks bounds unless `masked`.
static trn_status derive(const nki_prog *p, const nki_instr *in, nki_operand *o, const range *vars,
                         bool masked, int which) {
    const nki_tensor *t = &p->t[o->tid];
    if (o->ntd != t->ndim)
        return fail_at(p, in->name, in->loc, "operand %d indexes %d dims of a %d-d tensor", which,
                       o->ntd, t->ndim);
    memset(&o->flat, 0, sizeof o->flat);
    for (int j = 0; j < o->nd; j++) {
        o->stride[j] = 0;
        if (o->count[j] < 1)
            return fail_at(p, in->name, in->loc, "operand %d has an empty dimension %d", which, j);
    }
    int64_t strides[NKI_MAXD];
    int64_t run = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        strides[d] =
            (t->kind == NKI_ARG || t->kind == NKI_OUT || t->kind == NKI_VIEW) ? t->strides[d] : run;
        run *= t->sizes[d];
    }
    for (int d = 0; d < t->ndim; d++) {
        affine_add(&o->flat, &o->base[d], strides[d]);
        for (int j = 0; j < o->nd; j++) o->stride[j] += strides[d] * o->coef[d][j];
        if (masked) continue;  // checked per element at run time (render.c)
        range r = affine_range(&o->base[d], vars);
        for (int j = 0; j < o->nd; j++) {
            int64_t x = o->coef[d][j] * (o->count[j] - 1);
            if (x < 0)
                r.lo += x;
            else
                r.hi += x;
        }
        if (r.lo < 0 || r.hi >= t->sizes[d])
            return fail_at(p, in->name, in->loc,
                           "out-of-bounds access: operand %d reads/writes indices [%lld, %lld] of "
                           "dimension %d "
                           "of a tensor of shape %lld%s (allocated at %s)",
                           which, (long long)r.lo, (long long)r.hi, d, (long long)t->sizes[0],
                           t->ndim > 1 ? "x..." : "", t->loc);
    }
    // a view's elements sit at its offset in the root's memory
    for (const nki_tensor *v = t; v->kind == NKI_VIEW; v = &p->t[v->base]) o->flat.c += v->offset;
    if (on_chip(root_kind(p, o)) && o->count[0] > PMAX)
        return fail_at(p, in->name, in->loc,
                       "operand %d spans %lld partitions; the partition dimension is at most %d",
                       which, (long long)o->count[0], PMAX);
    return TRN_SUCCESS;
}

static trn_status need_kind(const nki_prog *p, const nki_instr *in, int i, const char *role,
                            bool sbuf, bool psum, bool hbm) {
    nki_kind k = root_kind(p, &in->opd[i]);
    bool ok = k == NKI_SBUF ? sbuf : k == NKI_PSUM ? psum : hbm;
    if (ok) return TRN_SUCCESS;
    char allowed[64] = "";
    if (sbuf) strcat(allowed, "sbuf ");
    if (psum) strcat(allowed, "psum ");
    if (hbm) strcat(allowed, "hbm ");
    return fail_at(p, in->name, in->loc, "%s is in %s; this instruction takes it from: %s", role,
                   nki__kind_name(k == NKI_ARG || k == NKI_OUT || k == NKI_HBM ? NKI_ARG : k),
                   allowed);
}

// Inputs must match the iteration space (the dst's) element for element,
// broadcast along size-1 dims, or have the same partition count and the same
// number of elements per partition.
static trn_status same_space(const nki_prog *p, const nki_instr *in, int i) {
    const nki_operand *d = &in->opd[0], *o = &in->opd[i];
    if (o->nd == d->nd) {
        bool ok = true;
        for (int j = 0; j < d->nd; j++) ok = ok && (o->count[j] == d->count[j] || o->count[j] == 1);
        if (ok) return TRN_SUCCESS;
    }
    if (o->count[0] == d->count[0] && free_count(o) == free_count(d)) return TRN_SUCCESS;
    return fail_at(p, in->name, in->loc,
                   "operand %d has %lld partitions x %lld elements, the destination %lld x %lld", i,
                   (long long)o->count[0], (long long)free_count(o), (long long)d->count[0],
                   (long long)free_count(d));
}

static trn_status check_instr(const nki_prog *p, nki_instr *in, const range *vars) {
    trn_status st;
    if (in->nopd == 0) return fail_at(p, in->name, in->loc, "no destination");
    for (int i = 0; i < in->nopd; i++) {
        const nki_operand *o = &in->opd[i], *d = &in->opd[0];
        bool aligned = o->nd == d->nd;
        for (int j = 0; aligned && j < o->nd; j++)
            aligned = o->count[j] == d->count[j] || o->count[j] == 1;
        // (a masked gather's mask picks rows only: its operands stay checked here)
        // (a top-8 mask selects data elements: every operand is checked here)
        in->rt[i] = in->nmask > 0 && aligned && in->op != NKI_OP_GATHER && in->op != NKI_OP_TOP8;
        // the indirect side of a gather/scatter: its rows come from the index
        // tile, checked per row at run time (render.c), its other dims per element
        if (in->op == NKI_OP_GATHER && in->np > 0 && i == (int)in->p[0]) in->rt[i] = true;
        st = derive(p, in, &in->opd[i], vars, in->rt[i], i);
        if (st != TRN_SUCCESS) return st;
    }
    if (in->nmask > 0 &&
        (in->op == NKI_OP_MATMUL || in->op == NKI_OP_SCAN || in->op == NKI_OP_PREDUCE ||
         in->op == NKI_OP_BNSTATS || in->op == NKI_OP_BNAGGR ||
         (in->op == NKI_OP_ACT && in->np > 4 && in->p[4] >= 0)))
        return fail_at(p, in->name, in->loc,
                       "mask= is not supported on this instruction here; slice the operands");
    const int mode = in->np > 0 ? (int)in->p[0] : 0;
    switch (in->op) {
    case NKI_OP_COPY:
        if (mode == 1) {
            for (int i = 0; i < 2; i++)
                if ((st = need_kind(p, in, i, i ? "the source" : "the destination", true, false,
                                    true)))
                    return st;
        } else if (mode == 2) {
            for (int i = 0; i < 2; i++)
                if ((st = need_kind(p, in, i, i ? "the source" : "the destination", true, true,
                                    false)))
                    return st;
        }
        return same_space(p, in, 1);
    case NKI_OP_MATMUL: {
        if ((st = need_kind(p, in, 0, "the destination", false, true, false))) return st;
        if ((st = need_kind(p, in, 1, "the stationary operand", true, false, false))) return st;
        if ((st = need_kind(p, in, 2, "the moving operand", true, false, false))) return st;
        const nki_operand *d = &in->opd[0], *s = &in->opd[1], *m = &in->opd[2];
        if (s->count[0] != m->count[0])
            return fail_at(p, in->name, in->loc,
                           "contraction (partition) sizes differ: stationary %lld, moving %lld",
                           (long long)s->count[0], (long long)m->count[0]);
        if (free_count(s) > MM_STAT_FMAX)
            return fail_at(p, in->name, in->loc, "stationary free size %lld exceeds %d",
                           (long long)free_count(s), MM_STAT_FMAX);
        if (free_count(m) > MM_MOV_FMAX)
            return fail_at(p, in->name, in->loc, "moving free size %lld exceeds %d",
                           (long long)free_count(m), MM_MOV_FMAX);
        if (d->count[0] != free_count(s) || free_count(d) != free_count(m))
            return fail_at(p, in->name, in->loc,
                           "destination is %lld x %lld, the product is %lld x %lld",
                           (long long)d->count[0], (long long)free_count(d),
                           (long long)free_count(s), (long long)free_count(m));
        nki_dtype dt = p->t[d->tid].dtype, sa = p->t[s->tid].dtype, sb = p->t[m->tid].dtype;
        if (!(dt == NKI_F32 || (p->target >= 4 && dt == NKI_BF16)))
            return fail_at(p, in->name, in->loc, "the PSUM destination must be float32");
        if ((sa == NKI_F32) != (sb == NKI_F32))
            return fail_at(p, in->name, in->loc,
                           "float32 operands cannot be mixed with other dtypes");
        if ((sa == NKI_F8E4M3 && sb == NKI_F8E4M3FN) || (sa == NKI_F8E4M3FN && sb == NKI_F8E4M3))
            return fail_at(p, in->name, in->loc,
                           "float8_e4m3 and float8_e4m3fn cannot be mixed in one matmul");
        int64_t bytes = free_count(m) * nki__dtype_size(dt);
        if (bytes > PSUM_BANK)
            return fail_at(p, in->name, in->loc,
                           "the result needs %lld bytes per partition; one PSUM bank holds %d",
                           (long long)bytes, PSUM_BANK);
        range fr = affine_range(&d->flat, vars);
        const nki_tensor *root = &p->t[p->t[d->tid].root];
        int64_t row = numel(root) / (root->ndim ? root->sizes[root->par_axis] : 1);
        if (fr.lo == fr.hi && root->par_axis == 0 && row > 0) {
            int64_t first = (fr.lo % row) * nki__dtype_size(dt), last = first + bytes - 1;
            if (first / PSUM_BANK != last / PSUM_BANK)
                return fail_at(p, in->name, in->loc,
                               "the result crosses a PSUM bank boundary (bytes %lld..%lld of "
                               "the partition)",
                               (long long)first, (long long)last);
        }
        return TRN_SUCCESS;
    }
    case NKI_OP_GATHER: {
        for (int i = 0; i < 2; i++)
            if ((st = need_kind(p, in, i, i ? "the source" : "the destination", true, false, true)))
                return st;
        if ((st = need_kind(p, in, 2, "the index tile", true, false, false))) return st;
        const int which = (int)in->p[0], dim = (int)in->p[1];
        const nki_tensor *it = &p->t[in->opd[which].tid];
        if (which < 0 || which > 1 || dim < 0 || dim >= it->ndim)
            return fail_at(p, in->name, in->loc, "malformed indirect access");
        for (int m = 0; m < in->nmask; m++)
            for (int j = 1; j < in->mask[m].nd; j++)
                if (in->mask[m].coef[j] != 0)
                    return fail_at(p, in->name, in->loc,
                                   "mask= on an indirect access may only select partitions "
                                   "(a predicate over the partition index and loop indices)");
        if (in->opd[0].nd != in->opd[1].nd)
            return fail_at(p, in->name, in->loc, "source and destination shapes differ");
        for (int j = 0; j < in->opd[0].nd; j++)
            if (in->opd[0].count[j] != in->opd[1].count[j])
                return fail_at(p, in->name, in->loc, "source and destination shapes differ");
        nki_dtype xd = p->t[in->opd[2].tid].dtype;
        if (xd != NKI_I32 && xd != NKI_U32)
            return fail_at(p, in->name, in->loc, "the index tile must be int32 or uint32");
        return TRN_SUCCESS;
    }
    case NKI_OP_TRANSPOSE: {
        const nki_operand *d = &in->opd[0], *s = &in->opd[1];
        if (s->nd != 2 || d->nd != 2 || d->count[0] != s->count[1] || d->count[1] != s->count[0])
            return fail_at(p, in->name, in->loc,
                           "destination must be the source's transpose (2-d)");
        if (mode == 1) {
            if ((st = need_kind(p, in, 0, "the destination", false, true, false))) return st;
            if ((st = need_kind(p, in, 1, "the source", true, false, false))) return st;
        } else if (mode == 0) {
            if (s->count[0] > 32 || s->count[1] > 32)
                return fail_at(p, in->name, in->loc,
                               "the Vector Engine transposes at most 32x32 (got %lldx%lld)",
                               (long long)s->count[0], (long long)s->count[1]);
        }
        return TRN_SUCCESS;
    }
    case NKI_OP_TAKE: {
        const nki_operand *d = &in->opd[0], *x = &in->opd[1], *ix = &in->opd[2];
        if (x->count[0] != d->count[0] || free_count(ix) != free_count(d) ||
            ix->count[0] != d->count[0])
            return fail_at(p, in->name, in->loc,
                           "indices and result must have one shape, with data's partitions");
        if (nki__dtype_float(p->t[ix->tid].dtype))
            return fail_at(p, in->name, in->loc, "indices must be an integer tile");
        break;
    }
    case NKI_OP_TOP8: {
        const nki_operand *d = &in->opd[0], *s = &in->opd[1];
        const int64_t n = free_count(s);
        if (n < 8 || n > 16384)
            return fail_at(p, in->name, in->loc,
                           "reads %lld elements per partition; 8 to 16384 are allowed",
                           (long long)n);
        for (int i = 0; i < in->nopd; i++)
            if (in->opd[i].count[0] != s->count[0])
                return fail_at(p, in->name, in->loc,
                               "operands have different partition counts (%lld and %lld)",
                               (long long)in->opd[i].count[0], (long long)s->count[0]);
        if (mode == 2 ? free_count(d) != n : free_count(d) != 8)
            return fail_at(p, in->name, in->loc, "the destination must hold %lld per partition",
                           (long long)(mode == 2 ? n : 8));
        for (int i = 2; i < in->nopd; i++)
            if (free_count(&in->opd[i]) != 8)
                return fail_at(p, in->name, in->loc, "%s must hold 8 elements per partition",
                               i == 2 ? "vals" : "dst_idx");
        break;
    }
    default: break;
    }
    // compute engines: SBUF or PSUM only
    for (int i = 0; i < in->nopd; i++)
        if ((st = need_kind(p, in, i, i ? "an input" : "the destination", true, true, false)))
            return st;
    if (in->op == NKI_OP_TT && root_kind(p, &in->opd[1]) == NKI_PSUM &&
        root_kind(p, &in->opd[2]) == NKI_PSUM)
        return fail_at(p, in->name, in->loc, "both inputs are in PSUM; at most one may be");
    if (in->op == NKI_OP_TT || in->op == NKI_OP_WHERE || in->op == NKI_OP_PREDCOPY ||
        in->op == NKI_OP_SELECT || in->op == NKI_OP_TS || in->op == NKI_OP_STT)
        for (int i = 1; i < in->nopd; i++) {
            const nki_operand *o = &in->opd[i];
            bool vec = (in->op == NKI_OP_TS && i >= 2) ||
                       (in->op == NKI_OP_STT && i == 2 && in->p[2] == 2);
            if (vec) {
                if (o->count[0] != in->opd[0].count[0] && o->count[0] != 1)
                    return fail_at(p, in->name, in->loc,
                                   "a per-partition scalar must have the destination's "
                                   "%lld partitions",
                                   (long long)in->opd[0].count[0]);
                continue;
            }
            if ((st = same_space(p, in, i))) return st;
        }
    if ((in->op == NKI_OP_ACT || in->op == NKI_OP_SCAN) && in->nopd > 1 &&
        (st = same_space(p, in, 1)))
        return st;
    return TRN_SUCCESS;
}

// Per-partition bytes of an on-chip allocation (PSUM: whole banks). A
// mod_alloc tensor (rot > 0) holds rot physical block tiles, each placed as
// its own allocation (a PSUM block tile takes whole banks).
static int64_t footprint(const nki_tensor *t) {
    int64_t psize = t->ndim ? t->sizes[t->par_axis] : 1;
    int64_t b = (numel(t) / (psize ? psize : 1)) * nki__dtype_size(t->dtype);
    int64_t blocks = 1;
    for (int d = 0; d < t->par_axis; d++) blocks *= t->sizes[d];
    if (t->rot > 0 && blocks > 0) {
        int64_t tile = b / blocks;
        if (t->kind == NKI_PSUM) tile = (tile + PSUM_BANK - 1) / PSUM_BANK * PSUM_BANK;
        return tile * (t->rot < blocks ? t->rot : blocks);
    }
    if (t->kind == NKI_PSUM) b = (b + PSUM_BANK - 1) / PSUM_BANK * PSUM_BANK;
    return b;
}

static trn_status check_capacity(const nki_prog *p) {
    // live interval of each on-chip allocation: from its allocation point to
    // its last use, widened to the end of a loop that is deeper than the
    // allocation (the use repeats each iteration)
    int64_t *first = malloc(((size_t)p->nt + 1) * sizeof *first);
    int64_t *last = malloc(((size_t)p->nt + 1) * sizeof *last);
    int *depth_of = malloc(((size_t)p->nt + 1) * sizeof *depth_of);
    int *stack = malloc(((size_t)p->ns + 1) * sizeof *stack);
    int64_t *delta_s = calloc((size_t)p->ns + 2, sizeof *delta_s);
    int64_t *delta_p = calloc((size_t)p->ns + 2, sizeof *delta_p);
    // explicitly placed PSUM tensors (banks != 0) may share banks: live
    // tensors per bank, each bank with any counted once
    int *delta_b = calloc(((size_t)p->ns + 2) * PSUM_BANKS, sizeof *delta_b);
    trn_status st = TRN_SUCCESS;
    if (!first || !last || !depth_of || !stack || !delta_s || !delta_p || !delta_b) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "nki: out of memory");
        goto done;
    }
    for (int i = 0; i < p->nt; i++) first[i] = last[i] = -1;
    int depth = 0;
    for (int i = 0; i < p->ns; i++) {
        const nki_stmt *s = &p->s[i];
        if (s->kind == NKI_LOOP || s->kind == NKI_IF)
            stack[depth++] = i;
        else if (s->kind == NKI_END)
            depth--;
        else if (s->kind == NKI_POISON) {
            int r = p->t[s->tensor].root;
            if (first[r] < 0) {
                first[r] = last[r] = i;
                depth_of[r] = depth;
            }
        } else {
            for (int k = 0; k < s->ins->nopd; k++) {
                int r = p->t[s->ins->opd[k].tid].root;
                if (first[r] < 0) continue;
                int64_t end = i;
                if (depth > depth_of[r]) {
                    int outer = stack[depth_of[r]];
                    if (outer >= first[r]) end = p->s[outer].end;
                }
                if (end > last[r]) last[r] = end;
            }
        }
    }
    for (int r = 0; r < p->nt; r++) {
        if (first[r] < 0 || !on_chip(p->t[r].kind)) continue;
        if (p->t[r].kind == NKI_PSUM && p->t[r].banks) {
            for (int b = 0; b < PSUM_BANKS; b++)
                if (p->t[r].banks >> b & 1) {
                    delta_b[first[r] * PSUM_BANKS + b]++;
                    delta_b[(last[r] + 1) * PSUM_BANKS + b]--;
                }
            continue;
        }
        int64_t *delta = p->t[r].kind == NKI_SBUF ? delta_s : delta_p;
        delta[first[r]] += footprint(&p->t[r]);
        delta[last[r] + 1] -= footprint(&p->t[r]);
    }
    int64_t cur_s = 0, cur_p = 0, cap = sbuf_capacity(p->target);
    int live[PSUM_BANKS] = {0};
    for (int i = 0; i <= p->ns; i++) {
        cur_s += delta_s[i];
        cur_p += delta_p[i];
        int64_t placed = 0;
        for (int b = 0; b < PSUM_BANKS; b++) {
            live[b] += delta_b[(int64_t)i * PSUM_BANKS + b];
            if (live[b] > 0) placed += PSUM_BANK;
        }
        const char *loc =
            i < p->ns ? (p->s[i].kind == NKI_INSTR ? p->s[i].ins->loc : p->s[i].loc) : "end";
        if (cur_s > cap) {
            st = fail_at(p, "allocation", loc,
                         "SBUF needs %lld bytes per partition here; NeuronCore v%d has %lld",
                         (long long)cur_s, p->target, (long long)cap);
            goto done;
        }
        if (cur_p + placed > PSUM_BANK * PSUM_BANKS) {
            st = fail_at(p, "allocation", loc,
                         "PSUM needs %lld banks here; there are %d (2 KiB per partition each)",
                         (long long)((cur_p + placed) / PSUM_BANK), PSUM_BANKS);
            goto done;
        }
    }
done:
    free(first);
    free(last);
    free(depth_of);
    free(stack);
    free(delta_s);
    free(delta_p);
    free(delta_b);
    return st;
}

trn_status nki__check(nki_prog *p) {
    if (p->target < 2 || p->target > 4) p->target = 3;
    // roots, argument slots, scratch layout (64-byte aligned pieces)
    int64_t off = 0;
    int nargs = 0;
    for (int i = 0; i < p->nt; i++) {
        nki_tensor *t = &p->t[i];
        if (t->kind == NKI_VIEW) {
            if (t->base >= i)
                return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "nki: view %d of a later tensor",
                                      i);
            t->root = p->t[t->base].root;
        } else {
            t->root = i;
        }
        for (int d = 0; d < t->ndim; d++)
            if (t->sizes[d] < 0) return fail_at(p, "allocation", t->loc, "negative size");
        if (t->kind == NKI_ARG || t->kind == NKI_OUT) {
            t->arg = nargs++;
        } else if (t->kind != NKI_VIEW) {
            if (on_chip(t->kind) && t->ndim > 0 && t->sizes[t->par_axis] > PMAX)
                return fail_at(p, "allocation", t->loc,
                               "%s tensor with %lld partitions; at most %d",
                               nki__kind_name(t->kind), (long long)t->sizes[t->par_axis], PMAX);
            t->scratch = off;
            off += (numel(t) * nki__dtype_size(t->dtype) + 63) / 64 * 64;
            if (t->kind == NKI_PSUM) {
                t->flags = off;
                off += (numel(t) + 63) / 64 * 64;
            }
        }
    }
    p->nargs = nargs;
    p->scratch_bytes = off + NKI_MM_SCRATCH;  // matmul accumulator and staging
    range *vars = calloc(NKI_PID_VAR + 4, sizeof *vars);
    if (vars == NULL) return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "nki: out of memory");
    for (int a = 0; a < 4; a++)
        vars[NKI_PID_VAR + a] = (range){0, a < p->ngrid ? p->grid[a] - 1 : 0};
    trn_status st = TRN_SUCCESS;
    // an if narrows the range of a loop index its condition bounds alone
    // (c + a*v cmp 0); saved ranges come back at its E
    typedef struct saved {
        int var;
        range r;
    } saved;
    saved *undo = malloc(((size_t)p->ns + 1) * 4 * sizeof *undo);
    int *undo_at = malloc(((size_t)p->ns + 2) * sizeof *undo_at);
    int nundo = 0, nopen = 0;
    bool *is_if = calloc((size_t)p->ns + 1, sizeof *is_if);
    int *open_kind = malloc(((size_t)p->ns + 1) * sizeof *open_kind);
    if (undo == NULL || undo_at == NULL || is_if == NULL || open_kind == NULL) {
        free(vars);
        free(undo);
        free(undo_at);
        free(is_if);
        free(open_kind);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "nki: out of memory");
    }
    for (int i = 0; i < p->ns && st == TRN_SUCCESS; i++) {
        nki_stmt *s = &p->s[i];
        if (s->kind == NKI_LOOP) {
            int64_t lastv = s->hi > s->lo ? s->lo + (s->hi - s->lo - 1) / s->step * s->step : s->lo;
            vars[s->var] = (range){s->lo, lastv};
            open_kind[nopen++] = 0;
        } else if (s->kind == NKI_IF) {
            undo_at[nopen] = nundo;
            open_kind[nopen++] = 1;
            for (int k = 0; k < s->ncond; k++) {
                const nki_expr *e = &s->cond[k];
                if (e->a.n != 1 || e->a.coef[0] == 0) continue;
                int v = e->a.var[0];
                int64_t a = e->a.coef[0], c0 = e->a.c;
                range r = vars[v];
                undo[nundo++] = (saved){v, r};
                // a*v + c0 cmp 0
                int cmp = e->cmp;
                if (a < 0) {  // flip to positive coefficient: -a*v - c0 (reversed cmp) 0
                    a = -a;
                    c0 = -c0;
                    cmp = cmp == 10 ? 12 : cmp == 11 ? 13 : cmp == 12 ? 10 : cmp == 13 ? 11 : cmp;
                }
                // a*v + c0 < 0  <=>  v <= floor((-c0 - 1) / a)
                int64_t num;
                if (cmp == 10 || cmp == 11) {
                    num = cmp == 10 ? -c0 - 1 : -c0;
                    int64_t hi = num >= 0 ? num / a : -((-num + a - 1) / a);
                    if (hi < r.hi) r.hi = hi;
                } else if (cmp == 12 || cmp == 13) {
                    num = cmp == 12 ? -c0 + 1 : -c0;
                    int64_t lo = num >= 0 ? (num + a - 1) / a : -((-num) / a);
                    if (lo > r.lo) r.lo = lo;
                }
                if (r.lo <= r.hi) vars[v] = r;
            }
        } else if (s->kind == NKI_END) {
            if (nopen > 0 && open_kind[--nopen] == 1) {
                while (nundo > undo_at[nopen]) {
                    nundo--;
                    vars[undo[nundo].var] = undo[nundo].r;
                }
            }
        } else if (s->kind == NKI_INSTR) {
            st = check_instr(p, s->ins, vars);
        }
    }
    free(vars);
    free(undo);
    free(undo_at);
    free(is_if);
    free(open_kind);
    if (st == TRN_SUCCESS) st = check_capacity(p);
    return st;
}
