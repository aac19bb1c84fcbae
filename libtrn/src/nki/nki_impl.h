// nki_impl.h - the NKI tile-instruction program (IR) shared by parse.c,
// check.c, render*.c and program.c. Names carry nki_.
//
// Program text (whitespace-separated tokens; strings have %XX escapes for
// whitespace and '%'); producer: nki/_ir.py.
//   K name target ngrid g0 .. g{n-1}            kernel, target 2|3|4, SPMD grid
//   T id kind dtype ndim sizes.. strides.. paraxis base offset loc
//        kind: 0 argument, 1 output, 2 sbuf, 3 psum, 4 private hbm, 5 view
//        (a view shares `base`'s memory from element `offset`; strides in
//        elements; others are contiguous and their strides are ignored)
//   L var lo hi step loc      loop (body traced once); var ids 0..999,
//   G n expr..  loc           if: the body runs where every expr holds
//                             (Python `if` on loop indices, kernel source rewritten)
//   E                         end of the innermost loop or if
//   P id loc                  allocation point: the tensor's memory is poisoned
//   I op name loc nparam params.. nopd operands.. nexpr exprs.. nmask masks..
// Affine (over loop vars, and program ids as var 1000+axis):
//   c nterm (var coef)..
// Operand: tid nd counts.. ntd then per tensor dim: affine coefs[nd]
//   element of tensor dim d at access index (i_0..i_nd-1) is
//   affine_d + sum_j coefs[j] * i_j
// Expr (iota values, affine_select and mask predicates): affine nd coefs.. cmp
#ifndef TRN_NKI_IMPL_H
#define TRN_NKI_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trn/nki.h"

#define NKI_MAXD 8
#define NKI_MAXT 24
#define NKI_MAXOPD 8
#define NKI_MAXP 24
#define NKI_PID_VAR 1000
#define NKI_MAX_VARS 1024
// Per-instance scratch after the tensors: the matmul accumulator (128 x 512
// float32) and the float32 staging of stationary (128 x 128) and moving
// (128 x 512) operands for libtrn's matmul.
#define NKI_MM_ACC (128 * 512 * 4)
#define NKI_MM_SA (128 * 128 * 4)
#define NKI_MM_SB (128 * 512 * 4)
#define NKI_MM_SCRATCH (NKI_MM_ACC + NKI_MM_SA + NKI_MM_SB)

typedef enum nki_dtype {
    NKI_F32,
    NKI_BF16,
    NKI_F16,
    NKI_F8E4M3,
    NKI_F8E4M3FN,
    NKI_F8E5M2,
    NKI_I8,
    NKI_U8,
    NKI_I16,
    NKI_U16,
    NKI_I32,
    NKI_U32,
    NKI_BOOL,
    NKI_TF32,
    NKI_NDTYPES
} nki_dtype;

typedef enum nki_kind { NKI_ARG, NKI_OUT, NKI_SBUF, NKI_PSUM, NKI_HBM, NKI_VIEW } nki_kind;

typedef enum nki_op {
    NKI_OP_COPY,  // dst, src; p0: 1 = a DMA (may not touch PSUM), 2 = tensor_copy (no HBM)
    NKI_OP_TT,    // dst, a, b; p0 alu
    NKI_OP_TS,  // dst, a, [vec0], [vec1]; p: op0 rev0 kind0 imm0 op1 rev1 kind1 imm1 (kind 0 none 1 imm 2 vec)
    NKI_OP_ACT,  // dst, data, [bias], [scale vec], [reduce res]; p: func has_bias scale_kind scale_imm reduce_op alpha
    NKI_OP_REDUCE,  // dst, src; p: alu nred negate
    NKI_OP_MATMUL,  // dst, stationary, moving; p: accumulate (0 first write overwrites, 1 accumulate, 2 overwrite)
    NKI_OP_TRANSPOSE,  // dst, src (2-d); p0: 1 = tensor engine (dst PSUM)
    NKI_OP_IOTA,       // dst; expr0 = value
    NKI_OP_MEMSET,     // dst; p0 value
    NKI_OP_SCAN,       // dst, d0, d1, [init vec]; p: op0 op1 init_kind init_imm
    NKI_OP_STT,        // dst, data, [vec], data2; p: op0 op1 kind imm rev0 rev1
    NKI_OP_PREDCOPY,   // dst, pred, src; p0 reverse
    NKI_OP_PREDUCE,    // dst (1 x F), src (P x F); p0 alu
    NKI_OP_BNSTATS,    // dst (P x 6), src
    NKI_OP_BNAGGR,     // dst (P x 2), src (P x 6k)
    NKI_OP_SELECT,     // dst, src; p: cmp false_value; expr0
    NKI_OP_WHERE,      // dst, cond, a, b
    NKI_OP_GATHER,  // dst, src, index (K x 1 int32/uint32 SBUF); p: which (0 dst, 1 src) dim oob_skip [rmw alu]
    // Vector-Engine top-8 family, per partition over all free elements of
    // data; p: mode imm. mode 0 max8: dst (P x 8) the 8 largest, descending;
    // 1 nc_find_index8: dst (P x 8 ints) first index of each of vals (P x 8),
    // duplicates paired in ascending order, missing: all ones; 2
    // nc_match_replace8: dst = data with the first match of each val
    // (vals taken 7..0) replaced by imm, [dst_idx] (P x 8) their indices
    NKI_OP_TOP8,  // dst, data, [vals], [dst_idx]
    // nl.rand: dst uniform in [0, 1), a counter-based hash (splitmix64) of a
    // per-instruction execution counter and the element's position
    NKI_OP_RAND,  // dst
    // nl.gather_flattened: dst[p, j] = data[p, indices[p, j]] over data's
    // flattened free elements; an index out of range fails the run
    NKI_OP_TAKE,  // dst, data, indices (integer, dst's shape)
    NKI_OP_COUNT
} nki_op;

