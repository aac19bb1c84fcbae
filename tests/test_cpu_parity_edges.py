"""Edge cases where neuron once returned a value CPU refuses, or a value CPU
does not compute (issue 26 item 7, and what the bad-input fuzzer found
alongside). Every case runs on CPU and on neuron: both raise the same
exception type with CPU's message, or both return the same values.
"""

import math

import pytest
import torch
import torch.nn.functional as F

NAN, INF = float("nan"), float("inf")


def _outcome(fn, device):
    try:
        return "ok", fn(device)
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return "raised", e


def check_like_cpu(fn, match=None):
    """fn(device) on CPU and on neuron: the same exception (type and, when
    given, a message fragment), or equal results (NaN == NaN)."""
    kind, cpu = _outcome(fn, "cpu")
    nkind, dev = _outcome(fn, "neuron")
    if kind == "raised":
        assert nkind == "raised", f"CPU raised {type(cpu).__name__}: {cpu}; neuron returned {dev}"
        assert type(dev) is type(cpu), f"neuron raised {type(dev).__name__}: {dev}; CPU {cpu}"
        if match:
            assert match in str(cpu) and match in str(dev), (str(cpu), str(dev))
        return None
    assert nkind == "ok", f"neuron raised {type(dev).__name__}: {dev}; CPU returned {cpu}"
    torch.testing.assert_close(dev, cpu, check_device=False, equal_nan=True, atol=0, rtol=0)
    return cpu


# ---- binary_cross_entropy: input and target must lie in [0, 1] ------------------------------


@pytest.mark.parametrize(
    "x,t,match",
    [
        ([0.5, 0.5, 0.5], [0.0, 1.0, 2.0], "target should be between 0 and 1"),
        ([0.5, 0.5, 0.5], [0.0, -1.0, 1.0], "target should be between 0 and 1"),
        ([0.5, 0.5, 0.5], [0.0, NAN, 1.0], "target should be between 0 and 1"),
        ([0.5, NAN, 0.2], [0.0, 1.0, 1.0], "input should be between 0 and 1"),
        ([0.5, 1.5, 0.2], [0.0, 1.0, 1.0], "input should be between 0 and 1"),
        # the first element that fails decides the message, input checked first
        ([0.5, 1.5, 0.2], [2.0, 1.0, 1.0], "target should be between 0 and 1"),
        ([1.5, 0.5, 0.2], [2.0, 1.0, 1.0], "input should be between 0 and 1"),
    ],
)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_binary_cross_entropy_range(x, t, match, reduction):
    check_like_cpu(
        lambda d: F.binary_cross_entropy(
            torch.tensor(x, device=d), torch.tensor(t, device=d), reduction=reduction
        ),
        match,
    )


def test_binary_cross_entropy_in_range_still_computes():
    x, t = torch.tensor([0.0, 0.3, 1.0]), torch.tensor([0.0, 0.5, 1.0])
    check_like_cpu(lambda d: F.binary_cross_entropy(x.to(d), t.to(d), reduction="none"))


def test_smooth_l1_backward_beta_zero():
    # CPU's formula: -1 for d <= 0 (zero included), 1 for d > 0, NaN for NaN.
    x = torch.tensor([NAN, 0.0, -0.0, 1.0, -1.0])
    check_like_cpu(
        lambda d: torch.ops.aten.smooth_l1_loss_backward(
            torch.ones(5, device=d), x.to(d), torch.zeros(5, device=d), 0, 0.0
        )
    )


# ---- random fills: ATen's bounds checks ------------------------------------------------------


@pytest.mark.parametrize(
    "dtype,lo,hi,match",
    [
        (torch.float32, -INF, INF, "from is out of bounds for float"),
        (torch.float32, NAN, 1.0, "from is out of bounds for float"),
        (torch.float32, 0.0, INF, "to is out of bounds for float"),
        (torch.float32, -3e38, 3e38, "to-from to exceed the limit"),
        (torch.float16, 0.0, 70000.0, "to is out of bounds for c10::Half"),
        (torch.float32, 2.0, 1.0, "[from, to) range"),
    ],
)
def test_uniform_bounds(dtype, lo, hi, match):
    check_like_cpu(lambda d: torch.empty(3, device=d, dtype=dtype).uniform_(lo, hi), match)


