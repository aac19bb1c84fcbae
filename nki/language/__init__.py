"""nki.language: tensors, memories, loops and the convenience ops (each a
documented lowering onto nki.isa instructions). Shared by both API
generations; the legacy front end (neuronxcc.nki.language) re-exports it
with its extra names (arange, mgrid, par_dim, ...)."""

import math as _math

import numpy as _np

from .. import _dtypes as _dt
from .. import _ops
from .._dtypes import (
    bfloat16,
    bool_,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    int8,  # noqa: F401
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from .._ir import AP, ARG, HBM, OUT, PSUM, SBUF, Affine, IExpr, NkiError, Sym, current, loop

float8_e8m0fnu = None  # MX scales (v4): not modelled
NkiTensor = AP
tensor = AP


class _Buffer:
    def __init__(self, name, kind):
        self.name, self.kind = name, kind

    def __repr__(self):
        return f"nl.{self.name}"

    def view(self, dtype, shape, name=None):
        return ndarray(shape, dtype, buffer=self, name=name)


sbuf = _Buffer("sbuf", SBUF)
psum = _Buffer("psum", PSUM)
hbm = _Buffer("hbm", OUT)
shared_hbm = _Buffer("shared_hbm", OUT)
private_hbm = _Buffer("private_hbm", HBM)


class tile_size:
    pmax = 128
    psum_fmax = 512
    psum_partition_max = 128
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    total_available_sbuf_size = 224 * 1024


class par_dim:
    """Marks the partition dimension of a block tensor (legacy)."""

    def __init__(self, size):
        self.size = int(size)

    def __index__(self):
        return self.size

    def __int__(self):
        return self.size


class _Const:
    def __init__(self, lo, hi):
        self.min, self.max = lo, hi


fp32 = _Const(-3.4028234663852886e38, 3.4028234663852886e38)
bf16 = bfp16 = _Const(-3.3895313892515355e38, 3.3895313892515355e38)
fp16 = _Const(-65504.0, 65504.0)


class finfo:
    """Machine limits of an NKI float dtype (NumPy's finfo fields)."""

    # name: (bits, mantissa bits, max, smallest normal)
    _LIMITS = {
        "float32": (32, 23, 3.4028234663852886e38, 2.0**-126),
        "tfloat32": (32, 10, 3.4028234663852886e38, 2.0**-126),
        "bfloat16": (16, 7, 3.3895313892515355e38, 2.0**-126),
        "float16": (16, 10, 65504.0, 2.0**-14),
        "float8_e4m3": (8, 3, 240.0, 2.0**-6),
        "float8_e4m3fn": (8, 3, 448.0, 2.0**-6),
        "float8_e5m2": (8, 2, 57344.0, 2.0**-14),
    }

    def __init__(self, dtype):
        d = _dt.to_dtype(dtype)
        if str(d) not in self._LIMITS:
            raise NkiError(f"nki: nl.finfo takes a float dtype (got {d})")
        self.dtype = d
        self.bits, self.nmant, self.max, self.tiny = self._LIMITS[str(d)]
        self.min = -self.max
        self.eps = 2.0**-self.nmant
        self.smallest_normal = self.tiny


def _kind(buffer):
    if buffer is None:
        return SBUF
    if isinstance(buffer, _Buffer):
        return buffer.kind
    n = getattr(buffer, "name", None) or str(buffer)
    return {"sbuf": SBUF, "psum": PSUM, "hbm": OUT, "shared_hbm": OUT, "private_hbm": HBM}.get(
        n, SBUF
    )


def ndarray(shape, dtype=float32, buffer=None, name=None, address=None, **kw):
    if isinstance(shape, int):
        shape = (shape,)
    par_axis = 0
    dims = []
    for i, s in enumerate(shape):
        if isinstance(s, par_dim):
            par_axis = i
        dims.append(int(s))
    kind = _kind(buffer)
    t = _ops.alloc(dims, dtype, kind, par_axis=par_axis if kind in (SBUF, PSUM) else 0, name=name)
    tiles = getattr(buffer, "tiles", None)
    if tiles is not None and kind in (SBUF, PSUM):
        _ops.rotate(t, tiles)
    if kind == PSUM and (
        getattr(buffer, "func", None) or getattr(buffer, "base_bank", None) is not None
    ):
        _ops.place_banks(t, buffer.base_bank, buffer.func, tiles)
    return t


def empty_like(x, dtype=None, buffer=None, **kw):
    return ndarray(x.shape, dtype or x.dtype, buffer=buffer)


def full(shape, fill_value, dtype=float32, buffer=None, name=None, **kw):
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    _ops.memset(t, float(fill_value), name="nl.full")
    return t


def zeros(shape, dtype=float32, buffer=None, name=None, **kw):
    return full(shape, 0.0, dtype, buffer, name)


def ones(shape, dtype=float32, buffer=None, name=None, **kw):
    return full(shape, 1.0, dtype, buffer, name)


def zeros_like(x, dtype=None, buffer=None, **kw):
    return zeros(x.shape, dtype or x.dtype, buffer)


def ones_like(x, dtype=None, buffer=None, **kw):
    return ones(x.shape, dtype or x.dtype, buffer)


def full_like(x, fill_value, dtype=None, buffer=None, **kw):
    return full(x.shape, fill_value, dtype or x.dtype, buffer)


def shared_constant(constant, dtype=None, **kw):
    """A constant HBM tensor (bound at run time to the array given here)."""
    d = _dt.to_dtype(_np.asarray(constant).dtype if dtype is None else dtype)
    arr = _dt.to_array(constant, d)
    tr = current()
    t = tr.new_tensor(ARG, d, list(arr.shape))
    tr.constants.append((t.id, arr))
    return AP(t)


def shared_identity_matrix(n, dtype=uint8, **kw):
    return shared_constant(_np.eye(n), dtype=dtype)


# ------------------------------------------------------------ memory movement
def load(src, dtype=None, mask=None, **kw):
    return _ops.copy(None, src, 0, dtype=dtype, mask=mask, name="nl.load")


def store(dst, value, mask=None, **kw):
    if _ops.is_scalar(value):
        t = full((dst.shape[0],) + tuple(dst.shape[1:]), value, dst.dtype)
        value = t
    _ops.copy(
        dst,
        value if value.shape == dst.shape else _ops.conform(value, dst.shape),
        0,
        mask=mask,
        name="nl.store",
    )


def load_transpose2d(src, dtype=None, mask=None, **kw):
    t = _ops.alloc((src.shape[1], src.shape[0]), dtype or src.dtype)
    return _ops.transpose(t, src, 2, name="nl.load_transpose2d")


def copy(src, dtype=None, mask=None, **kw):
    if kw.get("dst") is not None:
        return _ops.copy(kw["dst"], src, 2, mask=mask, name="nl.copy")
    return _ops.copy(None, src, 0, dtype=dtype, mask=mask, name="nl.copy")


def transpose(x, dtype=None, mask=None, **kw):
    return _ops.transpose(None, x, 2, dtype=dtype, name="nl.transpose")


def matmul(x, y, transpose_x=False, mask=None, **kw):
    """x.T @ y with transpose_x (x is (K, M)), else x @ y (x is (M, K));
    the result is an fp32 PSUM tile (M, N)."""
    if not transpose_x:
        x = _ops.transpose(None, x, 2, kind=SBUF, name="nl.matmul")
    return _ops.matmul(None, x, y, name="nl.matmul")


def broadcast_to(x, shape, **kw):
    return x.broadcast_to(shape)


def expand_dims(x, axis, **kw):
    return x.expand_dims(axis)


def ds(start, size):
    return slice(start, start + size)


# ------------------------------------------------------------ math
def _binop(name):
    def f(x, y, dtype=None, mask=None, **kw):
        return _ops.binary(x, y, name, dst=kw.get("dst"), dtype=dtype, mask=mask)

    f.__name__ = f._nki_op = name
    return f


def _unop(name):
    def f(x, dtype=None, mask=None, **kw):
        return _ops.unary(x, name, dst=kw.get("dst"), dtype=dtype, mask=mask)

    f.__name__ = f._nki_op = name
    return f


for _n in [
    "add",
    "subtract",
    "multiply",
    "divide",
    "maximum",
    "minimum",
    "power",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "left_shift",
    "right_shift",
    "abs_max",
    "abs_min",
    "mod",
    "fmod",
]:
    globals()[_n] = _binop(_n)
for _n in [
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "gelu_apprx_tanh",
    "gelu_apprx_sigmoid",
    "silu",
    "softplus",
    "mish",
    "erf",
    "sin",
    "cos",
    "tan",
    "arctan",
    "abs",
    "sign",
    "square",
    "negative",
    "ceil",
    "floor",
    "trunc",
    "gelu_dx",
    "silu_dx",
    "erf_dx",
    "logical_not",
    "invert",
    "bitwise_not",
    "rint",
    "gelu_apprx_sigmoid_dx",
]:
    globals()[_n] = _unop(_n)
identity = _unop("identity")
bypass = _unop("bypass")


def _reduction(name, op):
    def f(x, axis=None, dtype=None, keepdims=False, mask=None, **kw):
        return _ops.reduce(
            kw.get("dst"), op, x, axis, keepdims=keepdims, dtype=dtype, mask=mask, name=f"nl.{name}"
        )

    f.__name__ = name
    f._nki_op = op
    return f


sum = _reduction("sum", "add")  # noqa: A001
max = _reduction("max", "maximum")  # noqa: A001
min = _reduction("min", "minimum")  # noqa: A001
prod = _reduction("prod", "multiply")
all = _reduction("all", "logical_and")  # noqa: A001
any = _reduction("any", "logical_or")  # noqa: A001


def mean(x, axis=None, dtype=None, keepdims=False, mask=None, **kw):
    s = sum(x, axis, dtype=float32, keepdims=keepdims, mask=mask)
    nd = x.ndim
    ax = (
        tuple(range(1, nd)) if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))
    )
    n = 1
    for a in ax:
        n *= x.shape[a]
    return _ops.tensor_scalar(None, s, "multiply", 1.0 / n, dtype=dtype or x.dtype, name="nl.mean")


