// histc.c - owns trn_histc_launch (trn/histc.h): equal-width histograms.
//
// Pieces of the input count into their own int64 histograms, summed at the
// end (counts are exact whatever the split); the bin rule is CPU's, in the
// input's dtype (see the header).
#include <stdlib.h>
#include <string.h>

#include "../kit/launch.h"
#include "trn/convert.h"
#include "trn/histc.h"
#include "trn/parallel.h"

enum { GRAIN = 64 * 1024, MAX_PIECES = 64 };

static int is_int(trn_dtype t) {
    switch (t) {
    case TRN_DTYPE_U8:
    case TRN_DTYPE_I8:
    case TRN_DTYPE_I16:
    case TRN_DTYPE_I32:
    case TRN_DTYPE_I64: return 1;
    default: return 0;
    }
}

int trn_histc_supports(trn_dtype t) {
    return is_int(t) || t == TRN_DTYPE_F32 || t == TRN_DTYPE_F64 || t == TRN_DTYPE_F16 ||
           t == TRN_DTYPE_BF16;
}

static int64_t load_i(trn_dtype t, const void *p, int64_t i) {
    switch (t) {
    case TRN_DTYPE_U8: return ((const uint8_t *)p)[i];
    case TRN_DTYPE_I8: return ((const int8_t *)p)[i];
    case TRN_DTYPE_I16: return ((const int16_t *)p)[i];
    case TRN_DTYPE_I32: return ((const int32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

// Rounds a float result to the 16-bit dtype (as c10::Half / BFloat16
// arithmetic does after every operation).
static float r16(trn_dtype t, float v) {
    return t == TRN_DTYPE_F16 ? trn_half_to_float(trn_float_to_half(v))
                              : trn_bf16_to_float(trn_float_to_bf16(v));
}

// The bin of element i, or -1 when it is outside [lo, hi] or NaN.
static int64_t bin_of(const trn_histc_desc *d, int64_t i) {
    const int64_t nb = d->bins;
    int64_t pos;
    if (is_int(d->dtype)) {
        const int64_t x = load_i(d->dtype, d->input, i);
        const int64_t lo = (int64_t)d->lo, hi = (int64_t)d->hi;
        if (x < lo || x > hi) return -1;
        pos = (x - lo) * nb / (hi - lo);
    } else if (d->dtype == TRN_DTYPE_F64) {
        const double x = ((const double *)d->input)[i];
        if (!(x >= d->lo && x <= d->hi)) return -1;
        pos = (int64_t)((x - d->lo) * (double)nb / (d->hi - d->lo));
    } else if (d->dtype == TRN_DTYPE_F32) {
        const float x = ((const float *)d->input)[i], lo = (float)d->lo, hi = (float)d->hi;
        if (!(x >= lo && x <= hi)) return -1;
        const float num = (x - lo) * (float)nb;
        pos = (int64_t)(num / (hi - lo));
    } else {
        const uint16_t raw = ((const uint16_t *)d->input)[i];
        const float x = d->dtype == TRN_DTYPE_F16 ? trn_half_to_float(raw) : trn_bf16_to_float(raw);
        const float lo = r16(d->dtype, (float)d->lo), hi = r16(d->dtype, (float)d->hi);
        if (!(x >= lo && x <= hi)) return -1;
        const float num = r16(d->dtype, r16(d->dtype, x - lo) * r16(d->dtype, (float)nb));
        pos = (int64_t)r16(d->dtype, num / r16(d->dtype, hi - lo));
    }
    if (pos >= nb) pos = nb - 1;
    return pos < 0 ? 0 : pos;
}

typedef struct histc_ctx {
    const trn_histc_desc *d;
    int64_t *counts;  // [pieces][bins]
    int64_t chunk;
} histc_ctx;

static void histc_piece(void *vctx, int64_t p0, int64_t p1) {
    const histc_ctx *c = vctx;
    for (int64_t p = p0; p < p1; p++) {
        int64_t *h = c->counts + p * c->d->bins;
        const int64_t end = c->chunk * (p + 1) < c->d->n ? c->chunk * (p + 1) : c->d->n;
        for (int64_t i = c->chunk * p; i < end; i++) {
            const int64_t b = bin_of(c->d, i);
            if (b >= 0) h[b]++;
        }
    }
}

static void store_count(trn_dtype t, void *out, int64_t b, int64_t v) {
    switch (t) {
    case TRN_DTYPE_U8: ((uint8_t *)out)[b] = (uint8_t)v; break;
    case TRN_DTYPE_I8: ((int8_t *)out)[b] = (int8_t)v; break;
    case TRN_DTYPE_I16: ((int16_t *)out)[b] = (int16_t)v; break;
    case TRN_DTYPE_I32: ((int32_t *)out)[b] = (int32_t)v; break;
    case TRN_DTYPE_I64: ((int64_t *)out)[b] = v; break;
    case TRN_DTYPE_F64: ((double *)out)[b] = (double)v; break;
    case TRN_DTYPE_F32: ((float *)out)[b] = (float)v; break;
    case TRN_DTYPE_F16: ((uint16_t *)out)[b] = trn_float_to_half((float)v); break;
    default: ((uint16_t *)out)[b] = trn_float_to_bf16((float)v); break;
    }
}

typedef struct histc_args {
    trn_histc_desc d;
} histc_args;

static trn_status histc_task(void *args) {
    const trn_histc_desc *d = &((histc_args *)args)->d;
    const size_t es = trn_dtype_size(d->dtype);
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, d->input, (size_t)d->n * es);
    trn__access_add(&rg, d->out, (size_t)d->bins * es);
    trn_status st = trn__access_begin(&rg);
    if (st != TRN_SUCCESS) return st;
    int64_t pieces = (d->n + GRAIN - 1) / GRAIN;
    if (pieces < 1) pieces = 1;
    if (pieces > MAX_PIECES) pieces = MAX_PIECES;
    int64_t *counts = calloc((size_t)(pieces * d->bins), sizeof(int64_t));
    if (counts == NULL) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_histc_launch: out of host memory");
    } else {
        histc_ctx c = {d, counts, (d->n + pieces - 1) / pieces};
        trn_parallel_for(pieces, 1, histc_piece, &c);
        for (int64_t b = 0; b < d->bins; b++) {
            int64_t v = 0;
            for (int64_t p = 0; p < pieces; p++) v += counts[p * d->bins + b];
            store_count(d->dtype, d->out, b, v);
        }
        free(counts);
    }
    trn__access_end(&rg);
    return st;
}

trn_status trn_histc_launch(trn_stream *stream, const trn_histc_desc *d) {
    static const char fn[] = "trn_histc_launch";
    if (stream == NULL || d == NULL) return trn__check_launch(stream, d, fn);
    if (!trn_histc_supports(d->dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              (unsigned)d->dtype < TRN_DTYPE_COUNT ? trn_dtype_name(d->dtype)
                                                                   : "invalid");
    if (d->n < 0 || d->bins < 1)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: %lld elements, %lld bins", fn,
                              (long long)d->n, (long long)d->bins);
    if (!(d->lo < d->hi))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: range [%g, %g] is empty", fn, d->lo,
                              d->hi);
    trn_status st = trn__fork_check();
    if (st != TRN_SUCCESS) return st;
    const histc_args a = {*d};
    return trn_stream_launch(stream, histc_task, &a, sizeof a);
}
