// render_instr.c - one NKI instruction as C: a loop nest over its access
// pattern with fp32 arithmetic (prelude.c), written so that GCC vectorizes
// it (constant strides, `#pragma GCC ivdep` where no input partially
// overlaps the destination, row memmoves, reductions in LANES partial
// results), tile products through the run time's matmul (nki_rt).
// render.c places these in the instance and its parallel-loop bodies.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nki_impl.h"

// products from this many multiply-adds on go to libtrn's matmul
#define MM_LIBTRN_MIN 16384

typedef nki_rctx rctx;

static void put_expr(nki_buf *b, const nki_expr *e);

static void put_affine(nki_buf *b, const nki_affine *a) {
    nki__printf(b, "(%lldLL", (long long)a->c);
    for (int i = 0; i < a->n; i++) {
        if (a->coef[i] == 0) continue;
        if (a->var[i] >= NKI_PID_VAR)
            nki__printf(b, "+%lldLL*pid[%d]", (long long)a->coef[i], a->var[i] - NKI_PID_VAR);
        else
            nki__printf(b, "+%lldLL*v%d", (long long)a->coef[i], a->var[i]);
    }
    nki__printf(b, ")");
}

static const nki_tensor *root_of(const nki_prog *p, const nki_operand *o) {
    return &p->t[p->t[o->tid].root];
}
static int dt_of(const nki_prog *p, const nki_operand *o) { return (int)p->t[o->tid].dtype; }

// Offset of operand o at the iteration point i0..i{nd-1} of destination d:
// aligned (element for element, size-1 dims broadcast) or, failing that,
// the same flat position within the partition.
static void put_off(nki_buf *b, const nki_operand *o, const nki_operand *d) {
    put_affine(b, &o->flat);
    bool aligned = o->nd == d->nd;
    for (int j = 0; aligned && j < o->nd; j++)
        aligned = o->count[j] == d->count[j] || o->count[j] == 1;
    if (aligned) {
        for (int j = 0; j < o->nd; j++)
            if (o->count[j] != 1 && o->stride[j] != 0)
                nki__printf(b, "+i%d*%lldLL", j, (long long)o->stride[j]);
        return;
    }
    if (o->count[0] != 1) nki__printf(b, "+i0*%lldLL", (long long)o->stride[0]);
    // f = flat free index in the destination's free dims
    nki__printf(b, "+0");
    int64_t inner = 1;
    for (int j = o->nd - 1; j >= 1; j--) {
        nki__printf(b, "+((ff/%lldLL)%%%lldLL)*%lldLL", (long long)inner, (long long)o->count[j],
                    (long long)o->stride[j]);
        inner *= o->count[j];
    }
}

static bool aligned_to(const nki_operand *o, const nki_operand *d) {
    bool aligned = o->nd == d->nd;
    for (int j = 0; aligned && j < o->nd; j++)
        aligned = o->count[j] == d->count[j] || o->count[j] == 1;
    return aligned;
}

// The free flat index of the iteration point (for unaligned operands).
static void put_ff(nki_buf *b, const nki_operand *d) {
    // sum of i_j times the product of the counts inside dim j
    nki__printf(b, "i64 ff=0");
    for (int j = 1; j < d->nd; j++) {
        int64_t inner = 1;
        for (int k = j + 1; k < d->nd; k++) inner *= d->count[k];
        nki__printf(b, "+i%d*%lldLL", j, (long long)inner);
    }
    nki__printf(b, ";(void)ff;\n");
}

// The loop nest over d's access space, one brace per loop (close_loops);
// `ivdep`: the innermost loop carries no dependence (no_overlap), so GCC
// vectorizes it without run-time alias checks.
// In a fused group (c->fused) the partition loop i0 is the group's: its
// level is a plain block.
static void open_loops(rctx *c, const nki_operand *d, bool ivdep) {
    nki_buf *b = c->b;
    for (int j = 0; j < d->nd; j++) {
        if (j == 0 && c->fused) {
            nki__printf(b, "{");
            continue;
        }
        if (ivdep && j == d->nd - 1) nki__printf(b, "\n#pragma GCC ivdep\n");
        nki__printf(b, "for(i64 i%d=0;i%d<%lldLL;i%d++){", j, j, (long long)d->count[j], j);
    }
    nki__printf(b, "\n");
}

// The partition loop i0 of an instruction that writes its own (a block in
// a fused group).
static void open_part(rctx *c, int64_t n) {
    if (c->fused)
        nki__printf(c->b, "{");
    else
        nki__printf(c->b, "for(i64 i0=0;i0<%lldLL;i0++){", (long long)n);
}

static void close_loops(nki_buf *b, const nki_operand *d) {
    for (int j = 0; j < d->nd; j++) nki__printf(b, "}");
    nki__printf(b, "\n");
}

static bool same_affine(const nki_affine *x, const nki_affine *y) {
    if (x->c != y->c) return false;
    // every nonzero term of x is in y with the same coefficient, and back
    for (int pass = 0; pass < 2; pass++) {
        const nki_affine *a = pass ? y : x, *o = pass ? x : y;
        for (int i = 0; i < a->n; i++) {
            if (a->coef[i] == 0) continue;
            int k = 0;
            while (k < o->n && o->var[k] != a->var[i]) k++;
            if (k == o->n || o->coef[k] != a->coef[i]) return false;
        }
    }
    return true;
}

// Whether the element loop of `in` may run its innermost iterations in any
// order: every input either lies in other memory than the destination or
// reads exactly the elements the destination writes at the same point (an
// in-place update). Two HBM arguments may be one tensor: never assumed apart.
static bool no_overlap(const nki_prog *p, const nki_instr *in) {
    const nki_operand *d = &in->opd[0];
    const nki_tensor *dr = &p->t[p->t[d->tid].root];
    bool d_arg = dr->kind == NKI_ARG || dr->kind == NKI_OUT;
    for (int k = 1; k < in->nopd; k++) {
        const nki_operand *o = &in->opd[k];
        const nki_tensor *r = &p->t[p->t[o->tid].root];
        if (r != dr) {
            if (d_arg && (r->kind == NKI_ARG || r->kind == NKI_OUT)) return false;
            continue;
        }
        if (o->nd != d->nd || !same_affine(&o->flat, &d->flat)) return false;
        if (nki__dtype_size(p->t[o->tid].dtype) != nki__dtype_size(p->t[d->tid].dtype))
            return false;
        for (int j = 0; j < d->nd; j++)
            if (o->count[j] != d->count[j] || o->stride[j] != d->stride[j]) return false;
    }
    return true;
}

