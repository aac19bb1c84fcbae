"""NKI dtypes: strings (as NKI 0.6 spells them) that know their libtrn code,
size, NumPy and PyTorch equivalents. Every dtype-accepting API normalises
with ``to_dtype`` (strings, NumPy dtypes and types, torch dtypes).

bfloat16 and the float8 formats are NumPy dtypes through ``ml_dtypes`` (as
in AWS's nki): importing it registers their names, so ``np.ones(n,
dtype=nl.bfloat16)`` works, and such arrays go to kernels as they are (their
bytes are the NKI format's). Values become these dtypes only through
``to_array`` (float32 first, then round to nearest even: the kernels' own
cast)."""

import ml_dtypes  # noqa: F401  (registers bfloat16 / float8_* with NumPy)
import numpy as np


class NkiDType(str):
    code: int
    itemsize: int
    is_float: bool

    def __new__(cls, name, code, itemsize, is_float, np_name, torch_name):
        s = super().__new__(cls, name)
        s.code, s.itemsize, s.is_float = code, itemsize, is_float
        s.np_name, s.torch_name = np_name, torch_name
        return s

    @property
    def numpy(self):
        if self.np_name is None:
            raise TypeError(f"nki: {self} has no NumPy dtype here (pass torch tensors for {self})")
        return np.dtype(self.np_name)

    @property
    def torch(self):
        import torch

        if self.torch_name is None:
            raise TypeError(f"nki: {self} has no torch dtype")
        return getattr(torch, self.torch_name)


float32 = NkiDType("float32", 0, 4, True, "float32", "float32")
bfloat16 = NkiDType("bfloat16", 1, 2, True, "bfloat16", "bfloat16")
float16 = NkiDType("float16", 2, 2, True, "float16", "float16")
float8_e4m3 = NkiDType("float8_e4m3", 3, 1, True, "float8_e4m3", None)
float8_e4m3fn = NkiDType("float8_e4m3fn", 4, 1, True, "float8_e4m3fn", "float8_e4m3fn")
float8_e5m2 = NkiDType("float8_e5m2", 5, 1, True, "float8_e5m2", "float8_e5m2")
int8 = NkiDType("int8", 6, 1, False, "int8", "int8")
uint8 = NkiDType("uint8", 7, 1, False, "uint8", "uint8")
int16 = NkiDType("int16", 8, 2, False, "int16", "int16")
uint16 = NkiDType("uint16", 9, 2, False, "uint16", "uint16")
int32 = NkiDType("int32", 10, 4, False, "int32", "int32")
uint32 = NkiDType("uint32", 11, 4, False, "uint32", "uint32")
bool_ = NkiDType("bool", 12, 1, False, "bool", "bool")
tfloat32 = NkiDType("tfloat32", 13, 4, True, "float32", None)

ALL = [
    float32,
    bfloat16,
    float16,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    int8,
    uint8,
    int16,
    uint16,
    int32,
    uint32,
    bool_,
    tfloat32,
]
_BY_NAME = {d: d for d in ALL}
_BY_NAME.update(
    {
        "float": float32,
        "fp32": float32,
        "bf16": bfloat16,
        "half": float16,
        "fp16": float16,
        "bool_": bool_,
        "tf32": tfloat32,
        "float8e4": float8_e4m3,
        "float8e5": float8_e5m2,
        "float8_e4m3fnuz": float8_e4m3fn,
    }
)


_SEEN = {}  # dtype objects (NumPy, torch) already resolved: the per-call fast path


def to_dtype(x):
    """Any dtype spelling -> NkiDType (TypeError if NKI has no such dtype)."""
    if isinstance(x, NkiDType):
        return x
    try:
        return _SEEN[x]
    except (KeyError, TypeError):
        pass
    d = _to_dtype(x)
    if not isinstance(x, str):
        try:
            _SEEN[x] = d
        except TypeError:  # unhashable spelling
            pass
    return d


def _to_dtype(x):
    if isinstance(x, str):
        if x in _BY_NAME:
            return _BY_NAME[x]
        raise TypeError(f"nki: unknown dtype {x!r}")
    name = None
    try:
        import torch

        if isinstance(x, torch.dtype):
            name = str(x).replace("torch.", "")
    except ImportError:  # pragma: no cover - torch is a project dependency
        pass
    if name is None:
        try:
            name = np.dtype(x).name
        except TypeError:
            name = getattr(x, "__name__", str(x))
    if name in _BY_NAME:
        return _BY_NAME[name]
    raise TypeError(f"nki: dtype {x} is not an NKI dtype (NKI has {', '.join(ALL)})")


def to_array(x, d):
    """x (anything NumPy takes) as a contiguous array of NKI dtype d, with the
    bits a kernel's cast gives (tests/nki/test_nki_numpy_dtypes.py sweeps
    them): values reach the narrow float formats through float32 (never
    straight from float64), then round to nearest even; bfloat16 as
    trn/convert.h (NaN keeps its payload's top bits), float8 as ml_dtypes
    (overflow to inf, or NaN in the formats without one)."""
    d = to_dtype(d)
    a = np.asarray(x)
    if not d.is_float or d.itemsize == 4 or a.dtype == d.numpy:
        return np.ascontiguousarray(a.astype(d.numpy, copy=False))
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.ascontiguousarray(a, dtype=np.float32)
        if d == bfloat16:
            # trn/convert.h's trn_float_to_bf16 (ml_dtypes drops NaN payloads)
            u = a.view(np.uint32).astype(np.uint64)
            r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            r = np.where((u & 0x7FFFFFFF) > 0x7F800000, (u >> 16) | 0x40, r)
            return r.astype(np.uint16).view(d.numpy)
        return a.astype(d.numpy)


def torch_view(a):
    """A NumPy array as a CPU tensor on the same bytes, bfloat16 and float8
    included (torch.from_numpy does not know ml_dtypes' types)."""
    import torch

    d = _BY_NAME.get(a.dtype.name)
    if d not in (bfloat16, float8_e4m3, float8_e4m3fn, float8_e5m2):
        return torch.from_numpy(a)
    if d.torch_name is None:
        raise TypeError(f"nki: PyTorch has no {d} (pass a NumPy array to nki.simulate)")
    raw = np.ascontiguousarray(a).view(np.uint16 if d.itemsize == 2 else np.uint8)
    return torch.from_numpy(raw).view(d.torch)


def promote(a, b):
    """Legacy NKI type promotion of two dtypes (None: a Python scalar)."""
    if a is None:
        return b
    if b is None:
        return a
    if a == b:
        return a
    if a.is_float and not b.is_float:
        return a
    if b.is_float and not a.is_float:
        return b
    if a.is_float and b.is_float:
        pair = {a, b}
        if pair == {float16, bfloat16}:
            return float32
        if a.itemsize == 1 and b.itemsize == 1:
            return bfloat16
        return a if a.itemsize > b.itemsize else b
    if {a, b} == {int32, uint32}:
        return float32
    return a if a.itemsize >= b.itemsize else b
