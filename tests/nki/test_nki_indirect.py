"""Indirect DMA: rows of an HBM tensor chosen at run time by a (K, 1) int32
SBUF index tile, in both API generations: gather (indexed source), scatter
(indexed destination), oob_mode error (the run fails and names the
instruction) and skip (the row is left alone)."""

import re

import numpy as np
import pytest

import neuronxcc.nki as lnki
import neuronxcc.nki.isa as lnisa
import neuronxcc.nki.language as lnl
import nki
import nki.isa as nisa
import nki.language as nl

rng = np.random.default_rng(11)


@nki.jit
def gather(data, indices, skip=False):
    out = nl.ndarray((indices.shape[0], data.shape[1]), data.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray(indices.shape, nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    t = nl.ndarray((indices.shape[0], data.shape[1]), data.dtype, buffer=nl.sbuf)
    oob = nisa.oob_mode.skip if skip else nisa.oob_mode.error
    nisa.dma_copy(dst=t, src=data[idx, :], oob_mode=oob)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def scatter(rows, indices, dst):
    """out-parameter: dst[indices[p]] = rows[p]"""
    idx = nl.ndarray(indices.shape, nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    t = nl.ndarray(rows.shape, rows.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=rows)
    nisa.dma_copy(dst=dst[idx, :], src=t)


def test_gather_rows():
    data = rng.standard_normal((300, 48)).astype(np.float32)
    ind = rng.integers(0, 300, (128, 1)).astype(np.int32)  # repeats allowed
    np.testing.assert_array_equal(gather(data, ind), data[ind[:, 0]])
    # more indices than the tensor has rows
    small = data[:40]
    ind2 = rng.integers(0, 40, (96, 1)).astype(np.int32)
    np.testing.assert_array_equal(gather(small, ind2), small[ind2[:, 0]])


def test_scatter_rows():
    rows = rng.standard_normal((64, 32)).astype(np.float32)
    ind = rng.permutation(200)[:64].reshape(64, 1).astype(np.int32)
    dst = np.zeros((200, 32), np.float32)
    scatter(rows, ind, dst)
    want = np.zeros((200, 32), np.float32)
    want[ind[:, 0]] = rows
    np.testing.assert_array_equal(dst, want)


def test_out_of_range_index_error_and_skip():
    data = rng.standard_normal((50, 16)).astype(np.float32)
    ind = np.arange(128, dtype=np.int32).reshape(128, 1)  # rows 50.. do not exist
    # on the host: NumPy's IndexError (as AWS's simulator raises it), from
    # the run's error naming the kernel, the instruction and its line
    with pytest.raises(
        IndexError, match="^index 800 is out of bounds for axis 0 with size 800$"
    ) as e:
        gather(data, ind)
    assert isinstance(e.value.__cause__, ValueError)
    assert re.search(r"dma_copy at test_nki_indirect.py:\d+.*index tile", str(e.value.__cause__))
    got = gather(data, ind, True)
    np.testing.assert_array_equal(got[:50], data)
    assert np.isnan(got[50:]).all()  # skipped rows keep the new tile's poison


def test_index_tile_must_be_int_and_in_sbuf():
    @nki.jit
    def bad(data, indices):
        out = nl.ndarray((128, 16), data.dtype, buffer=nl.shared_hbm)
        idx = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=indices)
        t = nl.ndarray((128, 16), data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=data[idx, :])
        nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.raises(nki.NkiError, match="int32 or uint32"):
        bad(np.zeros((10, 16), np.float32), np.zeros((128, 1), np.float32))


@lnki.jit
def legacy_embedding(table, tokens):
    out = lnl.ndarray((tokens.shape[0], table.shape[1]), table.dtype, buffer=lnl.shared_hbm)
    ip = lnl.arange(tokens.shape[0])[:, None]
    iy = lnl.arange(table.shape[1])[None, :]
    idx = lnl.load(tokens[ip, lnl.arange(1)[None, :]])
    rows = lnl.load(table[idx, iy])
    lnl.store(out[ip, iy], value=rows)
    return out


def test_legacy_load_with_index_tile():
    table = rng.standard_normal((1000, 64)).astype(np.float32)
    tokens = rng.integers(0, 1000, (128, 1)).astype(np.int32)
    got = lnki.simulate_kernel(legacy_embedding, table, tokens)
    np.testing.assert_array_equal(got, table[tokens[:, 0]])


@lnki.jit
def legacy_gather_skip(table):
    out = lnl.ndarray((64, 32), table.dtype, buffer=lnl.shared_hbm)
    ip, iy = lnl.mgrid[0:64, 0:32]
    idx = lnisa.iota(5 * lnl.arange(64)[:, None], dtype=np.int32)  # past the end from 20 on
    t = lnisa.memset(shape=(64, 32), value=-1.0, dtype=table.dtype)
    lnisa.dma_copy(src=table[idx, iy], dst=t[ip, iy], oob_mode=lnisa.oob_mode.skip)
    lnl.store(out[ip, iy], value=t)
    return out


def test_legacy_dma_copy_oob_skip():
    table = rng.standard_normal((100, 32)).astype(np.float32)
    got = lnki.simulate_kernel(legacy_gather_skip, table)
    want = np.full((64, 32), -1.0, np.float32)
    want[:20] = table[0:100:5]
    np.testing.assert_array_equal(got, want)


def test_dma_copy_rmw_raises():
    @nki.jit
    def rmw(a):
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t, dst_rmw_op=nl.add)
        return out

    with pytest.raises(nki.NkiError, match="dst_rmw_op"):
        rmw(np.zeros((128, 8), np.float32))


@nki.jit
def scatter_add(rows, indices, dst):
    idx = nl.ndarray((rows.shape[0], 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    t = nl.ndarray(rows.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=rows)
    nisa.dma_copy(dst=dst[idx, :], src=t, dst_rmw_op=nl.add)


@lnki.jit
def legacy_scatter_max(rows, indices, dst):
    idx = lnl.load(indices)
    t = lnl.load(rows)
    iy = lnl.arange(rows.shape[1])[None, :]
    lnisa.dma_copy(dst=dst[idx, iy], src=t, dst_rmw_op=np.maximum)


def test_dma_copy_rmw_scatter_accumulates_repeated_rows():
    rows = rng.standard_normal((128, 24)).astype(np.float32)
    ind = rng.integers(0, 40, (128, 1)).astype(np.int32)  # many repeats
    dst = rng.standard_normal((40, 24)).astype(np.float32)
    want = dst.astype(np.float64)
    np.add.at(want, ind[:, 0], rows)
    got = dst.copy()
    scatter_add(rows, ind, got)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    got = dst.copy()
    legacy_scatter_max(rows, ind, got)
    want = dst.copy()
    np.maximum.at(want, ind[:, 0], rows)
    np.testing.assert_array_equal(got, want)


@lnki.jit
def legacy_masked_gather(table, tokens, n):
    # rows p >= n are masked off: their (out of range) indices are never
    # read, and the loaded tile keeps its memset value there
    out = lnl.ndarray((128, 64), table.dtype, buffer=lnl.shared_hbm)
    ip, iy = lnl.mgrid[0:128, 0:64]
    idx = lnl.load(tokens)
    t = lnisa.memset(shape=(128, 64), value=-1.0, dtype=table.dtype)
    t[ip, iy] = lnl.load(table[idx, iy], mask=ip < n)
    lnl.store(out[ip, iy], value=t)
    return out


def test_legacy_masked_load_with_index_tile():
    table = rng.standard_normal((1000, 64)).astype(np.float32)
    tokens = rng.integers(0, 1000, (128, 1)).astype(np.int32)
    tokens[100:] = 5000  # out of range, but masked off
    got = lnki.simulate_kernel(legacy_masked_gather, table, tokens, 100)
    np.testing.assert_array_equal(got[:100], table[tokens[:100, 0]])
    assert (got[100:] == -1).all()
    with pytest.raises(IndexError, match="out of bounds"):
        lnki.simulate_kernel(legacy_masked_gather, table, tokens, 101)


@lnki.jit
def legacy_masked_gather_free(table, tokens):
    out = lnl.ndarray((128, 64), table.dtype, buffer=lnl.shared_hbm)
    ip, iy = lnl.mgrid[0:128, 0:64]
    lnl.store(out[ip, iy], value=lnl.load(table[lnl.load(tokens), iy], mask=iy < 32))
    return out


def test_masked_gather_selects_rows_only():
    table = np.zeros((10, 64), np.float32)
    with pytest.raises(nki.NkiError, match="may only select partitions"):
        lnki.simulate_kernel(legacy_masked_gather_free, table, np.zeros((128, 1), np.int32))
