"""fp8 double-row matmul (nc_matmul perf_mode) and mod_alloc's rotating
block tiles (num_free_tiles / num_bank_tiles), in both API generations,
against NumPy."""

import numpy as np
import pytest

import neuronxcc.nki as lnki
import neuronxcc.nki.compiler as lncc
import neuronxcc.nki.isa as lnisa
import neuronxcc.nki.language as lnl
import nki
import nki.compiler as ncc
import nki.isa as nisa
import nki.language as nl

rng = np.random.default_rng(7)


def _fp8(shape, dtype):
    # values exactly representable in the fp8 format: the reference sees what the kernel sees
    return (rng.standard_normal(shape) * 4).astype(dtype)


def _double_row_ref(a, b):
    # c[i, j] = sum over partition k and row l of a[k, l, i] * b[k, l, j], in float64
    return np.einsum("kli,klj->ij", a.astype(np.float64), b.astype(np.float64))


@pytest.mark.parametrize("mode", ["double_row", nisa.matmul_perf_mode.double_row])
def test_double_row_new_api(mode):
    @nki.jit
    def k(a, b):
        out = nl.ndarray((a.shape[2], b.shape[2]), nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((a.shape[2], b.shape[2]), nl.float32, buffer=nl.psum)
        for i in nl.affine_range(a.shape[0] // 128):
            at = nl.ndarray((128, 2, a.shape[2]), a.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, 2, b.shape[2]), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a[nl.ds(i * 128, 128)])
            nisa.dma_copy(dst=bt, src=b[nl.ds(i * 128, 128)])
            # accumulate=None: the first write overwrites, the rest accumulate
            nisa.nc_matmul(dst=ps, stationary=at, moving=bt, perf_mode=mode)
        o = nl.ndarray(ps.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nl.store(out, o)
        return out

    a, b = _fp8((256, 2, 96), nl.float8_e4m3), _fp8((256, 2, 384), nl.float8_e5m2)
    ref = _double_row_ref(a, b)
    got = k(a, b)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(got, ref.astype(np.float32), rtol=1e-6, atol=1e-3)


def test_double_row_new_api_accumulate_false_overwrites():
    @nki.jit
    def k(a, b):
        out = nl.ndarray((a.shape[2], b.shape[2]), nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((a.shape[2], b.shape[2]), nl.float32, buffer=nl.psum)
        for i in nl.sequential_range(2):
            at = nl.ndarray((128, 2, a.shape[2]), a.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, 2, b.shape[2]), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a[nl.ds(i * 128, 128)])
            nisa.dma_copy(dst=bt, src=b[nl.ds(i * 128, 128)])
            nisa.nc_matmul(
                dst=ps, stationary=at, moving=bt, perf_mode="double_row", accumulate=False
            )
        o = nl.ndarray(ps.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nl.store(out, o)
        return out

    a, b = _fp8((256, 2, 32), nl.float8_e4m3), _fp8((256, 2, 64), nl.float8_e4m3)
    # both rows of the last step only: overwrite means the whole 256-deep contraction
    np.testing.assert_allclose(k(a, b), _double_row_ref(a[128:], b[128:]), rtol=1e-6, atol=1e-3)


@lnki.jit
def _legacy_double_row(a, b):
    n, m = a.shape[2], b.shape[2]
    out = lnl.ndarray((n, m), dtype=lnl.float32, buffer=lnl.shared_hbm)
    ps = lnl.zeros((n, m), dtype=lnl.float32, buffer=lnl.psum)
    for i in lnl.affine_range(a.shape[0] // 128):
        ik, ir, ii = lnl.mgrid[0:128, 0:2, 0:n]
        jk, jr, jj = lnl.mgrid[0:128, 0:2, 0:m]
        at = lnl.load(a[i * 128 + ik, ir, ii])
        bt = lnl.load(b[i * 128 + jk, jr, jj])
        ps += lnisa.nc_matmul(at, bt, perf_mode="double_row_gen3")
    lnl.store(out, value=lnl.copy(ps, dtype=lnl.float32))
    return out


def test_double_row_legacy():
    a, b = _fp8((384, 2, 128), lnl.float8_e5m2), _fp8((384, 2, 512), lnl.float8_e4m3)
    ref = _double_row_ref(a, b)
    np.testing.assert_allclose(
        lnki.simulate_kernel(_legacy_double_row, a, b), ref, rtol=1e-6, atol=1e-3
    )


def test_double_row_rules():
    def kern(adt, rows, env_target=None):
        @nki.jit
        def k(a, b):
            ps = nl.ndarray((32, 64), nl.float32, buffer=nl.psum)
            at = nl.ndarray((128, rows, 32), adt, buffer=nl.sbuf)
            bt = nl.ndarray((128, rows, 64), nl.float8_e4m3, buffer=nl.sbuf)
            nisa.memset(dst=at, value=1.0)
            nisa.memset(dst=bt, value=1.0)
            nisa.nc_matmul(dst=ps, stationary=at, moving=bt, perf_mode="double_row")

        return k

    with pytest.raises(
        nki.NkiError, match=r"double-row mode takes fp8 operands \(stationary is bfloat16\)"
    ):
        kern(nl.bfloat16, 2)(np.zeros(1, np.float32), np.zeros(1, np.float32))
    with pytest.raises(nki.NkiError, match=r"double-row mode takes \[P, 2, F\] operands"):
        kern(nl.float8_e4m3, 3)(np.zeros(1, np.float32), np.zeros(1, np.float32))
    with pytest.raises(nki.NkiError, match="perf_mode='double_pixel' is not supported"):

        @nki.jit
        def dp(a):
            ps = nl.ndarray((32, 64), nl.float32, buffer=nl.psum)
            at = nl.ndarray((128, 32), nl.float8_e4m3, buffer=nl.sbuf)
            nisa.nc_matmul(dst=ps, stationary=at, moving=at, perf_mode="double_pixel")

        dp(np.zeros(1, np.float32))


def test_double_row_needs_v3(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    a, b = _fp8((128, 2, 16), lnl.float8_e4m3), _fp8((128, 2, 16), lnl.float8_e4m3)
    with pytest.raises(nki.NkiError, match="double-row mode needs NeuronCore v3 or later"):
        lnki.simulate_kernel(_legacy_double_row, a, b)


# -- mod_alloc: 16 PSUM block tiles rotating through one bank fit next to a
# second tensor; without the rotation the same kernel does not fit


def _transposes(alloc_a, alloc_b):
    nl_, nisa_legacy = lnl, lnisa

    @lnki.jit
    def k(x):
        out = nl_.ndarray((128, 16 * 128), dtype=nl_.float32, buffer=nl_.shared_hbm)
        ps = nl_.ndarray((16, nl_.par_dim(128), 512), dtype=nl_.float32, buffer=alloc_a)
        other = nl_.ndarray((1, nl_.par_dim(128), 512), dtype=nl_.float32, buffer=alloc_b)
        ip, jf = nl_.mgrid[0:128, 0:128]
        for m in nl_.sequential_range(16):
            t = nl_.load(x[ip, m * 128 + jf])
            ps[m, ip, jf] = nisa_legacy.nc_transpose(t, engine=nisa_legacy.engine.tensor)
            o = nl_.copy(ps[m, ip, jf], dtype=nl_.float32)
            nl_.store(out[ip, m * 128 + jf], value=o)
        other[0, ip, jf] = nisa_legacy.nc_transpose(
            nl_.load(x[ip, jf]), engine=nisa_legacy.engine.tensor
        )
        nl_.store(out[ip, jf], value=nl_.copy(other[0, ip, jf], dtype=nl_.float32))
        return out

    return k


@pytest.mark.parametrize("cc", [lncc, ncc], ids=["neuronxcc.nki.compiler", "nki.compiler"])
def test_mod_alloc_psum_bank_tiles_rotate(cc):
    x = rng.standard_normal((128, 16 * 128)).astype(np.float32)
    ref = np.concatenate([x[:, m * 128 : (m + 1) * 128].T for m in range(16)], axis=1)
    k = _transposes(
        cc.psum.mod_alloc(base_bank=0, num_bank_tiles=(1,)),
        cc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)),
    )
    assert "R " in k.specialize(x)[0].text  # the rotation reaches libtrn
    np.testing.assert_array_equal(lnki.simulate_kernel(k, x), ref)

    # one bank per block: 16 banks from bank 0, past the last
    k = _transposes(cc.psum.mod_alloc(base_bank=0), cc.psum.mod_alloc(base_bank=7))
    with pytest.raises(nki.NkiError, match=r"placed in banks \[0, 1, .*15\]; there are 8"):
        lnki.simulate_kernel(k, x)
    # placed by the compiler: 16 banks for the first alone
    k = _transposes(lnl.psum, lnl.psum)
    with pytest.raises(nki.NkiError, match="PSUM needs 16 banks here; there are 8"):
        lnki.simulate_kernel(k, x)


@pytest.mark.parametrize("tiles,fits", [((2,), True), ((4,), False), ((8,), False)])
def test_mod_alloc_sbuf_free_tiles_capacity(tiles, fits):
    # 8 block tiles of 64 KiB per partition; v3 SBUF holds 224 KiB: 2 buffers fit, 4 do not
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        big = nl.ndarray(
            (8, nl.par_dim(128), 16384),
            nl.float32,
            buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=tiles),
        )
        res = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        for i in nl.sequential_range(8):
            nisa.dma_copy(dst=big[i], src=a)
            nisa.tensor_reduce(dst=res[:, i : i + 1], op=nl.add, data=big[i], axis=1)
        nl.store(out, res)
        return out

    a = rng.standard_normal((128, 16384)).astype(np.float32)
    if fits:
        ref = np.repeat(a.astype(np.float64).sum(1, keepdims=True), 8, axis=1)
        np.testing.assert_allclose(k(a), ref, rtol=1e-4, atol=1e-3)
    else:
        with pytest.raises(nki.NkiError, match="SBUF needs"):
            k(a)


def test_mod_alloc_rejects_bad_tile_counts():
    @nki.jit
    def k(a):
        nl.ndarray(
            (4, nl.par_dim(128), 64),
            nl.float32,
            buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2, 2)),
        )

    with pytest.raises(nki.NkiError, match="mod_alloc gives 2 tile counts for 1 block dims"):
        k(np.zeros(1, np.float32))


