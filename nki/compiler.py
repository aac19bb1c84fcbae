"""nki.compiler: allocation hints. Memory placement is the compiler's here,
so the hints are accepted and ignored (SBUF/PSUM capacity is still checked)."""


def skip_middle_end_transformations(fn):
    return fn


def enable_stack_allocator(*a, **kw):
    return None


def force_auto_alloc(fn):
    return fn


class _Alloc:
    """A placement hint; `name` keeps the memory it places in (nl.ndarray's
    buffer=sbuf.mod_alloc(...) is an SBUF tile, psum.mod_alloc(...) a PSUM
    one)."""

    name = "sbuf"

    def __init__(self, *a, **kw):
        pass

    def __call__(self, *a, **kw):
        return self


class _PsumAlloc(_Alloc):
    name = "psum"


class sbuf:
    mod_alloc = alloc = auto_alloc = _Alloc


class psum:
    mod_alloc = alloc = auto_alloc = _PsumAlloc
