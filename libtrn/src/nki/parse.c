// parse.c - reads the NKI program text (format: nki_impl.h) into nki_prog.
// The producer is our own tracer, but the text crosses a language boundary,
// so every count and id is range-checked: bad text is an error, never UB.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "nki_impl.h"

typedef struct lexer {
    const char *s;
    bool bad;
    const char *what;
} lexer;

static const char *next_tok(lexer *lx, size_t *len) {
    while (*lx->s == ' ' || *lx->s == '\n' || *lx->s == '\t' || *lx->s == '\r') lx->s++;
    const char *start = lx->s;
    while (*lx->s && *lx->s != ' ' && *lx->s != '\n' && *lx->s != '\t' && *lx->s != '\r') lx->s++;
    *len = (size_t)(lx->s - start);
    return start;
}

static int64_t get_i(lexer *lx) {
    size_t n;
    const char *t = next_tok(lx, &n);
    if (n == 0 || n > 30) {
        lx->bad = true;
        return 0;
    }
    char tmp[32];
    memcpy(tmp, t, n);
    tmp[n] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(tmp, &end, 10);
    if (*end || errno) lx->bad = true;
    return v;
}

static double get_f(lexer *lx) {
    size_t n;
    const char *t = next_tok(lx, &n);
    if (n == 0 || n > 60) {
        lx->bad = true;
        return 0;
    }
    char tmp[64];
    memcpy(tmp, t, n);
    tmp[n] = 0;
    char *end;
    double v = strtod(tmp, &end);
    if (*end) lx->bad = true;
    return v;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// A %XX-escaped string token (malloc'd).
static char *get_s(lexer *lx) {
    size_t n;
    const char *t = next_tok(lx, &n);
    if (n == 0) {
        lx->bad = true;
        return NULL;
    }
    char *out = malloc(n + 1);
    if (out == NULL) {
        lx->bad = true;
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '%' && i + 2 < n && hexval(t[i + 1]) >= 0 && hexval(t[i + 2]) >= 0) {
            out[k++] = (char)(hexval(t[i + 1]) * 16 + hexval(t[i + 2]));
            i += 2;
        } else {
            out[k++] = t[i];
        }
    }
    out[k] = 0;
    return out;
}

static void get_affine(lexer *lx, nki_affine *a) {
    a->c = get_i(lx);
    int64_t n = get_i(lx);
    if (n < 0 || n > NKI_MAXT) {
        lx->bad = true;
        lx->what = "too many terms in an index expression";
        return;
    }
    a->n = (int)n;
    for (int i = 0; i < a->n; i++) {
        int64_t v = get_i(lx);
        if (v < 0 || v >= NKI_PID_VAR + 4) lx->bad = true;
        a->var[i] = (int)v;
        a->coef[i] = get_i(lx);
    }
}

static int get_nd(lexer *lx) {
    int64_t nd = get_i(lx);
    if (nd < 0 || nd > NKI_MAXD) {
        lx->bad = true;
        lx->what = "more than 8 dimensions";
        return 0;
    }
    return (int)nd;
}

static void get_expr(lexer *lx, nki_expr *e) {
    get_affine(lx, &e->a);
    e->nd = get_nd(lx);
    for (int j = 0; j < e->nd; j++) e->coef[j] = get_i(lx);
    e->cmp = (int)get_i(lx);
}

static void get_operand(lexer *lx, const nki_prog *p, nki_operand *o) {
    int64_t tid = get_i(lx);
    if (tid < 0 || tid >= p->nt) {
        lx->bad = true;
        lx->what = "operand names an unknown tensor";
        return;
    }
    o->tid = (int)tid;
    o->nd = get_nd(lx);
    for (int j = 0; j < o->nd; j++) o->count[j] = get_i(lx);
    o->ntd = get_nd(lx);
    for (int d = 0; d < o->ntd && !lx->bad; d++) {
        get_affine(lx, &o->base[d]);
        for (int j = 0; j < o->nd; j++) o->coef[d][j] = get_i(lx);
    }
}

static trn_status grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return TRN_SUCCESS;
    int nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *na = realloc(*arr, (size_t)nc * elem);
    if (na == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "nki: out of memory reading the program");
    memset((char *)na + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = na;
    *cap = nc;
    return TRN_SUCCESS;
}

