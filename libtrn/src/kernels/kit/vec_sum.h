// vec_sum.h - partial sums in one 64-byte vector, for the row / channel sums
// of the normalization kernels.
//
// A single running float sum is one dependent add per element, which the
// compiler may not reorder into vectors (libtrn never uses -ffast-math), so
// such loops ran 5-8x slower than ATen's vectorized moments. Summing element
// i into lane i % lanes of a vector, then the lanes in order, vectorizes and
// is deterministic. GNU vector types rather than an array of lanes: GCC 12
// turned the array form into kilobytes of permutes, 8x slower.
#ifndef TRN_KERNELS_VEC_SUM_H
#define TRN_KERNELS_VEC_SUM_H

typedef float trn__vec_f __attribute__((vector_size(64)));
typedef double trn__vec_d __attribute__((vector_size(64)));

// Lanes of vector type V holding compute type C.
#define TRN_VLANES(V, C) ((int)(sizeof(V) / sizeof(C)))

// acc += the next lanes values EXPR(j), j = 0..lanes-1 (C t[] staged, then
// one vector add; memcpy keeps it free of aliasing and alignment rules).
#define TRN_VACC(V, C, acc, j, EXPR)                                                               \
    do {                                                                                           \
        C t_[TRN_VLANES(V, C)];                                                                    \
        for (int j = 0; j < TRN_VLANES(V, C); j++) t_[j] = (EXPR);                                 \
        V v_;                                                                                      \
        memcpy(&v_, t_, sizeof v_);                                                                \
        (acc) += v_;                                                                               \
    } while (0)

// s += the lanes of acc, in lane order.
#define TRN_VREDUCE(V, C, acc, s)                                                                  \
    do {                                                                                           \
        for (int j_ = 0; j_ < TRN_VLANES(V, C); j_++) (s) += (acc)[j_];                            \
    } while (0)

// How often a float lane sum moves to its double total: every
// TRN_VFLUSH_ELEMS elements (16 terms a float lane), so the float part of a
// long sum stays short (a float sum of the lanes of 100 +- 1 data would
// round at 6400) and the statistics of the norms stay within a few float
// roundings of the exact values. The grouping depends only on the shape.
// The move is TRN_VREDUCE into the double total.
#define TRN_VFLUSH_ELEMS 256

#endif
