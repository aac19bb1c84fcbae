"""Writes docs/ops.md from the live dispatcher registrations and the
conformance suite's definition (tests/conformance: which OpInfo entries are
checked against PyTorch CPU, for which dtypes, and every exclusion).

Usage: python scripts/gen_ops_doc.py [--check]
--check exits 1 when docs/ops.md differs from what would be written.
"""

import importlib.util
import sys
from pathlib import Path

import torch

import torch_neuronx  # noqa: F401  registers the kernels

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ops.md"
CONFORMANCE = ROOT / "tests" / "conformance"

# Common ops a model hits; listed so the doc shows what still falls back.
COMMON = [
    "add",
    "sub",
    "mul",
    "div",
    "mm",
    "bmm",
    "addmm",
    "relu",
    "gelu",
    "exp",
    "sum",
    "mean",
    "softmax",
    "_softmax",
    "_log_softmax",
    "layer_norm",
    "native_layer_norm",
    "convolution",
    "embedding",
    "index_select",
    "cat",
    "where",
    "fill_",
    "zero_",
    "normal_",
    "uniform_",
    "argmax",
    "topk",
    "sort",
    "nonzero",
]


# aten kernels reached by OpInfo entries whose names differ from theirs.
ALIASES = {
    "convolution_overrideable": [
        "nn.functional.conv1d",
        "nn.functional.conv2d",
        "nn.functional.conv3d",
    ],
    "convolution_backward_overrideable": ["nn.functional.conv2d (grad)"],
    "index": ["__getitem__"],
    "embedding_dense_backward": ["nn.functional.embedding (grad)"],
    "_log_softmax_backward_data": ["log_softmax (grad)"],
}

# ops7a: group norm, RMS norm, upsampling, transposed conv, embedding_bag.
_UP = {
    "upsample_nearest1d": ["nn.functional.interpolate.nearest", "nn.functional.upsample_nearest"],
    "upsample_nearest2d": ["nn.functional.interpolate.nearest", "nn.functional.upsample_nearest"],
    "upsample_nearest3d": ["nn.functional.interpolate.nearest", "nn.functional.upsample_nearest"],
    "_upsample_nearest_exact1d": ["nn.functional.interpolate.nearest-exact"],
    "_upsample_nearest_exact2d": ["nn.functional.interpolate.nearest-exact"],
    "_upsample_nearest_exact3d": ["nn.functional.interpolate.nearest-exact"],
    "upsample_bilinear2d": [
        "nn.functional.interpolate.bilinear",
        "nn.functional.upsample_bilinear",
    ],
    "upsample_linear1d": ["nn.functional.interpolate.linear"],
    "upsample_trilinear3d": ["nn.functional.interpolate.trilinear"],
    "upsample_bicubic2d": ["nn.functional.interpolate.bicubic"],
}
ALIASES.update(_UP)
ALIASES.update({k + "_backward": [i + " (grad)" for i in v] for k, v in _UP.items()})
ALIASES.update(
    {
        "_fused_rms_norm": ["nn.functional.rms_norm"],
        "_fused_rms_norm_backward": ["nn.functional.rms_norm (grad)"],
        "native_group_norm": ["nn.functional.group_norm"],
        "native_group_norm_backward": ["nn.functional.group_norm (grad)"],
        "_embedding_bag": ["nn.functional.embedding_bag"],
        "_embedding_bag_forward_only": ["nn.functional.embedding_bag"],
        "_embedding_bag_backward": ["nn.functional.embedding_bag (grad)"],
        "_embedding_bag_dense_backward": ["nn.functional.embedding_bag (grad)"],
        "_embedding_bag_per_sample_weights_backward": ["nn.functional.embedding_bag (grad)"],
    }
)
ALIASES["convolution_overrideable"] = ALIASES["convolution_overrideable"] + [
    "nn.functional.conv_transpose1d",
    "nn.functional.conv_transpose2d",
    "nn.functional.conv_transpose3d",
]


# PrivateUse1 kernels that run the op's CPU kernel through the fallback and
# correct its result (torch_neuronx/csrc/aten/special_poly.cpp: NaN where the
# CPU kernel returns an unset value): fallbacks, not native kernels.
FALLBACK_PREFIXES = (
    "aten::special_chebyshev_polynomial_u",
    "aten::special_chebyshev_polynomial_w",
    "aten::special_shifted_chebyshev_polynomial_u",
    "aten::special_shifted_chebyshev_polynomial_w",
    "aten::special_laguerre_polynomial_l",
    "aten::special_legendre_polynomial_p",
)


def _corrected_fallback(r: str) -> bool:
    return r.split(".", 1)[0] in FALLBACK_PREFIXES


def native_ops() -> list[str]:
    regs = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    return sorted(r for r in regs if r.startswith("aten::") and not _corrected_fallback(r))


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def conformance():
    """(OpInfo entries checked, exclusions, tolerances, dtypes) of the suite."""
    from torch.testing._internal.common_methods_invocations import op_db

    checked = set()
    # A family may check entries of PyTorch's other OpInfo lists (the
    # foreach_*_op_db ForeachFuncInfos): it names them in DB.
    extra_db = []
    for path in sorted(CONFORMANCE.glob("ops_*.py")):
        mod = _load(path)
        checked |= set(mod.OPS)
        extra_db += getattr(mod, "DB", [])
    excl = _load(CONFORMANCE / "exclusions.py")
    dtypes = _load(CONFORMANCE / "dtypes.py").DTYPES
    entries = [op for op in [*op_db, *extra_db] if op.name in checked]
    return entries, excl, dtypes


