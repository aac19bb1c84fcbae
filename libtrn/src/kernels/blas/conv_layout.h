// conv_layout.h - owns the bfloat16 copies between PyTorch's channels-first
// activations (each [n, c] plane a dense H x W block, any n / c strides) and
// oneDNN's nChw16c layout ([n][c/16][h][w][16 channels]) that conv.c's
// direct convolutions compute on. oneDNN 2.6's own bfloat16 reorders for
// these (`jit:uni`) ran at 2-4 GB/s, 0.13 ms for a 32x32x16x16 batch that
// sits in L2, and were 12-15 % of a ResNet-18 bf16 autocast training step
// (the same reorders PyTorch CPU's ideep pays). Here each 16 channels x 16
// pixels tile is loaded as 16 vectors, transposed in registers (four rounds
// of two-input shuffles) and stored as 16 vectors: 4-5x faster. A copy moves
// bits, so the results are those of the oneDNN reorder.
#ifndef TRN_KERNELS_BLAS_CONV_LAYOUT_H
#define TRN_KERNELS_BLAS_CONV_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define CONV_LAYOUT_BLOCK 16

typedef uint16_t conv_v16x2 __attribute__((vector_size(32)));
// The same vector at any 2-byte alignment, for the tile's loads and stores.
// GCC 12 fused the 16 row stores of a tile whose rows are adjacent (to
// nChw16c, where the row stride was a constant of a clone: 512 contiguous
// bytes) into zmm stores built through the stack: 16 ymm stores, then 8 zmm
// loads of them, each waiting on two stores it cannot forward from (perf: a
// third of the move's samples on that stack traffic). So the tile keeps its
// strides as arguments (noclone) and accesses rows as vectors.
typedef uint16_t conv_v16x2u __attribute__((vector_size(32), aligned(2), may_alias));
#if defined(__clang__)
#define CONV_LAYOUT_NOCLONE __attribute__((noinline))
#else
#define CONV_LAYOUT_NOCLONE __attribute__((noinline, noclone))
#endif

// One round of the 16x16 transpose: rows i and i + h (i & h == 0) swap
// their off-diagonal h x h blocks. The four rounds h = 8, 4, 2, 1 together
// transpose the tile (a block transpose is the off-diagonal swap plus the
// transpose of every block, and the rounds commute).
#define CONV_LAYOUT_ROUND(V, M, r, h)                                                              \
    do {                                                                                           \
        const M lo = {CONV_LAYOUT_MASKS_LO(h)}, hi = {CONV_LAYOUT_MASKS_HI(h)};                    \
        for (int i = 0; i < 16; i++) {                                                             \
            if (i & (h)) continue;                                                                 \
            const V a = r[i], b = r[i + (h)];                                                      \
            r[i] = __builtin_shuffle(a, b, lo);                                                    \
            r[i + (h)] = __builtin_shuffle(a, b, hi);                                              \
        }                                                                                          \
    } while (0)

#define CONV_LAYOUT_LO1(h, j) ((j) & (h) ? 16 + (j) - (h) : (j))
#define CONV_LAYOUT_HI1(h, j) ((j) & (h) ? 16 + (j) : (j) + (h))
// The 16 lanes of a shuffle mask, lane j given by F(h, j).
#define CONV_LAYOUT_MASKS(F, h)                                                                    \
    F(h, 0), F(h, 1), F(h, 2), F(h, 3), F(h, 4), F(h, 5), F(h, 6), F(h, 7), F(h, 8), F(h, 9),      \
        F(h, 10), F(h, 11), F(h, 12), F(h, 13), F(h, 14), F(h, 15)
#define CONV_LAYOUT_MASKS_LO(h) CONV_LAYOUT_MASKS(CONV_LAYOUT_LO1, h)
#define CONV_LAYOUT_MASKS_HI(h) CONV_LAYOUT_MASKS(CONV_LAYOUT_HI1, h)

// A 16 x 16 tile: element (i, j) of `src` (row i at src + i * ss, element j
// at + j) to element (j, i) of `dst` (row j at dst + j * ds).
#define CONV_LAYOUT_TILE(NAME, T, V, U, M)                                                         \
    static CONV_LAYOUT_NOCLONE void NAME(T *dst, int64_t ds, const T *src, int64_t ss) {           \
        V r[16];                                                                                   \
        for (int i = 0; i < 16; i++) r[i] = *(const U *)(src + i * ss);                            \
        CONV_LAYOUT_ROUND(V, M, r, 8);                                                             \
        CONV_LAYOUT_ROUND(V, M, r, 4);                                                             \
        CONV_LAYOUT_ROUND(V, M, r, 2);                                                             \
        CONV_LAYOUT_ROUND(V, M, r, 1);                                                             \
        for (int j = 0; j < 16; j++) *(U *)(dst + j * ds) = r[j];                                  \
    }
CONV_LAYOUT_TILE(conv_layout_tile2, uint16_t, conv_v16x2, conv_v16x2u, conv_v16x2)

// One [c/16 block] of one image: `plain` holds 16 planes of `hw` elements
// (plane j at plain + j * cs), `blk` hw x 16 elements. to_blocked: plain ->
// blk, else blk -> plain.
#define CONV_LAYOUT_PLANE(NAME, T, TILE)                                                           \
    static void NAME(T *plain, int64_t cs, T *blk, int64_t hw, bool to_blocked) {                  \
        int64_t p = 0;                                                                             \
        for (; p + 16 <= hw; p += 16) {                                                            \
            if (to_blocked)                                                                        \
                TILE(blk + p * 16, 16, plain + p, cs);                                             \
            else                                                                                   \
                TILE(plain + p, cs, blk + p * 16, 16);                                             \
        }                                                                                          \
        for (; p < hw; p++)                                                                        \
            for (int64_t j = 0; j < 16; j++) {                                                     \
                if (to_blocked)                                                                    \
                    blk[p * 16 + j] = plain[j * cs + p];                                           \
                else                                                                               \
                    plain[j * cs + p] = blk[p * 16 + j];                                           \
            }                                                                                      \
    }
CONV_LAYOUT_PLANE(conv_layout_plane2, uint16_t, conv_layout_tile2)

// plain [n, c, hw] (strides ns, cs elements; each plane dense) <-> blk
// (dense nChw16c, c % 16 == 0), 2-byte elements (bfloat16: float32 stays
// with oneDNN's `jit:blk` reorders, which were as fast on ResNet's planes).
static void conv_layout_move(uint16_t *plain, int64_t ns, int64_t cs, uint16_t *blk, int64_t n,
                             int64_t c, int64_t hw, bool to_blocked) {
    for (int64_t b = 0; b < n; b++)
        for (int64_t c0 = 0; c0 < c; c0 += CONV_LAYOUT_BLOCK)
            conv_layout_plane2(plain + b * ns + c0 * cs, cs, blk + (b * c + c0) * hw, hw,
                               to_blocked);
}

#endif