static const char *cmp_c(int cmp) {
    switch (cmp) {
    case 8: return "==";
    case 9: return "!=";
    case 10: return "<";
    case 11: return "<=";
    case 12: return ">";
    default: return ">=";
    }
}

void nki__put_cond(nki_buf *b, const nki_expr *e) {
    put_expr(b, e);
    nki__printf(b, "%s0", cmp_c(e->cmp));
}

static void put_expr(nki_buf *b, const nki_expr *e) {
    nki__printf(b, "(");
    put_affine(b, &e->a);
    for (int j = 0; j < e->nd; j++)
        if (e->coef[j]) nki__printf(b, "+%lldLL*i%d", (long long)e->coef[j], j);
    nki__printf(b, ")");
}

// Masks, then (masked instructions) per-element bounds of every operand.
static void put_guards(rctx *c, const nki_instr *in) {
    nki_buf *b = c->b;
    for (int m = 0; m < in->nmask; m++) {
        nki__printf(b, "if(!(");
        put_expr(b, &in->mask[m]);
        nki__printf(b, "%s0))continue;\n", cmp_c(in->mask[m].cmp));
    }
    for (int k = 0; k < in->nopd; k++) {
        if (!in->rt[k]) continue;
        const nki_operand *o = &in->opd[k];
        const nki_tensor *t = &c->p->t[o->tid];
        for (int dd = 0; dd < o->ntd; dd++) {
            nki__printf(b, "if((uint64_t)(");
            put_affine(b, &o->base[dd]);
            for (int j = 0; j < o->nd; j++)
                if (o->coef[dd][j] && o->count[j] != 1)
                    nki__printf(b, "+i%d*%lldLL", j, (long long)o->coef[dd][j]);
            nki__printf(b, ")>=%lluULL)return %d;\n", (unsigned long long)t->sizes[dd], c->sid + 1);
        }
    }
}

#define P(...) nki__printf(b, __VA_ARGS__)

// A C float literal for v (NaN and infinities included).
static void put_float(nki_buf *b, double v) {
    if (v != v)
        P("NAN");
    else if (v > 3.4028235677973366e38)
        P("INFINITY");
    else if (v < -3.4028235677973366e38)
        P("(-INFINITY)");
    else
        P("((float)%.17g)", v);
}

// "ldN(Tr, off)" for operand k
static void put_ld(rctx *c, const nki_instr *in, int k) {
    nki_buf *b = c->b;
    const nki_operand *o = &in->opd[k];
    P("ld%d(T%d,", dt_of(c->p, o), root_of(c->p, o)->id);
    put_off(b, o, &in->opd[0]);
    P(")");
}

// per-partition vector operand: element (i0, 0)
static void put_vec(rctx *c, const nki_operand *o) {
    nki_buf *b = c->b;
    if (c->hin != NULL && o >= c->hin->opd && o < c->hin->opd + c->hin->nopd &&
        (c->hoist >> (o - c->hin->opd) & 1u)) {
        P("H%d", (int)(o - c->hin->opd));
        return;
    }
    P("ld%d(T%d,", dt_of(c->p, o), root_of(c->p, o)->id);
    put_affine(b, &o->flat);
    if (o->count[0] != 1) P("+i0*%lldLL", (long long)o->stride[0]);
    P(")");
}

static void put_st_begin(rctx *c, const nki_instr *in) {
    nki_buf *b = c->b;
    const nki_operand *d = &in->opd[0];
    P("st%d(T%d,", dt_of(c->p, d), root_of(c->p, d)->id);
    put_off(b, d, d);
    P(",");
}

// offset expression of operand o at flat free index named `f` (partition i0 named `pp`)
static void put_off_flat(nki_buf *b, const nki_operand *o, const char *pp, const char *f) {
    put_affine(b, &o->flat);
    P("+(%s)*%lldLL", pp, (long long)o->stride[0]);
    int64_t inner = 1;
    for (int j = o->nd - 1; j >= 1; j--) {
        if (o->nd == 2)
            P("+(%s)*%lldLL", f, (long long)o->stride[j]);
        else
            P("+(((%s)/%lldLL)%%%lldLL)*%lldLL", f, (long long)inner, (long long)o->count[j],
              (long long)o->stride[j]);
        inner *= o->count[j];
    }
}

static int64_t fcount(const nki_operand *o) {
    int64_t n = 1;
    for (int j = 1; j < o->nd; j++) n *= o->count[j];
    return n;
}

static const char *reduce_init(int op) {
    switch (op) {
    case 3:
    case 14: return "1.0f";  // mul, and
    case 5: return "-INFINITY";
    case 6:
    case 23: return "INFINITY";  // min, absmin
    case 17: return "-1.0f";     // bitwise and: all ones
    default: return "0.0f";
    }
}

// Partial results per reduction: associative, commutative ALU ops reduce in
// LANES independent accumulators (a vector register's worth) combined at
// the end, so the loop vectorizes; the summation order is not the
// hardware's either way (docs/nki.md).
#define LANES 16
// Kept as a loop until the vectorizer sees it (GCC unrolls 16 short
// iterations into scalar code first otherwise).
#define NO_UNROLL "#pragma GCC unroll 1\n"
static bool lanes_ok(int op) {
    switch (op) {
    case ALU_ADD:
    case ALU_MUL:
    case ALU_MAX:
    case ALU_MIN:
    case ALU_ABSMAX:
    case ALU_ABSMIN:
    case ALU_LAND:
    case ALU_LOR:
    case ALU_BAND:
    case ALU_BOR:
    case ALU_BXOR: return true;
    default: return false;
    }
}

// activation on the element at the iteration point: x = f(data*scale + bias), stored
static void act_body(rctx *c, const nki_instr *in, int svec, int bias) {
    nki_buf *b = c->b;
    P("float x=");
    put_ld(c, in, 1);
    P(";\n");
    if (svec >= 0) {
        P("x*=");
        put_vec(c, &in->opd[svec]);
        P(";\n");
    } else if ((int)in->p[2] == 1 && in->p[3] != 1.0) {
        P("x*=");
        put_float(b, in->p[3]);
        P(";\n");
    }
    if (bias >= 0) {
        P("x+=");
        put_vec(c, &in->opd[bias]);
        P(";\n");
    }
    P("x=act(%d,x,", (int)in->p[0]);
    put_float(b, in->np > 5 ? in->p[5] : 0.0);
    P(");\n");
    put_st_begin(c, in);
    P("x);\n");
}

