// pool/pool_common.c - owns the pooling skeleton declared in pool_common.h:
// the checks and the task body shared by pool2d.c and pool3d.c.
#include "pool_common.h"

int trn_pool_supports(trn_dtype d) { return trn__is_float_dtype(d); }

trn_status trn__pool_check(const trn_stream *stream, const void *desc, trn_dtype dtype,
                           trn_pool_mode mode, const char *fn) {
    trn_status st = trn__check_launch(stream, desc, fn);
    if (st != TRN_SUCCESS) return st;
    if (!trn_pool_supports(dtype))
        return trn__set_error(TRN_ERROR_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                              trn_dtype_name(dtype));
    if (mode != TRN_POOL_MAX && mode != TRN_POOL_AVG)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: unknown pooling mode %d", fn,
                              (int)mode);
    return TRN_SUCCESS;
}

trn_status trn__pool_check_forward(const trn__pool_io *io, int64_t in_n, const char *fn) {
    if (io->x == NULL || io->y == NULL || (io->mode == TRN_POOL_MAX && io->idx_out == NULL) ||
        in_n == 0)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "%s: x, y or indices is NULL, or the input is empty", fn);
    return TRN_SUCCESS;
}

trn_status trn__pool_check_backward(const trn__pool_io *io, int64_t out_n, const char *fn) {
    if (io->dx == NULL ||
        (out_n > 0 && (io->dy == NULL || (io->mode == TRN_POOL_MAX && io->idx_in == NULL))))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: dx, dy or indices is NULL", fn);
    return TRN_SUCCESS;
}

trn_status trn__pool_submit(trn_stream *stream, trn__pool_io *io, int64_t planes, int64_t in_n,
                            int64_t out_n, trn_task_fn task, size_t size, const char *fn) {
    if (planes * (io->backward ? in_n : out_n) == 0) return TRN_SUCCESS;
    const trn_status st = io->backward ? trn__pool_check_backward(io, out_n, fn)
                                       : trn__pool_check_forward(io, in_n, fn);
    return st != TRN_SUCCESS ? st : trn_stream_launch(stream, task, io, size);
}

// The position of a floating dtype in TRN_KIT_FLOAT_TYPES (launch checked it).
static int float_slot(trn_dtype d) {
    int k = 0;
#define SLOT(E, ...)                                                                               \
    if (d == E) return k;                                                                          \
    k++;
    TRN_KIT_FLOAT_TYPES(SLOT)
#undef SLOT
    return 0;
}

trn_status trn__pool_run(trn__pool_io *io, const trn__pool_shape *s, const trn__pool_loops *l,
                         void *ctx) {
    const size_t es = trn_dtype_size(io->dtype);
    const size_t in_b = (size_t)(s->planes * s->in_n), out_b = (size_t)(s->planes * s->out_n);
    const void *ix = io->backward ? (const void *)io->idx_in : (const void *)io->idx_out;
    trn__access_set rg = {.count = 0};
    trn__access_add(&rg, io->backward ? io->dx : io->x, in_b * es);
    trn__access_add(&rg, io->backward ? io->dy : io->y, out_b * es);
    if (io->mode == TRN_POOL_MAX) trn__access_add(&rg, ix, out_b * sizeof(int64_t));
    trn_status st = trn__access_begin(&rg);
    atomic_int bad = 0;
    if (st == TRN_SUCCESS && s->planes > 0) {
        io->bad = &bad;
        // Work per plane: the backward touches every input and output once;
        // the forward reads fwd_reads inputs per output.
        const int64_t work =
            (int64_t)((io->backward ? in_b + out_b : out_b * (size_t)s->fwd_reads) /
                      (size_t)s->planes);
        trn_parallel_for(s->planes, work > 0 ? trn__grain(TRN__POOL_GRAIN, work) : 1,
                         (io->backward ? l->bwd : l->fwd)[float_slot(io->dtype)], ctx);
    }
    trn__access_end(&rg);
    if (st == TRN_SUCCESS && atomic_load(&bad) == 1)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s", s->outside);
    if (st == TRN_SUCCESS && atomic_load(&bad) == 2)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "pool backward: out of host memory");
    return st;
}
