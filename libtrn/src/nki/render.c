// render.c - one C translation unit per NKI program: a function that runs
// one kernel instance (program ids in pid[]), loops kept as C loops (a
// traced affine_range is one `for`, never unrolled), each instruction one
// loop nest over its access pattern with fp32 arithmetic (prelude.c).
// Exports nki_instance, nki_scratch_bytes and nki_abi.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "nki_impl.h"

extern const char *const nki__prelude[];

#define ABI 1

typedef struct rctx {
    const nki_prog *p;
    nki_buf *b;
    int sid;  // statement index (runtime errors report it + 1)
} rctx;

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

// The free flat index of the iteration point (for unaligned operands).
static void put_ff(nki_buf *b, const nki_operand *d) {
    nki__printf(b, "i64 ff=0");
    for (int j = 1; j < d->nd; j++) nki__printf(b, "*%lldLL+i%d", (long long)d->count[j], j);
    nki__printf(b, ";(void)ff;\n");
}

static void open_loops(nki_buf *b, const nki_operand *d) {
    for (int j = 0; j < d->nd; j++)
        nki__printf(b, "for(i64 i%d=0;i%d<%lldLL;i%d++)", j, j, (long long)d->count[j], j);
    nki__printf(b, "{\n");
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
    case 6: return "INFINITY";
    default: return "0.0f";
    }
}

