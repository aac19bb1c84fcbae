"""nki.language convenience ops against NumPy, in both API generations
(the legacy neuronxcc.nki.language runs the same kernels: it re-exports
the shared core plus its own names)."""

import numpy as np
import pytest

import neuronxcc.nki.language as lnl
import nki
import nki.language as nl

rng = np.random.default_rng(1)
UNARY = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "square": np.square,
    "abs": np.abs,
    "negative": np.negative,
    "reciprocal": np.reciprocal,
    "sin": np.sin,
    "cos": np.cos,
    "arctan": np.arctan,
    "floor": np.floor,
    "ceil": np.ceil,
    "sign": np.sign,
    "trunc": np.trunc,
    "silu": lambda x: x / (1 + np.exp(-x)),
    "softplus": lambda x: np.log1p(np.exp(x)),
    "gelu_apprx_tanh": lambda x: 0.5
    * x
    * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3))),
}


@pytest.mark.parametrize("lang", [nl, lnl], ids=["current", "legacy"])
def test_unary_math(lang):
    names = list(UNARY)

    @nki.jit
    def k(a):
        out = nl.ndarray((len(names), 128, 40), nl.float32, buffer=nl.shared_hbm)
        t = lang.load(a)
        for i, n in enumerate(names):
            lang.store(out[i], getattr(lang, n)(t))
        return out

    a = (rng.random((128, 40)) * 3 + 0.1).astype(np.float32)
    got = k(a)
    for i, n in enumerate(names):
        np.testing.assert_allclose(
            got[i], UNARY[n](a).astype(np.float32), rtol=2e-5, atol=2e-6, err_msg=n
        )