# -- explicit PSUM placement: tensors a kernel puts in the same banks share
# them (counted once); the legacy `psum[...] = nc_matmul(...)` writes the
# PSUM tile itself (overwriting), without a PSUM result tile of its own


def _shared_banks(place_a, place_b):
    @lnki.jit
    def k(x, y):
        out = lnl.ndarray((2, 128, 512), dtype=lnl.float32, buffer=lnl.shared_hbm)
        a = lnl.ndarray((2, 4, lnl.par_dim(128), 512), dtype=lnl.float32, buffer=place_a)
        b = lnl.ndarray((2, 4, lnl.par_dim(128), 512), dtype=lnl.float32, buffer=place_b)
        xt, yt = lnl.load(x), lnl.load(y)
        for g in lnl.sequential_range(2):
            for t in lnl.sequential_range(4):
                a[g, t] = lnisa.nc_matmul(xt, yt)
                a[g, t] = lnisa.nc_matmul(xt, yt)  # `=` overwrites: one product, not two
                b[g, t] = lnisa.nc_matmul(xt, yt)
            s = lnl.add(lnl.copy(a[g, 3], dtype=lnl.float32), lnl.copy(b[g, 0], dtype=lnl.float32))
            lnl.store(out[g], value=s)
        return out

    return k


@pytest.mark.parametrize("cc", [lncc, ncc], ids=["neuronxcc.nki.compiler", "nki.compiler"])
def test_psum_tensors_placed_in_the_same_banks_share_them(cc):
    x = rng.standard_normal((128, 128)).astype(np.float32)
    y = rng.standard_normal((128, 512)).astype(np.float32)
    ref = 2 * (x.astype(np.float64).T @ y)
    banks = {(0, 0): 0, (0, 1): 1, (0, 2): 2, (0, 3): 3, (1, 0): 4, (1, 1): 5, (1, 2): 6, (1, 3): 7}

    def by_map(idx, pdim_size, fdim_size):
        assert pdim_size == 128 and fdim_size == 512 * 4
        return (banks[idx], 0, 0)

    k = _shared_banks(cc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2, 4)), cc.psum.alloc(by_map))
    assert "B " in k.specialize(x, y)[0].text
    np.testing.assert_allclose(
        lnki.simulate_kernel(k, x, y), np.stack([ref, ref]), rtol=1e-5, atol=1e-4
    )

    # the same tensors placed by the compiler: 8 + 8 banks
    k = _shared_banks(lnl.psum, lnl.psum)
    with pytest.raises(nki.NkiError, match="PSUM needs 16 banks here; there are 8"):
        lnki.simulate_kernel(k, x, y)


def test_psum_placement_past_the_last_bank():
    k = _shared_banks(ncc.psum.mod_alloc(base_bank=4, num_bank_tiles=(2, 4)), nl.psum)
    x, y = np.zeros((128, 128), np.float32), np.zeros((128, 512), np.float32)
    with pytest.raises(nki.NkiError, match=r"placed in banks \[4, 5, .*11\]; there are 8"):
        lnki.simulate_kernel(k, x, y)
