"""nki.compiler: allocation hints. Memory placement is the compiler's here,
so addresses are accepted and ignored; what a hint says about capacity is
kept: mod_alloc's num_free_tiles (SBUF) / num_bank_tiles (PSUM) rotate a
tensor's block tiles through that many physical buffers (block i in buffer
i % n), so the SBUF/PSUM capacity check counts those buffers only."""


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
    _tiles_kw = "num_free_tiles"

    def __init__(self, *a, **kw):
        t = kw.get(self._tiles_kw)
        # physical buffers per block dim (leading block dims; the rest keep
        # one buffer per tile); None: no rotation
        self.tiles = tuple(int(n) for n in t) if t else None

    def __call__(self, *a, **kw):
        return self


class _PsumAlloc(_Alloc):
    name = "psum"
    _tiles_kw = "num_bank_tiles"


class sbuf:
    mod_alloc = alloc = auto_alloc = _Alloc


class psum:
    mod_alloc = alloc = auto_alloc = _PsumAlloc
