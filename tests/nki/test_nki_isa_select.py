"""The Vector Engine's top-8 and select-with-reduce instructions (max8,
nc_find_index8, nc_match_replace8 / match_replace8, select_reduce,
range_select) in both API generations, against NumPy references."""

import numpy as np
import pytest
import torch

import neuronxcc.nki as lnki
import neuronxcc.nki.isa as lisa
import neuronxcc.nki.language as lnl
import nki
import nki.isa as nisa
import nki.language as nl
from nki._ir import NkiError

rng = np.random.default_rng(8)
FMIN = np.float32(-3.4028235e38)


def np_max8(x):
    return -np.sort(-x.reshape(x.shape[0], -1), axis=1)[:, :8]


def np_find_index8(data, vals, order=(0, 1, 2, 3, 4, 5, 6, 7)):
    """first unused position of each val, vals taken in `order`"""
    data = data.reshape(data.shape[0], -1)
    idx = np.full(vals.shape, 0xFFFFFFFF, np.uint64)
    for p in range(data.shape[0]):
        used = set()
        for k in order:
            for f in range(data.shape[1]):
                if data[p, f] == vals[p, k] and f not in used:
                    idx[p, k] = f
                    used.add(f)
                    break
    return idx


def np_match_replace8(data, vals, imm):
    idx = np_find_index8(data, vals, order=range(7, -1, -1))
    out = data.reshape(data.shape[0], -1).copy()
    for p in range(out.shape[0]):
        for k in range(8):
            if idx[p, k] != 0xFFFFFFFF:
                out[p, int(idx[p, k])] = imm
    return out.reshape(data.shape), idx


# ---------------------------------------------------------------- current API
@nki.jit
def top8_new(x, v, imm):
    P = x.shape[0]
    shp = tuple(x.shape)
    o_max = nl.ndarray((P, 8), nl.float32, buffer=nl.shared_hbm)
    o_idx = nl.ndarray((P, 8), nl.uint32, buffer=nl.shared_hbm)
    o_rep = nl.ndarray(shp, nl.float32, buffer=nl.shared_hbm)
    o_ridx = nl.ndarray((P, 8), nl.uint32, buffer=nl.shared_hbm)
    o_vidx = nl.ndarray((P, 8), nl.uint16, buffer=nl.shared_hbm)
    t = nl.ndarray(shp, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    vv = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=vv, src=v)
    m = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=m, src=t)
    i = nl.ndarray((P, 8), nl.uint32, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=i, data=t, vals=m)
    vi = nl.ndarray((P, 8), nl.uint16, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=vi, data=t, vals=vv)
    r = nl.ndarray(shp, nl.float32, buffer=nl.sbuf)
    ri = nl.ndarray((P, 8), nl.uint32, buffer=nl.sbuf)
    nisa.match_replace8(dst=r, data=t, vals=vv, imm=imm, dst_idx=ri)
    for dst, src in ((o_max, m), (o_idx, i), (o_rep, r), (o_ridx, ri), (o_vidx, vi)):
        nisa.dma_copy(dst=dst, src=src)
    return o_max, o_idx, o_rep, o_ridx, o_vidx


def test_documented_duplicate_pairing():
    x = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    v = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    mx, idx, rep, ridx, vidx = top8_new(x, v, -5.0)
    np.testing.assert_array_equal(mx, [[8, 8, 8, 8, 8, 8, 8, 4]])
    np.testing.assert_array_equal(idx, [[4, 5, 6, 7, 8, 9, 10, 3]])  # ascending pairing
    np.testing.assert_array_equal(ridx, [[2, 10, 9, 8, 7, 6, 5, 4]])  # descending pairing
    np.testing.assert_array_equal(rep, [[1, 2, -5, 4, -5, -5, -5, -5, -5, -5, -5]])
    np.testing.assert_array_equal(vidx, [[2, 4, 5, 6, 7, 8, 9, 10]])


