// render_text.c - owns the text primitives of generated code: the string
// builder, C types of each dtype, loads, stores, conversions and literals.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render_impl.h"

// ---- string builder -------------------------------------------------------------

TRN__PRINTF(2, 3) void put(sb *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *s = realloc(b->s, cap);
        if (s == NULL) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

// ---- types ----------------------------------------------------------------------

// The trn/convert.h name of an 8-bit float format ("e4m3fn", ...).
static const char *fp8_name(trn_dtype d) {
    switch (d) {
    case TRN_DTYPE_F8E4M3FN: return "e4m3fn";
    case TRN_DTYPE_F8E5M2: return "e5m2";
    case TRN_DTYPE_F8E4M3FNUZ: return "e4m3fnuz";
    case TRN_DTYPE_F8E5M2FNUZ: return "e5m2fnuz";
    default: return "e8m0fnu";
    }
}

// Converts the value of expression `e` held in the register type of `from`
// to the value it has as dtype `to` (in `to`'s register type). 8-bit floats
// are held as their codes (graph.c says which casts reach here); their
// conversions are trn/convert.h's, the eager ones.
void put_convert(sb *b, const char *e, trn_dtype from, trn_dtype to) {
    if (from == to && trn_dtype_is_fp8(to)) {
        put(b, "(%s)", e);  // a copy of the byte
        return;
    }
    if (trn_dtype_is_fp8(from)) {
        char *wide = NULL;
        sb t = {0};
        put(&t, "trn_fp8_%s_to_float((uint8_t)(%s))", fp8_name(from), e);
        wide = t.s;
        if (t.oom || wide == NULL) {
            b->oom = true;
            free(wide);
            return;
        }
        put_convert(b, wide, TRN_DTYPE_F32, to);
        free(wide);
        return;
    }
    if (trn_dtype_is_fp8(to)) {
        put(b, "(int64_t)trn_float_to_fp8_%s((float)(%s))", fp8_name(to), e);
        return;
    }
    if (is_f(to)) {
        const char *src = is_f(from) ? "" : "(float)";
        if (to == TRN_DTYPE_F16)
            put(b, "trn_g_round_half(%s(%s))", src, e);
        else if (to == TRN_DTYPE_BF16)
            put(b, "trn_g_round_bf16(%s(%s))", src, e);
        else
            put(b, "%s(%s)", src, e);
        return;
    }
    if (to == TRN_DTYPE_BOOL) {
        put(b, "(int64_t)((%s) != 0)", e);
        return;
    }
    if (is_f(from))
        put(b, "(int64_t)(%s)(int64_t)(%s)", mem_type(to), e);
    else
        put(b, "(int64_t)(%s)(%s)", mem_type(to), e);
}

void put_load(sb *b, trn_dtype d, const char *ptr, const char *idx) {
    switch (d) {
    case TRN_DTYPE_F16: put(b, "trn_half_to_float(%s[%s])", ptr, idx); break;
    case TRN_DTYPE_BF16: put(b, "trn_bf16_to_float(%s[%s])", ptr, idx); break;
    case TRN_DTYPE_F64: put(b, "(float)%s[%s]", ptr, idx); break;
    case TRN_DTYPE_F32: put(b, "%s[%s]", ptr, idx); break;
    default: put(b, "(int64_t)%s[%s]", ptr, idx); break;
    }
}

void put_store_value(sb *b, trn_dtype d, const char *v) {
    switch (d) {
    case TRN_DTYPE_F16: put(b, "trn_float_to_half(%s)", v); break;
    case TRN_DTYPE_BF16: put(b, "trn_float_to_bf16(%s)", v); break;
    case TRN_DTYPE_F64: put(b, "(double)%s", v); break;
    case TRN_DTYPE_F32: put(b, "%s", v); break;
    case TRN_DTYPE_BOOL: put(b, "(uint8_t)(%s != 0)", v); break;
    default: put(b, "(%s)%s", mem_type(d), v); break;
    }
}

static void put_float_literal(sb *b, double v) {
    if (v != v)
        put(b, "NAN");
    else if (v == INFINITY)
        put(b, "INFINITY");
    else if (v == -INFINITY)
        put(b, "(-INFINITY)");
    else {
        char t[64];
        snprintf(t, sizeof t, "%.9g", (double)(float)v);
        put(b, "%s%sf", t, strpbrk(t, ".en") ? "" : ".0");
    }
}

void put_i64(sb *b, int64_t v) {
    // -9223372036854775808 is not a literal in C: the unary minus applies to
    // 9223372036854775808, which no signed type holds (a warning under -Wall).
    if (v == INT64_MIN)
        put(b, "(-INT64_C(9223372036854775807) - 1)");
    else
        put(b, "INT64_C(%lld)", (long long)v);
}

void put_const(sb *b, const trn__cc_node *c) {
    if (is_f(c->dtype))
        put_float_literal(b, c->cf);
    else if (c->dtype == TRN_DTYPE_BOOL)
        put(b, "INT64_C(%d)", c->ci != 0);
    else
        put_i64(b, c->ci);
}

void lower_name(const char *up, char *out, size_t n) {
    size_t i = 0;
    for (; up[i] && i + 1 < n; i++)
        out[i] = (char)(up[i] >= 'A' && up[i] <= 'Z' ? up[i] - 'A' + 'a' : up[i]);
    out[i] = 0;
}
