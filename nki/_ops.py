"""Instruction emitters shared by both API generations: each builds the
operands (access patterns) of one libtrn NKI instruction and records it on
the current tracer. Op and activation-function codes mirror
libtrn/src/nki/nki_impl.h and prelude.c."""

import numpy as np

from . import _dtypes as dt
from ._ir import AP, PSUM, SBUF, Affine, IExpr, NkiError, Pred, current, expr_text, user_loc

(
    OP_COPY,
    OP_TT,
    OP_TS,
    OP_ACT,
    OP_REDUCE,
    OP_MATMUL,
    OP_TRANSPOSE,
    OP_IOTA,
    OP_MEMSET,
    OP_SCAN,
    OP_STT,
    OP_PREDCOPY,
    OP_PREDUCE,
    OP_BNSTATS,
    OP_BNAGGR,
    OP_SELECT,
    OP_WHERE,
    OP_GATHER,
    OP_TOP8,
    OP_RAND,
    OP_TAKE,
) = range(21)

ALU = {
    "bypass": 0,
    "add": 1,
    "subtract": 2,
    "multiply": 3,
    "divide": 4,
    "maximum": 5,
    "minimum": 6,
    "power": 7,
    "equal": 8,
    "not_equal": 9,
    "less": 10,
    "less_equal": 11,
    "greater": 12,
    "greater_equal": 13,
    "logical_and": 14,
    "logical_or": 15,
    "logical_xor": 16,
    "bitwise_and": 17,
    "bitwise_or": 18,
    "bitwise_xor": 19,
    "left_shift": 20,
    "right_shift": 21,
    "abs_max": 22,
    "abs_min": 23,
    "mod": 24,
    "fmod": 25,
    "rsub": 26,
}
ALU_ALIAS = {
    "max": "maximum",
    "min": "minimum",
    "amax": "maximum",
    "amin": "minimum",
    "sum": "add",
    "prod": "multiply",
    "true_divide": "divide",
    "remainder": "mod",
    "subtract": "subtract",
    "sub": "subtract",
    "mul": "multiply",
    "div": "divide",
    "pow": "power",
    "arith_shift_right": "right_shift",
    "logical_shift_left": "left_shift",
    "logical_shift_right": "right_shift",
    "invert": "bitwise_xor",
    "eq": "equal",
    "ne": "not_equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
    "all": "logical_and",
    "any": "logical_or",
}
ACT = {
    "copy": 0,
    "identity": 0,
    "bypass": 0,
    "exp": 1,
    "log": 2,
    "sqrt": 3,
    "rsqrt": 4,
    "reciprocal": 5,
    "tanh": 6,
    "sigmoid": 7,
    "relu": 8,
    "gelu": 9,
    "gelu_apprx_tanh": 10,
    "gelu_apprx_sigmoid": 11,
    "silu": 12,
    "softplus": 13,
    "mish": 14,
    "erf": 15,
    "sin": 16,
    "cos": 17,
    "tan": 18,
    "arctan": 19,
    "abs": 20,
    "absolute": 20,
    "sign": 21,
    "square": 22,
    "negative": 23,
    "ceil": 24,
    "floor": 25,
    "trunc": 26,
    "gelu_dx": 27,
    "silu_dx": 28,
    "erf_dx": 29,
    "lrelu": 30,
    "leaky_relu": 30,
    "elu": 31,
    "rint": 32,
    "round": 32,
    "gelu_apprx_sigmoid_dx": 33,
    "logical_not": 34,
    "bitwise_not": 35,
    "invert": 35,
    "cube": 36,
    "exponential": 1,
}
COMPARE = {
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
}


def op_name(op):
    """A name for an op given as a string, an nl function or a NumPy function."""
    if isinstance(op, str):
        return op
    n = getattr(op, "_nki_op", None) or getattr(op, "__name__", None)
    if n is None:
        raise NkiError(f"nki: {op!r} is not an operator")
    return n


def alu_code(op):
    n = op_name(op)
    n = ALU_ALIAS.get(n, n)
    if n not in ALU:
        raise NkiError(f"nki: {n} is not an arithmetic/logical operator")
    return ALU[n]


def act_code(op):
    n = op_name(op)
    if n not in ACT:
        raise NkiError(f"nki: {n} is not an activation function")
    return ACT[n]


def loc_tracer():
    return current()


def alloc(shape, dtype, kind=SBUF, par_axis=0, name=None):
    dtype = dt.to_dtype(dtype)
    shape = [int(s) for s in shape]
    return AP(current().new_tensor(kind, dtype, shape, par_axis=par_axis, name=name))


def rotate(ap, tiles):
    """mod_alloc: the block tiles (dims before the partition dim) of a fresh
    tensor rotate through tiles[i] physical buffers along block dim i, so
    only that many count against SBUF/PSUM capacity."""
    t = ap.tensor
    blocks = t.shape[: t.par_axis]
    if any(n < 1 for n in tiles):
        raise NkiError(f"nki: mod_alloc tile counts must be positive (got {tiles})")
    if len(tiles) > len(blocks):
        raise NkiError(
            f"nki: mod_alloc gives {len(tiles)} tile counts for {len(blocks)} block dims "
            f"of shape {t.shape}"
        )
    phys = 1
    for j, n in enumerate(blocks):
        phys *= min(n, tiles[j]) if j < len(tiles) else n
    t.rot = phys


PSUM_BANKS, PSUM_BANK_BYTES = 8, 2048


