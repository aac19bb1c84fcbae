"""nki.isa, current generation: every instruction takes its destination
first (``dst=``) and writes it. Each call records one libtrn NKI
instruction (a few, documented, record two)."""

import enum as _enum
import math as _math

from .. import _dtypes as _dt
from .. import _ops
from .._ir import PSUM, SBUF, NkiError, Pred


class engine(_enum.IntEnum):
    unknown = 0
    tensor = 1
    vector = 2
    scalar = 3
    activation = 3
    gpsimd = 4
    sync = 5
    pool = 4


class reduce_cmd(_enum.IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class nc_version(_enum.IntEnum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(_enum.IntEnum):
    sync = 0
    gpsimd = 1


class dge_mode(_enum.IntEnum):
    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class oob_mode(_enum.IntEnum):
    error = 0
    skip = 1


class matmul_perf_mode(_enum.IntEnum):
    none = 0
    double_row = 1
    double_row_gen3 = 1
    double_pixel = 2


def get_nc_version():
    from .._ir import active

    tr = active()
    return nc_version(tr.target if tr is not None else 3)


def _need(dst, name):
    if dst is None:
        raise NkiError(
            f"nki: nisa.{name} takes its destination first (dst=); the result-returning form is the "
            "legacy neuronxcc.nki.isa"
        )
    return dst


def nc_matmul(
    dst,
    stationary,
    moving,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    is_transpose=False,
    tile_position=None,
    tile_size=None,
    perf_mode=None,
    accumulate=None,
    **kw,
):
    if is_transpose:
        return _ops.transpose(_need(dst, "nc_matmul"), stationary, 1, name="nc_matmul")
    return _ops.matmul(
        _need(dst, "nc_matmul"), stationary, moving, accumulate=accumulate, perf_mode=perf_mode
    )


def nc_transpose(dst, data, engine=engine.unknown, **kw):
    mode = 0 if engine == 2 or engine == 4 else 1
    if engine == 0 and dst.tensor.kind != PSUM:
        mode = 0
    return _ops.transpose(_need(dst, "nc_transpose"), data, mode)


def activation(
    dst,
    op,
    data,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=None,
    alpha=0.0,
    **kw,
):
    return _ops.activation(
        _need(dst, "activation"),
        op,
        data,
        bias=bias,
        scale=scale,
        reduce_op=reduce_op,
        reduce_res=reduce_res,
        alpha=alpha,
    )


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, **kw):
    return _ops.activation(
        _need(dst, "activation_reduce"),
        op,
        data,
        bias=bias,
        scale=scale,
        reduce_op=reduce_op,
        reduce_res=reduce_res,
        name="activation_reduce",
    )


def activate2(*a, **kw):
    raise NkiError("nki: nisa.activate2 is not supported by this implementation")


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=None, **kw):
    if max_value:
        t = _ops.tensor_scalar(None, src, "subtract", float(max_value), dtype=_dt.float32)
        src = t
    return _ops.activation(
        _need(dst, "exponential"),
        "exp",
        src,
        reduce_op="add" if reduce_res is not None else None,
        reduce_res=reduce_res,
        name="exponential",
    )


def reciprocal(dst, data, **kw):
    return _ops.activation(_need(dst, "reciprocal"), "reciprocal", data, name="reciprocal")


def tensor_tensor(dst, data1, data2, op, **kw):
    return _ops.binary(data1, data2, op, dst=_need(dst, "tensor_tensor"), name="tensor_tensor")


def tensor_scalar(
    dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, **kw
):
    return _ops.tensor_scalar(
        _need(dst, "tensor_scalar"), data, op0, operand0, reverse0, op1, operand1, reverse1
    )


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res, reverse0=False, **kw):
    _ops.tensor_scalar(
        _need(dst, "tensor_scalar_reduce"),
        data,
        op0,
        operand0,
        reverse0,
        name="tensor_scalar_reduce",
    )
    _ops.reduce(reduce_res, reduce_op, dst, None, name="tensor_scalar_reduce")
    return dst


_CUMUL_INIT = {
    "add": 0.0,
    "subtract": 0.0,
    "multiply": 1.0,
    "maximum": -_math.inf,
    "minimum": _math.inf,
}
_CUMUL_DTYPES = ("float32", "bfloat16", "float16", "uint8", "uint16", "int8", "int16")


