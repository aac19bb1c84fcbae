// norm/norm_common.h - owns the skeleton the normalization kernels share:
// which (data, parameter, statistic) dtype triples they accept, their
// descriptor checks, the per-launch conversion of weight/bias into the
// compute type, and the row-norm driver that layer norm and RMS norm run
// (rows split across the pool, the dweight/dbias column sums split by column
// blocks). Each kernel keeps only its per-row math. Private to src/kernels/norm.
#ifndef TRN_KERNELS_NORM_COMMON_H
#define TRN_KERNELS_NORM_COMMON_H

#include <stdint.h>

#include "../kit/dtype_io.h"
#include "../kit/launch.h"

// Elements per parallel piece of a row norm.
#define TRN__NORM_GRAIN 16384
// Columns per piece of the dweight/dbias sums (column walk).
#define TRN__NORM_COLBLOCK 64
// Rows per dweight/dbias partial of the one-pass backward: fixed, so the
// sums' order (rows within a block, then blocks in order) and so their bits
// do not depend on the thread count.
#define TRN__NORM_ROWBLOCK 64

// A floating data dtype whose parameter (or statistic) dtype `other` is the
// same, or float32 for 16-bit data (mixed precision, as ATen allows).
int trn__norm_dtype_pair_ok(trn_dtype dtype, trn_dtype other);

// The launch checks of a norm: stream and descriptor, then `supported`; the
// message names the data dtype and, where given, the parameter and
// statistic dtypes under their labels ("params", "weight", "stats", ...).
trn_status trn__norm_check_dtypes(const trn_stream *stream, const void *desc, int supported,
                                  const char *fn, trn_dtype dtype, const char *param_label,
                                  trn_dtype param_dtype, const char *stat_label,
                                  trn_dtype stat_dtype);
// [rows, cols] sizes of a row norm (then the fork check).
trn_status trn__norm_check_rows(int64_t rows, int64_t cols, const char *fn);

// A [n] parameter converted into the compute type (double when is_double,
// else float); NULL when out of memory. The caller frees it.
void *trn__norm_param_to_compute(trn_dtype d, const void *p, int64_t n, int is_double);

// A kernel's loops for one dtype: forward and dx over rows, and either the
// dweight/dbias sums over column blocks of TRN__NORM_COLBLOCK (dw) or one
// pass over row blocks of TRN__NORM_ROWBLOCK (dxw) that writes dx (when
// asked) and each block's double dweight/dbias partials, which the driver
// then sums over blocks in order. dxw, when set, is used whenever dweight
// or dbias is asked for.
typedef struct trn__row_norm_fns {
    trn_parallel_fn fwd, dx, dw, dxw;
} trn__row_norm_fns;

// The task arguments of a row norm (layer norm uses every field, RMS norm
// leaves bias, mean and dbias NULL): rows of `cols` elements, normalized
// independently.
typedef struct trn__row_norm_args {
    trn_dtype dtype, param_dtype, stat_dtype;
    int64_t rows, cols;
    const void *x, *dy, *weight, *bias;
    const void *mean_in, *rstd_in;
    void *y, *mean, *rstd, *dx, *dweight, *dbias;
    double eps;
    int backward;
    trn__row_norm_fns fns;  // the kernel's loops for dtype
    const char *what;       // the norm's name, for the out-of-memory message
} trn__row_norm_args;

_Static_assert(sizeof(trn__row_norm_args) <= TRN_TASK_MAX_ARGS, "row norm args too large");

// What the loops see: the arguments, and weight / bias converted into the
// compute type (NULL: absent), and dxw's partials (row block k's dweight
// sums at part + 2 * cols * k, its dbias sums cols further).
typedef struct trn__row_norm_ctx {
    const trn__row_norm_args *a;
    const void *w, *b;
    double *part;
} trn__row_norm_ctx;

// The task of a row norm (args: a trn__row_norm_args): opens the ranges,
// converts the parameters and runs the loops.
trn_status trn__row_norm_task(void *args);
// The launch checks of a row norm: descriptor, dtypes (labelled as in
// trn__norm_check_dtypes), sizes.
trn_status trn__row_norm_check(const trn_stream *stream, const void *desc, int supported,
                               const char *fn, trn_dtype dtype, const char *param_label,
                               trn_dtype param_dtype, const char *stat_label, trn_dtype stat_dtype,
                               int64_t rows, int64_t cols);

#endif
