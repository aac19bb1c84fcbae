"""The compile section: the program under torch.compile(backend="neuron"),
through a backend that records what Dynamo hands the neuron backend.

Owner: graph, graph-break, unlowerable-op and recompile records, and the
bucketing suggestion. The probe backend wraps ``neuron_backend``: per Dynamo
graph it keeps the frame (code object) it came from, its op count, the break
reason and the user's source line (``gm.compile_subgraph_reason``, what
``torch._dynamo.explain`` reads), the compile time, and each call's input
shapes (a symbolic graph compiles one static graph per new shape on neuron,
see _compile/shapes.py). A graph the neuron backend refuses
(``NeuronCompileError``: an op that cannot be lowered) is recorded with the op
and its source line and then run eagerly, so the evaluation goes on.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict

import torch

from .locations import frame_summary_location, is_user_file


def _shape_of(x):
    if isinstance(x, torch.Tensor):
        return tuple(int(s) for s in x.shape)
    return None


def _hint(s):
    try:
        return int(s)
    except Exception:  # noqa: BLE001 - unbacked symbol
        return -1


class CompileProbe:
    def __init__(self):
        self.graphs: list[dict] = []
        self.breaks: dict[tuple, dict] = {}
        self.unlowerable: dict[tuple, dict] = {}
        self.frame_shapes: dict[str, dict] = defaultdict(
            lambda: {"shapes": [], "inputs": None, "compiles": 0}
        )
        self.user_calls: list[dict] = []  # torch.compile calls made by the script

    # ---- the backend -----------------------------------------------------------
    def backend(self, gm: torch.fx.GraphModule, example_inputs, **kwargs):
        from .._compile import neuron_backend
        from .._compile.config import NeuronCompileError

        t0 = time.perf_counter()
        reason = getattr(gm, "compile_subgraph_reason", None)
        frame = self._frame_of(gm)
        rec = {
            "index": len(self.graphs),
            "frame": frame,
            "ops": sum(
                1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")
            ),
            "inputs": [
                list(map(_hint, x.shape)) if isinstance(x, torch.Tensor) else None
                for x in example_inputs
            ],
            "symbolic": any(
                isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape)
                for x in example_inputs
            ),
            "error": None,
        }
        if reason is not None and reason.graph_break:
            where = frame_summary_location(reason.user_stack)
            rec["break_reason"] = reason.reason
            rec["break_location"] = where
            key = (reason.reason, where)
            b = self.breaks.setdefault(
                key, {"reason": _short(reason.reason), "location": where, "count": 0}
            )
            b["count"] += 1
        fs = self.frame_shapes[frame]
        fs["compiles"] += 1
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        fs["inputs"] = names
        fs.setdefault("location", _first_user_line(gm))
        try:
            fn = neuron_backend(gm, example_inputs, options={"fallback_execution": False})
        except NeuronCompileError as e:
            rec["error"] = str(e)
            op, where = _parse_unlowerable(str(e))
            where = where or _node_location(gm, op, str(e))
            u = self.unlowerable.setdefault(
                (op, where), {"op": op, "location": where, "count": 0, "message": str(e)[:500]}
            )
            u["count"] += 1
            fn = gm.forward
        rec["compile_seconds"] = time.perf_counter() - t0
        self.graphs.append(rec)

        def call(*args):
            shp = tuple(
                (nm, _shape_of(a)) for nm, a in zip(names, args) if isinstance(a, torch.Tensor)
            )
            if shp not in fs["shapes"]:
                fs["shapes"].append(shp)
            return fn(*args)

        return call

    @staticmethod
    def _frame_of(gm) -> str:
        code = None
        try:
            from torch._guards import CompileContext

            cid = CompileContext.current_compile_id()
            if cid is not None:
                code = f"frame {cid.frame_id}"
        except Exception:  # noqa: BLE001
            pass
        # The user function the graph came from: the first node's stack trace.
        for n in gm.graph.nodes:
            st = n.meta.get("stack_trace")
            if st:
                m = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', st)
                for f, line, fn in m:
                    if is_user_file(f):
                        return f"{fn} ({f})" if code is None else f"{fn} ({f}, {code})"
                break
        return code or "?"

    # ---- the report --------------------------------------------------------------
    def recompiles(self) -> list[dict]:
        out = []
        for frame, fs in self.frame_shapes.items():
            shapes = fs["shapes"]
            # Only the user's code: a PyTorch frame (nn.Linear.forward compiled on
            # its own after a break) "recompiles" per module instance, not per shape.
            if len(shapes) < 2 or fs.get("location") is None:
                continue
            varying = []
            seen = [dict(s) for s in shapes]
            common = [
                n for n in shapes[0] and [nm for nm, _ in shapes[0]] if all(n in d for d in seen)
            ]
            for name in common:
                col = [d[name] for d in seen]
                if len({len(c) for c in col}) != 1:
                    continue
                for d in range(len(col[0])):
                    vals = sorted({c[d] for c in col})
                    if len(vals) > 1:
                        varying.append(
                            {
                                "input": _pretty(name),
                                "dim": d,
                                "values": vals,
                                "buckets": bucket(vals),
                            }
                        )
            if not varying:
                continue
            suggestion = "; ".join(
                f"pad {v['input']} dim {v['dim']} to {v['buckets']} ({len(v['values'])} sizes -> "
                f"{len(v['buckets'])} graphs)"
                for v in varying
            )
            out.append(
                {
                    "frame": frame,
                    "location": fs.get("location"),
                    "shapes_seen": [{_pretty(k): list(v) for k, v in s} for s in shapes],
                    "graphs_compiled": len(shapes),
                    "varying": varying,
                    "suggestion": suggestion,
                }
            )
        # A graph break splits a function into the part before and Dynamo's
        # resume function after it: one shape change, reported once (at the
        # function), with the resumed parts' graphs counted there.
        parents = [r for r in out if not r["frame"].startswith("torch_dynamo_resume_in_")]
        for r in out:
            if r in parents:
                continue
            host = next(
                (p for p in parents if r["frame"].split("(", 1)[-1].split(",")[0] in p["frame"]),
                None,
            )
            if host is None:
                parents.append(r)
            else:
                host["resume_graphs"] = host.get("resume_graphs", 0) + r["graphs_compiled"]
        return parents


def _first_user_line(gm) -> "str | None":
    for n in gm.graph.nodes:
        st = n.meta.get("stack_trace")
        if st:
            locs = [
                (f, ln)
                for f, ln in re.findall(r'File "([^"]+)", line (\d+)', st)
                if is_user_file(f)
            ]
            if locs:
                return f"{locs[-1][0]}:{locs[-1][1]}"
    return None


def _pretty(name: str) -> str:
    """Dynamo's placeholder name as the user wrote it: l_x_ -> x."""
    if name.startswith("l_") and name.endswith("_"):
        name = name[2:-1]
    return name.replace("_modules_", ".").replace("_parameters_", ".")


