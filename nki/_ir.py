"""Tracing: a kernel runs once per signature on symbolic handles and
records a tile-instruction program (the text format of libtrn's
src/nki/nki_impl.h). Loops stay loops: ``affine_range`` yields one symbolic
index (an ``Affine``) and records a loop around the body, traced once.

Owns: Affine / IExpr / Pred (index arithmetic, legacy arange/mgrid and
masks), Tensor (a memory), AP (an access pattern over one: the handle
kernels index and pass to instructions), Tracer (the program being built).
Instruction emitters live in _ops.py."""

import os
import sys
import threading

from . import _dtypes as dt

PID_VAR = 1000
MAXT = 24


class NkiError(ValueError):
    """A kernel that NKI rejects (raised while tracing or checking)."""


class Concretize(Exception):
    """A symbolic loop index was used as a Python value (``if i == 0``);
    the tracer retraces with that loop unrolled."""

    def __init__(self, vars_):
        super().__init__("symbolic loop index used as a Python value")
        self.vars = vars_


_HERE = os.path.dirname(os.path.abspath(__file__))
_LEGACY = os.path.join(os.path.dirname(_HERE), "neuronxcc")


def user_loc():
    """file:line of the innermost frame outside the nki packages."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not (fn.startswith(_HERE) or fn.startswith(_LEGACY)):
            return f"{os.path.basename(fn)}:{f.f_lineno}"
        f = f.f_back
    return "?"


def _esc(s):
    out = []
    for ch in str(s):
        if ch in " \t\r\n%" or ord(ch) < 33 or ord(ch) > 126:
            out.extend("%%%02X" % b for b in ch.encode())
        else:
            out.append(ch)
    return "".join(out) or "-"


# ---------------------------------------------------------------- index arithmetic
class _Ordered:
    """<, <=, >, >= through the class's ``_cmp(o, op)`` (Affine: a Python
    bool on constants, else a predicate; IExpr: a predicate)."""

    __slots__ = ()

    def __lt__(self, o):
        return self._cmp(o, "lt")

    def __le__(self, o):
        return self._cmp(o, "le")

    def __gt__(self, o):
        return self._cmp(o, "gt")

    def __ge__(self, o):
        return self._cmp(o, "ge")


class Affine(_Ordered):
    """c + sum(coef * var): a loop index, a program id, or arithmetic on them."""

    __slots__ = ("c", "t")

    def __init__(self, c=0, t=None):
        self.c = int(c)
        self.t = {k: v for k, v in (t or {}).items() if v != 0}

    @staticmethod
    def of(x):
        if isinstance(x, Affine):
            return x
        if isinstance(x, bool):
            return Affine(int(x))
        if isinstance(x, int) or (hasattr(x, "__index__") and not isinstance(x, (AP, IExpr))):
            return Affine(int(x.__index__()) if not isinstance(x, int) else x)
        raise NkiError(f"nki: {x!r} is not an integer index")

    def is_const(self):
        return not self.t

    def _bin(self, o, sign):
        if isinstance(o, IExpr):
            return NotImplemented
        if isinstance(o, float) and o.is_integer():
            o = int(o)
        if not isinstance(o, (int, Affine)) and not hasattr(o, "__index__"):
            return NotImplemented
        o = Affine.of(o)
        t = dict(self.t)
        for k, v in o.t.items():
            t[k] = t.get(k, 0) + sign * v
        return Affine(self.c + sign * o.c, t)

    def __add__(self, o):
        return self._bin(o, 1)

    __radd__ = __add__

    def __sub__(self, o):
        return self._bin(o, -1)

    def __rsub__(self, o):
        r = self._bin(o, -1)
        return r if r is NotImplemented else -r

    def __neg__(self):
        return Affine(-self.c, {k: -v for k, v in self.t.items()})

    def __pos__(self):
        return self

    def __mul__(self, o):
        if isinstance(o, Affine):
            if o.is_const():
                o = o.c
            elif self.is_const():
                return o * self.c
            else:
                raise NkiError("nki: the product of two loop indices is not an affine index")
        if isinstance(o, IExpr):
            return NotImplemented
        if isinstance(o, float) and o.is_integer():
            o = int(o)
        if not isinstance(o, int):
            return NotImplemented
        return Affine(self.c * o, {k: v * o for k, v in self.t.items()})

    __rmul__ = __mul__

    def _const_op(self, o, name):
        if self.is_const() and (isinstance(o, int) or (isinstance(o, Affine) and o.is_const())):
            return None
        if (
            isinstance(o, int)
            and o != 0
            and all(v % o == 0 for v in self.t.values())
            and name == "floordiv"
        ):
            if self.c % o == 0:
                return Affine(self.c // o, {k: v // o for k, v in self.t.items()})
        raise Concretize(list(self.t))

    def __floordiv__(self, o):
        r = self._const_op(o, "floordiv")
        return r if r is not None else Affine(self.c // Affine.of(o).c)

    def __mod__(self, o):
        r = self._const_op(o, "mod")
        return r if r is not None else Affine(self.c % Affine.of(o).c)

    def __rfloordiv__(self, o):
        if self.is_const():
            return Affine(o // self.c)
        raise Concretize(list(self.t))

    def __index__(self):
        if self.is_const():
            return self.c
        raise Concretize(list(self.t))

    __int__ = __index__

    def __bool__(self):
        if self.is_const():
            return self.c != 0
        raise Concretize(list(self.t))

    def __hash__(self):
        return hash((self.c, tuple(sorted(self.t.items()))))

    def _cmp(self, o, op):
        if isinstance(o, (AP,)):
            return NotImplemented
        if (
            isinstance(o, IExpr)
            or not self.is_const()
            or (isinstance(o, Affine) and not o.is_const())
        ):
            return IExpr.of(self)._cmp(o, op)
        v, w = self.c, Affine.of(o).c if not isinstance(o, float) else o
        return {"eq": v == w, "ne": v != w, "lt": v < w, "le": v <= w, "gt": v > w, "ge": v >= w}[
            op
        ]

    def __eq__(self, o):
        if not isinstance(o, (int, Affine, IExpr, float)):
            return NotImplemented
        return self._cmp(o, "eq")

    def __ne__(self, o):
        if not isinstance(o, (int, Affine, IExpr, float)):
            return NotImplemented
        return self._cmp(o, "ne")

    def __repr__(self):
        return f"Affine({self.c}, {self.t})"

    def text(self):
        if len(self.t) > MAXT:
            raise NkiError("nki: index expression over too many loop variables")
        return " ".join([str(self.c), str(len(self.t))] + [f"{k} {v}" for k, v in self.t.items()])


def as_index(x):
    """int / Affine (loop arithmetic) from anything integral."""
    if isinstance(x, Affine):
        return x.c if x.is_const() else x
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if hasattr(x, "__index__") and not isinstance(x, (AP, IExpr)):
        return x.__index__()
    raise NkiError(f"nki: {x!r} is not an integer index")


class Sym:
    """One axis of a legacy index expression (arange/mgrid): values
    0..size-1 placed at `rpos` (axis counted from the right)."""

    __slots__ = ("size", "rpos", "uid")
    _n = [0]

    def __init__(self, size, rpos):
        self.size, self.rpos = size, rpos
        Sym._n[0] += 1
        self.uid = Sym._n[0]


class IExpr(_Ordered):
    """Legacy index expression: affine over loop indices plus syms."""

    __slots__ = ("a", "s", "ndim")

    def __init__(self, a, s, ndim):
        self.a, self.s, self.ndim = a, s, ndim  # s: {Sym: coef}

    @staticmethod
    def of(x):
        if isinstance(x, IExpr):
            return x
        return IExpr(Affine.of(as_index(x)) if not isinstance(x, Affine) else x, {}, 0)

    def _bin(self, o, sign):
        if isinstance(o, AP):
            return NotImplemented
        o = IExpr.of(o)
        s = dict(self.s)
        for k, v in o.s.items():
            s[k] = s.get(k, 0) + sign * v
        return IExpr(self.a + (o.a if sign > 0 else -o.a), s, max(self.ndim, o.ndim))

    def __add__(self, o):
        return self._bin(o, 1)

    __radd__ = __add__

    def __sub__(self, o):
        return self._bin(o, -1)

    def __rsub__(self, o):
        return (-self)._bin(o, 1)

    def __neg__(self):
        return IExpr(-self.a, {k: -v for k, v in self.s.items()}, self.ndim)

    def __mul__(self, o):
        o = as_index(o)
        if not isinstance(o, int):
            if self.s:
                raise NkiError("nki: index expression times a loop index is not affine")
            return IExpr(self.a * o, {}, self.ndim)
        return IExpr(self.a * o, {k: v * o for k, v in self.s.items()}, self.ndim)

    __rmul__ = __mul__

    def __getitem__(self, key):
        # arange(n)[:, None] / [None, :]: place the expression's axis
        if not isinstance(key, tuple):
            key = (key,)
        nd = len(key)
        if self.ndim > 1:
            raise NkiError("nki: only 1-d index expressions can be re-shaped with None")
        axis = [i for i, k in enumerate(key) if k is not None]
        if len(axis) != 1:
            raise NkiError("nki: use arange(n)[:, None] or arange(n)[None, :]")
        s = {Sym(k.size, nd - 1 - axis[0]): v for k, v in self.s.items()}
        return IExpr(self.a, s, nd)

    @property
    def shape(self):
        dims = [1] * self.ndim
        for k in self.s:
            dims[self.ndim - 1 - k.rpos] = k.size
        return tuple(dims)

    def _cmp(self, o, op):
        return Pred([(self - IExpr.of(o) if not isinstance(o, IExpr) else self - o, op)])

    def __eq__(self, o):
        return self._cmp(o, "eq")

    def __ne__(self, o):
        return self._cmp(o, "ne")

    __hash__ = object.__hash__


CMP = {"eq": 8, "ne": 9, "lt": 10, "le": 11, "gt": 12, "ge": 13}


class Pred:
    """Conjunction of (expr cmp 0): masks and affine_select predicates."""

    def __init__(self, terms):
        self.terms = terms

    def __and__(self, o):
        if isinstance(o, bool):
            return self if o else Pred([(IExpr.of(1), "lt")])
        return Pred(self.terms + o.terms)

    __rand__ = __and__

    def __bool__(self):
        vars_ = [v for e, _ in self.terms for v in e.a.t]
        if vars_ and not any(e.s for e, _ in self.terms):
            raise Concretize(vars_)  # `if i == 0` on a loop index: unroll that loop
        raise NkiError("nki: a mask/predicate expression has no Python truth value")


def expr_text(e, nd, cmp="ge"):
    """IExpr -> libtrn expr text over the iteration dims 0..nd-1 (syms by
    their right-aligned axis)."""
    e = IExpr.of(e)
    coefs = [0] * nd
    for k, v in e.s.items():
        j = nd - 1 - k.rpos
        if not 0 <= j < nd:
            raise NkiError("nki: the index expression has more dimensions than the instruction")
        coefs[j] += v
    return f"{e.a.text()} {nd} {' '.join(map(str, coefs))} {CMP[cmp]}".replace("  ", " ")


# ---------------------------------------------------------------- tensors
ARG, OUT, SBUF, PSUM, HBM, VIEW = range(6)
KIND_NAME = {
    ARG: "hbm",
    OUT: "shared_hbm",
    SBUF: "sbuf",
    PSUM: "psum",
    HBM: "private_hbm",
    VIEW: "view",
}


class Tensor:
    __slots__ = (
        "id",
        "kind",
        "dtype",
        "shape",
        "strides",
        "par_axis",
        "base",
        "offset",
        "loc",
        "name",
        "mask",
        "rot",
        "banks",
    )

    def __init__(
        self,
        id_,
        kind,
        dtype,
        shape,
        strides=None,
        par_axis=0,
        base=-1,
        offset=0,
        loc="?",
        name=None,
    ):
        self.id, self.kind, self.dtype, self.shape = id_, kind, dtype, tuple(int(s) for s in shape)
        if strides is None:
            strides, run = [], 1
            for s in reversed(self.shape):
                strides.insert(0, run)
                run *= s
        self.strides = tuple(strides)
        self.par_axis, self.base, self.offset, self.loc, self.name = (
            par_axis,
            base,
            offset,
            loc,
            name,
        )
        self.mask = (
            None  # legacy: the mask= its producing instruction had (x[...] = op(..., mask=m))
        )
        self.rot = 0  # mod_alloc: physical block tiles (0: one per block tile)
        self.banks = 0  # explicitly placed PSUM: bit b set for each bank b it occupies

    def text(self):
        nd = len(self.shape)
        return " ".join(
            ["T", str(self.id), str(self.kind), str(self.dtype.code), str(nd)]
            + [str(s) for s in self.shape]
            + [str(s) for s in self.strides]
            + [str(self.par_axis), str(self.base), str(self.offset), _esc(self.loc)]
        )


class AP:
    """An access pattern over a Tensor: the handle kernels see (NkiTensor).
    dims: counts of its own dims; idx[d] = (Affine base, [coef per dim]) for
    each tensor dim d."""

    __slots__ = ("tensor", "dims", "idx", "gather", "__weakref__")

    def __init__(self, tensor, dims=None, idx=None):
        self.tensor = tensor
        # indirect access: (index tile, tensor dim) - element p of the
        # partition axis reads row index_tile[p] of that dim (DMA only)
        self.gather = None
        if dims is None:
            nd = len(tensor.shape)
            dims = list(tensor.shape)
            idx = [(Affine(0), [1 if j == d else 0 for j in range(nd)]) for d in range(nd)]
        self.dims, self.idx = list(dims), idx

    def __class_getitem__(cls, item):  # nki.typing.tensor[128, 512] annotations
        return cls

    # -- properties
    @property
    def shape(self):
        return tuple(self.dims)

    @property
    def dtype(self):
        return self.tensor.dtype

    @property
    def ndim(self):
        return len(self.dims)

    @property
    def buffer(self):
        from . import language as nl

        k = self.tensor.kind
        return {
            SBUF: nl.sbuf,
            PSUM: nl.psum,
            ARG: nl.hbm,
            OUT: nl.shared_hbm,
            HBM: nl.private_hbm,
        }.get(k, nl.sbuf)

    def __len__(self):
        return self.dims[0]

    def __repr__(self):
        return f"NkiTensor(shape={self.shape}, dtype={self.dtype}, buffer={KIND_NAME[self.tensor.kind]})"

    def __iter__(self):
        raise NkiError("nki: tensors are not iterable; index them")

    def __bool__(self):
        # a kernel argument is a handle: true, as any Python object (AWS's
        # tracer too; kernels write `x = nl.load(t) if t else None`); a
        # computed tile's truth would need its values
        if self.tensor.kind in (ARG, OUT):
            return True
        raise NkiError("nki: a tile has no Python truth value")

    def same(self, o):
        return (
            isinstance(o, AP)
            and o.tensor is self.tensor
            and o.dims == self.dims
            and [(b.c, b.t, c) for b, c in o.idx] == [(b.c, b.t, c) for b, c in self.idx]
        )

    # -- indexing
    def _compose(self, newdims, vals):
        """vals[j] = (Affine, {newdim: coef}) for each of our dims."""
        idx = []
        for base, coefs in self.idx:
            b = base
            nc = [0] * len(newdims)
            for j, (vb, vc) in enumerate(vals):
                if coefs[j]:
                    b = b + vb * coefs[j]
                    for nd_, c in vc.items():
                        nc[nd_] += c * coefs[j]
            idx.append((b, nc))
        return AP(self.tensor, newdims, idx)

    def _key(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is Ellipsis for k in key):
            i = [j for j, k in enumerate(key) if k is Ellipsis][0]
            fill = len(self.dims) - (len(key) - 1)
            key = key[:i] + (slice(None),) * fill + key[i + 1 :]
        if len(key) > len(self.dims):
            raise NkiError(f"nki: {len(key)} indices for a {len(self.dims)}-d tensor")
        return key + (slice(None),) * (len(self.dims) - len(key))

    def __getitem__(self, key):
        key = self._key(key)
        if self.gather is not None:
            raise NkiError("nki: an indirect access pattern cannot be indexed again")
        if any(isinstance(k, AP) for k in key):
            return self._indirect(key)
        if any(isinstance(k, IExpr) for k in key):
            return self._index_exprs(key)
        newdims, vals = [], []
        for j, k in enumerate(key):
            if isinstance(k, slice):
                n = self.dims[j]
                start = 0 if k.start is None else as_index(k.start)
                step = 1 if k.step is None else as_index(k.step)
                if isinstance(step, Affine) or step <= 0:
                    raise NkiError("nki: slice steps must be positive integers")
                if k.stop is None:
                    stop = n
                else:
                    stop = as_index(k.stop)
                if isinstance(start, int) and start < 0:
                    start += n
                if isinstance(stop, int) and stop < 0:
                    stop += n
                if isinstance(start, Affine) or isinstance(stop, Affine):
                    size = Affine.of(stop) - Affine.of(start)
                    if not size.is_const():
                        raise NkiError(
                            "nki: a slice's size must not depend on a loop index (use nl.ds(start, size))"
                        )
                    size = size.c
                    cnt = max(0, -(-size // step))
                else:
                    stop = min(stop, n) if k.stop is None else stop
                    cnt = max(0, -(-(stop - start) // step))
                vals.append((Affine.of(start), {len(newdims): step}))
                newdims.append(cnt)
            else:
                v = as_index(k)
                if isinstance(v, int) and v < 0:
                    v += self.dims[j]
                if self._keeps_int_dim(j):
                    vals.append((Affine.of(v), {len(newdims): 0}))
                    newdims.append(1)
                else:
                    vals.append((Affine.of(v), {}))
        return self._compose(newdims, vals)

    def _indirect(self, key):
        """tensor[index_tile, ...]: rows chosen at run time by a (K, 1)
        int32/uint32 SBUF tile (indirect DMA: gather when read, scatter when
        written). The index selects the partition axis of the access."""
        js = [j for j, k in enumerate(key) if isinstance(k, AP)]
        it = key[js[0]]
        if len(js) != 1:
            raise NkiError("nki: indirect access takes one index tile")
        if self.tensor.kind in (SBUF, PSUM):
            raise NkiError("nki: indirect access (an index tile) reads or writes HBM tensors only")
        if it.tensor.kind != SBUF or it.ndim != 2 or it.dims[1] != 1:
            raise NkiError(f"nki: the index tile must be a (K, 1) SBUF tile, got {it.shape}")
        if str(it.dtype) not in ("int32", "uint32"):
            raise NkiError(f"nki: the index tile must be int32 or uint32, not {it.dtype}")
        j, k_rows = js[0], it.dims[0]
        rest = list(key)
        exprs = [e for e in rest if isinstance(e, IExpr)]
        if exprs:  # legacy: t[idx_tile, iy] next to arange expressions
            nd = max(e.ndim for e in exprs)
            rest[j] = IExpr(Affine(0), {Sym(k_rows, nd - 1): 1}, nd)
        else:
            rest[j] = slice(0, k_rows)
        view = self[tuple(rest)]
        want = [1] + [0] * (view.ndim - 1)
        b, c = view.idx[j]
        if not (b.is_const() and b.c == 0 and c == want) or any(
            cc[0] != 0 for d, (_, cc) in enumerate(view.idx) if d != j
        ):
            raise NkiError("nki: the index tile must select the access's partition (first) axis")
        view.gather = (it, j)
        return view

    def _keeps_int_dim(self, j):
        """Legacy tiles: an integer index on the partition or a free dim
        keeps it (size 1); on a block dim (before par_dim) it drops it."""
        tr = active()
        if tr is None or not tr.legacy or self.tensor.kind not in (SBUF, PSUM):
            return False
        d = next((d for d, (_, c) in enumerate(self.idx) if c[j] != 0), None)
        return d is not None and d >= self.tensor.par_axis

    def _index_exprs(self, key):
        ex = [IExpr.of(k) if not isinstance(k, slice) else k for k in key]
        if any(isinstance(k, slice) for k in ex):
            # a full slice next to index expressions: its own axis
            raise NkiError("nki: mixing slices and arange/mgrid index expressions is not supported")
        nd = max(e.ndim for e in ex)
        newdims = [1] * nd
        for e in ex:
            for s in e.s:
                pos = nd - 1 - s.rpos
                if newdims[pos] not in (1, s.size):
                    raise NkiError("nki: index expressions disagree on a dimension's size")
                newdims[pos] = s.size
        vals = []
        for e in ex:
            c = {}
            for s, v in e.s.items():
                pos = nd - 1 - s.rpos
                c[pos] = c.get(pos, 0) + v
            vals.append((e.a, c))
        return self._compose(newdims, vals)

    def __setitem__(self, key, value):
        from . import _ops

        dst = self[key]
        if isinstance(value, AP) and value.same(dst):
            return
        _ops.assign(dst, value)

    # -- views
    def _is_whole(self):
        nd = len(self.tensor.shape)
        return (
            self.dims == list(self.tensor.shape)
            and all(
                b.is_const()
                and b.c == 0
                and c == [1 if j == d else 0 for j in range(len(self.dims))]
                for d, (b, c) in enumerate(self.idx)
            )
            and nd == len(self.dims)
        )

    def reshape(self, *shape, **kw):
        if "shape" in kw and not shape:  # legacy keyword form: t.reshape(shape=(...))
            shape = (kw.pop("shape"),)
        if kw:
            raise NkiError(f"nki: reshape() got unexpected arguments {sorted(kw)}")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = [int(s) for s in shape]
        n = 1
        for s in self.dims:
            n *= s
        if -1 in shape:
            k = 1
            for s in shape:
                if s != -1:
                    k *= s
            shape[shape.index(-1)] = n // k
        m = 1
        for s in shape:
            m *= s
        if m != n:
            raise NkiError(f"nki: cannot reshape {self.shape} into {tuple(shape)}")
        return self._view(shape, self.dtype)

    def view(self, dtype):
        dtype = dt.to_dtype(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise NkiError("nki: view(dtype) needs a dtype of the same size here")
        return self._view(list(self.dims), dtype)

    def _view(self, shape, dtype):
        tr = current()
        t = self.tensor
        if self._is_whole():
            contiguous = list(t.strides) == list(Tensor(0, SBUF, dtype, t.shape).strides)
            if contiguous:
                return AP(tr.new_tensor(VIEW, dtype, shape, base=t.id, offset=0))
        # a slice contiguous in memory over its free dims (e.g. tile[:, k]):
        # view its partition rows
        raise NkiError(
            "nki: reshape/view of a sliced or strided tensor is not supported here; reshape the whole tensor"
        )

    def broadcast_to(self, shape):
        shape = tuple(int(s) for s in shape)
        tr = active()
        if (
            tr is not None
            and tr.legacy
            and self.tensor.kind in (SBUF, PSUM)
            and 0 < len(self.dims) < len(shape)
            and self.dims[0] == shape[0]
        ):
            # legacy: a reduced tile (P,) keeps its partition axis first;
            # the missing dims are free dims it is broadcast along (as AWS's
            # simulator: per-partition values, not NumPy's leading dims)
            ap = self
            while len(ap.dims) < len(shape):
                ap = ap.expand_dims(len(ap.dims))
            return ap.broadcast_to(shape)
        if len(shape) != len(self.dims):
            raise NkiError(
                f"nki: broadcast_to {shape} from {self.shape}: same number of dims required"
            )
        dims = list(self.dims)
        idx = [(b, list(c)) for b, c in self.idx]
        for j, (a, b) in enumerate(zip(self.dims, shape)):
            if a == b:
                continue
            if a != 1:
                raise NkiError(f"nki: cannot broadcast {self.shape} to {shape}")
            dims[j] = b
            for _, c in idx:
                c[j] = 0
        return AP(self.tensor, dims, idx)

    def expand_dims(self, axis):
        nd = len(self.dims) + 1
        if axis < 0:
            axis += nd
        dims = self.dims[:axis] + [1] + self.dims[axis:]
        idx = [(b, c[:axis] + [0] + c[axis:]) for b, c in self.idx]
        return AP(self.tensor, dims, idx)

    def squeeze_to(self, ndims_keep):
        """Drops size-1 dims beyond the first `ndims_keep` dims."""
        keep = [j for j in range(len(self.dims)) if j < ndims_keep or self.dims[j] != 1]
        return AP(
            self.tensor,
            [self.dims[j] for j in keep],
            [(b, [c[j] for j in keep]) for b, c in self.idx],
        )

    def flat_free(self):
        """(P, F) view if the free dims are mergeable (strides nest)."""
        return self

    def ap(self, pattern, offset=0, **kw):
        """Raw access pattern [[stride, count], ...] over the tensor's memory
        (elements, partition pattern first)."""
        if kw.get("vector_offset") is not None or kw.get("scalar_offset") is not None:
            raise NkiError(
                "nki: .ap(vector_offset/scalar_offset) (indirect access) is not supported"
            )
        t = self.tensor
        strides = (
            Tensor(0, SBUF, t.dtype, t.shape).strides
            if t.kind != ARG and t.kind != OUT
            else t.strides
        )
        # express a flat pattern over a tensor viewed as 1-d of its elements
        n = 1
        for s in t.shape:
            n *= s
        flat = (
            AP(current().new_tensor(VIEW, t.dtype, [n], strides=[1], base=t.id, offset=0))
            if list(strides) == list(Tensor(0, SBUF, t.dtype, t.shape).strides)
            else None
        )
        if flat is None:
            raise NkiError("nki: .ap() on a non-contiguous tensor is not supported")
        dims = [int(c) for _, c in pattern]
        idx = [(Affine.of(as_index(offset)), [int(s) for s, _ in pattern])]
        return AP(flat.tensor, dims, idx)

    def operand_text(self):
        parts = (
            [str(self.tensor.id), str(len(self.dims))]
            + [str(d) for d in self.dims]
            + [str(len(self.idx))]
        )
        for b, c in self.idx:
            parts.append(b.text())
            parts.extend(str(x) for x in c)
        return " ".join(parts)

    # -- arithmetic sugar: nl ops (legacy semantics: broadcasting, promotion)
    def _b(self, o, op, rev=False):
        from . import _ops

        return _ops.binary(o, self, op) if rev else _ops.binary(self, o, op)

    def __add__(self, o):
        return self._b(o, "add")

    def __radd__(self, o):
        return self._b(o, "add", True)

    def __sub__(self, o):
        return self._b(o, "subtract")

    def __rsub__(self, o):
        return self._b(o, "subtract", True)

    def __mul__(self, o):
        return self._b(o, "multiply")

    def __rmul__(self, o):
        return self._b(o, "multiply", True)

    def __truediv__(self, o):
        return self._b(o, "divide")

    def __rtruediv__(self, o):
        return self._b(o, "divide", True)

    def __pow__(self, o):
        return self._b(o, "power")

    def __rpow__(self, o):
        return self._b(o, "power", True)

    def __mod__(self, o):
        return self._b(o, "mod")

    def __and__(self, o):
        return self._b(o, "bitwise_and")

    def __or__(self, o):
        return self._b(o, "bitwise_or")

    def __xor__(self, o):
        return self._b(o, "bitwise_xor")

    def __lt__(self, o):
        return self._b(o, "less")

    def __le__(self, o):
        return self._b(o, "less_equal")

    def __gt__(self, o):
        return self._b(o, "greater")

    def __ge__(self, o):
        return self._b(o, "greater_equal")

    def __eq__(self, o):
        return self._b(o, "equal")

    def __ne__(self, o):
        return self._b(o, "not_equal")

    __hash__ = object.__hash__

    def __neg__(self):
        from . import _ops

        return _ops.unary(self, "negative")

    def __abs__(self):
        from . import _ops

        return _ops.unary(self, "abs")

    def _inplace(self, o, op):
        from . import _ops

        if op == "add" and _ops.matmul_into(self, o):
            return self
        _ops.binary(self, o, op, dst=self)
        return self

    def __iadd__(self, o):
        return self._inplace(o, "add")

    def __isub__(self, o):
        return self._inplace(o, "subtract")

    def __imul__(self, o):
        return self._inplace(o, "multiply")

    def __itruediv__(self, o):
        return self._inplace(o, "divide")


# ---------------------------------------------------------------- tracer
_tls = threading.local()


def current():
    t = getattr(_tls, "tracer", None)
    if t is None:
        raise NkiError(
            "nki: this call is only valid inside a kernel being traced (call the @nki.jit kernel)"
        )
    return t


def active():
    return getattr(_tls, "tracer", None)


class Tracer:
    def __init__(self, name, grid, target=3, unroll=frozenset(), legacy=False):
        self.name, self.grid, self.target, self.unroll, self.legacy = (
            name,
            tuple(grid),
            target,
            unroll,
            legacy,
        )
        self.tensors = []
        self.lines = []
        self.nvars = 0
        self.loop_keys = {}  # var -> loop key (for unrolling on Concretize)
        self.depth = 0
        self.constants = []  # (tensor id, numpy array) for shared_constant
        self.n_instr = 0
        self.unroll_all = False

    def __enter__(self):
        self._prev = active()
        _tls.tracer = self
        return self

    def __exit__(self, *a):
        _tls.tracer = self._prev

    def new_tensor(
        self, kind, dtype, shape, strides=None, par_axis=0, base=-1, offset=0, name=None
    ):
        for s in shape:
            if not isinstance(s, int):
                raise NkiError(f"nki: tensor shapes must be integers (got {shape})")
        t = Tensor(
            len(self.tensors), kind, dtype, shape, strides, par_axis, base, offset, user_loc(), name
        )
        self.tensors.append(t)
        if kind in (SBUF, PSUM, HBM):
            self.lines.append(f"P {t.id} {_esc(t.loc)}")
        return t

    def begin_loop(self, lo, hi, step, key):
        v = self.nvars
        self.nvars += 1
        if v >= PID_VAR:
            raise NkiError("nki: too many loops")
        self.loop_keys[v] = key
        self.lines.append(f"L {v} {lo} {hi} {step} {_esc(user_loc())}")
        self.depth += 1
        return Affine(0, {v: 1})

    def end_loop(self):
        self.lines.append("E")
        self.depth -= 1

    def emit(self, op, name, params, operands, exprs=(), masks=()):
        self.n_instr += 1
        parts = ["I", str(op), _esc(name), _esc(user_loc()), str(len(params))]
        parts += [repr(float(p)) for p in params]
        parts.append(str(len(operands)))
        parts += [o.operand_text() for o in operands]
        parts.append(str(len(exprs)))
        parts += list(exprs)
        parts.append(str(len(masks)))
        parts += list(masks)
        self.lines.append(" ".join(parts))

    def text(self):
        head = f"K {_esc(self.name)} {self.target} {len(self.grid)} " + " ".join(
            str(g) for g in self.grid
        )
        rot = [f"R {t.id} {t.rot}" for t in self.tensors if t.rot]
        rot += [f"B {t.id} {t.banks}" for t in self.tensors if t.banks]
        return "\n".join([head] + [t.text() for t in self.tensors] + rot + self.lines) + "\n"


def loop(lo, hi, step, kind):
    """The range aliases: one symbolic index, body traced once (unless the
    tracer unrolls this loop: its index was needed as a Python value)."""
    tr = active()
    if step == 0:
        raise NkiError("nki: range step must not be 0")
    vals = (lo, hi, step)
    if tr is None or any(isinstance(v, Affine) and not v.is_const() for v in vals):
        if tr is not None:
            raise NkiError("nki: loop bounds must not depend on another loop's index here")
        yield from range(int(lo), int(hi), int(step))
        return
    lo, hi, step = (as_index(v) for v in vals)
    f = sys._getframe(1)
    key = (f.f_code.co_filename, f.f_lineno, kind)
    n = len(range(lo, hi, step))
    if n == 0:
        return
    if kind == "static" or key in tr.unroll or tr.unroll_all or n == 1 or step < 0:
        yield from range(lo, hi, step)
        return
    v = tr.begin_loop(lo, hi, step, key)
    try:
        yield v
    finally:
        tr.end_loop()