def var(x, axis=None, dtype=None, keepdims=False, mask=None, **kw):
    m = mean(x, axis, dtype=float32, keepdims=True)
    d = subtract(x, m, dtype=float32)
    return mean(multiply(d, d, dtype=float32), axis, dtype=dtype or x.dtype, keepdims=keepdims)


def softmax(x, axis=-1, dtype=None, **kw):
    m = max(x, axis, dtype=float32, keepdims=True)
    e = exp(subtract(x, m, dtype=float32), dtype=float32)
    s = sum(e, axis, dtype=float32, keepdims=True)
    return divide(e, s, dtype=dtype or x.dtype)


def rms_norm(x, w, axis=-1, n=None, epsilon=1e-6, dtype=None, **kw):
    sq = multiply(x, x, dtype=float32)
    ms = mean(sq, axis, dtype=float32, keepdims=True)
    r = rsqrt(add(ms, float(epsilon), dtype=float32), dtype=float32)
    return multiply(multiply(x, r, dtype=float32), w, dtype=dtype or x.dtype)


def where(condition, x, y, dtype=None, mask=None, **kw):
    return _ops.where(condition, x, y, dst=kw.get("dst"), dtype=dtype, mask=mask)


def dropout(x, rate, dtype=None, mask=None, **kw):
    """Zero each element with probability `rate` (a scalar or a (P, 1) tile);
    kept elements are not rescaled."""
    if _ops.is_scalar(rate) and float(_ops.scalar_value(rate)) == 0.0:
        return copy(x, dtype=dtype)
    return _ops.dropout(None, x, rate, dtype=dtype, name="nl.dropout")