// bn_stats of partition i0's F elements into sum, mean, sq (the sum of
// squared deviations), as libtrn's layer norm computes them: two passes of
// 32 float lanes, moved to a double total every 256 elements, the second
// pass around the mean split into float hi + lo. Contiguous float32 rows use
// GCC vectors (two accumulators of 16, a register each); others the same
// sums in the same order through ld<dtype> (identical results).
#define BN_BLOCK 256
static void put_bnstats(rctx *c, const nki_instr *in, int64_t F) {
    nki_buf *b = c->b;
    const nki_prog *p = c->p;
    const nki_operand *s = &in->opd[1];
    bool vec = p->t[s->tid].dtype == NKI_F32 && s->nd >= 2;
    int64_t expect = 1;
    for (int j = s->nd - 1; vec && j >= 1; j--) {
        if (s->count[j] == 1) continue;
        vec = s->stride[j] == expect;
        expect *= s->count[j];
    }
    const long long n = (long long)F;
    if (vec) {
        P("typedef float nki_v16 __attribute__((vector_size(64)));\nconst float*R_=(const "
          "float*)T%d+",
          root_of(p, s)->id);
        put_affine(b, &s->flat);
        P("+i0*%lldLL;\n", (long long)s->stride[0]);
    }
    for (int pass = 0; pass < 2; pass++) {
        const char *acc = pass ? "sq" : "sum";
        P("double %s=0;{i64 f=0;while(f+32<=%lldLL){i64 "
          "e=f+%d<=%lldLL?f+%d:f+((%lldLL-f)/32)*32;\n",
          acc, n, BN_BLOCK, n, BN_BLOCK, n);
        if (vec) {
            P("nki_v16 A0={0},A1={0};for(;f<e;f+=32){nki_v16 x0,x1;memcpy(&x0,R_+f,64);"
              "memcpy(&x1,R_+f+16,64);");
            if (pass)
                P("x0=(x0-mhi)-mlo;x1=(x1-mhi)-mlo;A0+=x0*x0;A1+=x1*x1;}\n");
            else
                P("A0+=x0;A1+=x1;}\n");
            P("nki_v16 t=A0+A1;for(int l=0;l<16;l++)%s+=(double)t[l];}\n", acc);
        } else {
            P("float A[32];for(int l=0;l<32;l++)A[l]=0.0f;for(;f<e;f+=32)\n%sfor(int "
              "l=0;l<32;l++){float x=ld%d(T%d,",
              NO_UNROLL, dt_of(p, s), root_of(p, s)->id);
            put_off_flat(b, s, "i0", "f+l");
            P(");%s}\nfor(int l=0;l<16;l++)%s+=(double)(A[l]+A[l+16]);}\n",
              pass ? "x=(x-mhi)-mlo;A[l]+=x*x;" : "A[l]+=x;", acc);
        }
        P("for(;f<%lldLL;f++){float x=", n);
        if (vec) {
            P("R_[f]");
        } else {
            P("ld%d(T%d,", dt_of(p, s), root_of(p, s)->id);
            put_off_flat(b, s, "i0", "f");
            P(")");
        }
        P(";%s}}\n", pass ? "x=(x-mhi)-mlo;sq+=(double)(x*x);" : "sum+=(double)x;");
        if (pass == 0)
            P("double mean=sum/%lldLL;const float mhi=(float)mean,mlo=(float)(mean-(double)mhi);\n",
              n);
    }
    P("float out[6]={(float)%lld,(float)mean,(float)(sq/%lldLL),0,0,0};\n", n, n);
}

// The top-8 family (nki_impl.h NKI_OP_TOP8), one partition i0 at a time
// over the data's free elements in flat order, compared in fp32 (NaN sorts
// above everything in max8 and matches nothing).
// Legacy mask= of a top-8 instruction, over the data's access dims: skip
// free element f (flat) of partition i0 where a predicate fails.
static void put_top8_mask(nki_buf *b, const nki_instr *in, const nki_operand *s) {
    for (int m = 0; m < in->nmask; m++) {
        const nki_expr *e = &in->mask[m];
        nki__printf(b, "if(!((");
        put_affine(b, &e->a);
        if (e->nd > 0 && e->coef[0]) nki__printf(b, "+%lldLL*i0", (long long)e->coef[0]);
        int64_t inner = 1;
        for (int j = s->nd - 1; j >= 1; j--) {
            if (j < e->nd && e->coef[j])
                nki__printf(b, "+%lldLL*((f/%lldLL)%%%lldLL)", (long long)e->coef[j],
                            (long long)inner, (long long)s->count[j]);
            inner *= s->count[j];
        }
        nki__printf(b, ")%s0))continue;", cmp_c(e->cmp));
    }
}

static void put_top8(rctx *c, const nki_instr *in) {
    nki_buf *b = c->b;
    const nki_prog *p = c->p;
    const nki_operand *d = &in->opd[0], *s = &in->opd[1];
    const int mode = (int)in->p[0];
    const long long n = (long long)fcount(s);
    P("for(i64 i0=0;i0<%lldLL;i0++){\n", (long long)d->count[0]);
#define LD_S(f)                                                                                    \
    do {                                                                                           \
        P("ld%d(T%d,", dt_of(p, s), root_of(p, s)->id);                                            \
        put_off_flat(b, s, "i0", f);                                                               \
        P(")");                                                                                    \
    } while (0)
    if (mode == 0) {
        P("float top[8];int nt=0;\nfor(i64 f=0;f<%lldLL;f++){", n);
        put_top8_mask(b, in, s);
        P("float v=");
        LD_S("f");
        P(";int k;if(nt<8)k=nt++;else{if(!((v!=v&&top[7]==top[7])||v>top[7]))continue;k=7;}\n"
          "while(k>0&&((v!=v&&top[k-1]==top[k-1])||v>top[k-1])){top[k]=top[k-1];k--;}"
          "top[k]=v;}\n");
        // (fewer than 8 unmasked elements: the rest stays as it was)
        P("for(i64 f=0;f<nt;f++)st%d(T%d,", dt_of(p, d), root_of(p, d)->id);
        put_off_flat(b, d, "i0", "f");
        P(",top[f]);\n}\n");
        return;
    }
    const nki_operand *v = &in->opd[2];
    P("float vv[8];i64 idx[8];for(i64 f=0;f<8;f++){vv[f]=ld%d(T%d,", dt_of(p, v),
      root_of(p, v)->id);
    put_off_flat(b, v, "i0", "f");
    P(");idx[f]=-1;}\n");
    // each val takes the first position no earlier val took
    P("for(int q=0;q<8;q++){const int k=%s;for(i64 f=0;f<%lldLL;f++){", mode == 2 ? "7-q" : "q", n);
    put_top8_mask(b, in, s);
    P("float x=");
    LD_S("f");
    P(";if(x!=vv[k])continue;int taken=0;for(int j=0;j<8;j++)taken|=idx[j]==f;"
      "if(!taken){idx[k]=f;break;}}}\n");
    const nki_operand *o = mode == 1 ? d : (in->nopd > 3 ? &in->opd[3] : NULL);
    if (o != NULL) {
        P("for(i64 f=0;f<8;f++)sti(T%d,", root_of(p, o)->id);
        put_off_flat(b, o, "i0", "f");
        P(",%d,idx[f]);\n", nki__dtype_size(p->t[o->tid].dtype));
    }
    if (mode == 2) {
        // the data row (cast to dst's dtype) with the matches replaced
        P("for(i64 f=0;f<%lldLL;f++){", n);
        put_top8_mask(b, in, s);  // (elements masked off are not written)
        P("int taken=0;for(int j=0;j<8;j++)taken|=idx[j]==f;float x=");
        LD_S("f");
        P(";st%d(T%d,", dt_of(p, d), root_of(p, d)->id);
        put_off_flat(b, d, "i0", "f");
        P(",taken?");
        put_float(b, in->np > 1 ? in->p[1] : 0.0);
        P(":x);}\n");
    }
#undef LD_S
    P("}\n");
}