trn_status nki__parse(const char *text, nki_prog *p) {
    memset(p, 0, sizeof *p);
    lexer lx = {text, false, NULL};
    int depth = 0;
    int open[64];
    for (;;) {
        size_t n;
        const char *t = next_tok(&lx, &n);
        if (n == 0) break;
        if (n != 1) {
            lx.bad = true;
            break;
        }
        char c = t[0];
        if (c == 'K') {
            p->name = get_s(&lx);
            p->target = (int)get_i(&lx);
            int64_t ng = get_i(&lx);
            if (ng < 0 || ng > 4) {
                lx.bad = true;
                lx.what = "an SPMD grid has at most 4 dimensions";
                break;
            }
            p->ngrid = (int)ng;
            for (int i = 0; i < p->ngrid; i++) {
                p->grid[i] = get_i(&lx);
                if (p->grid[i] < 1 || p->grid[i] > 65536) lx.bad = true;
            }
        } else if (c == 'T') {
            if (grow((void **)&p->t, &p->capt, p->nt + 1, sizeof *p->t) != TRN_SUCCESS) goto oom;
            nki_tensor *x = &p->t[p->nt];
            x->id = (int)get_i(&lx);
            if (x->id != p->nt) lx.bad = true;
            x->kind = (nki_kind)get_i(&lx);
            x->dtype = (nki_dtype)get_i(&lx);
            if ((int)x->kind < 0 || x->kind > NKI_VIEW || (int)x->dtype < 0 ||
                x->dtype >= NKI_NDTYPES)
                lx.bad = true;
            x->ndim = get_nd(&lx);
            for (int d = 0; d < x->ndim; d++) x->sizes[d] = get_i(&lx);
            for (int d = 0; d < x->ndim; d++) x->strides[d] = get_i(&lx);
            x->par_axis = (int)get_i(&lx);
            x->base = (int)get_i(&lx);
            x->offset = get_i(&lx);
            x->loc = get_s(&lx);
            if (x->kind == NKI_VIEW && (x->base < 0 || x->base >= p->nt)) lx.bad = true;
            if (x->par_axis < 0 || (x->ndim > 0 && x->par_axis >= x->ndim)) lx.bad = true;
            p->nt++;
        } else if (c == 'R') {
            // R tid n: a mod_alloc tensor's block tiles share n physical buffers
            int64_t tid = get_i(&lx), n = get_i(&lx);
            if (tid < 0 || tid >= p->nt || n < 1 || p->t[tid].kind == NKI_VIEW) {
                lx.bad = true;
                break;
            }
            p->t[tid].rot = n;
        } else if (c == 'B') {
            // B tid mask: a PSUM tensor placed by the kernel in these banks
            int64_t tid = get_i(&lx), mask = get_i(&lx);
            if (tid < 0 || tid >= p->nt || mask < 1 || mask >= 256 /* 8 banks */ ||
                p->t[tid].kind != NKI_PSUM) {
                lx.bad = true;
                break;
            }
            p->t[tid].banks = (int)mask;
        } else if (c == 'L' || c == 'E' || c == 'P' || c == 'I' || c == 'G') {
            if (grow((void **)&p->s, &p->caps, p->ns + 1, sizeof *p->s) != TRN_SUCCESS) goto oom;
            nki_stmt *s = &p->s[p->ns];
            if (c == 'L') {
                s->kind = NKI_LOOP;
                s->var = (int)get_i(&lx);
                s->lo = get_i(&lx);
                s->hi = get_i(&lx);
                s->step = get_i(&lx);
                s->loc = get_s(&lx);
                if (s->var < 0 || s->var >= NKI_PID_VAR || s->step <= 0 || depth >= 64)
                    lx.bad = true;
                else
                    open[depth++] = p->ns;
            } else if (c == 'G') {
                s->kind = NKI_IF;
                int64_t nc = get_i(&lx);
                if (nc < 1 || nc > 4 || depth >= 64) {
                    lx.bad = true;
                    lx.what = "an if takes 1 to 4 conditions";
                    break;
                }
                s->ncond = (int)nc;
                for (int i = 0; i < s->ncond; i++) get_expr(&lx, &s->cond[i]);
                s->loc = get_s(&lx);
                if (!lx.bad) open[depth++] = p->ns;
            } else if (c == 'E') {
                s->kind = NKI_END;
                if (depth == 0)
                    lx.bad = true;
                else
                    p->s[open[--depth]].end = p->ns;
            } else if (c == 'P') {
                s->kind = NKI_POISON;
                s->tensor = (int)get_i(&lx);
                s->loc = get_s(&lx);
                if (s->tensor < 0 || s->tensor >= p->nt) lx.bad = true;
            } else {
                s->kind = NKI_INSTR;
                nki_instr *in = calloc(1, sizeof *in);
                if (in == NULL) goto oom;
                s->ins = in;
                in->op = (nki_op)get_i(&lx);
                if ((int)in->op < 0 || in->op >= NKI_OP_COUNT) lx.bad = true;
                in->name = get_s(&lx);
                in->loc = get_s(&lx);
                int64_t np = get_i(&lx);
                if (np < 0 || np > NKI_MAXP) {
                    lx.bad = true;
                    break;
                }
                in->np = (int)np;
                for (int i = 0; i < in->np; i++) in->p[i] = get_f(&lx);
                int64_t no = get_i(&lx);
                if (no < 0 || no > NKI_MAXOPD) {
                    lx.bad = true;
                    break;
                }
                in->nopd = (int)no;
                for (int i = 0; i < in->nopd && !lx.bad; i++) get_operand(&lx, p, &in->opd[i]);
                int64_t ne = get_i(&lx);
                if (ne < 0 || ne > 2) {
                    lx.bad = true;
                    break;
                }
                in->nexpr = (int)ne;
                for (int i = 0; i < in->nexpr; i++) get_expr(&lx, &in->expr[i]);
                int64_t nm = get_i(&lx);
                if (nm < 0 || nm > 4) {
                    lx.bad = true;
                    lx.what = "at most 4 mask predicates";
                    break;
                }
                in->nmask = (int)nm;
                for (int i = 0; i < in->nmask; i++) get_expr(&lx, &in->mask[i]);
            }
            p->ns++;
        } else {
            lx.bad = true;
        }
        if (lx.bad) break;
    }
    if (!lx.bad && depth != 0) lx.bad = true;
    if (!lx.bad && p->name == NULL) lx.bad = true;
    if (lx.bad) {
        trn_status st = trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                                       "nki: malformed program text near `%.40s`%s%s", lx.s,
                                       lx.what ? ": " : "", lx.what ? lx.what : "");
        nki__prog_free(p);
        return st;
    }
    return TRN_SUCCESS;
