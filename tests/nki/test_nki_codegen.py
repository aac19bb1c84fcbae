"""The fast paths of the generated C (libtrn/src/nki/render.c, parallel.c):
loops spread over the device's threads only where iterations are
independent, lane reductions with ragged tails, row copies, tile products
through libtrn's matmul (float32 as it lies, other dtypes staged), bn_stats
in lanes. Each against NumPy, with the loop decisions read from the source."""

import numpy as np
import torch

import nki
import nki.isa as nisa
import nki.language as nl

rng = np.random.default_rng(7)


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def source(kernel, *args):
    return kernel.specialize(*args)[0].prog.source


@nki.jit
def rowwise(x):
    """per 128-row tile: out = exp(x - max) and the row sums: independent tiles"""
    R, F = x.shape
    out = nl.ndarray((R, F), nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((R, 1), nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(R // 128):
        t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(i * 128, 128), :])
        m = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=m, op=nl.maximum, data=t, axis=1, negate=True)
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=t, op=nl.exp, data=t, bias=m, reduce_op=nl.add, reduce_res=s)
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=t)
        nisa.dma_copy(dst=sums[nl.ds(i * 128, 128), :], src=s)
    return out, sums


def test_independent_tiles_run_as_parallel_loop_with_ragged_lanes():
    x = r(512, 100)  # 100 = 6 lanes of 16 and a tail of 4
    assert "rt->pfor" in source(rowwise, x)
    out, sums = rowwise(x)
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(sums, ref.sum(1, keepdims=True), rtol=1e-5)


@nki.jit
def accumulate(x):
    """acc (allocated before the loop) += each tile: a loop-carried tile"""
    R, F = x.shape
    out = nl.ndarray((128, F), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for i in nl.affine_range(R // 128):
        t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(i * 128, 128), :])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def last_wins(x):
    """every iteration writes the same output rows: the last one stays"""
    R, F = x.shape
    out = nl.ndarray((128, F), nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(R // 128):
        t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(i * 128, 128), :])
        nisa.dma_copy(dst=out, src=t)
    return out


def test_dependent_loops_stay_serial():
    x = r(1024, 48)
    assert "rt->pfor" not in source(accumulate, x)
    np.testing.assert_allclose(accumulate(x), x.reshape(8, 128, 48).sum(0), rtol=1e-5, atol=1e-5)
    assert "rt->pfor" not in source(last_wins, x)
    np.testing.assert_array_equal(last_wins(x), x[-128:])


@nki.jit
def shift_tiles(src, dst):
    """out-parameter kernel: dst tile i = src tile i + 1"""
    R, F = src.shape
    for i in nl.affine_range(R // 128 - 1):
        t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src[nl.ds((i + 1) * 128, 128), :])
        nisa.dma_copy(dst=dst[nl.ds(i * 128, 128), :], src=t)


def test_aliased_arguments_run_serially():
    # one array as both arguments: iteration i must read tile i + 1 before
    # iteration i + 1 overwrites it, as when the loop runs in order
    x = r(1024, 32)
    assert "rt->pfor" in source(shift_tiles, x, np.empty_like(x))
    want = x.copy()
    want[:-128] = x[128:]
    shift_tiles(x, x)
    np.testing.assert_array_equal(x, want)