// acc (M x N) into the PSUM destination, per element by its first-write flag
static void put_merge(rctx *c, const nki_instr *in, int64_t M, int64_t N) {
    nki_buf *b = c->b;
    const nki_prog *p = c->p;
    const nki_operand *d = &in->opd[0];
    const nki_tensor *dr = root_of(p, d);
    P("for(i64 m=0;m<%lldLL;m++)\n#pragma GCC ivdep\nfor(i64 n=0;n<%lldLL;n++){i64 o=",
      (long long)M, (long long)N);
    put_off_flat(b, d, "m", "n");
    P(";float v=acc[m*%lldLL+n];\n", (long long)N);
    int mode = (int)in->p[0];
    if (mode == 0)
        P("if(F%d[o])v+=ld%d(T%d,o);F%d[o]=1;\n", dr->id, dt_of(p, d), dr->id, dr->id);
    else if (mode == 1)
        P("v+=ld%d(T%d,o);F%d[o]=1;\n", dt_of(p, d), dr->id, dr->id);
    else
        P("F%d[o]=1;\n", dr->id);
    P("st%d(T%d,o,v);}\n", dt_of(p, d), dr->id);
}

// In a fused group, the per-partition scalars (vector operands) of
// tensor_scalar, scalar_tensor_tensor and activation are loaded once, before
// the free-axis loops: GCC cannot prove a store of the row leaves them alone
// (one scratch block) and otherwise keeps the activation loop scalar. Only
// operands in a tensor the instruction does not write, so each element
// reads the same value as before.
static void put_hoisted(rctx *c, const nki_instr *in) {
    nki_buf *b = c->b;
    const nki_prog *p = c->p;
    c->hin = in;
    c->hoist = 0;
    if (!c->fused) return;
    unsigned vec = 0;
    if (in->op == NKI_OP_TS)
        for (int k = 2; k < in->nopd; k++) vec |= 1u << k;
    else if (in->op == NKI_OP_STT && (int)in->p[2] == 2)
        vec = 1u << 2;
    else if (in->op == NKI_OP_ACT) {
        int next = 2;
        if (in->p[1] != 0) vec |= 1u << next++;
        if ((int)in->p[2] == 2) vec |= 1u << next++;
    }
    for (int k = 0; k < in->nopd; k++) {
        if (!(vec >> k & 1u)) continue;
        bool written = false;
        for (int w = 0; w < in->nopd; w++)
            if (nki__instr_writes(in, w) && root_of(p, &in->opd[w]) == root_of(p, &in->opd[k]))
                written = true;
        if (written) continue;
        P("const float H%d=", k);
        put_vec(c, &in->opd[k]);
        P(";\n");
        c->hoist |= 1u << k;
    }
}

