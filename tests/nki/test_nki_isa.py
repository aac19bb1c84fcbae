"""nki.isa (current API, dst first) against NumPy references, run on the
host (NumPy arrays in, NumPy arrays out)."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

rng = np.random.default_rng(0)


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_dma_copy_tensor_tensor_all_ops():
    ops = [
        nl.add,
        nl.subtract,
        nl.multiply,
        nl.maximum,
        nl.minimum,
        nl.divide,
        nl.greater,
        nl.less_equal,
        nl.equal,
        nl.power,
    ]
    refs = [
        np.add,
        np.subtract,
        np.multiply,
        np.maximum,
        np.minimum,
        np.divide,
        np.greater,
        np.less_equal,
        np.equal,
        np.power,
    ]

    @nki.jit
    def k(a, b):
        out = nl.ndarray((len(ops), 128, 64), nl.float32, buffer=nl.shared_hbm)
        at = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        bt = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a)
        nisa.dma_copy(dst=bt, src=b)
        for i, op in enumerate(ops):
            ct = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=ct, data1=at, data2=bt, op=op)
            nisa.dma_copy(dst=out[i], src=ct)
        return out

    a, b = np.abs(r(128, 64)) + 0.5, r(128, 64)
    got = k(a, b)
    for i, f in enumerate(refs):
        np.testing.assert_allclose(
            got[i], f(a, b).astype(np.float32), rtol=2e-6, atol=1e-6, err_msg=str(f)
        )


def test_tensor_scalar_vector_operand_and_reverse():
    @nki.jit
    def k(a, v):
        out = nl.ndarray((2, 128, 32), nl.float32, buffer=nl.shared_hbm)
        at, vt = nl.load(a), nl.load(v)
        t1 = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=t1, data=at, op0=nl.multiply, operand0=vt, op1=nl.add, operand1=2.0)
        t2 = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=t2, data=at, op0=nl.subtract, operand0=3.0, reverse0=True)
        nl.store(out[0], t1)
        nl.store(out[1], t2)
        return out

    a, v = r(128, 32), r(128, 1)
    got = k(a, v)
    np.testing.assert_allclose(got[0], a * v + 2.0, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[1], 3.0 - a, rtol=1e-6)


def test_activation_bias_scale_reduce():
    @nki.jit
    def k(a, bias):
        out = nl.ndarray((128, 48), nl.float32, buffer=nl.shared_hbm)
        red = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        at, bt = nl.load(a), nl.load(bias)
        o = nl.ndarray((128, 48), nl.float32, buffer=nl.sbuf)
        rr = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(
            dst=o, op=nl.exp, data=at, bias=bt, scale=0.5, reduce_op=nl.add, reduce_res=rr
        )
        nl.store(out, o)
        nl.store(red, rr)
        return out, red

    a, b = r(128, 48), r(128, 1)
    o, red = k(a, b)
    ref = np.exp(a * 0.5 + b)
    np.testing.assert_allclose(o, ref, rtol=1e-5)
    np.testing.assert_allclose(red, ref.sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("accumulate", [None, True, False])
def test_nc_matmul_psum_semantics(accumulate):
    @nki.jit
    def k(a, b, c):
        out = nl.ndarray((64, 96), nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((64, 96), nl.float32, buffer=nl.psum)
        if accumulate is True:
            nisa.nc_matmul(
                dst=ps, stationary=nl.load(c[0:128]), moving=nl.load(b[0:128]), accumulate=False
            )
        for i in nl.affine_range(2):
            at = nl.load(a[nl.ds(i * 128, 128), :])
            bt = nl.load(b[nl.ds(i * 128, 128), :])
            nisa.nc_matmul(dst=ps, stationary=at, moving=bt, accumulate=accumulate)
        o = nl.ndarray((64, 96), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nl.store(out, o)
        return out

    a, b, c = r(256, 64), r(256, 96), r(256, 64)
    got = k(a, b, c)
    full = a.T @ b
    last = a[128:].T @ b[128:]
    ref = {None: full, True: c[:128].T @ b[:128] + full, False: last}[accumulate]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_transposes_and_reduce():
    @nki.jit
    def k(a):
        t_out = nl.ndarray((64, 128), nl.float32, buffer=nl.shared_hbm)
        v_out = nl.ndarray((16, 32), nl.float32, buffer=nl.shared_hbm)
        red = nl.ndarray((128, 3), nl.float32, buffer=nl.shared_hbm)
        at = nl.load(a)
        ps = nl.ndarray((64, 128), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=ps, data=at)
        o = nl.ndarray((64, 128), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nl.store(t_out, o)
        vt = nl.ndarray((16, 32), nl.float32, buffer=nl.sbuf)
        nisa.nc_transpose(dst=vt, data=at[0:32, 0:16], engine=nisa.engine.vector)
        nl.store(v_out, vt)
        rr = nl.ndarray((128, 3), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=rr[:, 0:1], op=nl.add, data=at, axis=1)
        nisa.tensor_reduce(dst=rr[:, 1:2], op=nl.maximum, data=at, axis=1, negate=True)
        nisa.tensor_reduce(dst=rr[:, 2:3], op=nl.minimum, data=at, axis=(1,), keepdims=True)
        nl.store(red, rr)
        return t_out, v_out, red

    a = r(128, 64)
    t, v, red = k(a)
    np.testing.assert_array_equal(t, a.T)
    np.testing.assert_array_equal(v, a[:32, :16].T)
    np.testing.assert_allclose(red[:, 0], a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(red[:, 1], -a.max(1))
    np.testing.assert_array_equal(red[:, 2], a.min(1))


def test_iota_affine_select_memset():
    @nki.jit
    def k(a):
        io = nl.ndarray((128, 16), nl.int32, buffer=nl.shared_hbm)
        sel = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 16), nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=t, pattern=[[3, 16]], offset=5, channel_multiplier=100)
        nl.store(io, t)
        at = nl.load(a)
        s = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.affine_select(
            dst=s,
            pattern=[[-1, 128]],
            channel_multiplier=1,
            on_true_tile=at,
            on_false_value=-7.0,
            cmp_op=nl.greater_equal,
            offset=0,
        )
        nl.store(sel, s)
        return io, sel

    a = r(128, 128)
    io, sel = k(a)
    p, f = np.mgrid[0:128, 0:16]
    np.testing.assert_array_equal(io, 5 + 100 * p + 3 * f)
    np.testing.assert_array_equal(sel, np.where(np.tril(np.ones((128, 128))) > 0, a, -7.0))


def test_scan_stt_predicated_partition_reduce_bn():
    @nki.jit
    def k(a, b, m):
        outs = nl.ndarray((4, 128, 64), nl.float32, buffer=nl.shared_hbm)
        pr = nl.ndarray((1, 64), nl.float32, buffer=nl.shared_hbm)
        bn = nl.ndarray((128, 2), nl.float32, buffer=nl.shared_hbm)
        at, bt, mt = nl.load(a), nl.load(b), nl.load(m)
        sc = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(
            dst=sc, data0=at, data1=bt, initial=0.0, op0=nl.multiply, op1=nl.add
        )
        nl.store(outs[0], sc)
        st = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(
            dst=st, data=at, op0=nl.multiply, operand0=2.0, op1=nl.subtract, operand1=bt
        )
        nl.store(outs[1], st)
        pc = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=pc, src=bt)
        nisa.tensor_copy_predicated(dst=pc, src=at, predicate=mt)
        nl.store(outs[2], pc)
        ex = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=ex, data=bt)
        nl.store(outs[3], ex)
        p = nl.ndarray((1, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(dst=p, op=nl.add, data=at)
        nl.store(pr, p)
        stats = nl.ndarray((128, 12), nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=stats[:, 0:6], data=at[:, 0:32])
        nisa.bn_stats(dst=stats[:, 6:12], data=at[:, 32:64])
        mv = nl.ndarray((128, 2), nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=stats)
        nl.store(bn, mv)
        return outs, pr, bn

    a, b = r(128, 64), r(128, 64) + 3.0
    m = (rng.random((128, 64)) > 0.5).astype(np.float32)
    outs, pr, bn = k(a, b, m)
    ref = np.zeros_like(a)
    prev = np.zeros(128, np.float32)
    for i in range(64):
        prev = a[:, i] * prev + b[:, i]
        ref[:, i] = prev
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[1], a * 2 - b, rtol=1e-6)
    np.testing.assert_array_equal(outs[2], np.where(m != 0, a, b))
    np.testing.assert_allclose(outs[3], 1 / b, rtol=1e-6)
    np.testing.assert_allclose(pr[0], a.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bn[:, 0], a.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn[:, 1], a.var(1), rtol=1e-5)


def test_dma_transpose_ap_and_views():
    @nki.jit
    def k(a):
        out = nl.ndarray((32, 128), nl.float32, buffer=nl.shared_hbm)
        flat = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((32, 128), nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        s = nl.ndarray((128, 4, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=a.reshape((128, 4, 8)))
        nisa.dma_copy(dst=flat, src=s.reshape((128, 32)))
        return out, flat

    a = r(128, 32)
    out, flat = k(a)
    np.testing.assert_array_equal(out, a.T)
    np.testing.assert_array_equal(flat, a)


def test_tensor_scalar_cumulative():
    # documented: reg = op1(op0(x, imm0), reg); dst[i] = reg, per partition
    # along the free axis; reg starts at op1's identity (reset_reduce) or imm1
    cases = [
        (nl.multiply, 2.0, nl.add, {}, lambda x: np.cumsum(2 * x, 1)),
        (nl.subtract, 0.5, nl.maximum, {}, lambda x: np.maximum.accumulate(x - 0.5, 1)),
        (nl.add, 0.0, nl.minimum, {}, lambda x: np.minimum.accumulate(x, 1)),
        (
            nl.add,
            1.0,
            nl.add,
            {"reduce_cmd": nisa.reduce_cmd.load_reduce, "imm1": 10.0},
            lambda x: 10 + np.cumsum(x + 1, 1),
        ),
        (nl.subtract, 3.0, nl.add, {"reverse0": True}, lambda x: np.cumsum(3 - x, 1)),
        (nl.multiply, 1.0, nl.multiply, {}, lambda x: np.cumprod(x, 1)),
    ]

    def sub_ref(x):  # op1 = subtract: reg = t - reg
        out, reg = np.empty_like(x), np.zeros(x.shape[0], np.float32)
        for i in range(x.shape[1]):
            reg = x[:, i] * 2 - reg
            out[:, i] = reg
        return out

    cases.append((nl.multiply, 2.0, nl.subtract, {}, sub_ref))

    @nki.jit
    def k(a):
        out = nl.ndarray((len(cases), 128, 40), nl.float32, buffer=nl.shared_hbm)
        at = nl.ndarray((128, 40), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a)
        for i, (op0, imm0, op1, kw, _) in enumerate(cases):
            ct = nl.ndarray((128, 40), nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(dst=ct, src=at, op0=op0, op1=op1, imm0=imm0, **kw)
            nisa.dma_copy(dst=out[i], src=ct)
        return out

    a = (r(128, 40) * 0.5 + 1.0).astype(np.float32)
    got = k(a)
    for i, case in enumerate(cases):
        np.testing.assert_allclose(got[i], case[4](a), rtol=1e-5, atol=1e-5, err_msg=str(i))


def test_tensor_scalar_cumulative_reduce_continues_the_register():
    @nki.jit
    def carry(a, first):
        out = nl.ndarray((2, 128, 8), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        u = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        v = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        if first:
            nisa.tensor_scalar_cumulative(dst=u, src=t, op0=nl.multiply, op1=nl.add, imm0=2.0)
            nisa.dma_copy(dst=out[0], src=u)
        nisa.tensor_scalar_cumulative(
            dst=v, src=t, op0=nl.add, op1=nl.add, imm0=0.0, reduce_cmd=nisa.reduce_cmd.reduce
        )
        nisa.dma_copy(dst=out[1], src=v)
        return out

    a = r(128, 8)
    got = carry(a, True)
    c0 = np.cumsum(2 * a, axis=1)
    np.testing.assert_allclose(got[0], c0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], c0[:, -1:] + np.cumsum(a, axis=1), rtol=1e-5, atol=1e-5)
    # reduce with no earlier cumulative: the register is new memory (poison)
    assert np.isnan(carry(a, False)[1]).all()

    @nki.jit
    def i32(a):
        out = nl.ndarray((128, 8), nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_scalar_cumulative(dst=t, src=t, op0=nl.add, op1=nl.add, imm0=1.0)
        nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.raises(nki.NkiError, match="int32 tiles are not supported"):
        i32(np.zeros((128, 8), np.int32))