@pytest.mark.parametrize(
    "dtype,args,match",
    [
        (torch.uint8, (0, 1000), "to - 1 is out of bounds for unsigned char"),
        (torch.uint8, (-5, 10), "from is out of bounds for unsigned char"),
        (torch.int8, (1000,), "to - 1 is out of bounds for signed char"),
        (torch.float16, (0, 100000), "to - 1 is out of bounds for c10::Half"),
    ],
)
def test_random_bounds(dtype, args, match):
    check_like_cpu(lambda d: torch.empty(3, device=d, dtype=dtype).random_(*args), match)


def test_random_in_bounds_stays_in_range():
    t = torch.empty(1000, device="neuron", dtype=torch.float16).random_(0, 65504).cpu()
    assert t.min() >= 0 and t.max() < 65504


# ---- conv_transpose: output_padding < stride or < dilation ----------------------------------


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("stride,output_padding,dilation", [(1, 1, 1), (2, 2, 1), (1, 2, 2)])
def test_conv_transpose_output_padding(nd, stride, output_padding, dilation):
    f = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][nd - 1]
    x, w = torch.randn(1, 2, *[4] * nd), torch.randn(2, 3, *[3] * nd)
    check_like_cpu(
        lambda d: f(
            x.to(d), w.to(d), stride=stride, output_padding=output_padding, dilation=dilation
        ),
        "output padding must be smaller than either stride or dilation, but got "
        + ("output_padding_depth" if nd == 3 else "output_padding_height"),
    )


def test_conv_transpose_output_padding_below_dilation_runs():
    x, w = torch.randn(1, 2, 4, 4), torch.randn(2, 3, 3, 3)
    cpu = F.conv_transpose2d(x, w, stride=1, output_padding=1, dilation=2)
    dev = F.conv_transpose2d(x.to("neuron"), w.to("neuron"), stride=1, output_padding=1, dilation=2)
    torch.testing.assert_close(dev.cpu(), cpu, atol=1e-5, rtol=1e-5)


def test_conv_transpose_backward_output_padding():
    x = torch.randn(1, 2, 4, 4, device="neuron")
    w = torch.randn(2, 3, 3, 3, device="neuron")
    go = torch.randn(1, 3, 7, 7, device="neuron")
    with pytest.raises(RuntimeError, match="output padding must be smaller"):
        torch.ops.aten.convolution_backward(
            go, x, w, [3], [1, 1], [0, 0], [1, 1], True, [1, 1], 1, [True, True, True]
        )


# ---- addmm / linear: self must broadcast to the product, zero-size included --------------------


@pytest.mark.parametrize(
    "self_shape,m1,m2,beta",
    [
        ((3,), (0, 5), (5, 4), 1),
        ((2, 3), (0, 5), (5, 3), 1),
        ((3,), (2, 5), (5, 0), 1),
        ((3,), (0, 5), (5, 4), 0),
        ((3,), (2, 5), (5, 4), 0),
    ],
)
def test_addmm_self_must_broadcast(self_shape, m1, m2, beta):
    check_like_cpu(
        lambda d: torch.addmm(
            torch.randn(self_shape, device=d),
            torch.randn(m1, device=d),
            torch.randn(m2, device=d),
            beta=beta,
        ),
        "The expanded size of the tensor",
    )


def test_addmm_out_self_must_broadcast():
    check_like_cpu(
        lambda d: torch.addmm(
            torch.randn(3, device=d),
            torch.randn(0, 5, device=d),
            torch.randn(5, 4, device=d),
            out=torch.empty(0, 4, device=d),
        ),
        "The expanded size of the tensor",
    )


@pytest.mark.parametrize(
    "x,w,b", [((0, 5), (3, 5), (4,)), ((2, 5), (0, 5), (4,)), ((7, 0, 5), (3, 5), (4,))]
)
def test_linear_bias_must_broadcast(x, w, b):
    check_like_cpu(
        lambda d: F.linear(
            torch.randn(x, device=d), torch.randn(w, device=d), torch.randn(b, device=d)
        ),
        "The expanded size of the tensor",
    )


