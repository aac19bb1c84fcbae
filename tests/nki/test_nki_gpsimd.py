"""GpSimd-engine instructions recorded from existing ones: sequence_bounds,
local_gather and nc_n_gather, both API generations, against NumPy
references written from the instructions' documented semantics."""

import numpy as np
import pytest

import neuronxcc.nki as lnki
import neuronxcc.nki.isa as lnisa
import neuronxcc.nki.language as lnl
import nki
import nki.isa as nisa
import nki.language as nl
from nki import NkiError

rng = np.random.default_rng(0)


def bounds_ref(seq):
    """[start, end) of each element's run of equal ids; id 0: (n, -1)."""
    n = len(seq)
    start, end = np.zeros(n), np.zeros(n)
    for i in range(n):
        j = i
        while j > 0 and seq[j - 1] == seq[i]:
            j -= 1
        k = i
        while k + 1 < n and seq[k + 1] == seq[i]:
            k += 1
        start[i], end[i] = (n, -1) if seq[i] == 0 else (j, k + 1)
    return np.stack([start, end])


@nki.jit
def bounds_new(seg):
    out = nl.ndarray((seg.shape[0], 2, seg.shape[1]), seg.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(out.shape, seg.dtype, buffer=nl.sbuf)
    nisa.sequence_bounds(dst=t, segment_ids=nl.load(seg))
    nl.store(out, t)
    return out


@lnki.jit
def bounds_legacy(seg):
    out = lnl.ndarray((seg.shape[0], 2, seg.shape[1]), dtype=seg.dtype, buffer=lnl.shared_hbm)
    lnl.store(out, lnisa.sequence_bounds(segment_ids=lnl.load(seg)))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_sequence_bounds_both_generations(dtype):
    seqs = [
        [0, 1, 1, 2, 2, 2, 0, 3, 3],  # the documented example
        [5] * 9,
        [0] * 9,
        [1, 2, 1, 0, 0, 4, 4, 4, 7],
    ]
    seg = np.array(seqs, dtype=dtype)
    want = np.stack([bounds_ref(s) for s in seqs]).astype(dtype)
    np.testing.assert_array_equal(
        want[0], [[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]
    )
    np.testing.assert_array_equal(nki.simulate(bounds_new)(seg), want)
    np.testing.assert_array_equal(lnki.simulate_kernel(bounds_legacy, seg), want)
    long = np.sort(rng.integers(0, 40, (1, 512))).astype(dtype)
    np.testing.assert_array_equal(bounds_new(long), bounds_ref(long[0])[None].astype(dtype))


def gather_ref(src, index, E, nv):
    """Each 16-partition group: its index rows flattened partition-first,
    the first nv offsets, E elements of each partition's own flat row."""
    P = src.shape[0]
    flat = src.reshape(P, -1)
    out = np.empty((P, nv, E), src.dtype)
    for c in range(P // 16):
        offs = index[16 * c : 16 * c + 16].flatten(order="F")[:nv].astype(np.int64)
        pos = offs[:, None] + np.arange(E)
        out[16 * c : 16 * c + 16] = flat[16 * c : 16 * c + 16][:, pos]
    return out


@nki.jit
def gather_new(src, index, E, nv):
    out = nl.ndarray((src.shape[0], nv * E), src.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((src.shape[0], nv * E), src.dtype, buffer=nl.sbuf)
    nisa.local_gather(
        dst=t,
        src_buffer=nl.load(src),
        index=nl.load(index),
        num_elem_per_idx=E,
        num_valid_indices=nv,
    )
    nl.store(out, t)
    return out


@lnki.jit
def gather_legacy(src, index, E, nv):
    g = lnisa.local_gather(lnl.load(src), lnl.load(index), E, nv)
    out = lnl.ndarray(g.shape, dtype=src.dtype, buffer=lnl.shared_hbm)
    lnl.store(out, g)
    return out


@pytest.mark.parametrize("P,K,E,nv", [(128, 4, 4, 64), (32, 3, 1, 40), (16, 2, 8, 5)])
def test_local_gather_both_generations(P, K, E, nv):
    src = rng.standard_normal((P, 64, 8)).astype(np.float32)
    per_core = rng.integers(0, 512 // E, (16, K)) * E
    index = np.concatenate([np.roll(per_core, c, 0) for c in range(P // 16)]).astype(np.uint16)
    want = gather_ref(src, index, E, nv)
    np.testing.assert_array_equal(nki.simulate(gather_new)(src, index, E, nv), want.reshape(P, -1))
    got = lnki.simulate_kernel(gather_legacy, src, index, E, nv)
    shape = (P, K, 16, E) if nv == 16 * K else (P, nv, E)
    assert got.shape == shape
    np.testing.assert_array_equal(got.reshape(P, nv, E), want)


def test_local_gather_rules():
    src = np.zeros((24, 8), np.float32)
    with pytest.raises(NkiError, match="multiple of 16"):
        nki.simulate(gather_new)(src, np.zeros((24, 2), np.uint16), 1, 4)
    with pytest.raises(NkiError, match="num_elem_per_idx"):
        nki.simulate(gather_new)(src[:16], np.zeros((16, 2), np.uint16), 3, 4)
    with pytest.raises(NkiError, match="integers"):
        nki.simulate(gather_new)(src[:16], np.zeros((16, 2), np.float32), 1, 4)
    with pytest.raises(NkiError, match="num_valid_indices"):
        nki.simulate(gather_new)(src[:16], np.zeros((16, 2), np.uint16), 1, 33)


def test_nc_n_gather():
    @nki.jit
    def k(data, idx):
        out = nl.ndarray(idx.shape, data.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(idx.shape, data.dtype, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=t, data=nl.load(data), indices=nl.load(idx))
        nl.store(out, t)
        return out

    data = rng.standard_normal((64, 4, 30)).astype(np.float32)
    idx = rng.integers(0, 120, (64, 50)).astype(np.uint32)
    want = np.take_along_axis(data.reshape(64, -1), idx.astype(np.int64), 1)
    np.testing.assert_array_equal(nki.simulate(k)(data, idx), want)