@nki.jit
def tiled_matmul(a_t, b):
    """a_t (K, M), b (K, N) of any dtype: a_t.T @ b, K accumulated in PSUM"""
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        ps = nl.ndarray((128, N), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // 128):
            at = nl.ndarray((128, 128), a_t.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[nl.ds(k * 128, 128), nl.ds(m * 128, 128)])
            bt = nl.ndarray((128, N), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=bt, src=b[nl.ds(k * 128, 128), :])
            nisa.nc_matmul(dst=ps, stationary=at, moving=bt)
        o = nl.ndarray((128, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nisa.dma_copy(dst=out[nl.ds(m * 128, 128), :], src=o)
    return out


def test_matmul_tiles_float32_and_staged_bfloat16():
    a, b = r(384, 256), r(384, 200)
    np.testing.assert_allclose(tiled_matmul(a, b), a.T @ b, rtol=1e-4, atol=1e-3)
    assert "rt->matmul" in source(tiled_matmul, a, b)
    a16, b16 = torch.from_numpy(a).bfloat16(), torch.from_numpy(b).bfloat16()
    want = a16.double().T @ b16.double()
    np.testing.assert_allclose(tiled_matmul(a16, b16).numpy(), want.numpy(), rtol=1e-4, atol=1e-3)


@nki.jit
def bn(x):
    P, F = x.shape
    out = nl.ndarray((P, 2), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    st = nl.ndarray((P, 6), nl.float32, buffer=nl.sbuf)
    nisa.bn_stats(dst=st, data=t)
    mv = nl.ndarray((P, 2), nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(dst=mv, data=st)
    nisa.dma_copy(dst=out, src=mv)
    return out


def test_bn_stats_lanes_with_tail():
    x = r(128, 37) * 3 + 5
    got = bn(x)
    np.testing.assert_allclose(got[:, 0], x.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 1], x.var(1), rtol=1e-5)


@nki.jit
def half_written(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[:, 0:32], src=a)
    u = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=u)
    return out


def test_poison_kept_unless_the_next_instruction_writes_everything():
    # t: only half written next, so its other half keeps the NaN poison; u is
    # written whole by the next instruction, which may skip its fill
    a = r(128, 32)
    src = source(half_written, a)
    assert src.count("poison(T") == 1
    got = half_written(a)
    np.testing.assert_array_equal(got[:, :32], a * 2)
    assert np.isnan(got[:, 32:]).all()


@nki.jit
def overlapping_psum(a, b):
    """two products into overlapping PSUM columns: the overlap accumulates,
    the rest of each is its first write"""
    out = nl.ndarray((128, 384), nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a)
    bt = nl.ndarray((128, 256), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=bt, src=b)
    ps = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps[:, 0:256], stationary=at, moving=bt)
    nisa.nc_matmul(dst=ps[:, 128:384], stationary=at, moving=bt)
    o = nl.ndarray((128, 384), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=ps[:, 0:384])
    nisa.dma_copy(dst=out, src=o)
    return out


def test_matmul_into_partly_written_psum():
    a, b = r(128, 128), r(128, 256)
    p = a.T @ b
    want = np.concatenate([p[:, :128], p[:, 128:] + p[:, :128], p[:, 128:]], 1)
    np.testing.assert_allclose(overlapping_psum(a, b), want, rtol=1e-4, atol=1e-3)


@nki.jit
def nested(x):
    """an outer loop that stays serial (it accumulates into acc) around an
    inner loop of independent tiles that uses the outer index"""
    B, R, F = x.shape
    out = nl.ndarray((B, R, F), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for b in nl.sequential_range(B):
        for i in nl.affine_range(R // 128):
            t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[b, nl.ds(i * 128, 128), :])
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out[b, nl.ds(i * 128, 128), :], src=t)
        t0 = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t0, src=x[b, 0:128, :])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t0, op=nl.add)
    nisa.dma_copy(dst=out[0, 0:128, :], src=acc)
    return out


def test_parallel_loop_inside_serial_loop_sees_the_outer_index():
    x = r(3, 512, 24)
    src = source(nested, x)
    assert src.count("rt->pfor") == 1
    want = x * 2
    want[0, :128] = x[:, :128].sum(0)
    np.testing.assert_allclose(nested(x), want, rtol=1e-6, atol=1e-6)


@nki.jit
def stats_two_layouts(x):
    """bn_stats of the same values read contiguously (GCC-vector path) and
    every other element of a wider tile (the generic path)"""
    P, F = x.shape
    out = nl.ndarray((P, 12), nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    w = nl.ndarray((P, 2 * F), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=w, value=0.0)
    nisa.dma_copy(dst=w.ap([[2 * F, P], [2, F]]), src=x)
    st = nl.ndarray((P, 12), nl.float32, buffer=nl.sbuf)
    nisa.bn_stats(dst=st[:, 0:6], data=a)
    nisa.bn_stats(dst=st[:, 6:12], data=w.ap([[2 * F, P], [2, F]]))
    nisa.dma_copy(dst=out, src=st)
    return out


def test_bn_stats_same_sums_in_both_layouts_and_accurate():
    # 600 = two 256-element blocks, one block of 64 and a tail of 24
    x = (rng.standard_normal((128, 600)) * 0.01 + 100).astype(np.float32)
    src = source(stats_two_layouts, x)
    assert "nki_v16 A0" in src and "float A[32]" in src  # both paths
    out = stats_two_layouts(x)
    np.testing.assert_array_equal(out[:, 0:6].view(np.int32), out[:, 6:12].view(np.int32))
    x64 = x.astype(np.float64)
    np.testing.assert_array_equal(out[:, 0], 600)
    np.testing.assert_allclose(out[:, 1], x64.mean(1), rtol=1e-7)
    np.testing.assert_allclose(out[:, 2], x64.var(1), rtol=1e-4)
