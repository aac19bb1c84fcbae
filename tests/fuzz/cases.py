"""Bad-input cases for one OpInfo entry in one dtype, and how one case is run
and classified.

A unit is (OpInfo name, variant, dtype). Its cases come from the entry's own
samples (op.sample_inputs on CPU, generated under a fixed seed) and its
error_inputs, each sample mutated: wrong dtypes, a shape mismatch, zero-size,
NaN/inf, non-contiguous operands, out-of-range dims and indices, the in-place
variant, and every out= variant (correct, wrong dtype, wrong shape, expanded,
aliasing the input, partially overlapping it, on another device). A case is a
recipe: given a device it builds its operands there from CPU templates, so the
same case runs on CPU and on neuron.

Classes (the driver counts them):
  both_raise      CPU and neuron raise (exception types compared in `detail`)
  agree           both return, and the values agree
  neuron_raises   neuron raises where CPU returns (a missing feature, loud)
  neuron_returns  neuron returns where CPU raises (a check neuron misses)
  values_differ   both return different values
  crash           the worker process died or hung (set by the driver)
"""

import contextlib
import fnmatch
import io
import math
import warnings
import zlib

import torch
from torch.testing import make_tensor

BAD_CLASSES = ("neuron_returns", "values_differ", "crash")
CLASSES = ("both_raise", "agree", "neuron_raises", "neuron_returns", "values_differ", "crash")

# Ops whose values depend on a random stream (dropout inside attention,
# fractional pooling's random offsets) or on uninitialized memory (empty,
# resize_ growing a tensor): only dtypes, shapes and devices are compared.
_VALUE_FREE_WORDS = (
    "rand",
    "dropout",
    "bernoulli",
    "multinomial",
    "normal",
    "uniform",
    "poisson",
    "cauchy",
    "exponential",
    "geometric",
    "log_normal",
    "empty",
    "rrelu",
    "resize",
    "fractional_max_pool",
    "multi_head_attention",
)
# Ops that select among equal elements (ties): indices may differ, values not.
_TIE_FREE = {
    "sort",
    "argsort",
    "topk",
    "kthvalue",
    "median",
    "nanmedian",
    "mode",
    "max",
    "min",
    "argmax",
    "argmin",
    "cummax",
    "cummin",
    "msort",
    "unique",
    "unique_consecutive",
    "nn.functional.max_pool1d",
    "nn.functional.max_pool2d",
    "nn.functional.max_pool3d",
    "nn.functional.adaptive_max_pool1d",
    "nn.functional.adaptive_max_pool2d",
    "nn.functional.adaptive_max_pool3d",
    "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d",
    "nanquantile",
    "quantile",
}
_DIM_KEYS = ("dim", "dim0", "dim1", "start_dim", "end_dim", "axis", "source", "destination")
CASE_TIMEOUT_S = 60


def value_free(op_name):
    return any(w in op_name for w in _VALUE_FREE_WORDS)


# ---------------------------------------------------------------------------------------------
# building operands on a device
# ---------------------------------------------------------------------------------------------
def _map(obj, fn):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map(o, fn) for o in obj)
    if isinstance(obj, dict):
        return {k: _map(v, fn) for k, v in obj.items()}
    return obj


def _to(t, device):
    # A copy on every device (CPU too): in-place and out= cases write to it.
    return t.detach().clone() if device == "cpu" else t.detach().to(device)


def noncontig(t):
    """The same values in a non-contiguous tensor (every other element of a
    wider buffer), on t's device."""
    if t.dim() == 0 or t.numel() == 0:
        return t
    buf = torch.zeros(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype, device=t.device)
    view = buf[..., ::2]
    view.copy_(t)
    return view


class Case:
    """One call: `kind` is the mutation; build(device) -> (fn, args, kwargs,
    extra) where extra holds tensors whose final contents are compared too
    (out= tensors, in-place inputs, overlap buffers)."""

    def __init__(self, unit, index, kind, builder):
        self.unit, self.index, self.kind, self._builder = unit, index, kind, builder

    @property
    def id(self):
        return f"{self.unit}#{self.index}:{self.kind}"

    def build(self, device):
        return self._builder(device)