static void render_instr(rctx *c, const nki_instr *in) {
    nki_buf *b = c->b;
    const nki_prog *p = c->p;
    const nki_operand *d = &in->opd[0];
    P("{ /* %s at %s */\n", in->name, in->loc);
    switch (in->op) {
    case NKI_OP_COPY: {
        const nki_operand *s = &in->opd[1];
        open_loops(b, d);
        put_ff(b, d);
        put_guards(c, in);
        if (dt_of(p, s) == dt_of(p, d)) {
            P("cpy(T%d,", root_of(p, d)->id);
            put_off(b, d, d);
            P(",T%d,", root_of(p, s)->id);
            put_off(b, s, d);
            P(",%d);\n", nki__dtype_size(p->t[d->tid].dtype));
        } else {
            put_st_begin(c, in);
            put_ld(c, in, 1);
            P(");\n");
        }
        P("}\n");
        break;
    }
    case NKI_OP_TT:
    case NKI_OP_WHERE:
    case NKI_OP_PREDCOPY: {
        open_loops(b, d);
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
        P("}\n");
        break;
    }
    case NKI_OP_TS:
    case NKI_OP_STT: {
        // TS: p op0 rev0 kind0 imm0 op1 rev1 kind1 imm1; STT: op0 op1 kind imm rev0 rev1
        open_loops(b, d);
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
        P("x);\n}\n");
        break;
    }
    case NKI_OP_ACT: {
        // p: func has_bias scale_kind scale_imm reduce_op alpha
        int func = (int)in->p[0], has_bias = in->p[1] != 0, skind = (int)in->p[2],
            rop = (int)in->p[4];
        int next = 2, bias = -1, svec = -1, rres = -1;
        if (has_bias) bias = next++;
        if (skind == 2) svec = next++;
        if (rop >= 0) rres = next++;
        P("for(i64 i0=0;i0<%lldLL;i0++){\n", (long long)d->count[0]);
        if (rop >= 0) P("float acc=%s;\n", reduce_init(rop));
        for (int j = 1; j < d->nd; j++)
            P("for(i64 i%d=0;i%d<%lldLL;i%d++)", j, j, (long long)d->count[j], j);
        P("{\n");
        put_ff(b, d);
        put_guards(c, in);
        P("float x=");
        put_ld(c, in, 1);
        P(";\n");
        if (svec >= 0) {
            P("x*=");
            put_vec(c, &in->opd[svec]);
            P(";\n");
        } else if (skind == 1 && in->p[3] != 1.0) {
            P("x*=");
            put_float(b, in->p[3]);
            P(";\n");
        }
        if (bias >= 0) {
            P("x+=");
            put_vec(c, &in->opd[bias]);
            P(";\n");
        }
        P("x=act(%d,x,", func);
        put_float(b, in->np > 5 ? in->p[5] : 0.0);
        P(");\n");
        put_st_begin(c, in);
        P("x);\n");
        if (rop >= 0) P("acc=alu(%d,acc,x);\n", rop);
        P("}\n");
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
        for (int j = 0; j < keep; j++)
            P("for(i64 i%d=0;i%d<%lldLL;i%d++)", j, j, (long long)s->count[j], j);
        P("{\nfloat acc=%s;\n", reduce_init(op));
        for (int j = keep; j < s->nd; j++)
            P("for(i64 i%d=0;i%d<%lldLL;i%d++)", j, j, (long long)s->count[j], j);
        P("{\n");
        put_guards(c, in);
        P("acc=alu(%d,acc,ld%d(T%d,", op, dt_of(p, s), root_of(p, s)->id);
        put_affine(b, &s->flat);
        for (int j = 0; j < s->nd; j++) P("+i%d*%lldLL", j, (long long)s->stride[j]);
        P("));\n}\n");
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
        P("float*acc=(float*)(scratch+%lldLL);\n", (long long)(p->scratch_bytes - 128 * 512 * 4));
        P("for(i64 e=0;e<%lldLL;e++)acc[e]=0.0f;\n", (long long)(M * N));
        P("for(i64 k=0;k<%lldLL;k++)for(i64 m=0;m<%lldLL;m++){float a=ld%d(T%d,", (long long)K,
          (long long)M, dt_of(p, s), root_of(p, s)->id);
        put_off_flat(b, s, "k", "m");
        P(");float*r=acc+m*%lldLL;\nfor(i64 n=0;n<%lldLL;n++)r[n]+=a*ld%d(T%d,", (long long)N,
          (long long)N, dt_of(p, m), root_of(p, m)->id);
        put_off_flat(b, m, "k", "n");
        P(");}\n");
        P("for(i64 m=0;m<%lldLL;m++)for(i64 n=0;n<%lldLL;n++){i64 o=", (long long)M, (long long)N);
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
        break;
    }
    case NKI_OP_TRANSPOSE: {
        const nki_operand *s = &in->opd[1];
        open_loops(b, d);
        put_guards(c, in);
        P("i64 o=");
        put_affine(b, &d->flat);
        P("+i0*%lldLL+i1*%lldLL;\n", (long long)d->stride[0], (long long)d->stride[1]);
        P("st%d(T%d,o,ld%d(T%d,", dt_of(p, d), root_of(p, d)->id, dt_of(p, s), root_of(p, s)->id);
        put_affine(b, &s->flat);
        P("+i1*%lldLL+i0*%lldLL));\n", (long long)s->stride[0], (long long)s->stride[1]);
        if (root_of(p, d)->kind == NKI_PSUM) P("F%d[o]=1;\n", root_of(p, d)->id);
        P("}\n");
        break;
    }
    case NKI_OP_IOTA:
    case NKI_OP_MEMSET:
    case NKI_OP_SELECT: {
        open_loops(b, d);
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
        P("}\n");
        break;
    }
    case NKI_OP_SCAN: {
        // dst, d0, d1, [init vec]; p: op0 op1 init_kind init_imm
        const nki_operand *a = &in->opd[1], *bb = &in->opd[2];
        int64_t F = fcount(d);
        P("for(i64 i0=0;i0<%lldLL;i0++){float prev=", (long long)d->count[0]);
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
        P("for(i64 i0=0;i0<%lldLL;i0++){\n", (long long)d->count[0]);
        if (in->op == NKI_OP_BNSTATS) {
            P("double sum=0,sq=0;for(i64 f=0;f<%lldLL;f++){double x=ld%d(T%d,", (long long)F,
              dt_of(p, s), root_of(p, s)->id);
            put_off_flat(b, s, "i0", "f");
            P(");sum+=x;}double mean=sum/%lldLL;for(i64 f=0;f<%lldLL;f++){double x=ld%d(T%d,",
              (long long)F, (long long)F, dt_of(p, s), root_of(p, s)->id);
            put_off_flat(b, s, "i0", "f");
            P(")-mean;sq+=x*x;}\nfloat "
              "out[6]={(float)%lld,(float)mean,(float)(sq/%lldLL),0,0,0};\n",
              (long long)F, (long long)F);
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
    default: P("return %d;\n", c->sid + 1); break;
    }
    P("}\n");
}

static uint32_t poison_pattern(nki_dtype d) {
    switch (d) {
    case NKI_F32:
    case NKI_TF32: return 0x7fc00000u;
    case NKI_BF16: return 0x7fc0u;
    case NKI_F16: return 0x7e00u;
    case NKI_F8E4M3:
    case NKI_F8E4M3FN:
    case NKI_F8E5M2: return 0x7fu;
    default: return 4u;
    }
}

trn_status nki__render(const nki_prog *p, char **source) {
    nki_buf buf = {0};
    nki_buf *b = &buf;
    for (int i = 0; nki__prelude[i]; i++) P("%s", nki__prelude[i]);
    P("const int nki_abi=%d;\nconst long long nki_scratch_bytes=%lldLL;\n", ABI,
      (long long)p->scratch_bytes);
    P("/* kernel %s */\nint nki_instance(void*const*args,const "
      "i64*pid,char*scratch){\n(void)pid;\n",
      p->name);
    for (int i = 0; i < p->nt; i++) {
        const nki_tensor *t = &p->t[i];
        if (t->kind == NKI_ARG || t->kind == NKI_OUT)
            P("char*T%d=(char*)args[%d];(void)T%d;\n", i, t->arg, i);
        else if (t->kind != NKI_VIEW) {
            P("char*T%d=scratch+%lldLL;(void)T%d;\n", i, (long long)t->scratch, i);
            if (t->kind == NKI_PSUM)
                P("unsigned char*F%d=(unsigned char*)scratch+%lldLL;(void)F%d;\n", i,
                  (long long)t->flags, i);
        }
    }
    rctx c = {p, b, 0};
    for (int i = 0; i < p->ns; i++) {
        const nki_stmt *s = &p->s[i];
        c.sid = i;
        if (s->kind == NKI_LOOP)
            P("for(i64 v%d=%lldLL;v%d<%lldLL;v%d+=%lldLL){\n", s->var, (long long)s->lo, s->var,
              (long long)s->hi, s->var, (long long)s->step);
        else if (s->kind == NKI_IF) {
            P("if(1");
            for (int k = 0; k < s->ncond; k++) {
                P("&&");
                put_expr(b, &s->cond[k]);
                P("%s0", cmp_c(s->cond[k].cmp));
            }
            P("){\n");
        } else if (s->kind == NKI_END)
            P("}\n");
        else if (s->kind == NKI_POISON) {
            const nki_tensor *t = &p->t[s->tensor];
            int64_t n = 1;
            for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
            if (t->kind == NKI_VIEW || t->kind == NKI_ARG || t->kind == NKI_OUT) continue;
            P("poison(T%d,%lldLL,%d,0x%xu);\n", t->id, (long long)n, nki__dtype_size(t->dtype),
              poison_pattern(t->dtype));
            if (t->kind == NKI_PSUM) P("memset(F%d,0,%lld);\n", t->id, (long long)n);
        } else {
            render_instr(&c, s->ins);
        }
    }
    P("return 0;\n}\n");
    if (buf.oom) {
        free(buf.s);
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "nki: out of memory rendering kernel %s",
                              p->name);
    }
    *source = buf.s;
    return TRN_SUCCESS;
}