@pytest.mark.parametrize("lang", [nl, lnl], ids=["current", "legacy"])
def test_binary_reductions_where_broadcast(lang):
    @nki.jit
    def k(a, b, row):
        out = nl.ndarray((9, 128, 32), nl.float32, buffer=nl.shared_hbm)
        red = nl.ndarray((128, 5), nl.float32, buffer=nl.shared_hbm)
        x, y, rw = lang.load(a), lang.load(b), lang.load(row)
        lang.store(out[0], lang.add(x, y))
        lang.store(out[1], lang.subtract(x, 2.0))
        lang.store(out[2], lang.multiply(x, y))
        lang.store(out[3], lang.maximum(x, y))
        lang.store(out[4], lang.where(lang.greater(x, y), x, y))
        lang.store(out[5], x * lang.broadcast_to(rw, (128, 32)))  # a (1, 32) row across partitions
        lang.store(out[6], lang.divide(x, y))
        lang.store(out[7], x - lang.max(x, axis=1, keepdims=True))
        lang.store(out[8], lang.copy(lang.softmax(x, axis=1)))
        r = nl.ndarray((128, 5), nl.float32, buffer=nl.sbuf)
        r[:, 0:1] = lang.sum(x, axis=1, keepdims=True)
        r[:, 1:2] = lang.max(x, axis=1, keepdims=True)
        r[:, 2:3] = lang.min(x, axis=1, keepdims=True)
        r[:, 3:4] = lang.mean(x, axis=1, keepdims=True)
        r[:, 4:5] = lang.var(x, axis=1, keepdims=True)
        lang.store(red, r)
        return out, red

    a, b = (
        rng.standard_normal((128, 32)).astype(np.float32),
        rng.standard_normal((128, 32)).astype(np.float32) + 4,
    )
    row = rng.standard_normal((1, 32)).astype(np.float32)
    out, red = k(a, b, row)
    e = np.exp(a - a.max(1, keepdims=True))
    refs = [
        a + b,
        a - 2,
        a * b,
        np.maximum(a, b),
        np.where(a > b, a, b),
        a * row,
        a / b,
        a - a.max(1, keepdims=True),
        e / e.sum(1, keepdims=True),
    ]
    for i, ref in enumerate(refs):
        np.testing.assert_allclose(out[i], ref, rtol=1e-5, atol=1e-6, err_msg=str(i))
    np.testing.assert_allclose(
        red, np.stack([a.sum(1), a.max(1), a.min(1), a.mean(1), a.var(1)], 1), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("lang", [nl, lnl], ids=["current", "legacy"])
def test_matmul_transpose_zeros_full_loops(lang):
    @nki.jit
    def k(x, w):  # x (M, K), w (K, N): x @ w with K tiled by 128
        M, K = x.shape
        N = w.shape[1]
        out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
        acc = lang.zeros((M, N), nl.float32, buffer=nl.sbuf)
        for kk in lang.affine_range(K // 128):
            xt = lang.load(x[:, lang.ds(kk * 128, 128)])
            wt = lang.load(w[lang.ds(kk * 128, 128), :])
            acc += lang.matmul(xt, wt)
        for j in lang.sequential_range(2):
            acc[:, j : j + 1] = lang.full((M, 1), 7.0, nl.float32)
        lang.store(out, acc)
        return out

    x = rng.standard_normal((64, 384)).astype(np.float32)
    w = rng.standard_normal((384, 48)).astype(np.float32)
    ref = x @ w
    ref[:, 0:2] = 7.0
    np.testing.assert_allclose(k(x, w), ref, rtol=1e-4, atol=1e-4)


def test_fori_loop_program_id_num_programs_and_static_range():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        assert nl.num_programs(0) == 2 and nl.program_ndim() == 1
        pid = nl.program_id(0)

        def body(i):
            t = nl.load(a[pid * 128 : (pid + 1) * 128, nl.ds(i * 16, 16)])
            nl.store(out[pid * 128 : (pid + 1) * 128, nl.ds(i * 16, 16)], nl.multiply(t, 3.0))

        nl.fori_loop(0, a.shape[1] // 16, body)
        for j in nl.static_range(1):
            t = nl.load(a[pid * 128 : (pid + 1) * 128, j : j + 1])
            nl.store(out[pid * 128 : (pid + 1) * 128, j : j + 1], nl.add(t, 1.0))
        return out

    a = rng.standard_normal((256, 64)).astype(np.float32)
    ref = a * 3
    ref[:, 0] = a[:, 0] + 1
    np.testing.assert_allclose(nki.simulate(k[2])(a), ref, rtol=1e-6)


def test_loop_index_as_python_value_unrolls_that_loop():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            t = nl.load(a[nl.ds(i * 32, 32), :])
            if i == 0:  # needs a Python value: this loop is unrolled on a retrace
                t = nl.multiply(t, 0.0)
            nl.store(out[nl.ds(i * 32, 32), :], t)
        return out

    a = rng.standard_normal((128, 8)).astype(np.float32)
    ref = a.copy()
    ref[:32] = 0
    np.testing.assert_array_equal(k(a), ref)


@nki.jit
def _guarded(a, n_valid):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 32):
        t = nl.load(a[nl.ds(i * 32, 32), :])
        nl.store(out[nl.ds(i * 32, 32), :], t)
        if (
            i < n_valid
        ):  # a condition on the loop index: one conditional block, the loop stays a loop
            nl.store(out[nl.ds(i * 32, 32), :], nl.multiply(t, 2.0))
    return out


def test_if_on_loop_index_is_a_conditional_block():
    a = rng.standard_normal((128, 8)).astype(np.float32)
    ref = a.copy()
    ref[:64] *= 2
    np.testing.assert_array_equal(_guarded(a, 2), ref)
    text = _guarded.trace(a, 2)[0].text()
    assert "\nG 1 " in text and text.count("\nL ") == 1


def test_finfo_matches_numpy_and_bfloat16_limits():
    for d, nd in ((nl.float32, np.float32), (nl.float16, np.float16)):
        f, g = nl.finfo(d), np.finfo(nd)
        assert (f.min, f.max, f.eps, f.tiny, f.bits) == (g.min, g.max, g.eps, g.tiny, g.bits)
    b = nl.finfo(nl.bfloat16)
    assert b.max == 3.3895313892515355e38 and b.eps == 2.0**-7  # torch.finfo(bfloat16)
    assert nl.finfo(nl.float8_e4m3fn).max == 448.0
    with pytest.raises(nki.NkiError, match="float dtype"):
        nl.finfo(nl.int32)