def _sample_builder(call, inp, args, kwargs, xform=None):
    """Operands copied to the device; xform(device, input, args, kwargs) may
    rewrite them there (non-contiguous layouts, out tensors)."""

    def build(device):
        i, a, k = (
            _map(inp, lambda t: _to(t, device)),
            _map(args, lambda t: _to(t, device)),
            _map(kwargs, lambda t: _to(t, device)),
        )
        extra = []
        if xform is not None:
            i, a, k, extra = xform(device, i, a, k)
        return call, (i, *a), k, extra

    return build


# ---------------------------------------------------------------------------------------------
# mutations of one sample (all on CPU templates unless device-specific)
# ---------------------------------------------------------------------------------------------
def _other_dtypes(dtype):
    if dtype.is_floating_point:
        return [torch.int64, torch.bool, torch.complex64]
    if dtype == torch.bool:
        return [torch.float32, torch.uint8]
    return [torch.float16, torch.bool]


def _first_tensor_arg(args):
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            return i
    return None


def _dim_positions(inp, args, kwargs):
    """Positional ints and dim-like kwargs that look like dims of the input."""
    nd = max(inp.dim(), 1) if isinstance(inp, torch.Tensor) else 1
    pos = [
        i
        for i, a in enumerate(args)
        if isinstance(a, int) and not isinstance(a, bool) and -nd <= a < nd
    ]
    keys = [
        k
        for k in kwargs
        if k in _DIM_KEYS and isinstance(kwargs[k], int) and not isinstance(kwargs[k], bool)
    ]
    return nd, pos, keys


def _index_tensors(inp, args, kwargs):
    """Integer tensors among the arguments (indices, targets, offsets)."""
    found = [
        ("a", i)
        for i, a in enumerate(args)
        if isinstance(a, torch.Tensor) and a.dtype in (torch.int64, torch.int32) and a.numel() > 0
    ]
    found += [
        ("k", k)
        for k, v in kwargs.items()
        if isinstance(v, torch.Tensor) and v.dtype in (torch.int64, torch.int32) and v.numel() > 0
    ]
    return found


def mutations(op, sample, expected):
    """(kind, input, args, kwargs, xform) for one CPU sample; `expected` is
    CPU's result for the plain sample (None when it raised)."""
    inp, args, kwargs = sample.input, list(sample.args), dict(sample.kwargs)
    out = [("sample", inp, args, kwargs, None)]
    if isinstance(inp, torch.Tensor):
        out.append(
            (
                "noncontig",
                inp,
                args,
                kwargs,
                lambda d, i, a, k: (
                    noncontig(i),
                    [noncontig(x) if isinstance(x, torch.Tensor) else x for x in a],
                    k,
                    [],
                ),
            )
        )
        if inp.is_floating_point() and inp.numel() >= 1:
            bad = inp.clone(memory_format=torch.contiguous_format)
            flat = bad.view(-1) if bad.is_contiguous() else None
            if flat is not None:
                for j, v in enumerate([math.nan, math.inf, -math.inf][: flat.numel()]):
                    flat[j] = v
                out.append(("nan_inf", bad, args, kwargs, None))
        if inp.dim() >= 1:
            out.append(("zero_size", inp.new_empty((0, *inp.shape[1:])), args, kwargs, None))
        for dt in _other_dtypes(inp.dtype):
            out.append((f"dtype_{str(dt)[6:]}", inp.to(dt), args, kwargs, None))
        j = _first_tensor_arg(args)
        if j is not None and args[j].dim() >= 1:
            other = args[j]
            wider = make_tensor(
                (*other.shape[:-1], other.shape[-1] + 1),
                dtype=other.dtype,
                device="cpu",
                low=0 if not other.is_floating_point() else None,
                high=1 if other.dtype == torch.bool else None,
            )
            out.append(("shape_mismatch", inp, args[:j] + [wider] + args[j + 1 :], kwargs, None))
        nd, pos, keys = _dim_positions(inp, args, kwargs)
        for name, value in [("dim_high", nd + 2), ("dim_low", -nd - 3)]:
            if pos or keys:
                a2 = [value if i in pos else x for i, x in enumerate(args)]
                k2 = {k: (value if k in keys else v) for k, v in kwargs.items()}
                out.append((name, inp, a2, k2, None))
        idx = _index_tensors(inp, args, kwargs)
        if idx:
            big = max([*inp.shape, 1]) + 7
            for name, value in [("index_high", big), ("index_low", -big)]:
                a2, k2 = list(args), dict(kwargs)
                for where, key in idx:
                    src = a2 if where == "a" else k2
                    src[key] = torch.full_like(src[key], value)
                out.append((name, inp, a2, k2, None))
    if op.inplace_variant is not None and isinstance(inp, torch.Tensor):
        out.append(("inplace", inp, args, kwargs, "inplace"))
    if op.supports_out and expected is not None and isinstance(inp, torch.Tensor):
        out.extend(_out_mutations(inp, args, kwargs, expected))
    return out