def tensor_scalar_cumulative(
    dst, src, op0, op1, imm0, imm1=None, reduce_cmd=None, reverse0=False, **kw
):
    """Per partition, along the free axes in order: reg = op1(op0(x, imm0), reg),
    dst[i] = reg (op0(imm0, x) with reverse0). reg starts at op1's identity
    (reset_reduce; idle, the 0.4-0.5 default, as a fresh accumulator), at imm1
    (load_reduce), or where the previous cumulative instruction left the
    Vector Engine's accumulator register (reduce)."""
    name = "tensor_scalar_cumulative"
    dst = _need(dst, name)
    rc = globals()["reduce_cmd"]  # the enum; the argument shadows its name
    cmd = rc.reset_reduce if reduce_cmd is None else rc(int(reduce_cmd))
    opname = _ops.op_name(op1)
    opname = _ops.ALU_ALIAS.get(opname, opname)
    if opname not in _CUMUL_INIT:
        raise NkiError(f"nki: nisa.{name}: op1 must be add, subtract, multiply, maximum or minimum")
    for t in (dst, src):
        if not (str(t.dtype) in _CUMUL_DTYPES or str(t.dtype).startswith("float8")):
            raise NkiError(f"nki: nisa.{name}: {t.dtype} tiles are not supported (ISA limit)")
    if cmd in (rc.reset_reduce, rc.reset, rc.idle):
        init = _CUMUL_INIT[opname]
    elif cmd == rc.load_reduce:
        if imm1 is None:
            raise NkiError(f"nki: nisa.{name}: reduce_cmd=load_reduce needs imm1=")
        init = imm1
    elif cmd == rc.reduce:
        init = _ops._register(src.shape[0])  # where the previous one left it
    else:
        raise NkiError(f"nki: nisa.{name}: reduce_cmd {cmd.name} is not supported here")
    # op0 in fp32 (the engine's internal precision), then the running op1
    # as a scan whose second operator passes its value through, in fp32; the
    # last value per partition stays in the accumulator register
    t = _ops.tensor_scalar(None, src, op0, imm0, reverse0, dtype=_dt.float32, name=name)
    acc = _ops.scan(None, t, t, init, op1, "bypass", name=name)
    _ops.copy(dst, acc, 2, name=name)
    flat = acc.reshape((src.shape[0], _ops.free_size(src)))
    n = _ops.free_size(src)
    _ops.copy(_ops._register(src.shape[0]), flat[:, n - 1 : n], 2, name=name)
    return dst


def scalar_tensor_tensor(
    dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, **kw
):
    return _ops.stt(
        _need(dst, "scalar_tensor_tensor"), data, op0, operand0, op1, operand1, reverse0, reverse1
    )


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, **kw):
    return _ops.scan(_need(dst, "tensor_tensor_scan"), data0, data1, initial, op0, op1)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, **kw):
    return _ops.reduce(
        _need(dst, "tensor_reduce"), op, data, axis, negate=negate, keepdims=keepdims
    )


def tensor_partition_reduce(dst, op, data, **kw):
    return _ops.preduce(_need(dst, "tensor_partition_reduce"), op, data)


def tensor_copy(dst, src, engine=engine.unknown, **kw):
    return _ops.copy(_need(dst, "tensor_copy"), src, 2, name="tensor_copy")


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, **kw):
    return _ops.predcopy(_need(dst, "tensor_copy_predicated"), src, predicate, reverse_pred)


def dma_copy(dst, src, oob_mode=None, dge_mode=None, **kw):
    dst = _need(dst, "dma_copy")
    rmw = kw.get("dst_rmw_op")
    if rmw is not None and getattr(dst, "gather", None) is None:
        raise NkiError(
            "nki: nisa.dma_copy(dst_rmw_op=) is supported on indirect (index-tile) "
            "destinations only"
        )
    if getattr(src, "gather", None) is not None or dst.gather is not None:
        skip = oob_mode is not None and int(oob_mode) == int(globals()["oob_mode"].skip)
        return _ops.indirect_copy(dst, src, "dma_copy", oob_skip=skip, rmw_op=rmw)
    return _ops.copy(dst, src, 1, name="dma_copy")


def dma_transpose(dst, src, axes=None, **kw):
    return _ops.transpose(_need(dst, "dma_transpose"), src, 2, name="dma_transpose")


def memset(dst, value, **kw):
    return _ops.memset(_need(dst, "memset"), value)