def _dt(d) -> str:
    return d if isinstance(d, str) else str(d).replace("torch.", "")


def _unregistered_status(op: str) -> str:
    """How an op with no PrivateUse1 kernel runs: as a composite or on the CPU."""
    keys = (
        torch._C.DispatchKey.CompositeImplicitAutograd,
        torch._C.DispatchKey.CompositeExplicitAutograd,
    )
    packet = getattr(torch.ops.aten, op)
    composite = any(
        getattr(packet, o).has_kernel_for_dispatch_key(k)
        for o in packet.overloads()
        if not o.endswith("out")
        for k in keys
    )
    return "composite (runs as native ops)" if composite else "CPU fallback"


def render() -> str:
    native = native_ops()
    names = {n.split("::", 1)[1].split(".", 1)[0] for n in native}
    entries, excl, dtypes = conformance()
    by_aten: dict[str, list[str]] = {}
    for op in entries:
        label = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        for aten in {op.aten_name, op.name.rsplit(".", 1)[-1]}:
            by_aten.setdefault(aten, []).append(label)
    lines = [
        "# Operators on neuron",
        "",
        "Generated by `scripts/gen_ops_doc.py` from the dispatcher's PrivateUse1",
        "registrations; `tests/test_docs.py` fails when it is stale.",
        "",
        "Every aten op not listed as native runs through the CPU fallback: it works,",
        "it is recorded in `torch_neuronx.get_fallback_ops()`, and it warns once.",
        "These run through it with their result corrected (NaN where CPU's kernel",
        "returns a value it never set, for a NaN x and n >= 2):",
        ", ".join(f"`{p}`" for p in FALLBACK_PREFIXES) + ".",
        "",
        "Conformance: `tests/conformance` runs PyTorch's own OpInfo samples for each",
        "listed OpInfo entry on neuron and on CPU and compares values, dtypes and shapes",
        f"(dtypes: {', '.join(_dt(d) for d in dtypes)}, as each op supports), plus",
        "float32 gradients; it also asserts the op did not fall back. It runs in CI.",
        "",
        f"## Native ({len(native)})",
        "",
        "| op (overload) | status | OpInfo conformance |",
        "|---|---|---|",
    ]
    for op in native:
        base = op.split("::", 1)[1].split(".", 1)[0]
        # _softmax -> softmax, add_ -> add, _index_put_impl_ -> index_put
        candidates = {
            base,
            base.rstrip("_"),
            base.strip("_"),
            base.strip("_").removesuffix("_impl"),
        }
        infos = sorted({i for c in candidates for i in by_aten.get(c, []) + ALIASES.get(c, [])})
        cell = ", ".join(f"`{i}`" for i in infos) if infos else "(tests/test_*.py only)"
        lines.append(f"| `{op}` | native | {cell} |")
    lines += [
        "",
        f"## OpInfo entries checked ({len(entries)})",
        "",
        "| OpInfo entry | dtypes checked |",
        "|---|---|",
    ]
    for op in sorted(entries, key=lambda o: (o.name, o.variant_test_name)):
        label = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        sup = op.supported_dtypes("cpu")
        checked = [_dt(d) for d in dtypes if d in sup]
        lines.append(f"| `{label}` | {', '.join(checked)} |")
    lines += [
        "",
        "## Exclusions and adjusted tolerances",
        "",
        "From `tests/conformance/exclusions.py` (each with its reason there).",
        "",
        "| OpInfo entry | dtype | what | reason |",
        "|---|---|---|---|",
    ]
    for (name, variant, dt), reason in sorted(excl.EXCLUDED.items(), key=str):
        lines.append(
            f"| `{name}{'.' + variant if variant else ''}` | {_dt(dt)} | skipped | {reason} |"
        )
    for (name, variant, dt), (atol, rtol) in sorted(excl.TOLERANCES.items(), key=str):
        lines.append(
            f"| `{name}{'.' + variant if variant else ''}` | {_dt(dt)} | "
            f"atol {atol:g}, rtol {rtol:g} | summation order / rounding steps "
            "differ from ATen (see exclusions.py) |"
        )
    for name, ops in sorted(excl.ALLOWED_FALLBACKS.items()):
        lines.append(
            f"| `{name}` | all | may also call {', '.join(ops)} on the CPU | "
            "sample preparation, see exclusions.py |"
        )
    lines += [
        "",
        "## Common ops without a neuron kernel of their own",
        "",
        "A composite op decomposes, below autograd, into the native ops above and",
        "never reaches the CPU fallback itself.",
        "",
        "| op | status |",
        "|---|---|",
    ]
    lines += [f"| `aten::{op}` | {_unregistered_status(op)} |" for op in COMMON if op not in names]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if DOC.exists() and DOC.read_text() == text else 1)
    DOC.write_text(text)
    print(f"wrote {DOC}")
