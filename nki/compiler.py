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
    """psum.mod_alloc(base_bank, ..., num_bank_tiles=...) places the block
    tiles in banks base_bank, base_bank + 1, ... (one run of banks per
    physical tile); psum.alloc(func) asks func(idx=block index, pdim_size=partitions,
    fdim_size=bytes per partition) for (bank, partition, address) of each block tile.
    Tensors placed so may share banks (kernels reuse a bank for tensors
    whose lifetimes they order): the PSUM capacity check counts the banks
    they name, once."""

    name = "psum"
    _tiles_kw = "num_bank_tiles"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.func = a[0] if a and callable(a[0]) else kw.get("func")
        bb = kw.get("base_bank", a[0] if a and not callable(a[0]) else None)
        self.base_bank = None if bb is None else int(bb)


class sbuf:
    mod_alloc = alloc = auto_alloc = _Alloc


class psum:
    mod_alloc = alloc = auto_alloc = _PsumAlloc