// ALU ops (tensor_tensor / tensor_scalar / reductions); nki/_ir.py mirrors.
typedef enum nki_alu {
    ALU_BYPASS,
    ALU_ADD,
    ALU_SUB,
    ALU_MUL,
    ALU_DIV,
    ALU_MAX,
    ALU_MIN,
    ALU_POW,
    ALU_EQ,
    ALU_NE,
    ALU_LT,
    ALU_LE,
    ALU_GT,
    ALU_GE,
    ALU_LAND,
    ALU_LOR,
    ALU_LXOR,
    ALU_BAND,
    ALU_BOR,
    ALU_BXOR,
    ALU_SHL,
    ALU_SHR,
    ALU_ABSMAX,
    ALU_ABSMIN,
    ALU_MOD,
    ALU_FMOD,
    ALU_RSUB,
    ALU_COUNT
} nki_alu;

typedef struct nki_affine {
    int64_t c;
    int n;
    int var[NKI_MAXT];
    int64_t coef[NKI_MAXT];
} nki_affine;

typedef struct nki_operand {
    int tid;
    int nd;
    int64_t count[NKI_MAXD];
    int ntd;
    nki_affine base[NKI_MAXD];
    int64_t coef[NKI_MAXD][NKI_MAXD];  // [tensor dim][access dim]
    // derived (check.c): element offset = flat + sum_j i_j * stride[j]
    nki_affine flat;
    int64_t stride[NKI_MAXD];
} nki_operand;

typedef struct nki_expr {
    nki_affine a;
    int nd;
    int64_t coef[NKI_MAXD];
    int cmp;  // ALU_EQ .. ALU_GE (masks, selects); unused for values
} nki_expr;

typedef struct nki_tensor {
    int id;
    nki_kind kind;
    nki_dtype dtype;
    int ndim;
    int64_t sizes[NKI_MAXD], strides[NKI_MAXD];
    int par_axis;
    int base;        // views
    int64_t offset;  // views, elements
    char *loc;
    int64_t rot;  // mod_alloc: physical buffers its block tiles rotate through (0: one each)
    int banks;    // explicitly placed PSUM: bit b for each bank b it occupies (0: auto)
    // derived
    int root;         // the tensor whose memory this is
    int64_t scratch;  // byte offset in the instance scratch (sbuf/psum/hbm)
    int64_t flags;    // PSUM: byte offset of the written-by-matmul flags
    int arg;          // arguments and outputs: index in the run's args
} nki_tensor;

typedef enum nki_stmt_kind { NKI_LOOP, NKI_END, NKI_POISON, NKI_INSTR, NKI_IF } nki_stmt_kind;

typedef struct nki_instr {
    nki_op op;
    char *name, *loc;
    int np;
    double p[NKI_MAXP];
    int nopd;
    nki_operand opd[NKI_MAXOPD];
    int nexpr;
    nki_expr expr[2];
    int nmask;
    nki_expr mask[4];
    // masked instructions: operands bounds-checked per element at run time
    bool rt[NKI_MAXOPD];
} nki_instr;