void nki__render_instr(nki_rctx *c, const nki_instr *in) {
    nki_buf *b = c->b;
    const nki_prog *p = c->p;
    const nki_operand *d = &in->opd[0];
    P("{ /* %s at %s */\n", in->name, in->loc);
    put_hoisted(c, in);
    switch (in->op) {
    case NKI_OP_COPY: {
        const nki_operand *s = &in->opd[1];
        const bool iv = no_overlap(p, in);
        const int last = d->nd - 1, sz = nki__dtype_size(p->t[d->tid].dtype);
        if (dt_of(p, s) == dt_of(p, d) && in->nmask == 0 && !in->rt[0] && !in->rt[1] &&
            aligned_to(s, d) && s->count[last] == d->count[last] && s->stride[last] == 1 &&
            d->stride[last] == 1) {
            // rows of equal dtype: one memmove each
            nki_operand outer = *d;
            outer.nd = last;
            open_loops(c, &outer, false);
            if (iv && (sz == 4 || sz == 2)) {
                // a typed loop: GCC vectorizes it in place, cheaper than a
                // call per (short) row; may_alias: the tile is also read as
                // float / int through ld<dtype>
                const char *ty = sz == 4 ? "nki_a32" : "nki_a16";
                P("typedef uint%d_t __attribute__((may_alias)) %s;\n", sz * 8, ty);
                P("const i64 i%d=0;\n%s*d_=(%s*)T%d+(", last, ty, ty, root_of(p, d)->id);
                put_off(b, d, d);
                P(");const %s*s_=(const %s*)T%d+(", ty, ty, root_of(p, s)->id);
                put_off(b, s, d);
                P(");\n#pragma GCC ivdep\nfor(i64 q=0;q<%lldLL;q++)d_[q]=s_[q];\n",
                  (long long)d->count[last]);
                close_loops(b, &outer);
                break;
            }
            P("const i64 i%d=0;\nmemmove(T%d+(", last, root_of(p, d)->id);
            put_off(b, d, d);
            P(")*%d,T%d+(", sz, root_of(p, s)->id);
            put_off(b, s, d);
            P(")*%d,%lldu);\n", sz, (long long)(d->count[last] * sz));
            close_loops(b, &outer);
            break;
        }
        open_loops(c, d, iv);
        put_ff(b, d);
        put_guards(c, in);
        if (dt_of(p, s) == dt_of(p, d)) {
            P("cpy(T%d,", root_of(p, d)->id);
            put_off(b, d, d);
            P(",T%d,", root_of(p, s)->id);
            put_off(b, s, d);
            P(",%d);\n", sz);
        } else {
            put_st_begin(c, in);
            put_ld(c, in, 1);
            P(");\n");
        }
        close_loops(b, d);
        break;
    }
    case NKI_OP_TT:
    case NKI_OP_WHERE:
    case NKI_OP_PREDCOPY: {
        open_loops(c, d, no_overlap(p, in));
        put_ff(b, d);
        put_guards(c, in);
        if (in->op == NKI_OP_TT) {
            put_st_begin(c, in);
            P("alu(%d,", (int)in->p[0]);
            put_ld(c, in, 1);
            P(",");
            put_ld(c, in, 2);
            P("));\n");
        } else if (in->op == NKI_OP_WHERE) {
            put_st_begin(c, in);
            P("(");
            put_ld(c, in, 1);
            P("!=0.0f)?");
            put_ld(c, in, 2);
            P(":");
            put_ld(c, in, 3);
            P(");\n");
        } else {
            P("if((");
            put_ld(c, in, 1);
            P("!=0.0f)!=%d)", in->p[0] != 0);
            put_st_begin(c, in);
            put_ld(c, in, 2);
            P(");\n");
        }
        close_loops(b, d);
        break;
    }
    case NKI_OP_TS:
    case NKI_OP_STT: {
        // TS: p op0 rev0 kind0 imm0 op1 rev1 kind1 imm1; STT: op0 op1 kind imm rev0 rev1
        open_loops(c, d, no_overlap(p, in));
        put_ff(b, d);
        put_guards(c, in);
        P("float x=");
        put_ld(c, in, 1);
        P(";\n");
        if (in->op == NKI_OP_TS) {
            int next = 2;
            for (int k = 0; k < 2; k++) {
                int op = (int)in->p[4 * k], rev = in->p[4 * k + 1] != 0,
                    kind = (int)in->p[4 * k + 2];
                if (kind == 0) continue;
                P("{float s=");
                if (kind == 1)
                    put_float(b, in->p[4 * k + 3]);
                else
                    put_vec(c, &in->opd[next++]);
                P(";x=");
                P(rev ? "alu(%d,s,x);}\n" : "alu(%d,x,s);}\n", op);
            }
        } else {
            int op0 = (int)in->p[0], op1 = (int)in->p[1], kind = (int)in->p[2];
            P("float s=");
            if (kind == 1)
                put_float(b, in->p[3]);
            else
                put_vec(c, &in->opd[2]);
            P(";\n");
            P(in->p[4] != 0 ? "x=alu(%d,s,x);\n" : "x=alu(%d,x,s);\n", op0);
            P("float y=");
            put_ld(c, in, 3);
            P(";\n");
            P(in->p[5] != 0 ? "x=alu(%d,y,x);\n" : "x=alu(%d,x,y);\n", op1);
        }
        put_st_begin(c, in);
        P("x);\n");
        close_loops(b, d);
        break;
    }
    case NKI_OP_ACT: {
        // p: func has_bias scale_kind scale_imm reduce_op alpha
        int rop = (int)in->p[4];
        int next = 2, bias = -1, svec = -1, rres = -1;
        if (in->p[1] != 0) bias = next++;
        if ((int)in->p[2] == 2) svec = next++;
        if (rop >= 0) rres = next++;
        const bool iv = no_overlap(p, in);
        const int last = d->nd - 1;
        open_part(c, d->count[0]);
        P("\n");
        if (rop >= 0 && lanes_ok(rop) && in->nmask == 0 && last >= 1) {
            // the free-axis reduction in LANES partial results (vectorizes)
            P("float L[%d];for(int l=0;l<%d;l++)L[l]=%s;\n", LANES, LANES, reduce_init(rop));
            for (int j = 1; j < last; j++)
                P("for(i64 i%d=0;i%d<%lldLL;i%d++){", j, j, (long long)d->count[j], j);
            P("i64 f=0;for(;f+%d<=%lldLL;f+=%d){\n", LANES, (long long)d->count[last], LANES);
            if (iv) P("#pragma GCC ivdep\n");
            P("%sfor(int l=0;l<%d;l++){const i64 i%d=f+l;\n", NO_UNROLL, LANES, last);
            put_ff(b, d);
            act_body(c, in, svec, bias);
            P("L[l]=alu(%d,L[l],x);}}\n", rop);
            P("for(;f<%lldLL;f++){const i64 i%d=f;\n", (long long)d->count[last], last);
            put_ff(b, d);
            act_body(c, in, svec, bias);
            P("L[0]=alu(%d,L[0],x);}\n", rop);
            for (int j = 1; j < last; j++) P("}");
            P("float acc=L[0];for(int l=1;l<%d;l++)acc=alu(%d,acc,L[l]);\n", LANES, rop);
        } else {
            if (rop >= 0) P("float acc=%s;\n", reduce_init(rop));
            for (int j = 1; j < d->nd; j++) {
                if (iv && j == last) P("\n#pragma GCC ivdep\n");
                P("for(i64 i%d=0;i%d<%lldLL;i%d++){", j, j, (long long)d->count[j], j);
            }
            P("{\n");
            put_ff(b, d);
            put_guards(c, in);
            act_body(c, in, svec, bias);
            if (rop >= 0) P("acc=alu(%d,acc,x);\n", rop);
            P("}");
            for (int j = 1; j < d->nd; j++) P("}");
            P("\n");
        }
        if (rop >= 0) {
            const nki_operand *r = &in->opd[rres];
            P("st%d(T%d,", dt_of(p, r), root_of(p, r)->id);
            put_affine(b, &r->flat);
            P("+i0*%lldLL,acc);\n", (long long)r->stride[0]);
        }
        P("}\n");
        break;
    }
    case NKI_OP_REDUCE: {
        // p: alu nred negate; dst has the source's first nd-nred dims
        const nki_operand *s = &in->opd[1];
        int op = (int)in->p[0], nred = (int)in->p[1], keep = s->nd - nred;
        for (int j = c->fused ? 1 : 0; j < keep; j++)  // fused: i0 is the group's
            P("for(i64 i%d=0;i%d<%lldLL;i%d++)", j, j, (long long)s->count[j], j);
        const int last = s->nd - 1;
        if (lanes_ok(op) && in->nmask == 0 && nred >= 1) {
            P("{\nfloat L[%d];for(int l=0;l<%d;l++)L[l]=%s;\n", LANES, LANES, reduce_init(op));
            for (int j = keep; j < last; j++)
                P("for(i64 i%d=0;i%d<%lldLL;i%d++){", j, j, (long long)s->count[j], j);
            for (int pass = 0; pass < 2; pass++) {
                if (pass == 0)
                    P("i64 f=0;for(;f+%d<=%lldLL;f+=%d)\n#pragma GCC ivdep\n%sfor(int "
                      "l=0;l<%d;l++){const i64 i%d=f+l;\nL[l]=",
                      LANES, (long long)s->count[last], LANES, NO_UNROLL, LANES, last);
                else
                    P("for(;f<%lldLL;f++){const i64 i%d=f;\nL[0]=", (long long)s->count[last],
                      last);
                P("alu(%d,L[%s],ld%d(T%d,", op, pass ? "0" : "l", dt_of(p, s), root_of(p, s)->id);
                put_affine(b, &s->flat);
                for (int j = 0; j < s->nd; j++) P("+i%d*%lldLL", j, (long long)s->stride[j]);
                P("));}\n");
            }
            for (int j = keep; j < last; j++) P("}");
            P("float acc=L[0];for(int l=1;l<%d;l++)acc=alu(%d,acc,L[l]);\n", LANES, op);
        } else {
            P("{\nfloat acc=%s;\n", reduce_init(op));
            for (int j = keep; j < s->nd; j++)
                P("for(i64 i%d=0;i%d<%lldLL;i%d++)", j, j, (long long)s->count[j], j);
            P("{\n");
            put_guards(c, in);
            P("acc=alu(%d,acc,ld%d(T%d,", op, dt_of(p, s), root_of(p, s)->id);
            put_affine(b, &s->flat);
            for (int j = 0; j < s->nd; j++) P("+i%d*%lldLL", j, (long long)s->stride[j]);
            P("));\n}\n");
        }
        P("st%d(T%d,", dt_of(p, d), root_of(p, d)->id);
        put_affine(b, &d->flat);
        for (int j = 0; j < d->nd && j < keep; j++) P("+i%d*%lldLL", j, (long long)d->stride[j]);
        P(",%sacc);\n}\n", in->p[2] != 0 ? "-" : "");
        break;
    }
    case NKI_OP_MATMUL: {
        const nki_operand *s = &in->opd[1], *m = &in->opd[2];
        int64_t K = s->count[0], M = fcount(s), N = fcount(m);
        const nki_tensor *dr = root_of(p, d);
        const int64_t base = p->scratch_bytes - NKI_MM_SCRATCH;
        P("float*acc=(float*)(scratch+%lldLL);\n", (long long)base);
        if (M * N * K >= MM_LIBTRN_MIN) {
            // libtrn's matmul (trn/blas.h's kernel, through the run time):
            // float32 operands as they lie, others staged in float32
            // (exact: every NKI input dtype widens exactly)
            const nki_operand *op[2] = {s, m};
            const int64_t free_n[2] = {M, N};
            for (int w = 0; w < 2; w++) {
                const nki_operand *o = op[w];
                const bool direct = p->t[o->tid].dtype == NKI_F32 && o->nd == 2 &&
                                    o->stride[0] >= 0 && o->stride[1] >= 0;
                P("const float*X%d=", w);
                if (direct) {
                    P("(const float*)T%d+", root_of(p, o)->id);
                    put_affine(b, &o->flat);
                    P(";i64 X%dp=%lldLL,X%df=%lldLL;\n", w, (long long)o->stride[0], w,
                      (long long)o->stride[1]);
                    continue;
                }
                int64_t at = base + NKI_MM_ACC + (w ? NKI_MM_SA : 0);
                P("(const float*)(scratch+%lldLL);i64 X%dp=%lldLL,X%df=1;\n", (long long)at, w,
                  (long long)free_n[w], w);
                P("{float*S=(float*)(scratch+%lldLL);for(i64 k=0;k<%lldLL;k++)\n#pragma GCC "
                  "ivdep\nfor(i64 f=0;f<%lldLL;f++)S[k*%lldLL+f]=ld%d(T%d,",
                  (long long)at, (long long)K, (long long)free_n[w], (long long)free_n[w],
                  dt_of(p, o), root_of(p, o)->id);
                put_off_flat(b, o, "k", "f");
                P(");}\n");
            }
            const int mode = (int)in->p[0];
            if (p->t[d->tid].dtype == NKI_F32 && d->nd == 2 && d->stride[1] == 1 &&
                d->stride[0] >= N) {
                // PSUM rows: written in place where the first-write flags of
                // the whole result agree (all fresh: overwrite; all written:
                // accumulate); mixed regions take the accumulator below
                P("float*C=(float*)T%d+", dr->id);
                put_affine(b, &d->flat);
                P(";unsigned char*CF=F%d+", dr->id);
                put_affine(b, &d->flat);
                P(";int any0=%d,any1=%d;\n", mode == 2, mode == 1);
                if (mode == 0)
                    P("for(i64 m=0;m<%lldLL;m++)for(i64 n=0;n<%lldLL;n++){unsigned char "
                      "f=CF[m*%lldLL+n];any1|=f!=0;any0|=f==0;}\n",
                      (long long)M, (long long)N, (long long)d->stride[0]);
                P("if(!(any0&&any1)){rt->matmul(%lldLL,%lldLL,%lldLL,X0,X0f,X0p,X1,X1p,X1f,C,%"
                  "lldLL,"
                  "any1?1.0f:0.0f);for(i64 m=0;m<%lldLL;m++)memset(CF+m*%lldLL,1,%lldu);}else{\n",
                  (long long)M, (long long)N, (long long)K, (long long)d->stride[0], (long long)M,
                  (long long)d->stride[0], (long long)N);
                P("rt->matmul(%lldLL,%lldLL,%lldLL,X0,X0f,X0p,X1,X1p,X1f,acc,%lldLL,0.0f);\n",
                  (long long)M, (long long)N, (long long)K, (long long)N);
                put_merge(c, in, M, N);
                P("}\n");
                break;
            }
            // acc (M x N) = X0^T (M x K) @ X1 (K x N)
            P("rt->matmul(%lldLL,%lldLL,%lldLL,X0,X0f,X0p,X1,X1p,X1f,acc,%lldLL,0.0f);\n",
              (long long)M, (long long)N, (long long)K, (long long)N);
        } else {
            P("for(i64 e=0;e<%lldLL;e++)acc[e]=0.0f;\n", (long long)(M * N));
            P("for(i64 k=0;k<%lldLL;k++)for(i64 m=0;m<%lldLL;m++){float a=ld%d(T%d,", (long long)K,
              (long long)M, dt_of(p, s), root_of(p, s)->id);
            put_off_flat(b, s, "k", "m");
            P(");float*r=acc+m*%lldLL;\n#pragma GCC ivdep\nfor(i64 "
              "n=0;n<%lldLL;n++)r[n]+=a*ld%d(T%d,",
              (long long)N, (long long)N, dt_of(p, m), root_of(p, m)->id);
            put_off_flat(b, m, "k", "n");
            P(");}\n");
        }
        put_merge(c, in, M, N);
        break;
    }
    case NKI_OP_TRANSPOSE: {
        const nki_operand *s = &in->opd[1];
        open_loops(c, d, no_overlap(p, in));
        put_guards(c, in);
        P("i64 o=");
        put_affine(b, &d->flat);
        P("+i0*%lldLL+i1*%lldLL;\n", (long long)d->stride[0], (long long)d->stride[1]);
        P("st%d(T%d,o,ld%d(T%d,", dt_of(p, d), root_of(p, d)->id, dt_of(p, s), root_of(p, s)->id);
        put_affine(b, &s->flat);
        P("+i1*%lldLL+i0*%lldLL));\n", (long long)s->stride[0], (long long)s->stride[1]);
        if (root_of(p, d)->kind == NKI_PSUM) P("F%d[o]=1;\n", root_of(p, d)->id);
        close_loops(b, d);
        break;
    }
    case NKI_OP_IOTA:
    case NKI_OP_MEMSET:
    case NKI_OP_SELECT: {
        open_loops(c, d, no_overlap(p, in));
        put_ff(b, d);
        put_guards(c, in);
        bool isf = nki__dtype_float(p->t[d->tid].dtype);
        if (in->op == NKI_OP_IOTA) {
            P("i64 v=");
            put_expr(b, &in->expr[0]);
            P(";\n");
            if (isf) {
                put_st_begin(c, in);
                P("(float)v);\n");
            } else {
                P("sti(T%d,", root_of(p, d)->id);
                put_off(b, d, d);
                P(",%d,v);\n", nki__dtype_size(p->t[d->tid].dtype));
            }
        } else if (in->op == NKI_OP_MEMSET) {
            double v = in->p[0];
            if (!isf && v == (double)(int64_t)v && p->t[d->tid].dtype != NKI_BOOL) {
                P("sti(T%d,", root_of(p, d)->id);
                put_off(b, d, d);
                P(",%d,%lldLL);\n", nki__dtype_size(p->t[d->tid].dtype), (long long)(int64_t)v);
            } else {
                put_st_begin(c, in);
                put_float(b, v);
                P(");\n");
            }
        } else {
            P("int cnd=");
            put_expr(b, &in->expr[0]);
            P("%s0;\n", cmp_c((int)in->p[0]));
            put_st_begin(c, in);
            P("cnd?");
            put_ld(c, in, 1);
            double fv = in->p[1];
            P(":");
            put_float(b, fv);
            P(");\n");
        }
        close_loops(b, d);
        break;
    }
    case NKI_OP_SCAN: {
        // dst, d0, d1, [init vec]; p: op0 op1 init_kind init_imm
        const nki_operand *a = &in->opd[1], *bb = &in->opd[2];
        int64_t F = fcount(d);
        open_part(c, d->count[0]);
        P("float prev=");
        if ((int)in->p[2] == 2)
            put_vec(c, &in->opd[3]);
        else
            put_float(b, in->p[3]);
        P(";\nfor(i64 f=0;f<%lldLL;f++){float x=alu(%d,ld%d(T%d,", (long long)F, (int)in->p[0],
          dt_of(p, a), root_of(p, a)->id);
        put_off_flat(b, a, "i0", "f");
        P("),prev);x=alu(%d,x,ld%d(T%d,", (int)in->p[1], dt_of(p, bb), root_of(p, bb)->id);
        put_off_flat(b, bb, "i0", "f");
        P("));st%d(T%d,", dt_of(p, d), root_of(p, d)->id);
        put_off_flat(b, d, "i0", "f");
        P(",x);prev=x;}}\n");
        break;
    }
    case NKI_OP_PREDUCE: {
        const nki_operand *s = &in->opd[1];
        int64_t F = fcount(s);
        int op = (int)in->p[0];
        P("for(i64 f=0;f<%lldLL;f++){float acc=%s;for(i64 "
          "q=0;q<%lldLL;q++)acc=alu(%d,acc,ld%d(T%d,",
          (long long)F, reduce_init(op), (long long)s->count[0], op, dt_of(p, s),
          root_of(p, s)->id);
        put_off_flat(b, s, "q", "f");
        P("));st%d(T%d,", dt_of(p, d), root_of(p, d)->id);
        put_off_flat(b, d, "0", "f");
        P(",acc);}\n");
        break;
    }
    case NKI_OP_BNSTATS:
    case NKI_OP_BNAGGR: {
        // bn_stats: per partition (count, mean, variance, 0, 0, 0) of the
        // chunk; bn_aggr merges such groups into (mean, variance)
        const nki_operand *s = &in->opd[1];
        int64_t F = fcount(s);
        open_part(c, d->count[0]);
        P("\n");
        if (in->op == NKI_OP_BNSTATS) {
            put_bnstats(c, in, F);
            P("for(i64 f=0;f<6;f++)st%d(T%d,", dt_of(p, d), root_of(p, d)->id);
        } else {
            P("double n=0,mean=0,m2=0;for(i64 g=0;g<%lldLL;g++){double c=ld%d(T%d,",
              (long long)(F / 6), dt_of(p, s), root_of(p, s)->id);
            put_off_flat(b, s, "i0", "g*6");
            P(");double mu=ld%d(T%d,", dt_of(p, s), root_of(p, s)->id);
            put_off_flat(b, s, "i0", "g*6+1");
            P(");double var=ld%d(T%d,", dt_of(p, s), root_of(p, s)->id);
            put_off_flat(b, s, "i0", "g*6+2");
            P(");if(c<=0)continue;double "
              "t=n+c,dl=mu-mean;mean+=dl*c/t;m2+=var*c+dl*dl*n*c/t;n=t;}\n");
            P("float out[2]={(float)mean,(float)(n>0?m2/n:NAN)};\n");
            P("for(i64 f=0;f<2;f++)st%d(T%d,", dt_of(p, d), root_of(p, d)->id);
        }
        put_off_flat(b, d, "i0", "f");
        P(",out[f]);}\n");
        break;
    }
    case NKI_OP_GATHER: {
        // indirect DMA: partition i0 of the access reads (which 1) or writes
        // (which 0) row index[i0] of tensor dim `dim`; a row out of range
        // fails the run (oob error) or is skipped (oob skip)
        const int which = (int)in->p[0], dim = (int)in->p[1], skip = in->p[2] != 0;
        const nki_operand *ind = &in->opd[which], *x = &in->opd[2];
        const nki_tensor *t = &p->t[ind->tid];
        int64_t tstride = 1;
        if (t->kind == NKI_ARG || t->kind == NKI_OUT || t->kind == NKI_VIEW)
            tstride = t->strides[dim];
        else
            for (int k = t->ndim - 1; k > dim; k--) tstride *= t->sizes[k];
        const nki_dtype xd = p->t[x->tid].dtype;
        // mask=: rows (partitions) left out are neither read nor range-checked
        P("for(i64 i0=0;i0<%lldLL;i0++){\n", (long long)d->count[0]);
        for (int m = 0; m < in->nmask; m++) {
            P("if(!(");
            nki__put_cond(b, &in->mask[m]);
            P("))continue;\n");
        }
        P("i64 r=(i64)((const %s*)T%d)[", xd == NKI_U32 ? "uint32_t" : "int32_t",
          root_of(p, x)->id);
        put_affine(b, &x->flat);
        P("+i0*%lldLL];\nif(r<0||r>=%lldLL)", (long long)x->stride[0], (long long)t->sizes[dim]);
        if (skip) {
            P("continue;\n");
        } else {
            int64_t numel = 1;
            for (int k = 0; k < t->ndim; k++) numel *= t->sizes[k];
            P("{__atomic_store_n(&nki_oob[0],(long long)(r*%lldLL+", (long long)tstride);
            put_affine(b, &ind->flat);
            P("),__ATOMIC_RELAXED);__atomic_store_n(&nki_oob[1],%lldLL,__ATOMIC_RELAXED);return "
              "%d;}\n",
              (long long)numel, c->sid + 1);
        }
        P("i64 sh=(r-i0)*%lldLL;(void)sh;\n", (long long)tstride);
        for (int j = 1; j < d->nd; j++)
            P("for(i64 i%d=0;i%d<%lldLL;i%d++){", j, j, (long long)d->count[j], j);
        P("\n");
        // the indirect side's other dims, per element
        for (int dd = 0; dd < ind->ntd; dd++) {
            if (dd == dim) continue;
            P("if((uint64_t)(");
            put_affine(b, &ind->base[dd]);
            for (int j = 0; j < ind->nd; j++)
                if (ind->coef[dd][j] && ind->count[j] != 1)
                    P("+i%d*%lldLL", j, (long long)ind->coef[dd][j]);
            P(")>=%lluULL)return %d;\n", (unsigned long long)t->sizes[dd], c->sid + 1);
        }
        const nki_operand *sv = &in->opd[1];
        const int sz = nki__dtype_size(p->t[d->tid].dtype);
        const int rmw = in->np > 3 ? (int)in->p[3] : 0;
        if (rmw > 0) {
            // dst_rmw_op: dst = op(dst, src), rows in partition order (a
            // repeated index accumulates)
            P("{const i64 o_=");
            put_off(b, d, d);
            P("%s;st%d(T%d,o_,alu(%d,ld%d(T%d,o_),ld%d(T%d,", which == 0 ? "+sh" : "", dt_of(p, d),
              root_of(p, d)->id, rmw, dt_of(p, d), root_of(p, d)->id, dt_of(p, sv),
              root_of(p, sv)->id);
            put_off(b, sv, d);
            P("%s)));}\n", which == 1 ? "+sh" : "");
        } else if (dt_of(p, sv) == dt_of(p, d)) {
            P("cpy(T%d,", root_of(p, d)->id);
            put_off(b, d, d);
            P("%s,T%d,", which == 0 ? "+sh" : "", root_of(p, sv)->id);
            put_off(b, sv, d);
            P("%s,%d);\n", which == 1 ? "+sh" : "", sz);
        } else {
            P("st%d(T%d,", dt_of(p, d), root_of(p, d)->id);
            put_off(b, d, d);
            P("%s,ld%d(T%d,", which == 0 ? "+sh" : "", dt_of(p, sv), root_of(p, sv)->id);
            put_off(b, sv, d);
            P("%s));\n", which == 1 ? "+sh" : "");
        }
        for (int j = 0; j < d->nd; j++) P("}");
        P("\n");
        break;
    }
    case NKI_OP_TOP8: put_top8(c, in); break;
    case NKI_OP_TAKE: {
        const nki_operand *x = &in->opd[1], *ix = &in->opd[2];
        const long long n = (long long)fcount(x);
        open_loops(c, d, false);
        put_ff(b, d);
        P("const i64 q_=(i64)");
        put_ld(c, in, 2);
        P(";if(q_<0||q_>=%lldLL)return %d;\n", n, c->sid + 1);
        put_st_begin(c, in);
        P("ld%d(T%d,", dt_of(p, x), root_of(p, x)->id);
        put_off_flat(b, x, "i0", "q_");
        P("));\n");
        close_loops(b, d);
        (void)ix;
        break;
    }
    case NKI_OP_RAND: {
        // each execution draws a fresh stream (the counter is the
        // program's, shared by its instances and threads)
        P("static uint64_t nki_rng%d;const uint64_t s_=__atomic_fetch_add(&nki_rng%d,1,"
          "__ATOMIC_RELAXED)*0x9E3779B97F4A7C15ULL+%dULL;\n",
          c->sid, c->sid, c->sid);
        open_loops(c, d, false);
        put_ff(b, d);
        P("uint64_t z=s_+(uint64_t)(i0*%lldLL+ff)*0xBF58476D1CE4E5B9ULL;z^=z>>30;"
          "z*=0xBF58476D1CE4E5B9ULL;z^=z>>27;z*=0x94D049BB133111EBULL;z^=z>>31;\n",
          (long long)fcount(d));
        put_st_begin(c, in);
        P("(float)(z>>40)*0x1p-24f);\n");
        close_loops(b, d);
        break;
    }
    default: P("return %d;\n", c->sid + 1); break;
    }
    P("}\n");
    c->hin = NULL;
    c->hoist = 0;
}
