// pow_special.h - which exponents of pow(x, e) by a scalar or literal e run
// as ATen CPU's special cases (x*x, x*x*x, sqrt, 1/x, ...) instead of the
// general exp(e log|x|) path. One answer for eager (elementwise.c's
// pow_fast_path) and compiled graphs (render.c), so both give the same bits.
// Internal to libtrn.
#ifndef TRN_POW_SPECIAL_H
#define TRN_POW_SPECIAL_H

#include <stdbool.h>

typedef enum trn__pow_special {
    TRN__POW_GENERAL = 0,  // no special case
    TRN__POW_ONE,
    TRN__POW_ZERO,
    TRN__POW_SQUARE,
    TRN__POW_CUBE,
    TRN__POW_SQRT,
    TRN__POW_RSQRT,
    TRN__POW_RECIPROCAL,
    TRN__POW_INV_SQUARE,
    TRN__POW_SPECIAL_COUNT,
} trn__pow_special;

// The trn_sc_<name>_f / blk_<name>_* function of each case.
static const char *const trn__pow_special_name[TRN__POW_SPECIAL_COUNT] = {
    [TRN__POW_GENERAL] = "pow",         [TRN__POW_ONE] = "pow_one",
    [TRN__POW_ZERO] = "pow_zero",       [TRN__POW_SQUARE] = "pow_square",
    [TRN__POW_CUBE] = "pow_cube",       [TRN__POW_SQRT] = "sqrt",
    [TRN__POW_RSQRT] = "rsqrt",         [TRN__POW_RECIPROCAL] = "reciprocal",
    [TRN__POW_INV_SQUARE] = "pow_inv_square",
};

// `half`: computed for float16 storage. ATen computes float16 with std::pow
// for every exponent, so only the cases that are one correctly rounded float
// operation (x*x, 1/x, and the trivial 1 and 0) round identically there.
static inline trn__pow_special trn__pow_special_of(double e, bool half) {
    if (e == 1.0) return TRN__POW_ONE;
    if (e == 0.0) return TRN__POW_ZERO;
    if (e == 2.0) return TRN__POW_SQUARE;
    if (e == -1.0) return TRN__POW_RECIPROCAL;
    if (half) return TRN__POW_GENERAL;
    if (e == 3.0) return TRN__POW_CUBE;
    if (e == 0.5) return TRN__POW_SQRT;
    if (e == -0.5) return TRN__POW_RSQRT;
    if (e == -2.0) return TRN__POW_INV_SQUARE;
    return TRN__POW_GENERAL;
}

#endif
