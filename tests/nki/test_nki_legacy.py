"""The legacy neuronxcc.nki front end: result-returning ISA calls,
arange/mgrid index expressions, mask=, par_dim, N-d SPMD grids,
simulate_kernel / baremetal / benchmark."""

import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

rng = np.random.default_rng(2)


@nki.jit
def _grid_add(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 256 + nl.arange(256)[None, :]
    a = nl.load(a_input[ix, iy])
    b = nl.load(b_input[ix, iy])
    nl.store(c_output[ix, iy], value=a + b)
    return c_output


def test_2d_grid_arange_simulate_kernel_and_baremetal():
    a, b = rng.random((256, 512), np.float32), rng.random((256, 512), np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(_grid_add[2, 2], a, b), a + b)
    np.testing.assert_array_equal(nki.baremetal(_grid_add)[2, 2](a, b), a + b)


def test_masks_over_loop_indices_and_aranges():
    @nki.jit(mode="simulation")
    def k(a_input):
        out = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
        n, m = a_input.shape
        for i in nl.affine_range((n + 127) // 128):
            ip, jf = nl.arange(128)[:, None], nl.arange(m)[None, :]
            t = nl.load(a_input[i * 128 + ip, jf], mask=(i * 128 + ip < n))
            e = nl.exp(t, mask=(i * 128 + ip < n))
            nl.store(out[i * 128 + ip, jf], value=e, mask=(i * 128 + ip < n) & (jf < m - 1))
        return out

    a = rng.random((300, 16), np.float32)
    got = k(a)
    np.testing.assert_allclose(got[:, :15], np.exp(a[:, :15]), rtol=1e-6)
    assert np.isnan(got[:, 15]).all()  # never written: the output is poisoned


def test_mgrid_iota_affine_select_and_result_returning_isa():
    @nki.jit(mode="simulation")
    def k(a, b):
        out = nl.ndarray((4, 128, 128), nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:128]
        t, u = nl.load(a), nl.load(b)
        nl.store(out[0], nisa.affine_select(i_p - i_f >= 0, t, -1.0))
        nl.store(out[1], nisa.iota(i_p * 2 + i_f, dtype=nl.float32))
        nl.store(out[2], nisa.tensor_tensor(t, u, op=np.multiply))
        nl.store(out[3], nisa.activation(np.exp, nisa.tensor_scalar(t, np.add, 1.0), scale=0.5))
        return out

    a, b = rng.random((128, 128), np.float32), rng.random((128, 128), np.float32)
    out = k(a, b)
    p, f = np.mgrid[0:128, 0:128]
    np.testing.assert_array_equal(out[0], np.where(p >= f, a, -1.0))
    np.testing.assert_array_equal(out[1], (2 * p + f).astype(np.float32))
    np.testing.assert_allclose(out[2], a * b, rtol=1e-6)
    np.testing.assert_allclose(out[3], np.exp((a + 1) * 0.5), rtol=1e-6)


def test_par_dim_block_tensor_psum_iadd_and_transpose():
    @nki.jit(mode="simulation")
    def k(a, b):  # a (K, M), b (K, N), K = 3 * 128
        out = nl.ndarray((a.shape[1], b.shape[1]), nl.float32, buffer=nl.shared_hbm)
        tr = nl.ndarray((b.shape[1], 128), nl.float32, buffer=nl.shared_hbm)
        blocks = nl.ndarray((3, nl.par_dim(128), a.shape[1]), nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(3):
            blocks[i] = nl.load(a[i * 128 : (i + 1) * 128, :])
        res = nl.zeros((a.shape[1], b.shape[1]), nl.float32, buffer=nl.psum)
        for i in nl.affine_range(3):
            res += nisa.nc_matmul(blocks[i], nl.load(b[i * 128 : (i + 1) * 128, :]))
        nl.store(out, nl.copy(res))
        nl.store(tr, nl.copy(nisa.nc_transpose(nl.load(b[0:128, :]))))
        return out, tr

    a, b = rng.random((384, 64), np.float32), rng.random((384, 96), np.float32)
    out, tr = k(a, b)
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-5)
    np.testing.assert_array_equal(tr, b[:128].T)


def test_benchmark_runs_and_reports_latency():
    @nki.benchmark(warmup=1, iters=3)
    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) * 2.0)
        return out

    a = rng.random((128, 8), np.float32)
    np.testing.assert_array_equal(k(a), a * 2)
    assert k.benchmark_result.nc_latency.get_latency_percentile(50) > 0