@pytest.mark.parametrize("shape", [(128, 300), (64, 4, 9)])
def test_top8_family_random_with_missing_values(shape):
    x = rng.integers(-20, 20, size=shape).astype(np.float32)  # many ties
    x2 = x.reshape(shape[0], -1)
    v = np.stack([x2[p, rng.integers(0, x2.shape[1], 8)] for p in range(shape[0])])
    v[:, 5] = 99.0  # never present: all-ones sentinel, nothing replaced
    mx, idx, rep, ridx, vidx = top8_new(x, v, 0.5)
    np.testing.assert_array_equal(mx, np_max8(x))
    np.testing.assert_array_equal(idx, np_find_index8(x, np_max8(x)))
    ref_rep, ref_ridx = np_match_replace8(x, v, 0.5)
    np.testing.assert_array_equal(rep, ref_rep)
    np.testing.assert_array_equal(ridx, ref_ridx)
    ref_v = np_find_index8(x, v)
    np.testing.assert_array_equal(vidx, np.where(ref_v == 0xFFFFFFFF, 0xFFFF, ref_v))
    assert (vidx[:, 5] == 0xFFFF).all()


@nki.jit
def select_reduce_new(pred, x, fvec, reverse):
    P, F = x.shape
    o = nl.ndarray((P, F), nl.bfloat16, buffer=nl.shared_hbm)
    o2 = nl.ndarray((P, F), nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((P, 1), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((P, 1), nl.float32, buffer=nl.shared_hbm)
    pt = nl.ndarray((P, F), nl.uint8, buffer=nl.sbuf)
    nisa.dma_copy(dst=pt, src=pred)
    xt = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    fv = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=fv, src=fvec)
    d = nl.ndarray((P, F), nl.bfloat16, buffer=nl.sbuf)
    r = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(
        dst=d,
        predicate=pt,
        on_true=xt,
        on_false=-7.0,
        reduce_res=r,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
        reverse_pred=reverse,
    )
    d2 = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    a = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(
        dst=d2,
        predicate=pt,
        on_true=xt,
        on_false=fv,
        reduce_res=a,
        reduce_cmd=nisa.reduce_cmd.reduce,  # folds into the register of the first
        reverse_pred=reverse,
    )
    for dst, src in ((o, d), (o2, d2), (red, r), (acc, a)):
        nisa.dma_copy(dst=dst, src=src)
    return o, o2, red, acc


@pytest.mark.parametrize("reverse", [False, True])
def test_select_reduce_scalar_vector_false_and_register(reverse):
    P, F = 96, 40
    pred = (rng.random((P, F)) < 0.3).astype(np.uint8)
    x = rng.standard_normal((P, F)).astype(np.float32)
    fvec = rng.standard_normal((P, 1)).astype(np.float32) + 5
    o, o2, red, acc = select_reduce_new(pred, x, fvec, reverse)
    sel = (pred != 0) != reverse
    r1 = np.where(sel, x, np.float32(-7.0))
    r2 = np.where(sel, x, fvec)
    ref_bf16 = (r1.view(np.uint32) + 0x7FFF + ((r1.view(np.uint32) >> 16) & 1)) >> 16 << 16
    of = np.asarray(o, np.float32)  # a bfloat16 (ml_dtypes) array
    np.testing.assert_array_equal(of.view(np.uint32), ref_bf16.astype(np.uint32))
    np.testing.assert_array_equal(o2, r2)
    np.testing.assert_array_equal(red[:, 0], of.max(1))
    np.testing.assert_array_equal(acc[:, 0], np.maximum(red[:, 0], r2.max(1)))


@nki.jit
def range_select_new(x, b0, b1, start):
    P, F = x.shape
    o = nl.ndarray((P, F), nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((P, 1), nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    t0 = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t0, src=b0)
    t1 = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t1, src=b1)
    d = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.range_select(
        dst=d,
        on_true_tile=xt,
        comp_op0=nl.greater_equal,
        comp_op1=nl.less,
        bound0=t0,
        bound1=t1,
        reduce_res=r,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
        range_start=start,
    )
    nisa.dma_copy(dst=o, src=d)
    nisa.dma_copy(dst=red, src=r)
    return o, red


def test_range_select_bounds_and_start():
    P, F, start = 128, 70, 10
    x = rng.standard_normal((P, F)).astype(np.float32)
    b0 = rng.integers(0, 60, (P, 1)).astype(np.float32)
    b1 = b0 + rng.integers(0, 40, (P, 1)).astype(np.float32)
    o, red = range_select_new(x, b0, b1, start)
    i = start + np.arange(F, dtype=np.float32)[None, :]
    ref = np.where((i >= b0) & (i < b1), x, FMIN)
    np.testing.assert_array_equal(o, ref)
    np.testing.assert_array_equal(red[:, 0], ref.max(1))


# ---------------------------------------------------------------- legacy API
@lnki.jit
def top8_legacy(x, v):
    t = lnl.load(x)
    vv = lnl.load(v)
    m = lisa.max8(src=t)
    i = lisa.nc_find_index8(data=t, vals=m)
    ix, iy = lnl.mgrid[0 : x.shape[0], 0:8]
    di = lnl.ndarray((x.shape[0], 8), dtype=lnl.uint32)
    r = lisa.nc_match_replace8(dst_idx=di[ix, iy], data=t, vals=vv, imm=-1.0)
    o_m = lnl.ndarray((x.shape[0], 8), dtype=lnl.float32, buffer=lnl.shared_hbm)
    o_i = lnl.ndarray((x.shape[0], 8), dtype=lnl.uint32, buffer=lnl.shared_hbm)
    o_r = lnl.ndarray(x.shape, dtype=lnl.float32, buffer=lnl.shared_hbm)
    o_d = lnl.ndarray((x.shape[0], 8), dtype=lnl.uint32, buffer=lnl.shared_hbm)
    lnl.store(o_m, value=m)
    lnl.store(o_i, value=i)
    lnl.store(o_r, value=r)
    lnl.store(o_d[ix, iy], value=di[ix, iy])
    return o_m, o_i, o_r, o_d


def test_legacy_top8_family():
    x = rng.integers(0, 50, (32, 128)).astype(np.float32)
    v = np.stack([x[p, rng.integers(0, 128, 8)] for p in range(32)])
    m, i, r, d = top8_legacy(x, v)
    np.testing.assert_array_equal(m, np_max8(x))
    np.testing.assert_array_equal(i, np_find_index8(x, np_max8(x)))
    ref_r, ref_d = np_match_replace8(x, v, -1.0)
    np.testing.assert_array_equal(r, ref_r)
    np.testing.assert_array_equal(d, ref_d)


@lnki.jit
def selects_legacy(pred, x, b0, b1):
    p = lnl.load(pred)
    t = lnl.load(x)
    d = lnl.ndarray(x.shape, dtype=lnl.float32)
    red = lnl.ndarray((x.shape[0], 1), dtype=lnl.float32)
    lisa.select_reduce(
        dst=d,
        predicate=p,
        on_true=t,
        on_false=lnl.fp32.min,
        reduce_res=red,
        reduce_cmd=lisa.reduce_cmd.reset_reduce,
    )
    rs = lisa.range_select(
        on_true_tile=t,
        comp_op0=np.greater,
        comp_op1=np.less_equal,
        bound0=lnl.load(b0),
        bound1=lnl.load(b1),
        reduce_cmd=lisa.reduce_cmd.reset_reduce,
        reduce_op=np.max,
        on_false_value=lnl.fp32.min,
    )
    o1 = lnl.ndarray(x.shape, dtype=lnl.float32, buffer=lnl.shared_hbm)
    o2 = lnl.ndarray((x.shape[0], 1), dtype=lnl.float32, buffer=lnl.shared_hbm)
    o3 = lnl.ndarray(x.shape, dtype=lnl.float32, buffer=lnl.shared_hbm)
    lnl.store(o1, value=d)
    lnl.store(o2, value=red)
    lnl.store(o3, value=rs)
    return o1, o2, o3


def test_legacy_select_reduce_and_range_select():
    P, F = 128, 64
    pred = (rng.random((P, F)) < 0.5).astype(np.uint8)
    x = rng.standard_normal((P, F)).astype(np.float32)
    b0 = rng.integers(-1, 30, (P, 1)).astype(np.float32)
    b1 = b0 + 20
    o1, o2, o3 = selects_legacy(pred, x, b0, b1)
    ref = np.where(pred != 0, x, FMIN)
    np.testing.assert_array_equal(o1, ref)
    np.testing.assert_array_equal(o2[:, 0], ref.max(1))
    i = np.arange(F, dtype=np.float32)[None, :]
    np.testing.assert_array_equal(o3, np.where((i > b0) & (i <= b1), x, FMIN))


# ---------------------------------------------------------------- checks
@nki.jit
def max8_too_small(x):
    o = nl.ndarray((x.shape[0], 8), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    m = nl.ndarray((x.shape[0], 8), nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=m, src=t[:, 0:4])
    nisa.dma_copy(dst=o, src=m)
    return o


def test_max8_needs_8_elements_per_partition():
    with pytest.raises(Exception, match=r"max8.*4 elements per partition; 8 to 16384"):
        max8_too_small(np.zeros((16, 8), np.float32))


@lnki.jit
def legacy_masked_top8(x, imm):
    n, m = x.shape
    t = lnl.load(x)
    ix, iy = lnl.mgrid[0:n, 0:m]
    # `and` between mask predicates reads as their conjunction (as in AWS's tracer)
    mx = lisa.max8(src=t[ix, iy], mask=(ix < n // 2 and iy < m // 2))
    idx = lisa.nc_find_index8(data=t[ix, iy], vals=mx, mask=(ix < n // 2 and iy < m // 2))
    rep = lisa.nc_match_replace8(
        data=t[ix, iy], vals=mx, imm=imm, mask=(ix < n // 2) & (iy < m // 2)
    )
    outs = []
    for tile in (mx, idx, rep):
        o = lnl.ndarray(tile.shape, dtype=tile.dtype, buffer=lnl.shared_hbm)
        lnl.store(o, value=tile)
        outs.append(o)
    return tuple(outs)


def test_legacy_masked_top8_family():
    x = rng.permutation(64 * 40).reshape(64, 40).astype(np.float32)  # distinct values
    mx, idx, rep = lnki.simulate_kernel(legacy_masked_top8, x, -1.0)
    sub = x[:32, :20]
    want = -np.sort(-sub, axis=1)[:, :8]
    np.testing.assert_array_equal(mx[:32], want)
    pos = np.argsort(-sub, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(idx[:32], pos)  # flat positions in the (unmasked) row
    r = sub.copy()
    np.put_along_axis(r, pos, -1.0, axis=1)
    np.testing.assert_array_equal(rep[:32, :20], r)
    # elements masked off are not written: the result tile's poison shows
    assert np.isnan(rep[32:]).all() and np.isnan(rep[:, 20:]).all()
    assert np.isnan(mx[32:]).all()


# ---------------------------------------------------------------- nl.rand, nl.gather_flattened
@lnki.jit
def rand_twice():
    a = lnl.rand((64, 300), dtype=lnl.float32)
    b = lnl.rand((64, 300), dtype=lnl.float32)
    oa = lnl.ndarray((64, 300), dtype=lnl.float32, buffer=lnl.shared_hbm)
    ob = lnl.ndarray((64, 300), dtype=lnl.float32, buffer=lnl.shared_hbm)
    lnl.store(oa, value=a)
    lnl.store(ob, value=b)
    return oa, ob


def test_rand_uniform_and_fresh_per_call_and_run():
    a, b = rand_twice()
    c, _ = rand_twice()
    for x in (a, b):
        assert (x >= 0).all() and (x < 1).all()
        assert abs(x.mean() - 0.5) < 0.01 and abs(x.var() - 1 / 12) < 0.005
        assert len(np.unique(x)) > 0.99 * x.size
    assert not np.array_equal(a, b) and not np.array_equal(a, c)


@nki.jit
def take_new(x, ix):
    o = nl.ndarray(ix.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    it = nl.ndarray(ix.shape, nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=it, src=ix)
    r = nl.gather_flattened(data=t, indices=it)
    nisa.dma_copy(dst=o, src=r)
    return o


def test_gather_flattened_and_out_of_range_index():
    x = rng.standard_normal((128, 4, 10)).astype(np.float32)
    ix = rng.integers(0, 40, (128, 17)).astype(np.int32)
    np.testing.assert_array_equal(
        take_new(x, ix), np.take_along_axis(x.reshape(128, 40), ix, axis=1)
    )
    ix[3, 5] = 40
    with pytest.raises(Exception, match="gather_flattened"):
        take_new(x, ix)


@nki.jit
def dropout_new(x, pv):
    o1 = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    p = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=p, src=pv)
    d1 = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.dropout(dst=d1, data=t, prob=0.3)
    d2 = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.dropout(dst=d2, data=t, prob=p)
    nisa.dma_copy(dst=o1, src=d1)
    nisa.dma_copy(dst=o2, src=d2)
    return o1, o2


@lnki.jit
def dropout_legacy(x):
    t = lnl.load(x)
    a = lisa.dropout(t, prob=0.3)
    b = lnl.dropout(t, 0.3)
    oa = lnl.ndarray(x.shape, dtype=lnl.float32, buffer=lnl.shared_hbm)
    ob = lnl.ndarray(x.shape, dtype=lnl.float32, buffer=lnl.shared_hbm)
    lnl.store(oa, value=a)
    lnl.store(ob, value=b)
    return oa, ob


def test_dropout_rates_both_generations():
    x = rng.random((128, 400)).astype(np.float32) + 1  # never 0 itself
    pv = np.where(np.arange(128) < 64, 0.0, 1.0).astype(np.float32)[:, None]
    d1, d2 = dropout_new(x, pv)
    outs = [d1, *dropout_legacy(x)]
    for d in outs:
        kept = d != 0
        np.testing.assert_array_equal(d[kept], x[kept])  # not rescaled
        assert abs((~kept).mean() - 0.3) < 0.01
    assert not np.array_equal(outs[1], outs[2])  # separate draws
    np.testing.assert_array_equal(d2[:64], x[:64])  # prob 0 keeps everything
    assert (d2[64:] == 0).all()  # prob 1 drops everything


# ---------------------------------------------------------------- nc_stream_shuffle
MASK = [(i * 7 + 3) % 32 for i in range(32)]
MASK[4] = 255  # partition 4 of every quadrant keeps its value


@nki.jit
def shuffle_new(x, y):
    o = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    u = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=y)
    nisa.nc_stream_shuffle(dst=u, src=t, shuffle_mask=MASK)
    nisa.dma_copy(dst=o, src=u)
    return o


@lnki.jit
def shuffle_legacy_inplace(x):
    a = lnl.load(x)
    g = lnl.mgrid[0 : x.shape[0], 0 : x.shape[1]]
    lisa.nc_stream_shuffle(src=a[g.p, g.x], dst=a[g.p, g.x], shuffle_mask=MASK)
    o = lnl.ndarray(x.shape, dtype=lnl.float32, buffer=lnl.shared_hbm)
    lnl.store(o, value=a)
    return o


def np_shuffle(src, dst):
    out = dst.copy()
    for p in range(dst.shape[0]):
        q, i = divmod(p, 32)
        if MASK[i] != 255:
            out[p] = src[q * 32 + MASK[i]]
    return out


def test_stream_shuffle_quadrants_keep_and_in_place():
    x = rng.standard_normal((96, 20)).astype(np.float32)
    y = rng.standard_normal((96, 20)).astype(np.float32)
    np.testing.assert_array_equal(shuffle_new(x, y), np_shuffle(x, y))
    np.testing.assert_array_equal(shuffle_legacy_inplace(x), np_shuffle(x, x))