def iota(dst, pattern, offset=0, channel_multiplier=0, **kw):
    e = _ops.pattern_expr(dst.ndim, pattern, offset, channel_multiplier)
    return _ops.iota_expr(_need(dst, "iota"), e)


def affine_select(
    dst,
    pattern,
    channel_multiplier,
    on_true_tile,
    on_false_value,
    cmp_op="greater_equal",
    offset=0,
    **kw,
):
    e = _ops.pattern_expr(dst.ndim, pattern, offset, channel_multiplier)
    n = _ops.ALU_ALIAS.get(_ops.op_name(cmp_op), _ops.op_name(cmp_op))
    cmp = {
        "equal": "eq",
        "not_equal": "ne",
        "less": "lt",
        "less_equal": "le",
        "greater": "gt",
        "greater_equal": "ge",
    }[n]
    return _ops.select(_need(dst, "affine_select"), Pred([(e, cmp)]), on_true_tile, on_false_value)


def bn_stats(dst, data, **kw):
    return _ops.bn_stats(_need(dst, "bn_stats"), data)


def bn_aggr(dst, data, **kw):
    return _ops.bn_aggr(_need(dst, "bn_aggr"), data)


def max8(dst, src, **kw):
    return _ops.max8(_need(dst, "max8"), src)


def nc_find_index8(dst, data, vals, **kw):
    return _ops.find_index8(_need(dst, "nc_find_index8"), data, vals)


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, **kw):
    return _ops.match_replace8(_need(dst, "nc_match_replace8"), data, vals, imm, dst_idx)


match_replace8 = nc_match_replace8


def nc_stream_shuffle(dst=None, src=None, shuffle_mask=None, **kw):
    return _ops.stream_shuffle(dst, src, shuffle_mask)


def dropout(dst, data, prob, **kw):
    return _ops.dropout(_need(dst, "dropout"), data, prob)


def select_reduce(
    dst,
    predicate,
    on_true,
    on_false,
    reduce_res=None,
    reduce_cmd=None,
    reduce_op="maximum",
    reverse_pred=False,
    **kw,
):
    return _ops.select_reduce(
        _need(dst, "select_reduce"),
        predicate,
        on_true,
        on_false,
        reduce_res=reduce_res,
        reduce_op=reduce_op,
        reverse_pred=reverse_pred,
        reduce_cmd=reduce_cmd,
    )


def range_select(
    dst,
    on_true_tile,
    comp_op0,
    comp_op1,
    bound0,
    bound1,
    reduce_cmd=None,
    reduce_res=None,
    reduce_op="maximum",
    range_start=0,
    on_false_value=-3.4028234663852886e38,
    **kw,
):
    return _ops.range_select(
        _need(dst, "range_select"),
        on_true_tile,
        comp_op0,
        comp_op1,
        bound0,
        bound1,
        reduce_res=reduce_res,
        reduce_op=reduce_op,
        range_start=range_start,
        on_false_value=on_false_value,
        reduce_cmd=reduce_cmd,
    )


def sequence_bounds(dst, segment_ids, **kw):
    return _ops.sequence_bounds(_need(dst, "sequence_bounds"), segment_ids)


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, **kw):
    return _ops.local_gather(
        _need(dst, "local_gather"), src_buffer, index, num_elem_per_idx, num_valid_indices
    )


def nc_n_gather(dst, data, indices, **kw):
    """dst[p, j...] = data[p, indices[p, j...]] over data's flattened free
    elements (nl.gather_flattened with a destination)."""
    _need(dst, "nc_n_gather")
    if dst.dtype != data.dtype:
        raise NkiError(f"nki: nc_n_gather: dst must have data's dtype {data.dtype}")
    _ops.emit(_ops.OP_TAKE, "nc_n_gather", [], [dst, data, indices])
    return dst


def _unsupported(name):
    def f(*a, **kw):
        raise NkiError(f"nki: nisa.{name} is not supported by this implementation")

    f.__name__ = name
    return f


for _n in [
    "nc_matmul_mx",
    "quantize_mx",
    "dma_compute",
    "register_alloc",
    "register_load",
    "register_move",
    "register_store",
    "core_barrier",
    "sendrecv",
    "rng",
    "rand2",
    "rand_set_state",
    "rand_get_state",
    "set_rng_seed",
    "nonzero_with_count",
    "topk",
]:
    globals()[_n] = _unsupported(_n)