@nki.jit
def masked_window_sum(x):
    """a reduction whose mask ranges over the source's (3-d) index space, and
    the keyword form of reshape"""
    flat = x.reshape(shape=(128, 60))
    t = nl.load(flat.reshape(shape=(128, 6, 10)))
    ih = nl.arange(6)[None, :, None]
    iw = nl.arange(10)[None, None, :]
    s = nl.sum(t, axis=[-2, -1], mask=((ih < 4) & (iw < 7)))
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=s)
    return out


def test_reduction_mask_over_source_dims_and_reshape_keyword():
    x = np.random.default_rng(3).standard_normal((128, 6, 10)).astype(np.float32)
    got = masked_window_sum(x)
    np.testing.assert_allclose(got[:, 0], x[:, :4, :7].sum((1, 2)), rtol=1e-5, atol=1e-5)


@nki.jit
def int_division(a):
    t = nl.load(a)
    q = t / 7  # true division (NumPy's): float32, whatever the operands
    f = nl.floor(t / 7, dtype=nl.int32)
    oq = nl.ndarray(a.shape, dtype=q.dtype, buffer=nl.shared_hbm)
    of = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(oq, value=q)
    nl.store(of, value=f)
    return oq, of


def test_integer_true_division_gives_float32():
    a = np.arange(128 * 40, dtype=np.int32).reshape(128, 40) - 2000
    q, f = nki.simulate_kernel(int_division, a)
    assert q.dtype == np.float32
    np.testing.assert_array_equal(q, a.astype(np.float32) / np.float32(7))
    np.testing.assert_array_equal(f, np.floor(a / 7).astype(np.int32))


@nki.jit
def psum_iadd_uninitialised(a, b):
    # `res += nc_matmul(...)` into a fresh nl.ndarray PSUM tile (no zeros):
    # the matmul writes the tile with PSUM's rule, first write overwrites
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, ix = nl.mgrid[0:128, 0:128]
    jp, jx = nl.mgrid[0:128, 0:512]
    res = nl.ndarray((1, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    for m in nl.affine_range(a.shape[0] // 128):
        res[0] += nisa.nc_matmul(nl.load(a[m * 128 + ip, ix]), nl.load(b[m * 128 + jp, jx]))
    nl.store(out, value=nl.copy(res[0], dtype=nl.float32))
    return out


def test_psum_iadd_of_a_matmul_accumulates_from_the_first_write():
    a = np.random.rand(384, 128).astype(np.float32)
    b = np.random.rand(384, 512).astype(np.float32)
    got = nki.simulate_kernel(psum_iadd_uninitialised, a, b)
    np.testing.assert_allclose(got, a.T @ b, rtol=1e-5)


def test_psum_placement_hint_allocates_in_psum():
    import neuronxcc.nki.compiler as ncc

    @nki.jit
    def k(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
        ps += nisa.nc_matmul(nl.load(a), nl.load(b))
        nl.store(out, value=nl.copy(ps, dtype=nl.float32))
        return out

    a = np.random.rand(128, 128).astype(np.float32)
    b = np.random.rand(128, 512).astype(np.float32)
    e = k.specialize(a, b)[0]
    kinds = [ln.split()[2] for ln in e.text.split("\n") if ln.startswith("T ")]
    assert kinds.count("3") == 2  # ps and the matmul's own result tile: both PSUM (kind 3)
    np.testing.assert_allclose(nki.simulate_kernel(k, a, b), a.T @ b, rtol=1e-5)


def test_reduced_tile_broadcast_to_keeps_partition_axis():
    # tensor_reduce without keepdims gives a (P,) tile; broadcast_to((P, F))
    # spreads each partition's value along the free axis
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nisa.tensor_reduce(np.add, data=nl.load(a), axis=(1,), dtype=nl.float32)
        b = (1.0 / s).broadcast_to((128, 64))
        nl.store(out, value=nl.copy(b, dtype=nl.float32))
        return out

    a = rng.random((128, 32), np.float32) + 0.5
    ref = np.broadcast_to(1.0 / a.astype(np.float64).sum(1, keepdims=True), (128, 64))
    np.testing.assert_allclose(nki.simulate_kernel(k, a), ref, rtol=1e-6)
