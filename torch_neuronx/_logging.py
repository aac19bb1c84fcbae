"""Python side of OpenNeuron's logging: the same sink, level and format as
libtrn's (``TORCH_NEURONX_LOG_LEVEL``, ``TORCH_NEURONX_LOG_FILE``), so Python
components (compile backend, collectives) log next to the C core.
With ``TORCH_NEURONX_ENABLE_STACK_TRACE=1``, ERROR and WARNING records carry
the Python stack of the caller.

    from torch_neuronx._logging import log, INFO
    log(INFO, "compile", "graph 3: 41 nodes compiled in 182 ms")
"""

from __future__ import annotations

import traceback

from . import _C
from ._trn_constants import VALUES

# trn_log_level (libtrn/include/trn/log.h)
ERROR = VALUES["TRN_LOG_ERROR"]
WARNING = VALUES["TRN_LOG_WARNING"]
INFO = VALUES["TRN_LOG_INFO"]
DEBUG = VALUES["TRN_LOG_DEBUG"]


def enabled(level: int) -> bool:
    return _C._log_enabled(level)


def log(level: int, component: str, message: str) -> None:
    if not _C._log_enabled(level):
        return
    if level <= WARNING and _C._log_stack_trace_enabled():
        stack = "".join(traceback.format_stack()[:-1]).rstrip()
        message = f"{message}\nPython stack:\n{stack}"
    _C._log(level, component, message)


def get_level() -> int:
    return _C._log_level()


def set_level(level: "int | str") -> None:
    if isinstance(level, str):
        names = {"ERROR": ERROR, "WARNING": WARNING, "WARN": WARNING, "INFO": INFO, "DEBUG": DEBUG}
        if level.upper() not in names:
            raise ValueError(f"unknown log level {level!r}; expected ERROR, WARNING, INFO or DEBUG")
        level = names[level.upper()]
    _C._set_log_level(int(level))