typedef struct nki_stmt {
    nki_stmt_kind kind;
    int var;  // loop
    int64_t lo, hi, step;
    int tensor;  // poison
    char *loc;   // loop, poison
    int end;     // loop, if: index of its E
    nki_instr *ins;
    int ncond;  // if: conjunction of (affine cmp 0) over loop indices and program ids
    nki_expr cond[4];
} nki_stmt;

typedef struct nki_prog {
    char *name;
    int target;
    int ngrid;
    int64_t grid[4];
    nki_tensor *t;
    int nt, capt;
    nki_stmt *s;
    int ns, caps;
    int nargs;
    int64_t scratch_bytes;
} nki_prog;

trn_status nki__parse(const char *text, nki_prog *p);
void nki__prog_free(nki_prog *p);
// Hardware rules; fills the derived fields and the scratch layout.
trn_status nki__check(nki_prog *p);
// One C translation unit (malloc'd).
trn_status nki__render(const nki_prog *p, char **source);
// Rendering state (render.c, render_instr.c).
typedef struct nki_rctx {
    const nki_prog *p;
    struct nki_buf *b;
    int sid;     // statement index (runtime errors report it + 1)
    bool fused;  // inside a fused group: i0 is the group's partition loop (fuse.c)
    bool fuse;   // form fused groups (nki__fuse_enabled)
    // the instruction being rendered and which of its vector operands were
    // loaded once per partition (fused groups: H<k>, render_instr.c)
    const struct nki_instr *hin;
    unsigned hoist;
} nki_rctx;
// One instruction's loop nest into c->b (render_instr.c).
void nki__render_instr(nki_rctx *c, const nki_instr *in);
// "(affine expr)cmp0" of a condition or mask.
void nki__put_cond(struct nki_buf *b, const nki_expr *e);
// Partition-loop fusion (fuse.c): the end (exclusive) of the group of
// instructions (and the poison points among them, hoisted before it) that
// starts at statement `from` and may run as one loop over *parts
// partitions, or `from` when fewer than two instructions qualify; *guard:
// run fused only where no two HBM arguments overlap (rt->serial == 0).
int nki__fuse_group(const nki_prog *p, int from, int to, int64_t *parts, bool *guard);
// Copy forwarding inside fused group [from, end) (forward.c): per group
// position, subst[a] a malloc'd changed copy of the instruction to render
// instead (NULL: as is) and drop[a] whether to skip it. -1: out of memory
// (nothing changed).
int nki__forward_group(const nki_prog *p, int from, int end, nki_instr **subst, bool *drop);
// NKI_FUSE=0 in the environment renders every instruction unfused (the
// tests compare both).
bool nki__fuse_enabled(void);
// Whether instruction operand k is written (the destination; activation's
// reduce result) (parallel.c).
bool nki__instr_writes(const nki_instr *in, int k);
// Whether loop statement `loop` may run its iterations in parallel
// (parallel.c); fills live[2 * *nlive] with the (byte offset, bytes) pairs of
// scratch the body reads but does not allocate. live holds 4 * nt entries.
bool nki__par_loop(const nki_prog *p, int loop, int64_t *live, int *nlive);
// Whether output tensor `tensor` is never read and one instruction that
// always runs writes all of it, so its poison is unobservable (cover.c).
bool nki__output_covered(const nki_prog *p, int tensor);

// The run-time services an instance gets (ABI 2). prelude.c declares the
// same struct in the rendered C: keep the two equal.
typedef int (*nki_body_fn)(void *ctx, int64_t it, char *scratch);
typedef struct nki_rt {
    // runs body(ctx, it, scratch) for it in [0, n), iterations spread over
    // the pool; threads other than the caller's get a scratch holding the
    // live ranges copied from `scratch`. Returns the first nonzero result.
    int (*pfor)(const struct nki_rt *rt, int64_t n, nki_body_fn body, void *ctx,
                const int64_t *live, int nlive, char *scratch);
    // c (m x n, rows crs apart) = a (m x k) @ b (k x n) + beta * c, element
    // strides; beta 0: c is not read
    void (*matmul)(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t acs,
                   const float *b, int64_t brs, int64_t bcs, float *c, int64_t crs, float beta);
    const void *prog;
    int serial;  // HBM arguments overlap: every loop runs serially
} nki_rt;
int nki__dtype_size(nki_dtype d);
bool nki__dtype_float(nki_dtype d);
const char *nki__kind_name(nki_kind k);

// Growable text (render).
typedef struct nki_buf {
    char *s;
    size_t n, cap;
    bool oom;
} nki_buf;
void nki__printf(nki_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