# ---- triu / tril with a diagonal near +-2^63 -------------------------------------------------


@pytest.mark.parametrize("op", [torch.triu, torch.tril])
@pytest.mark.parametrize("k", [2**63 - 1, 2**63 - 2, -(2**63), -(2**63) + 1, 4, -4, 3, -3])
def test_tri_extreme_diagonal(op, k):
    x = torch.arange(1.0, 13.0).reshape(3, 4)
    check_like_cpu(lambda d: op(x.to(d), k))


# ---- sign / sgn of NaN and -0.0 ------------------------------------------------------------


@pytest.mark.parametrize("op", [torch.sign, torch.sgn])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_sign_nan_and_zero(op, dtype):
    x = torch.tensor([NAN, -0.0, 0.0, 2.0, -3.0, INF, -INF], dtype=dtype)
    r = check_like_cpu(lambda d: op(x.to(d)))
    dev = op(x.to("neuron")).cpu()
    assert not torch.signbit(dev[:3]).any()  # +0 like CPU, not -0 or NaN
    assert not math.isnan(r[0])


# ---- a scalar operand is cast to the compute dtype, as TensorIterator does --------------------


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
@pytest.mark.parametrize("value", [-1, -256, 256, 1000])
def test_uint8_compared_with_out_of_range_scalar(op, value):
    x = torch.tensor([0, 1, 255, 232], dtype=torch.uint8)
    check_like_cpu(lambda d: getattr(torch, op)(x.to(d), value))
    # a 0-dim int64 tensor, on CPU (a wrapped scalar) or on neuron
    check_like_cpu(lambda d: getattr(torch, op)(x.to(d), torch.tensor(value)))
    check_like_cpu(lambda d: getattr(torch, op)(x.to(d), torch.tensor(value, device=d)))


def test_int8_compared_with_wide_scalar():
    x = torch.tensor([-24, 0, 5], dtype=torch.int8)
    check_like_cpu(lambda d: torch.eq(x.to(d), 1000))


_BINARY = {
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "pow": torch.pow,
    "atan2": torch.atan2,
    "maximum": torch.maximum,
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "copysign": torch.copysign,
    "hypot": torch.hypot,
    "eq": torch.eq,
    "lt": torch.lt,
}


@pytest.mark.parametrize("name", sorted(_BINARY))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("where", ["cpu_scalar", "device_0dim", "python"])
def test_reduced_float_with_float32_scalar(name, dtype, where):
    # float16 remainder with a float32 0-dim tensor gave 1.0996 where CPU
    # gives 0.1719: CPU reads the scalar rounded to float16 (except mul and
    # the divisions, which read it unrounded).
    f = _BINARY[name]
    torch.manual_seed(0)
    x = (torch.rand(64) * 20 + 0.5).to(dtype)
    for v in [0.1001, 1.2001, 2.7001]:

        def run(d):
            s = (
                v
                if where == "python"
                else torch.tensor(v, device=d if where == "device_0dim" else "cpu")
            )
            return f(x.to(d), s)

        check_like_cpu(run)


def test_issue_remainder_example():
    x = torch.tensor([5.3, -5.3, 7.1, 3.9], dtype=torch.float16)
    check_like_cpu(lambda d: torch.remainder(x.to(d), torch.tensor(1.2)))
    check_like_cpu(lambda d: torch.remainder(x.to(d), torch.tensor(1.2, device=d)))


# ---- NEURON_LAUNCH_BLOCKING=1 keeps CPU's exception types ----------------------------------