def bucket(values: list[int]) -> list[int]:
    """Sizes to pad to: the next power of two (multiples of 128 above 1024)."""
    out = set()
    for v in values:
        if v <= 0:
            continue
        if v > 1024:
            out.add(-(-v // 128) * 128)
        else:
            b = 1
            while b < v:
                b *= 2
            out.add(b)
    return sorted(out)


def _node_location(gm, op: str, msg: str) -> "str | None":
    """The user line of the Dynamo graph's node behind an op the lowering
    refused (the message quotes its source line; else match by op name)."""
    short = op.split("::")[-1]
    m = re.search(r" at (.*?) \| ", msg)
    snippet = m.group(1).strip() if m else None
    cands = []
    for n in gm.graph.nodes:
        st = n.meta.get("stack_trace")
        if not st:
            continue
        locs = [
            (f, ln)
            for f, ln, _ in re.findall(r'File "([^"]+)", line (\d+), in (\S+)', st)
            if is_user_file(f)
        ]
        if not locs:
            continue
        loc = f"{locs[-1][0]}:{locs[-1][1]}"
        if snippet and snippet in st:
            return loc
        if short in getattr(n.target, "__name__", str(n.target)):
            cands.append(loc)
    return cands[0] if cands else None


def _short(reason: str) -> str:
    r = " ".join(reason.split())
    return r[:300]


def _parse_unlowerable(msg: str) -> tuple[str, "str | None"]:
    m = re.search(r"op (\S+) \(FX node", msg)
    op = m.group(1) if m else "?"
    if op.startswith("aten.") and op.count(".") >= 2:
        op = "aten::" + op.split(".")[1]
    locs = [(f, ln) for f, ln in re.findall(r'File "([^"]+)", line (\d+)', msg) if is_user_file(f)]
    return op, (f"{locs[-1][0]}:{locs[-1][1]}" if locs else None)
