"""Where in the user's program something happened: the first stack frame that
is not PyTorch's, OpenNeuron's or the Python standard library's.

Owner: the frame filter every finding's ``file:line`` comes from, for live
stacks (``user_frame``) and for exceptions (``exception_site``).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback

import torch

_OURS = tuple(
    os.path.normpath(p) + os.sep
    for p in {
        os.path.dirname(torch.__file__),
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # torch_neuronx
    }
)
# The standard library (in a venv "platstdlib" is the venv's lib/pythonX.Y,
# which also holds site-packages: third-party libraries are the program's).
_STDLIB = tuple(
    os.path.normpath(p) + os.sep
    for p in {
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths().get("platstdlib", sysconfig.get_paths()["stdlib"]),
    }
)
_PACKAGES = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


_INTERACTIVE = ("<string>", "<stdin>", "<ipython-input-")


def is_user_file(filename: str) -> bool:
    if not filename:
        return False
    if filename.startswith("<"):  # generated code (Dynamo, eval), but not code typed by the user
        return filename.startswith(_INTERACTIVE)
    path = os.path.normpath(os.path.abspath(filename))
    if path.startswith(_OURS):
        return False
    return not path.startswith(_STDLIB) or any(p in path for p in _PACKAGES)


def fmt(filename: str, lineno: int) -> str:
    return f"{filename}:{lineno}"


def user_frame(skip: int = 1) -> "str | None":
    """``file:line`` of the innermost user frame on the current stack."""
    f = sys._getframe(1)
    for _ in range(skip - 1):
        if f.f_back is None:
            break
        f = f.f_back
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            return fmt(f.f_code.co_filename, f.f_lineno)
        f = f.f_back
    return None


def frame_summary_location(stack) -> "str | None":
    """Innermost user frame of a list of FrameSummary (Dynamo's user stacks)."""
    for fs in reversed(list(stack or [])):
        if is_user_file(fs.filename):
            return fmt(fs.filename, fs.lineno)
    return None


def exception_site(exc: BaseException, script: "str | None" = None) -> dict:
    """The innermost user frame of ``exc``'s traceback, the innermost frame of
    ``script`` (when given and different), and the source line."""
    frames = traceback.extract_tb(exc.__traceback__)
    user = next((f for f in reversed(frames) if is_user_file(f.filename)), None)
    out = {"type": type(exc).__name__, "message": str(exc).strip()[:2000]}
    if user is not None:
        out["location"] = fmt(user.filename, user.lineno)
        out["source"] = (user.line or "").strip()
    if script is not None:
        sp = os.path.abspath(script)
        mine = next((f for f in reversed(frames) if os.path.abspath(f.filename) == sp), None)
        if mine is not None and (user is None or mine is not user):
            out["script_location"] = fmt(mine.filename, mine.lineno)
            out["script_source"] = (mine.line or "").strip()
    return out
