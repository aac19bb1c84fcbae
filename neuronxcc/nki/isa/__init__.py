"""neuronxcc.nki.isa: the legacy ISA calls, which allocate and return their
result tile (dtype=, mask= accepted), mapped onto nki's instruction core."""

from nki import _dtypes as _dt
from nki import _ops
from nki._ir import PSUM, SBUF, NkiError
from nki.isa import (
    dge_mode,
    dma_engine,
    engine,
    get_nc_version,
    matmul_perf_mode,
    nc_version,  # noqa: F401
    oob_mode,
    reduce_cmd,
    tensor_scalar_cumulative,  # noqa: F401 (dst=/src= keywords in both generations)
)


tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = (
    engine.tensor,
    engine.vector,
    engine.scalar,
    engine.gpsimd,
    engine.unknown,
)


def _dtype(dtype, default):
    return _dt.to_dtype(dtype) if dtype is not None else default


def nc_matmul(
    stationary,
    moving,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    mask=None,
    is_transpose=False,
    perf_mode=None,
    **kw,
):
    # legacy kernels may feed PSUM tiles (e.g. a transpose result) straight
    # in: the legacy compiler copies them to SBUF first, and so do we
    stationary = _ops.to_sbuf_if(stationary, (PSUM,))
    if is_transpose:
        return _ops.transpose(None, stationary, 1, name="nc_matmul")
    moving = _ops.to_sbuf_if(moving, (PSUM,))
    return _ops.matmul(None, stationary, moving, name="nc_matmul", mask=mask, perf_mode=perf_mode)


def nc_transpose(data, mask=None, dtype=None, engine=engine.unknown, **kw):
    small = data.shape[0] <= 32 and (data.shape[1] if data.ndim > 1 else 1) <= 32
    vector = engine in (2, 4) or (engine == 0 and small)
    if not vector:
        data = _ops.to_sbuf_if(data, (PSUM,))
    return _ops.transpose(
        None, data, 0 if vector else 1, dtype=dtype, kind=SBUF if vector else PSUM, mask=mask
    )


def activation(
    op,
    data,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=None,
    mask=None,
    dtype=None,
    **kw,
):
    return _ops.activation(
        None,
        op,
        data,
        bias=bias,
        scale=scale,
        reduce_op=reduce_op,
        reduce_res=reduce_res,
        dtype=_dtype(dtype, data.dtype),
        mask=mask,
    )


def activation_reduce(
    op, data, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kw
):
    return _ops.activation(
        None,
        op,
        data,
        bias=bias,
        scale=scale,
        reduce_op=reduce_op,
        reduce_res=reduce_res,
        dtype=_dtype(dtype, data.dtype),
        mask=mask,
        name="activation_reduce",
    )


def tensor_reduce(op, data, axis, mask=None, dtype=None, negate=False, keepdims=False, **kw):
    return _ops.reduce(
        None,
        op,
        data,
        axis,
        negate=negate,
        keepdims=keepdims,
        dtype=_dtype(dtype, data.dtype),
        mask=mask,
    )


def tensor_partition_reduce(op, data, mask=None, dtype=None, **kw):
    return _ops.preduce(None, op, data, dtype=_dtype(dtype, data.dtype))


def tensor_tensor(data1, data2, op, dtype=None, mask=None, engine=None, **kw):
    d = _dtype(dtype, _dt.promote(data1.dtype, data2.dtype))
    return _ops.binary(data1, data2, op, dtype=d, mask=mask, name="tensor_tensor")


def tensor_scalar(
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    dtype=None,
    mask=None,
    engine=None,
    **kw,
):
    return _ops.tensor_scalar(
        None,
        data,
        op0,
        operand0,
        reverse0,
        op1,
        operand1,
        reverse1,
        dtype=_dtype(dtype, data.dtype),
        mask=mask,
    )


def tensor_scalar_reduce(
    data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None, **kw
):
    r = _ops.tensor_scalar(
        None,
        data,
        op0,
        operand0,
        reverse0,
        dtype=_dtype(dtype, data.dtype),
        mask=mask,
        name="tensor_scalar_reduce",
    )
    _ops.reduce(reduce_res, reduce_op, r, None, name="tensor_scalar_reduce")
    return r


def scalar_tensor_tensor(
    data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None, mask=None, **kw
):
    out = _ops.alloc(data.shape, _dtype(dtype, data.dtype))
    return _ops.stt(out, data, op0, operand0, op1, operand1, reverse0, reverse1)


def tensor_tensor_scan(
    data0, data1, initial, op0, op1, reverse0=False, reverse1=False, dtype=None, mask=None, **kw
):
    out = _ops.alloc(data0.shape, _dtype(dtype, data0.dtype))
    return _ops.scan(out, data0, data1, initial, op0, op1)


def tensor_copy(src, mask=None, dtype=None, engine=None, **kw):
    return _ops.copy(None, src, 2, dtype=_dtype(dtype, src.dtype), mask=mask, name="tensor_copy")


def tensor_copy_predicated(src, dst, predicate, mask=None, dtype=None, reverse_pred=False, **kw):
    return _ops.predcopy(dst, src, predicate, reverse_pred)