oom:
    nki__prog_free(p);
    return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "nki: out of memory reading the program");
}

void nki__prog_free(nki_prog *p) {
    if (p == NULL) return;
    for (int i = 0; i < p->nt; i++) free(p->t[i].loc);
    for (int i = 0; i < p->ns; i++) {
        free(p->s[i].loc);
        if (p->s[i].ins) {
            free(p->s[i].ins->name);
            free(p->s[i].ins->loc);
            free(p->s[i].ins);
        }
    }
    free(p->t);
    free(p->s);
    free(p->name);
    memset(p, 0, sizeof *p);
}

void nki__printf(nki_buf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int k = vsnprintf(b->s ? b->s + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = (b->cap ? b->cap * 2 : 65536) + (size_t)k;
        char *ns = realloc(b->s, nc);
        if (ns == NULL) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
}

int nki__dtype_size(nki_dtype d) {
    switch (d) {
    case NKI_F32:
    case NKI_I32:
    case NKI_U32:
    case NKI_TF32: return 4;
    case NKI_BF16:
    case NKI_F16:
    case NKI_I16:
    case NKI_U16: return 2;
    default: return 1;
    }
}

bool nki__dtype_float(nki_dtype d) {
    return d == NKI_F32 || d == NKI_BF16 || d == NKI_F16 || d == NKI_F8E4M3 || d == NKI_F8E4M3FN ||
           d == NKI_F8E5M2 || d == NKI_TF32;
}

const char *nki__kind_name(nki_kind k) {
    static const char *names[] = {"hbm", "shared_hbm", "sbuf", "psum", "private_hbm", "view"};
    return (int)k >= 0 && k <= NKI_VIEW ? names[k] : "?";
}