def iota(expr, dtype=int32, mask=None, **kw):
    """Legacy: a tile holding the values of an index expression."""
    e = IExpr.of(expr)
    shape = e.shape if e.ndim else (1, 1)
    t = _ops.alloc(shape, dtype)
    return _ops.iota_expr(t, e, mask=mask, name="nl.iota")


def static_cast(x, dtype):
    """Host helper (legacy tests): a NumPy array cast to dtype."""
    return _dt.to_array(x, dtype)


# ------------------------------------------------------------ loops and SPMD
def affine_range(start, stop=None, step=1, **kw):
    lo, hi = (0, start) if stop is None else (start, stop)
    return loop(lo, hi, step, "affine")


def sequential_range(start, stop=None, step=1, **kw):
    lo, hi = (0, start) if stop is None else (start, stop)
    return loop(lo, hi, step, "sequential")


def static_range(start, stop=None, step=1, **kw):
    lo, hi = (0, start) if stop is None else (start, stop)
    return loop(lo, hi, step, "static")


def dynamic_range(start, stop=None, step=1, **kw):
    lo, hi = (0, start) if stop is None else (start, stop)
    return loop(lo, hi, step, "dynamic")


range = sequential_range  # noqa: A001  (NKI 0.6: the aliases are all range())


def fori_loop(lower, upper, body, init_val=None, **kw):
    """body(i[, carry]) traced once inside one loop; the carry must be
    tiles updated in place."""
    carry = init_val
    for i in loop(lower, upper, 1, "fori"):
        r = body(i) if init_val is None else body(i, carry)
        if init_val is not None and r is not None:
            carry = r
    return carry