def _out_like(expected, device, first=None):
    """out= argument shaped like CPU's result; `first` replaces the first tensor."""
    if isinstance(expected, torch.Tensor):
        return first(device) if first else torch.empty_like(expected, device=device)
    outs = [torch.empty_like(e, device=device) for e in expected]
    if first:
        outs[0] = first(device)
    return tuple(outs)


def _out_mutations(inp, args, kwargs, expected):
    if isinstance(expected, torch.Tensor):
        e0 = expected
    elif (
        isinstance(expected, (tuple, list))
        and expected
        and all(isinstance(e, torch.Tensor) for e in expected)
    ):
        e0 = expected[0]
    else:
        return []

    def with_out(first, kind):
        def xform(device, i, a, k):
            o = _out_like(expected, device, first)
            return i, a, {**k, "out": o}, list(o) if isinstance(o, tuple) else [o]

        return (kind, inp, args, kwargs, xform)

    res = [with_out(None, "out_ok")]
    wrong = torch.int64 if e0.is_floating_point() else torch.float16
    res.append(with_out(lambda d: torch.empty(e0.shape, dtype=wrong, device=d), "out_wrong_dtype"))
    res.append(
        with_out(lambda d: torch.zeros(e0.numel() + 3, dtype=e0.dtype, device=d), "out_wrong_shape")
    )
    if e0.numel() > 1:
        # Every element at one address (strides 0), in a buffer of numel
        # elements: some CPU kernels ignore out's strides and write numel
        # elements (heap corruption with a one-element buffer, which then
        # aborts a later case).
        res.append(
            with_out(
                lambda d: torch.zeros(e0.numel(), dtype=e0.dtype, device=d).as_strided(
                    e0.shape, [0] * e0.dim()
                ),
                "out_expanded",
            )
        )
    res.append(
        with_out(
            lambda d: torch.empty(e0.shape, dtype=e0.dtype, device="meta" if d == "cpu" else "cpu"),
            "out_other_device",
        )
    )
    if inp.shape == e0.shape and inp.dtype == e0.dtype and isinstance(expected, torch.Tensor):

        def alias(device, i, a, k):
            return i, a, {**k, "out": i}, [i]

        res.append(("out_alias_input", inp, args, kwargs, alias))
        n = inp.numel()
        if n > 1:

            def overlap(device, i, a, k):
                buf = torch.zeros(n + 1, dtype=i.dtype, device=device)
                x = buf[:n].view(i.shape)
                x.copy_(i)
                o = buf[1:].view(i.shape)
                return x, a, {**k, "out": o}, [buf]

            res.append(("out_partial_overlap", inp, args, kwargs, overlap))
    return res


# ---------------------------------------------------------------------------------------------
# running and comparing
# ---------------------------------------------------------------------------------------------
def _call(op, kind):
    if kind == "inplace":
        return op.inplace_variant
    return op.op


def unit_cases(op, dtype, seed, max_samples, kinds=None):
    """Every case of one unit, in a fixed order."""
    unit = f"{op.name}.{op.variant_test_name or 'default'}-{str(dtype)[6:]}"
    torch.manual_seed(seed ^ zlib.crc32(unit.encode()))
    cases = []
    with _quiet():
        # Up to max_samples samples, those with a tensor input of at least one
        # dim and two elements first (they admit every mutation), among the
        # first 30 the OpInfo generates.
        seen = []
        try:
            for s in op.sample_inputs("cpu", dtype, requires_grad=False):
                seen.append(s)
                if len(seen) >= 30:
                    break
        except Exception:  # noqa: BLE001 - an OpInfo that cannot sample this dtype
            pass
        rich = [
            s
            for s in seen
            if isinstance(s.input, torch.Tensor) and s.input.dim() >= 1 and s.input.numel() >= 2
        ]
        samples = (rich + [s for s in seen if not any(s is r for r in rich)])[:max_samples]
    n = 0
    for s in samples:
        expected = None
        try:
            with _quiet():
                expected = op.op(s.input, *s.args, **s.kwargs)
        except Exception:  # noqa: BLE001
            pass
        for kind, inp, args, kwargs, xform in mutations(op, s, expected):
            if kinds and not any(fnmatch.fnmatch(kind, p) for p in kinds):
                continue
            if xform == "inplace":
                call = op.inplace_variant
                build = _sample_builder(call, inp, args, kwargs, lambda d, i, a, k: (i, a, k, [i]))
            else:
                build = _sample_builder(op.op, inp, args, kwargs, xform)
            cases.append(Case(unit, n, kind, build))
            n += 1
    if not kinds or any(fnmatch.fnmatch("error_input", p) for p in kinds):
        try:
            with _quiet():
                errs = list(op.error_inputs("cpu"))
        except Exception:  # noqa: BLE001
            errs = []
        for e in errs[: max(4, max_samples * 2)]:
            s = e.sample_input
            if not isinstance(s.input, torch.Tensor) and not isinstance(s.input, (list, tuple)):
                continue
            cases.append(
                Case(
                    unit,
                    n,
                    "error_input",
                    _sample_builder(op.op, s.input, list(s.args), dict(s.kwargs)),
                )
            )
            n += 1
    return unit, cases


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()):
            yield