def test_launch_blocking_keeps_index_error(python):
    code = """
        import torch, torch.nn.functional as F
        x = torch.randn(4, 3, device="neuron")
        def kind(f):
            try:
                f()
            except Exception as e:
                return type(e).__name__
            return "ok"
        idx = torch.tensor([7], device="neuron")
        print(kind(lambda: x[idx]))
        print(kind(lambda: x.index_select(0, idx)))
        print(kind(lambda: x.index_select(1, idx)))
        print(kind(lambda: torch.gather(x, 0, torch.tensor([[9, 0, 0]], device="neuron"))))
        print(kind(lambda: F.nll_loss(x, torch.tensor([0, 1, 5, 2], device="neuron"))))
        print(kind(lambda: F.embedding(idx, x)))
    """
    expected = [
        "IndexError",
        "IndexError",
        "RuntimeError",
        "RuntimeError",
        "IndexError",
        "IndexError",
    ]
    for env in [{"NEURON_LAUNCH_BLOCKING": "1"}, {}]:
        r = python(code, env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == expected, (env, r.stdout, r.stderr[-2000:])


# ---- found by the bad-input fuzzer (tests/fuzz, docs/fuzz.md) -------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda d: torch.abs(torch.tensor([True, False], device=d)),
        lambda d: torch.zeros(3, dtype=torch.bool, device=d).geometric_(0.5),
        lambda d: F.interpolate(
            torch.ones(1, 1, 2, 2, dtype=torch.int64, device=d), scale_factor=2
        ),
        lambda d: F.interpolate(
            torch.ones(1, 1, 2, 2, dtype=torch.bool, device=d), scale_factor=2, mode="nearest-exact"
        ),
        lambda d: F.binary_cross_entropy(
            torch.full((3,), 1, device=d), torch.full((3,), 0.5, device=d)
        ),
        lambda d: F.binary_cross_entropy(
            torch.full((3,), 0.5, device=d), torch.full((3,), 0.5, device=d, dtype=torch.float16)
        ),
        lambda d: F.huber_loss(torch.ones(3, dtype=torch.int64, device=d), torch.ones(3, device=d)),
        lambda d: F.smooth_l1_loss(
            torch.ones(3, dtype=torch.complex64, device=d),
            torch.ones(3, dtype=torch.complex64, device=d),
        ),
        lambda d: torch.xlogy(
            torch.ones(3, dtype=torch.complex64, device=d), torch.ones(3, device=d)
        ),
        lambda d: F.mse_loss(
            torch.ones(3, dtype=torch.complex64, device=d),
            torch.ones(3, dtype=torch.complex64, device=d),
        ),
        lambda d: F.mse_loss(
            torch.ones(3, dtype=torch.int64, device=d), torch.ones(3, dtype=torch.int64, device=d)
        ),
    ],
    ids=[
        "abs-bool",
        "geometric-bool",
        "nearest-int64",
        "nearest_exact-bool",
        "bce-int64",
        "bce-mixed",
        "huber-int64",
        "smooth_l1-complex",
        "xlogy-complex",
        "mse-complex",
        "mse-int64",
    ],
)
def test_dtypes_cpu_refuses(fn):
    check_like_cpu(fn)


def test_nearest_uint8_still_native():
    x = torch.arange(16, dtype=torch.uint8).reshape(1, 1, 4, 4)
    check_like_cpu(lambda d: F.interpolate(x.to(d), scale_factor=2))


def test_dropout_backward_integer_grad_promotes():
    check_like_cpu(
        lambda d: torch.ops.aten.native_dropout_backward(
            torch.ones(3, dtype=torch.int64, device=d),
            torch.ones(3, dtype=torch.bool, device=d),
            2.0,
        )
    )


@pytest.mark.parametrize(
    "fn",
    [
        lambda d: torch.zeros(1, device=d).expand(3).copy_(torch.ones(3, device=d)),
        lambda d: torch.zeros(1, device=d).expand(3).copy_(torch.ones(3)),
        lambda d: torch.softmax(
            torch.randn(2, 3, device=d), 1, out=torch.zeros(1, device=d).expand(2, 3)
        ),
    ],
    ids=["copy-neuron", "copy-from-cpu", "softmax-out"],
)
def test_write_into_expanded_refused(fn):
    check_like_cpu(fn, "more than one element of the written-to tensor refers to a single memory")


@pytest.mark.parametrize("f", [F.hardswish, F.mish], ids=["hardswish", "mish"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_activation_at_infinities(f, dtype):
    x = torch.tensor([NAN, INF, -INF, 1.0, -2.0, -5.0, 4.0], dtype=dtype)
    cpu = f(x)
    dev = f(x.to("neuron")).cpu()
    torch.testing.assert_close(dev, cpu, equal_nan=True)