def place_banks(ap, base_bank, func, tiles):
    """Explicit PSUM placement (psum.mod_alloc(base_bank=...) or
    psum.alloc(func)): the set of banks the tensor's block tiles occupy,
    which libtrn's capacity check counts once however many tensors share
    them."""
    import itertools

    t = ap.tensor
    blocks = t.shape[: t.par_axis]
    per = dt.to_dtype(t.dtype).itemsize
    for n in t.shape[t.par_axis + 1 :]:
        per *= n
    nb = max(1, -(-per // PSUM_BANK_BYTES))
    banks = set()
    if func is not None:
        for idx in itertools.product(*[range(n) for n in blocks]):
            r = func(idx=idx, pdim_size=t.shape[t.par_axis], fdim_size=per)
            b = int(r[0]) if isinstance(r, (tuple, list)) else int(r)
            banks.update(range(b, b + nb))
    else:
        phys = 1
        for j, n in enumerate(blocks):
            phys *= min(n, tiles[j]) if tiles and j < len(tiles) else n
        banks.update(range(base_bank, base_bank + phys * nb))
    if min(banks) < 0 or max(banks) >= PSUM_BANKS:
        raise NkiError(
            f"nki: PSUM tensor {t.shape} at {user_loc()} placed in banks {sorted(banks)}; there are "
            f"{PSUM_BANKS} (0..{PSUM_BANKS - 1}, 2 KiB per partition each)"
        )
    t.banks = sum(1 << b for b in banks)


def is_scalar(x):
    return isinstance(x, (int, float, bool, np.number)) or (isinstance(x, Affine) and x.is_const())


def scalar_value(x):
    if isinstance(x, Affine):
        return float(x.c)
    return float(x)


def conform(ap, shape):
    """The same access pattern with `shape`'s dims: only size-1 dims may be
    added or removed (broadcasts stay where the shapes say)."""
    shape = list(shape)
    if ap.dims == shape:
        return ap
    nz_a = [(j, d) for j, d in enumerate(ap.dims) if d != 1]
    nz_s = [d for d in shape if d != 1]
    if [d for _, d in nz_a] != nz_s:
        raise NkiError(f"nki: shape {ap.shape} does not fit {tuple(shape)}")
    idx = []
    for b, c in ap.idx:
        nc, k = [], 0
        for d in shape:
            if d == 1:
                nc.append(0)
            else:
                nc.append(c[nz_a[k][0]])
                k += 1
        idx.append((b, nc))
    return AP(ap.tensor, shape, idx)


def _pad(shape, nd, like):
    """Tiles align on the partition dim: a lower-rank shape whose first dim
    is the other's partition size is padded on the right, else NumPy-style
    on the left."""
    shape = tuple(shape)
    if len(shape) < nd and shape and like and shape[0] == like[0] and like[0] != 1:
        return shape + (1,) * (nd - len(shape))
    return (1,) * (nd - len(shape)) + shape


def bshape(*shapes):
    nd = max(len(s) for s in shapes)
    big = max(shapes, key=len)
    shapes = [_pad(s, nd, big) for s in shapes]
    out = []
    for i in range(nd):
        sizes = {s[len(s) - nd + i] for s in shapes if len(s) - nd + i >= 0} - {1}
        if len(sizes) > 1:
            raise NkiError(f"nki: shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def align(ap, shape):
    """Right-aligned broadcast operand of `shape` (size-1 dims stay 1)."""
    if ap.ndim < len(shape) and ap.dims and ap.dims[0] == shape[0] and shape[0] != 1:
        while ap.ndim < len(shape):
            ap = ap.expand_dims(ap.ndim)
    while ap.ndim < len(shape):
        ap = ap.expand_dims(0)
    return ap


def masks_text(mask, nd):
    if mask is None:
        return []
    if isinstance(mask, bool):
        return [] if mask else [expr_text(IExpr.of(-1), nd, "ge")]
    if not isinstance(mask, Pred):
        raise NkiError("nki: mask= takes a predicate over index expressions (e.g. i_p < n)")
    return [expr_text(e, nd, c) for e, c in mask.terms]


def emit(op, name, params, operands, exprs=(), mask=None, mask_nd=None):
    tr = current()
    if isinstance(mask, Pred) and not any(e.s for e, _ in mask.terms) and len(mask.terms) <= 4:
        # a mask over loop indices only: the instruction runs or not as a whole
        from ._ir import _esc, user_loc

        tr.lines.append(
            "G "
            + str(len(mask.terms))
            + " "
            + " ".join(expr_text(IExpr.of(e), 0, c) for e, c in mask.terms)
            + " "
            + _esc(user_loc())
        )
        tr.emit(op, name, params, operands, exprs, [])
        tr.lines.append("E")
    else:
        nd = operands[0].ndim if mask_nd is None else mask_nd
        tr.emit(op, name, params, operands, exprs, masks_text(mask, nd))
    if mask is not None and not isinstance(mask, bool):
        operands[0].tensor.mask = mask


def to_sbuf_if(ap, kinds):
    if ap.tensor.kind in kinds:
        out = alloc(ap.shape, ap.dtype)
        emit(OP_COPY, "tensor_copy", [2], [out, ap])
        return out
    return ap


# ---------------------------------------------------------------- instructions
def copy(dst, src, mode=0, dtype=None, mask=None, name="copy", kind=SBUF):
    if is_scalar(src):
        if dst is None:
            raise NkiError("nki: copy of a scalar needs a destination")
        return memset(dst, scalar_value(src), mask=mask)
    if dst is None:
        dst = alloc(src.shape, dtype or src.dtype, kind)
    if src.gather is not None or dst.gather is not None:
        return indirect_copy(dst, src, name, mask=mask)
    s = align(src, dst.shape) if src.ndim < dst.ndim else src
    emit(OP_COPY, name, [mode], [dst, s], mask=mask)
    return dst


def indirect_copy(dst, src, name, mask=None, oob_skip=False, rmw_op=None):
    """Gather (src indexed by a tile) or scatter (dst indexed by a tile)."""
    if src.gather is not None and dst.gather is not None:
        raise NkiError(f"nki: {name}: at most one side of a copy may be indirect")
    which = 1 if src.gather is not None else 0
    it, dim = (src if which else dst).gather
    if tuple(src.shape) != tuple(dst.shape):
        raise NkiError(f"nki: {name}: shapes differ: {tuple(dst.shape)} and {tuple(src.shape)}")
    if it.dims[0] != dst.shape[0]:
        raise NkiError(
            f"nki: {name}: {it.dims[0]} indices for {dst.shape[0]} partitions of the access"
        )
    params = [which, dim, int(bool(oob_skip))]
    if rmw_op is not None:
        if which != 0:
            raise NkiError(f"nki: {name}: dst_rmw_op needs an indirect destination here")
        params.append(alu_code(rmw_op))
    # mask=: a predicate over the partition index picks the rows moved
    # (libtrn checks it depends on nothing else)
    emit(OP_GATHER, name, params, [dst, src, it], mask=None if mask is True else mask)
    return dst


def assign(dst, value):
    if type(value).__name__ == "_LoopReduce":
        x = value.x if value.x.shape == dst.shape else conform(value.x, dst.shape)
        binary(dst, x, value.op, dst=dst, mask=value.mask, name="nl.loop_reduce")
        return
    if is_scalar(value):
        memset(dst, scalar_value(value))
    elif isinstance(value, AP):
        if dst.tensor.kind == PSUM and matmul_into(dst, value, accumulate=False):
            return
        v = value
        if v.shape != dst.shape:
            try:
                v = conform(v, dst.shape)
            except NkiError:
                v = align(v, dst.shape)
        # a result computed under mask= is assigned under the same mask
        # (legacy: the mask covers the whole statement)
        m = value.tensor.mask if value.shape == dst.shape else None
        copy(dst, v, 0, mask=m, name="assign")
    else:
        raise NkiError(f"nki: cannot assign {type(value).__name__} to a tile")


def memset(dst, value, mask=None, name="memset"):
    emit(OP_MEMSET, name, [float(value)], [dst], mask=mask)
    return dst


def result_dtype(op, a, b, dtype):
    if dtype is not None:
        return dt.to_dtype(dtype)
    n = ALU_ALIAS.get(op_name(op), op_name(op))
    da = a.dtype if isinstance(a, AP) else None
    db = b.dtype if isinstance(b, AP) else None
    if n in COMPARE:
        return dt.bool_
    r = dt.promote(da, db)
    for s in (a, b):
        if isinstance(s, float) and r is not None and not r.is_float:
            r = dt.float32
    if n == "divide" and r is not None and not r.is_float:
        r = dt.float32  # true division, as NumPy's: 7 / 2 is 3.5 (then nl.floor)
    return r or dt.float32


def binary(a, b, op, dst=None, dtype=None, mask=None, name=None):
    name = name or f"nl.{op_name(op)}"
    if is_scalar(a) and is_scalar(b):
        raise NkiError("nki: an nl operation needs at least one tile")
    if isinstance(a, (IExpr,)) or isinstance(b, IExpr):
        raise NkiError(
            "nki: index expressions are not tiles; use nl.iota / nisa.iota to make a tile of them"
        )
    if isinstance(a, Affine) or isinstance(b, Affine):
        raise NkiError("nki: a loop index is not a value; use nisa.iota to make a tile of it")
    if is_scalar(b) or is_scalar(a):
        rev = is_scalar(a)
        tile, s = (b, a) if rev else (a, b)
        odt = result_dtype(op, a, b, dtype)
        if dst is None:
            dst = alloc(tile.shape, odt)
        return tensor_scalar(dst, tile, op, scalar_value(s), reverse0=rev, mask=mask, name=name)
    if mask is None and dst is not None:
        # legacy `x[...] += op(..., mask=m)`: the statement runs under m
        mask = next(
            (t.tensor.mask for t in (b, a) if t.tensor.mask is not None and t.shape == dst.shape),
            None,
        )
    odt = result_dtype(op, a, b, dtype)
    shape = dst.shape if dst is not None else bshape(a.shape, b.shape)
    if dst is None:
        dst = alloc(shape, odt)
    if a.tensor.kind == PSUM and b.tensor.kind == PSUM:
        b = to_sbuf_if(b, (PSUM,))
    emit(OP_TT, name, [alu_code(op)], [dst, align(a, dst.shape), align(b, dst.shape)], mask=mask)
    return dst


def unary(x, fn, dst=None, dtype=None, mask=None, name=None):
    return activation(dst, fn, x, dtype=dtype, mask=mask, name=name or f"nl.{op_name(fn)}")


def tensor_scalar(
    dst,
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    dtype=None,
    mask=None,
    name="tensor_scalar",
):
    if dst is None:
        dst = alloc(data.shape, dtype or data.dtype)
    params, ops = [], [dst, data]
    for op, operand, rev in ((op0, operand0, reverse0), (op1, operand1, reverse1)):
        if op is None:
            params += [0, 0, 0, 0]
        elif is_scalar(operand):
            params += [alu_code(op), int(bool(rev)), 1, scalar_value(operand)]
        elif isinstance(operand, AP):
            params += [alu_code(op), int(bool(rev)), 2, 0]
            ops.append(operand)
        else:
            raise NkiError("nki: tensor_scalar operands are scalars or (P, 1) tiles")
    emit(OP_TS, name, params, ops, mask=mask)
    return dst


def activation(
    dst,
    op,
    data,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    alpha=0.0,
    dtype=None,
    mask=None,
    name="activation",
):
    if dst is None:
        dst = alloc(data.shape, dtype or data.dtype)
    ops = [dst, data]
    has_bias = 0
    if bias is not None:
        if is_scalar(bias):
            if scalar_value(bias) != 0.0:
                b = alloc((data.shape[0], 1), dt.float32)
                memset(b, scalar_value(bias))
                ops.append(b)
                has_bias = 1
        else:
            ops.append(bias)
            has_bias = 1
    if is_scalar(scale):
        skind, simm = 1, scalar_value(scale)
    else:
        skind, simm = 2, 0.0
        ops.append(scale)
    rop = -1
    if reduce_op is not None or reduce_res is not None:
        rop = alu_code(reduce_op if reduce_op is not None else "add")
        if reduce_res is None:
            raise NkiError("nki: activation with reduce_op needs reduce_res=")
        ops.append(reduce_res)
    emit(OP_ACT, name, [act_code(op), has_bias, skind, simm, rop, float(alpha)], ops, mask=mask)
    return dst


def _permute(ap, order):
    return AP(
        ap.tensor, [ap.dims[j] for j in order], [(b, [c[j] for j in order]) for b, c in ap.idx]
    )


def reduce(
    dst, op, data, axis, negate=False, keepdims=False, dtype=None, mask=None, name="tensor_reduce"
):
    nd = data.ndim
    if axis is None:
        axis = tuple(range(1, nd))
    if isinstance(axis, int) or isinstance(axis, Affine):
        axis = (int(axis),)
    axis = sorted(a + nd if a < 0 else a for a in (int(x) for x in axis))
    if 0 in axis:
        raise NkiError("nki: reductions run over free axes only (axis 0 is the partition axis)")
    keep = [j for j in range(nd) if j not in axis]
    src = _permute(data, keep + axis)
    kshape = [data.dims[j] for j in keep]
    out_shape = [1 if j in axis else data.dims[j] for j in range(nd)] if keepdims else kshape
    if dst is None:
        dst = alloc(out_shape, dtype or data.dtype)
    d = conform(dst, kshape)
    # a mask ranges over the source's index space (its loops run the
    # reduction), in the source's dim order
    mask_nd = None
    if isinstance(mask, Pred):
        if keep + axis != list(range(nd)):
            raise NkiError(f"nki: {name}: mask= with reduced axes before kept ones")
        mask_nd = nd
    p = [alu_code(op), len(axis), int(bool(negate))]
    emit(OP_REDUCE, name, p, [d, src], mask=mask, mask_nd=mask_nd)
    return dst


def free_size(ap):
    n = 1
    for d in ap.dims[1:]:
        n *= d
    return n


def _perf_rows(perf_mode, name):
    """Rows per matmul for nc_matmul's perf_mode: 2 in double-row mode
    (matmul_perf_mode.double_row / 'double_row' / 'double_row_gen3'), else 1."""
    if perf_mode is None:
        return 1
    key = getattr(perf_mode, "name", perf_mode)
    if key in ("none", 0):
        return 1
    if key in ("double_row", "double_row_gen3", 1):
        return 2
    raise NkiError(f"nki: {name} perf_mode={perf_mode!r} is not supported (none or double_row)")


def _row(ap, r):
    """Row r of a [P, 2, F] double-row operand, as a [P, F] access pattern."""
    return ap._compose(
        [ap.dims[0], ap.dims[2]],
        [(Affine(0), {0: 1}), (Affine(r), {}), (Affine(0), {1: 1})],
    )


def _double_row_check(stationary, moving, name):
    tr = current()
    if tr.target < 3:
        raise NkiError(
            f"nki: {name} at {user_loc()}: double-row mode needs NeuronCore v3 or later (target is v{tr.target})"
        )
    for what, ap in (("stationary", stationary), ("moving", moving)):
        if ap.ndim != 3 or ap.dims[1] != 2:
            raise NkiError(
                f"nki: {name} at {user_loc()}: double-row mode takes [P, 2, F] operands ({what} is {ap.shape})"
            )
        if not str(ap.dtype).startswith("float8"):
            raise NkiError(
                f"nki: {name} at {user_loc()}: double-row mode takes fp8 operands ({what} is {ap.dtype})"
            )


def matmul(dst, stationary, moving, accumulate=None, name="nc_matmul", mask=None, perf_mode=None):
    fresh = dst is None
    tr = current()
    start = len(tr.lines)
    rows = _perf_rows(perf_mode, name)
    if rows == 2:
        _double_row_check(stationary, moving, name)
    if fresh:
        dst = alloc(
            (
                stationary.dims[-1] if rows == 2 else free_size(stationary),
                moving.dims[-1] if rows == 2 else free_size(moving),
            ),
            dt.float32,
            PSUM,
        )
    mode = 0 if accumulate is None else (1 if accumulate else 2)
    if rows == 2:
        # double row: the PE array contracts both rows (2P elements) in one
        # pass; the same sum as two matmuls where the second accumulates
        emit(OP_MATMUL, name, [mode], [dst, _row(stationary, 0), _row(moving, 0)], mask=mask)
        mode = 0 if accumulate is None else 1
        emit(OP_MATMUL, name, [mode], [dst, _row(stationary, 1), _row(moving, 1)], mask=mask)
    else:
        emit(OP_MATMUL, name, [mode], [dst, stationary, moving], mask=mask)
    if fresh:
        # a legacy result tile: `psum += nc_matmul(...)` retargets it (matmul_into)
        tr.fresh_matmul = (
            dst.tensor.id,
            start,
            len(tr.lines),
            stationary,
            moving,
            name,
            mask,
            perf_mode,
        )
    return dst


def matmul_into(dst, value, accumulate=None):
    """`dst += value` where value is the result tile of the nc_matmul just
    traced and dst is in PSUM: the matmul writes dst itself with the
    hardware's PSUM rule (first write after allocation overwrites, later ones
    accumulate), as legacy kernels mean it, instead of dst + a copy
    (`dst[...] = value`: accumulate=False, the matmul overwrites dst; no
    PSUM tile of its own either). False when that is not the case (a plain
    add or copy then)."""
    tr = current()
    rec = getattr(tr, "fresh_matmul", None)
    if rec is None or not isinstance(value, AP) or value.tensor.id != rec[0]:
        return False
    if rec[2] != len(tr.lines) or not value._is_whole() or dst.tensor.kind != PSUM:
        return False
    try:
        d = conform(dst, value.shape)
    except NkiError:
        return False
    del tr.lines[rec[1] : rec[2]]
    tr.fresh_matmul = None
    matmul(d, rec[3], rec[4], accumulate, name=rec[5], mask=rec[6], perf_mode=rec[7])
    return True


def transpose(dst, data, mode, dtype=None, kind=None, name="nc_transpose", mask=None):
    if data.ndim != 2:
        n = free_size(data)
        raise NkiError(
            f"nki: {name} takes a 2-d tile (got {data.shape}; flatten the free dims ({n}) first)"
        )
    if dst is None:
        dst = alloc(
            (data.shape[1], data.shape[0]),
            dtype or data.dtype,
            kind if kind is not None else (PSUM if mode == 1 else SBUF),
        )
    emit(OP_TRANSPOSE, name, [mode], [dst, data], mask=mask)
    return dst


def iota_expr(dst, expr, mask=None, name="iota"):
    emit(OP_IOTA, name, [], [dst], exprs=[expr_text(expr, dst.ndim)], mask=mask)
    return dst


def pattern_expr(nd, pattern, offset, channel_multiplier):
    """New-API [[step, count], ...] pattern -> IExpr over the dst dims."""
    from ._ir import Sym

    e = IExpr(Affine.of(offset) if not isinstance(offset, Affine) else offset, {}, nd)
    if channel_multiplier:
        e.s[Sym(0, nd - 1)] = int(channel_multiplier)
    for k, (step, _count) in enumerate(pattern):
        if k + 1 < nd and step:
            e.s[Sym(0, nd - 2 - k)] = int(step)
    return e


def select(dst, pred, on_true, false_value, mask=None, name="affine_select"):
    if not isinstance(pred, Pred):
        raise NkiError("nki: affine_select takes a predicate over index expressions")
    src = on_true
    for k, (e, cmp) in enumerate(pred.terms):
        out = dst if k == len(pred.terms) - 1 else alloc(dst.shape, dst.dtype)
        emit(
            OP_SELECT,
            name,
            [{"eq": 8, "ne": 9, "lt": 10, "le": 11, "gt": 12, "ge": 13}[cmp], float(false_value)],
            [out, align(src, out.shape)],
            exprs=[expr_text(e, out.ndim)],
            mask=mask,
        )
        src = out
    return dst


def scan(dst, data0, data1, initial, op0, op1, name="tensor_tensor_scan"):
    if dst is None:
        dst = alloc(data0.shape, data0.dtype)
    ops = [dst, data0, data1]
    if is_scalar(initial):
        p = [alu_code(op0), alu_code(op1), 1, scalar_value(initial)]
    else:
        p = [alu_code(op0), alu_code(op1), 2, 0]
        ops.append(initial)
    emit(OP_SCAN, name, p, ops)
    return dst


def stt(
    dst,
    data,
    op0,
    operand0,
    op1,
    operand1,
    reverse0=False,
    reverse1=False,
    name="scalar_tensor_tensor",
):
    if dst is None:
        dst = alloc(data.shape, data.dtype)
    if is_scalar(operand0):
        # operand slot 2 is unused for an immediate: the layout stays fixed
        ops, p = (
            [dst, data, data, operand1],
            [alu_code(op0), alu_code(op1), 1, scalar_value(operand0)],
        )
    else:
        ops, p = [dst, data, operand0, operand1], [alu_code(op0), alu_code(op1), 2, 0]
    emit(OP_STT, name, p + [int(bool(reverse0)), int(bool(reverse1))], ops)
    return dst


def predcopy(dst, src, predicate, reverse=False, name="tensor_copy_predicated"):
    emit(
        OP_PREDCOPY,
        name,
        [int(bool(reverse))],
        [dst, align(predicate, dst.shape), align(src, dst.shape)],
    )
    return dst


def where(cond, a, b, dst=None, dtype=None, mask=None, name="nl.where"):
    shapes = [x.shape for x in (cond, a, b) if isinstance(x, AP)]
    shape = dst.shape if dst is not None else bshape(*shapes)
    odt = (
        dtype
        or dt.promote(
            a.dtype if isinstance(a, AP) else None, b.dtype if isinstance(b, AP) else None
        )
        or dt.float32
    )
    if dst is None:
        dst = alloc(shape, odt)
    vals = []
    for x in (a, b):
        if is_scalar(x):
            t = alloc((shape[0],) + (1,) * (len(shape) - 1), dt.float32)
            memset(t, scalar_value(x))
            x = t
        vals.append(align(x, shape))
    emit(OP_WHERE, name, [], [dst, align(cond, shape)] + vals, mask=mask)
    return dst


def preduce(dst, op, data, dtype=None, name="tensor_partition_reduce"):
    if dst is None:
        dst = alloc((1,) + tuple(data.shape[1:]), dtype or data.dtype)
    emit(OP_PREDUCE, name, [alu_code(op)], [dst, data])
    return dst


def bn_stats(dst, data, dtype=None, name="bn_stats"):
    if dst is None:
        dst = alloc((data.shape[0], 6), dtype or dt.float32)
    emit(OP_BNSTATS, name, [], [dst, data])
    return dst


def bn_aggr(dst, data, dtype=None, name="bn_aggr"):
    if dst is None:
        dst = alloc((data.shape[0], 2), dtype or dt.float32)
    emit(OP_BNAGGR, name, [], [dst, data])
    return dst


# ---------------------------------------------------------------- top-8 family (Vector Engine)
_INDEX_DTYPES = ("uint32", "uint16", "int32")


def _p(ap):
    return ap.shape[0]


def _top8_mask(mask):
    # legacy mask=: a predicate over the data's index space (elements
    # masked off take no part; libtrn's put_top8)
    return None if mask is None or mask is True else mask


def max8(dst, src, dtype=None, name="max8", mask=None):
    if dst is None:
        dst = alloc((_p(src), 8), dtype or src.dtype)
    emit(OP_TOP8, name, [0, 0], [dst, src], mask=_top8_mask(mask), mask_nd=src.ndim)
    return dst


def _index_dst(dst, data, dtype, name):
    if dst is None:
        dst = alloc((_p(data), 8), dtype or dt.uint32)
    if str(dt.to_dtype(dst.dtype)) not in _INDEX_DTYPES:
        raise NkiError(f"nki: {name}: indices are uint16 or uint32 (got {dst.dtype})")
    return dst


def find_index8(dst, data, vals, dtype=None, name="nc_find_index8", mask=None):
    dst = _index_dst(dst, data, dtype, name)
    emit(OP_TOP8, name, [1, 0], [dst, data, vals], mask=_top8_mask(mask), mask_nd=data.ndim)
    return dst


def match_replace8(
    dst, data, vals, imm, dst_idx=None, dtype=None, name="nc_match_replace8", mask=None
):
    if dst is None:
        dst = alloc(data.shape, dtype or data.dtype)
    ops = [dst, data, vals]
    if dst_idx is not None:
        ops.append(_index_dst(dst_idx, data, None, name))
    emit(OP_TOP8, name, [2, scalar_value(imm)], ops, mask=_top8_mask(mask), mask_nd=data.ndim)
    return dst


# ---------------------------------------------------------------- selects with a max reduction
def _register(P):
    """The Vector Engine's accumulator register for P partitions: a (P, 1)
    fp32 tile allocated at the kernel's start (so it lives across loops,
    which then run serially), poisoned until a reset_reduce."""
    tr = current()
    regs = tr.__dict__.setdefault("_vector_acc", {})
    if P not in regs:
        n = len(tr.lines)
        regs[P] = alloc((P, 1), dt.float32, name="vector_accumulator")
        tr.lines.insert(0, tr.lines.pop(n))  # its allocation point: the kernel's start
    return regs[P]


# reduce_cmd codes (nki.isa.reduce_cmd)
_IDLE, _RESET, _REDUCE, _RESET_REDUCE = 0, 1, 2, 3


def _reduce_into(reduce_res, reduce_op, tile, name, cmd=None):
    """The max reduction of select_reduce / range_select: reset_reduce
    starts the accumulator register from this result, reduce folds this
    result into it, and reduce_res (if given) receives the register;
    without a reduce_cmd the result's own max goes to reduce_res."""
    n = op_name(reduce_op)
    if ALU_ALIAS.get(n, n) != "maximum":
        raise NkiError(f"nki: {name}: reduce_op must be maximum")
    cmd = None if cmd is None else int(cmd)
    if cmd in (None, _IDLE, _RESET):
        if reduce_res is not None:
            reduce(reduce_res, "maximum", tile, None, name=name)
        return
    if cmd not in (_REDUCE, _RESET_REDUCE):
        raise NkiError(f"nki: {name}: reduce_cmd {cmd} is not supported here")
    reg = _register(tile.shape[0])
    if cmd == _RESET_REDUCE:
        reduce(reg, "maximum", tile, None, name=name)
    else:
        part = reduce(None, "maximum", tile, None, keepdims=True, dtype=dt.float32, name=name)
        part = conform(part, (tile.shape[0], 1))
        binary(reg, part, "maximum", dst=reg, name=name)
    if reduce_res is not None:
        copy(reduce_res, reg, 2, name=name)


def select_reduce(
    dst,
    predicate,
    on_true,
    on_false,
    reduce_res=None,
    reduce_op="maximum",
    reverse_pred=False,
    dtype=None,
    name="select_reduce",
    reduce_cmd=None,
):
    """dst = where(predicate, on_true, on_false) (swapped when reverse_pred),
    then the per-partition max into reduce_res."""
    if dst is None:
        dst = alloc(on_true.shape, dtype or on_true.dtype)
    a, b = (on_false, on_true) if reverse_pred else (on_true, on_false)
    where(predicate, a, b, dst=dst, name=name)
    _reduce_into(reduce_res, reduce_op, dst, name, reduce_cmd)
    return dst


def range_select(
    dst,
    on_true,
    comp_op0,
    comp_op1,
    bound0,
    bound1,
    reduce_res=None,
    reduce_op="maximum",
    range_start=0,
    on_false_value=-3.4028234663852886e38,
    dtype=None,
    name="range_select",
    reduce_cmd=None,
):
    """dst = on_true where comp_op0(index, bound0) and comp_op1(index, bound1)
    (index: the flat free index + range_start, in fp32), else on_false_value;
    then the per-partition max into reduce_res."""
    if dst is None:
        dst = alloc(on_true.shape, dtype or on_true.dtype)
    shape = tuple(on_true.shape)
    pattern, step = [], 1
    for n in reversed(shape[1:]):
        pattern.insert(0, [step, n])
        step *= n
    idx = alloc(shape, dt.float32, name="range_select_index")
    iota_expr(idx, pattern_expr(len(shape), pattern, int(range_start), 0), name=name)
    m0 = tensor_scalar(None, idx, comp_op0, bound0, dtype=dt.float32, name=name)
    m1 = tensor_scalar(None, idx, comp_op1, bound1, dtype=dt.float32, name=name)
    binary(m0, m1, "logical_and", dst=m0, name=name)
    where(m0, on_true, on_false_value, dst=dst, name=name)
    _reduce_into(reduce_res, reduce_op, dst, name, reduce_cmd)
    return dst


def rand(dst, name="nl.rand"):
    """dst <- uniform [0, 1) values, fresh at each execution (not the
    hardware's generator: a counter-based hash, docs/nki.md)."""
    emit(OP_RAND, name, [], [dst])
    return dst


def gather_flattened(data, indices, dtype=None, name="nl.gather_flattened"):
    """result[p, j...] = data[p, indices[p, j...]] over data's flattened free
    elements (an index out of range fails the run)."""
    dst = alloc(indices.shape, dtype or data.dtype)
    emit(OP_TAKE, name, [], [dst, data, indices])
    return dst


def dropout(dst, data, prob, dtype=None, name="dropout"):
    """Zero each element with probability prob (a scalar or a (P, 1) tile)
    from nl.rand's stream; kept elements are not rescaled (the ISA's
    definition)."""
    if dst is None:
        dst = alloc(data.shape, dtype or data.dtype)
    u = rand(alloc(data.shape, dt.float32), name=name)
    keep = tensor_scalar(None, u, "greater_equal", prob, dtype=dt.float32, name=name)
    where(keep, data, 0.0, dst=dst, name=name)
    return dst


def stream_shuffle(dst, src, shuffle_mask, name="nc_stream_shuffle"):
    """Output partition q*32 + i copies source partition q*32 + mask[i] in
    every 32-partition quadrant q (255: left alone); recorded as one copy of
    the source (in-place shuffles read the original) and one partition-
    strided copy per mask entry."""
    mask = [int(scalar_value(m)) for m in shuffle_mask]
    if len(mask) != 32:
        raise NkiError(f"nki: {name}: shuffle_mask has 32 entries (got {len(mask)})")
    if free_size(dst) != free_size(src) or dt.to_dtype(dst.dtype) != dt.to_dtype(src.dtype):
        raise NkiError(f"nki: {name}: dst and src need one dtype and one size per partition")
    pd, ps = dst.shape[0], src.shape[0]
    tmp = alloc(src.shape, src.dtype, name="shuffle_source")
    copy(tmp, src, 2, name=name)
    tmp = conform(tmp, src.shape) if tmp.shape != src.shape else tmp
    for i, m in enumerate(mask):
        if m == 255:
            continue
        quads = [q for q in range((pd + 31) // 32) if q * 32 + i < pd]
        if not quads:
            continue
        if m < 0 or m > 31 or any(q * 32 + m >= ps for q in quads):
            raise NkiError(
                f"nki: {name}: mask entry {i} = {m} reads a partition the source does not have"
            )
        k = len(quads)
        d = dst[i : i + 32 * (k - 1) + 1 : 32]
        s = tmp[m : m + 32 * (k - 1) + 1 : 32]
        copy(d, conform(s, d.shape) if tuple(s.shape) != tuple(d.shape) else s, 2, name=name)
    return dst


def _reversed_free(ap):
    """The same (P, n) access with its free axis walked backwards."""
    idx = [(b + c[1] * (ap.dims[1] - 1), [c[0], -c[1]]) for b, c in ap.idx]
    return AP(ap.tensor, list(ap.dims), idx)


def sequence_bounds(dst, segment_ids, dtype=None, name="sequence_bounds"):
    """dst (P, 2, n) <- per element the [start, end) of its run of equal ids
    along segment_ids' (P, n) free axis; id 0 is padding (start n, end -1).
    Recorded as compares, an iota and two tensor_tensor_scans
    (start = start * same_as_previous + (1 - same) * i, and the end the same
    way over reversed access patterns), all in fp32 (exact: n < 2^24)."""
    if segment_ids.ndim != 2:
        raise NkiError(f"nki: {name}: segment_ids must be a (P, n) tile (got {segment_ids.shape})")
    P, n = segment_ids.shape
    if dst is None:
        dst = alloc((P, 2, n), dtype or segment_ids.dtype)
    if tuple(dst.shape) != (P, 2, n):
        raise NkiError(f"nki: {name}: dst must be {(P, 2, n)} (got {tuple(dst.shape)})")
    f32 = dt.float32
    s = copy(None, segment_ids, mode=2, dtype=f32, name=name)
    idx = alloc((P, n), f32)
    iota_expr(idx, pattern_expr(2, [[1, n]], 0, 0), name=name)
    pad = tensor_scalar(None, s, "equal", 0.0, dtype=f32, name=name)
    for end in (False, True):
        same = alloc((P, n), f32)  # the neighbour (previous / next) has the same id
        edge = (n - 1, n) if end else (0, 1)
        memset(same[:, edge[0] : edge[1]], 0.0, name=name)
        if n > 1:
            a, b = (s[:, 0 : n - 1], s[:, 1:n]) if end else (s[:, 1:n], s[:, 0 : n - 1])
            binary(a, b, "equal", dst=same[:, 0 : n - 1] if end else same[:, 1:n], name=name)
        pos = tensor_scalar(None, idx, "add", 1.0, dtype=f32, name=name) if end else idx
        fresh = stt(None, same, "subtract", 1.0, "multiply", pos, reverse0=True, name=name)
        bound = alloc((P, n), f32)
        if end:
            scan(
                _reversed_free(bound),
                _reversed_free(same),
                _reversed_free(fresh),
                0.0,
                "multiply",
                "add",
                name=name,
            )
        else:
            scan(bound, same, fresh, 0.0, "multiply", "add", name=name)
        where(pad, -1.0 if end else float(n), bound, dst=dst[:, 1 if end else 0, :], name=name)
    return dst


def local_gather(dst, src, index, num_elem_per_idx=1, num_valid_indices=None, name="local_gather"):
    """GpSimd local gather: each group of 16 partitions (one GpSimd core)
    flattens its rows of `index` partition-first into one list of element
    offsets (the first num_valid_indices of them) and every partition of the
    group reads num_elem_per_idx contiguous elements of its own flattened
    src row at each offset. Recorded as one strided copy of the indices per
    core, an add of the element positions and a per-partition take (an
    offset out of range fails the run; on hardware it is undefined)."""
    P = src.shape[0]
    if index.ndim != 2 or index.shape[0] != P or P % 16:
        raise NkiError(
            f"nki: {name}: index must be a (P, k) tile with src's partitions, P a multiple of 16 "
            f"(got src {tuple(src.shape)}, index {tuple(index.shape)})"
        )
    if index.dtype.is_float:
        raise NkiError(f"nki: {name}: indices must be integers (uint16), got {index.dtype}")
    E = int(num_elem_per_idx)
    if E not in (1, 2, 4, 8, 16, 32):
        raise NkiError(f"nki: {name}: num_elem_per_idx must be 1, 2, 4, 8, 16 or 32 (got {E})")
    K = index.shape[1]
    nv = 16 * K if num_valid_indices is None else int(num_valid_indices)
    if not 1 <= nv <= 16 * K or nv > 4096:
        raise NkiError(f"nki: {name}: num_valid_indices must be in [1, {min(16 * K, 4096)}]")
    if dst is None:
        shape = (P, K, 16, E) if nv == 16 * K else (P, nv, E)
        dst = alloc(shape, src.dtype)
    if dst.dtype != src.dtype:
        raise NkiError(f"nki: {name}: dst must have src's dtype {src.dtype} (no casts)")
    # offsets[p, k * 16 + q] = index[16 * core(p) + q, k]
    offs = alloc((P, 16 * K), dt.int32)
    for c in range(P // 16):
        d = AP(offs.tensor, [16, K, 16], [(Affine(16 * c), [1, 0, 0]), (Affine(0), [0, 16, 1])])
        s = AP(
            index.tensor,
            [16, K, 16],
            [(b + cf[0] * 16 * c, [0, cf[1], cf[0]]) for b, cf in index.idx],
        )
        copy(d, s, mode=2, name=name)
    # element positions: offsets[p, v] + e
    at = AP(offs.tensor, [P, nv, E], [(Affine(0), [1, 0, 0]), (Affine(0), [0, 1, 0])])
    pos = alloc((P, nv, E), dt.int32)
    if E > 1:
        e = alloc((P, nv, E), dt.int32)
        iota_expr(e, pattern_expr(3, [[0, nv], [1, E]], 0, 0), name=name)
        binary(at, e, "add", dst=pos, name=name)
    else:
        copy(pos, at, mode=2, name=name)
    emit(OP_TAKE, name, [], [dst, src, pos])
    return dst
