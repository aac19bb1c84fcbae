"""nki.typing: annotations kernels may use (they do not change tracing)."""

from ._ir import AP as tensor  # noqa: F401
from ._ir import AP as NkiTensor  # noqa: F401


class _Anno:
    def __getitem__(self, item):
        return tensor


scalar = int
mutable_tensor = tensor