def _sync_neuron():
    if hasattr(torch, "neuron"):
        torch.neuron.synchronize()


def run_on(case, device):
    """('ok', result on CPU) or ('raised', exception)."""
    try:
        with _quiet():
            fn, args, kwargs, extra = case.build(device)
            r = fn(*args, **kwargs)
            res = _map((r, extra), lambda t: t.cpu() if t.device.type != "meta" else t)
            if device != "cpu":
                _sync_neuron()
        return "ok", res
    except Exception as e:  # noqa: BLE001 - any exception is an outcome
        if device != "cpu":
            try:
                _sync_neuron()
            except Exception:  # noqa: BLE001 - a deferred error already reported
                pass
        return "raised", e


def _tol(dtype):
    if dtype in (torch.float16, torch.bfloat16):
        return {"atol": 1e-2, "rtol": 1.6e-2}
    if dtype in (torch.float32, torch.complex64):
        return {"atol": 1e-4, "rtol": 1e-4}
    return {"atol": 1e-6, "rtol": 1e-6}


def _flat(obj):
    if isinstance(obj, (list, tuple)):
        return [x for o in obj for x in _flat(o)]
    return [obj]


def compare(op_name, got, expected):
    """None when `got` (neuron's result) agrees with CPU's, else why not."""
    g, e = _flat(got), _flat(expected)
    if len(g) != len(e):
        return f"{len(g)} results vs {len(e)}"
    vfree, ties = value_free(op_name), op_name in _TIE_FREE
    for k, (a, b) in enumerate(zip(g, e)):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"result {k}: {type(a).__name__} vs tensor"
            if a.dtype != b.dtype or a.shape != b.shape:
                return f"result {k}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
            if b.device.type == "meta" or vfree:
                continue
            if ties and not (b.is_floating_point() or b.is_complex()):
                continue  # indices of equal elements
            try:
                torch.testing.assert_close(a, b, equal_nan=True, **_tol(b.dtype))
            except AssertionError as err:
                return f"result {k}: " + str(err).strip().splitlines()[0][:160]
        elif isinstance(b, float) and isinstance(a, float):
            if not (a == b or (math.isnan(a) and math.isnan(b)) or vfree):
                return f"result {k}: {a} vs {b}"
        elif a != b and not vfree:
            return f"result {k}: {a!r} vs {b!r}"
    return None


def classify(op_name, case, phase=None):
    """(class, detail) of one case: CPU's outcome against neuron's. phase(name)
    is called before each run (the worker reports it, so a crash names the
    side it happened on)."""
    if phase:
        phase("cpu")
    kc, rc = run_on(case, "cpu")
    if phase:
        phase("neuron")
    kn, rn = run_on(case, "neuron")
    if kc == "raised" and kn == "raised":
        same = type(rc) is type(rn)
        return "both_raise", (
            ""
            if same
            else f"types differ: CPU {type(rc).__name__}, neuron {type(rn).__name__}: "
            f"{str(rn).strip()[:160]}"
        )
    if kc == "raised":
        return "neuron_returns", f"CPU raised {type(rc).__name__}: {str(rc).strip()[:200]}"
    if kn == "raised":
        return "neuron_raises", f"{type(rn).__name__}: {str(rn).strip()[:200]}"
    why = compare(op_name, rn, rc)
    return ("agree", "") if why is None else ("values_differ", why)
