// render_impl.h - private to src/compiler/render: the builder, kernel and
// loop-nest types and the functions the render_*.c files share. render.c
// walks the schedule; each other file emits one kind of code (text
// primitives, loop shapes, element bodies, indexing, pointwise and
// reduction kernels).
#ifndef TRN_COMPILER_RENDER_IMPL_H
#define TRN_COMPILER_RENDER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../internal.h"
#include "../compiler_impl.h"
#include "trn/scalar.h"

// The renderer's helpers keep the short names they had as statics of one
// file; hidden visibility keeps them out of libtrn.so's exported symbols.
#pragma GCC visibility push(hidden)

// ---- string builder: put() appends printf-style; oom sticks -------------------------
typedef struct sb {
    char *s;
    size_t len, cap;
    bool oom;
} sb;

// ---- kernel structure -------------------------------------------------------------
typedef struct kernel {
    const trn_graph *g;
    const trn__cc_schedule *s;
    int root;
    bool reduce;
    int loop_ndim;
    int64_t loop_sizes[TRN_GRAPH_MAX_DIMS];
    int *fused;  // fused nodes in node order (pointwise/cast), root excluded
    int n_fused;
    int *leaves;  // nodes read from memory (buffer, view, gather), in node order
    int n_leaves;
    trn__cc_access *acc;  // per leaf (a gather's: its source, over its dims)
    char *mark;
    char **istr;  // per leaf: its element's offset expression in the loop body
    // Names in the body are local to the kernel (values v0.. in order of
    // first use, pointers b0.. per buffer read), so kernels that compute the
    // same thing on different buffers render the same body text and share
    // one function (transformer layers, the optimizer's per-parameter steps).
    int *local;  // node -> its value's number, or -1
    int *named;  // value number -> node
    int n_named;
    int *slot;   // buffer node -> its pointer's number, or -1
    int *slots;  // pointer number -> buffer node; the output is the last
    int n_slots;
} kernel;

// ---- loop dims: drop size-1 dims, merge dims every access walks as one ---
typedef struct loops {
    int nd;
    int64_t size[TRN_GRAPH_MAX_DIMS];
    int dim[TRN_GRAPH_MAX_DIMS][TRN_GRAPH_MAX_DIMS];  // merged original dims
    int nmerged[TRN_GRAPH_MAX_DIMS];
} loops;

// ---- types ------------------------------------------------------------------------
static inline bool is_f(trn_dtype d) { return trn__cc_is_float(d); }

static inline const char *reg_type(trn_dtype d) { return is_f(d) ? "float" : "int64_t"; }

static inline const char *mem_type(trn_dtype d) {
    switch (d) {
    case TRN_DTYPE_F32: return "float";
    case TRN_DTYPE_F64: return "double";
    case TRN_DTYPE_F16:
    case TRN_DTYPE_BF16:
    case TRN_DTYPE_U16: return "uint16_t";
    case TRN_DTYPE_BOOL:
    case TRN_DTYPE_U8: return "uint8_t";
    case TRN_DTYPE_I8: return "int8_t";
    case TRN_DTYPE_I16: return "int16_t";
    case TRN_DTYPE_I32: return "int32_t";
    case TRN_DTYPE_I64: return "int64_t";
    case TRN_DTYPE_U32: return "uint32_t";
    case TRN_DTYPE_U64: return "uint64_t";
    default: return "uint8_t";
    }
}

// render_text.c
TRN__PRINTF(2, 3) void put(sb *b, const char *fmt, ...);
void put_convert(sb *b, const char *e, trn_dtype from, trn_dtype to);
void put_load(sb *b, trn_dtype d, const char *ptr, const char *idx);
void put_store_value(sb *b, trn_dtype d, const char *v);
// An int64 as a C expression (INT64_C(v); INT64_MIN spelled so it is one).
void put_i64(sb *b, int64_t v);
void put_const(sb *b, const trn__cc_node *c);
void lower_name(const char *up, char *out, size_t n);

// render_loops.c
void build_loops(loops *l, const int64_t *sizes, const int *dims, int n, const int64_t *const *acc,
                 int n_acc);
int64_t eff_stride(const loops *l, int i, const int64_t *strides);
void put_unravel(sb *b, const loops *l, int nd, const char *var, const char *in);
void put_offset(sb *b, const loops *l, int nd, const int64_t *strides, int64_t base);

// render_body.c
int vid(const kernel *k, int n);
bool is_gather(const kernel *k, int n);
void put_value(sb *b, const kernel *k, int n);
void put_arg(sb *b, const kernel *k, int n, trn_dtype to);
int leaf_pos(const kernel *k, int n);
void put_compute(sb *b, const kernel *k, int n, const char *indent);
void put_ctx(sb *b, const kernel *k, int n);
void put_ptrs(sb *b, const kernel *k, const char *in);
void put_body_values(sb *b, kernel *k, const char *in, const char *const *idx);

// render_index.c
void put_gather(sb *b, const kernel *k, int n, const char *in);
void put_iota(sb *b, const kernel *k, int n, const char *in);
void put_scatter(sb *b, const kernel *k);

// render_pointwise.c
void render_pointwise(sb *b, kernel *k, int64_t *items_out, int64_t *grain_out);

// render_reduce.c
void render_reduce(sb *b, kernel *k, int64_t *items_out, int64_t *grain_out);

#pragma GCC visibility pop

#endif