def while_loop(*a, **kw):
    raise NkiError(
        "nki: nl.while_loop (register-driven loops) is not supported by this implementation"
    )


class _LoopReduce:
    """`dst[...] = nl.loop_reduce(x, op, loop_indices)`: dst = op(dst, x) on
    every iteration (the assignment accumulates)."""

    def __init__(self, x, op, mask):
        self.x, self.op, self.mask = x, op, mask


def loop_reduce(x, op, loop_indices, dtype=None, mask=None, **kw):
    return _LoopReduce(x, op, mask)


def program_id(axis=0):
    tr = current()
    axis = int(axis)
    if axis >= len(tr.grid) or tr.grid[axis] == 1:
        return 0
    from .._ir import PID_VAR

    return Affine(0, {PID_VAR + axis: 1})


def num_programs(axes=0):
    tr = current()
    if isinstance(axes, (tuple, list)):
        n = 1
        for a in axes:
            n *= tr.grid[a] if a < len(tr.grid) else 1
        return n
    return tr.grid[axes] if axes < len(tr.grid) else 1


def program_ndim():
    return len(current().grid)


class _NoReorder:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def no_reorder():
    return _NoReorder()


def device_print(prefix, x, **kw):
    """Printing tile values needs a host step; the traced kernel prints its
    shape once at trace time instead."""
    print(prefix, x)


def random_seed(seed, **kw):
    pass


def gather_flattened(data, indices, axis=0, dtype=None, **kw):
    """Per partition, the elements of data's flattened free dims at
    `indices` (same partitions as data)."""
    return _ops.gather_flattened(data, indices, dtype=dtype)


def rand(shape, dtype=float32, buffer=None, name=None, **kw):
    """A tile of uniform [0, 1) values (nl.random_seed does not change the
    stream)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 1:
        shape = shape + (1,)
    t = _ops.alloc(shape, dtype, name=name)
    return _ops.rand(t)


# ------------------------------------------------------------ legacy index expressions
def arange(start, stop=None, step=1):
    lo, hi = (0, start) if stop is None else (start, stop)
    lo, hi, step = int(lo), int(hi), int(step)
    n = len(_range(lo, hi, step))
    return IExpr(Affine(lo), {Sym(n, 0): step}, 1)


import builtins as _builtins  # noqa: E402

_range = _builtins.range


class _MGrid:
    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        nd = len(key)
        out = []
        for i, k in enumerate(key):
            lo = 0 if k.start is None else int(k.start)
            step = 1 if k.step is None else int(k.step)
            n = len(_range(lo, int(k.stop), step))
            out.append(IExpr(Affine(lo), {Sym(n, nd - 1 - i): step}, nd))
        return _Grid(out)


class _Grid(tuple):
    def __new__(cls, items):
        return super().__new__(cls, items)

    @property
    def p(self):
        return self[0]

    @property
    def x(self):
        return self[1]

    @property
    def y(self):
        return self[2]

    @property
    def z(self):
        return self[3]


mgrid = _MGrid()


def nc(n):
    """Legacy multi-core grid dimension: here the instances of all cores run
    on the device's threads, so nl.nc(k) is a grid dimension of size k."""
    return int(n)


def spmd_dim(*dims, **kw):
    """Legacy: a grid dimension made of several (e.g. spmd_dim(nc(2), 2))."""
    n = 1
    for d in dims:
        n *= int(d)
    return n