def iota(expr, dtype, mask=None, **kw):
    from nki import language as nl

    return nl.iota(expr, dtype=dtype, mask=mask)


def affine_select(pred, on_true_tile, on_false_value, mask=None, dtype=None, **kw):
    out = _ops.alloc(on_true_tile.shape, _dtype(dtype, on_true_tile.dtype))
    return _ops.select(out, pred, on_true_tile, on_false_value, mask=mask)


def memset(shape, value, dtype, mask=None, engine=None, **kw):
    out = _ops.alloc(shape, dtype)
    return _ops.memset(out, value, mask=mask)


def bn_stats(data, mask=None, dtype=None, **kw):
    return _ops.bn_stats(None, data, dtype=_dtype(dtype, _dt.float32))


def bn_aggr(data, mask=None, dtype=None, **kw):
    return _ops.bn_aggr(None, data, dtype=_dtype(dtype, _dt.float32))


def reciprocal(data, dtype=None, mask=None, **kw):
    return _ops.activation(
        None, "reciprocal", data, dtype=_dtype(dtype, data.dtype), mask=mask, name="reciprocal"
    )


def dma_transpose(src, axes=None, mask=None, dtype=None, **kw):
    if src.ndim != 2:
        raise NkiError("nki: dma_transpose of more than 2 dims is not supported here")
    return _ops.transpose(None, src, 2, dtype=_dtype(dtype, src.dtype), name="dma_transpose")


def dma_copy(dst, src, mask=None, dge_mode=None, oob_mode=None, **kw):
    rmw = kw.get("dst_rmw_op")
    if rmw is not None and getattr(dst, "gather", None) is None:
        raise NkiError(
            "nki: nisa.dma_copy(dst_rmw_op=) is supported on indirect (index-tile) "
            "destinations only"
        )
    if getattr(src, "gather", None) is not None or getattr(dst, "gather", None) is not None:
        # indirect: oob_mode.skip (1) leaves out-of-range rows alone
        skip = oob_mode is not None and int(oob_mode) == 1
        return _ops.indirect_copy(dst, src, "dma_copy", mask=mask, oob_skip=skip, rmw_op=rmw)
    return _ops.copy(dst, src, 1, mask=mask, name="dma_copy")


def _no_mask(name, mask):
    if mask is not None and mask is not True:
        raise NkiError(f"nki: nisa.{name}: mask= is not supported here; slice the operands")


def max8(src, mask=None, dtype=None, **kw):
    return _ops.max8(None, src, dtype=_dtype(dtype, None), mask=mask)


def nc_find_index8(data, vals, mask=None, dtype=None, **kw):
    return _ops.find_index8(None, data, vals, dtype=_dtype(dtype, None), mask=mask)


def nc_match_replace8(data, vals, imm, dst_idx=None, mask=None, dtype=None, **kw):
    return _ops.match_replace8(None, data, vals, imm, dst_idx, dtype=_dtype(dtype, None), mask=mask)


match_replace8 = nc_match_replace8


def nc_stream_shuffle(dst=None, src=None, shuffle_mask=None, **kw):
    return _ops.stream_shuffle(dst, src, shuffle_mask)


def dropout(data, prob, mask=None, dtype=None, **kw):
    _no_mask("dropout", mask)
    return _ops.dropout(None, data, prob, dtype=_dtype(dtype, None))


def select_reduce(
    dst,
    predicate,
    on_true,
    on_false,
    reduce_res=None,
    reduce_cmd=None,
    reduce_op="maximum",
    reverse_pred=False,
    mask=None,
    dtype=None,
    **kw,
):
    _no_mask("select_reduce", mask)
    return _ops.select_reduce(
        dst,
        predicate,
        on_true,
        on_false,
        reduce_res,
        reduce_op,
        reverse_pred,
        _dtype(dtype, None),
        reduce_cmd=reduce_cmd,
    )


def range_select(
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
    mask=None,
    dtype=None,
    **kw,
):
    _no_mask("range_select", mask)
    return _ops.range_select(
        None,
        on_true_tile,
        comp_op0,
        comp_op1,
        bound0,
        bound1,
        reduce_res=reduce_res,
        reduce_op=reduce_op,
        range_start=range_start,
        on_false_value=on_false_value,
        dtype=_dtype(dtype, None),
        reduce_cmd=reduce_cmd,
    )


def sequence_bounds(segment_ids, mask=None, dtype=None, **kw):
    _no_mask("sequence_bounds", mask)
    return _ops.sequence_bounds(None, segment_ids, dtype=_dtype(dtype, None))


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, mask=None, **kw):
    _no_mask("local_gather", mask)
    return _ops.local_gather(None, src_buffer, index, num_elem_per_idx, num_valid_indices)


def _unsupported(name):
    def f(*a, **kw):
        raise NkiError(f"nki: nisa.{name} is not supported by this implementation")

    f.__name__ = name
    return f


for _n in [
    "tensor_copy_dynamic_src",
    "tensor_copy_dynamic_dst",
    "nc_matmul_mx",
    "quantize_mx",
]:
    globals()[_n] = _unsupported(_n)
