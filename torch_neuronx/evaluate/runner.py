"""The evaluation: the program's phases in order, and the report built from
their measurements.

Owner: phase order and what each phase measures (docs/evaluate.md):
1. ``eager``   on neuron, with the eager observer (fallbacks, op and module
   time, fidelity) and the API watch; the second half of the steps runs
   unobserved and gives the steady eager step time; peak device memory.
2. ``shadow``  on neuron, each op re-run on the CPU and in float64.
3. ``cpu``     the same program on the CPU: the reference loss curve.
4. ``compile`` under torch.compile through the probe backend, cold (an empty
   compile cache): graphs, breaks, unlowerable ops, recompiles, step times.
5. ``warm``    the compiled program again in a fresh Dynamo state with the
   cache the cold run filled: the warm-start first step.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import time

import torch

from . import limits
from .program import CompilePatch, StepControl


class Options:
    def __init__(
        self,
        steps=4,
        shadow=True,
        shadow_steps=1,
        compile=True,
        cpu_reference=True,
        strict=False,
        progress=None,
        shadow_float64="divergent",
    ):
        self.shadow_float64 = shadow_float64
        self.steps = max(1, int(steps))
        self.shadow = shadow
        self.shadow_steps = max(1, min(int(shadow_steps), self.steps))
        self.compile = compile
        self.cpu_reference = cpu_reference
        self.strict = strict
        self.progress = progress


class _seeded:
    """Every phase starts from the same random state (torch.manual_seed(0):
    CPU and device generators), so a program that does not seed itself draws
    the same numbers in each phase; one that does, overrides it."""

    def __init__(self, program):
        self.program = program

    def run(self, *args, **kwargs):
        torch.manual_seed(0)
        return self.program.run(*args, **kwargs)


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


class _Phase:
    def __init__(self, report, name, progress, total):
        self.report, self.name, self.progress, self.total = report, name, progress, total

    def __enter__(self):
        self.t0 = time.perf_counter()
        if self.progress:
            self.progress.phase(self.name, self.total)
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        return False


def evaluate_program(program, opts: Options) -> dict:
    from torch.utils.module_tracker import ModuleTracker

    from .apis import ApiWatch
    from .compile_probe import CompileProbe
    from .observe import EagerObserver
    from .shadow import ShadowNumerics
    from .strict import StrictChecks

    prog = opts.progress
    report: dict = {
        "tool": "neuron-evaluate",
        "program": program.describe(),
        "steps_requested": opts.steps,
        "strict": bool(opts.strict),
        "phases": [],
    }
    if getattr(program, "mapping", None):
        report["device_map"] = program.mapping
    t_start = time.perf_counter()
    phases = (
        ["eager"]
        + (["shadow"] if opts.shadow else [])
        + (["cpu"] if opts.cpu_reference else [])
        + (["compile", "warm"] if opts.compile else [])
    )

    def on_step_progress(name):
        return (lambda i: prog.step(name, i, opts.steps)) if prog else None

    def add_phase(name, res, seconds, steps):
        report["phases"].append(
            {
                "name": name,
                "status": res.status,
                "steps": len(res.step_seconds),
                "seconds": round(seconds, 4),
                "error": res.error,
            }
        )

    # ---- 1. eager on neuron --------------------------------------------------------------------
    strict = StrictChecks(raise_errors=True) if opts.strict else None
    tracker = ModuleTracker()
    observer = EagerObserver(tracker, strict=strict)
    watch = ApiWatch(strict=strict)
    observed_steps = opts.steps if opts.steps < 2 else math.ceil(opts.steps / 2)
    step_cb = on_step_progress("eager")

    def eager_step(i):
        if i >= observed_steps:
            observer.active = False
        if step_cb:
            step_cb(i)

    torch.neuron.synchronize()
    torch.neuron.reset_peak_memory_stats()
    base_alloc = torch.neuron.memory_allocated()
    with _Phase(report, "eager", prog, len(phases)) as ph:
        ctl = StepControl(opts.steps, "neuron", on_step=eager_step)
        cp = CompilePatch("off")
        watch.install()
        try:
            eager = _seeded(program).run(ctl, "neuron", cp, contexts=[tracker, observer])
        finally:
            watch.uninstall()
    torch.neuron.synchronize()
    peak = torch.neuron.max_memory_allocated()
    add_phase("eager", eager, ph.seconds, opts.steps)
    report["runs"] = {
        "ok": eager.status != "error",
        "status": eager.status,
        "steps_completed": len(eager.step_seconds),
        "error": eager.error,
    }
    eager_steady = (
        _median(eager.step_seconds[observed_steps:])
        if len(eager.step_seconds) > observed_steps
        else _median(eager.step_seconds[1:] or eager.step_seconds)
    )

    # fallbacks
    n_obs = max(1, min(observed_steps, len(eager.step_seconds)) or 1)
    fbs = sorted(observer.fallbacks.values(), key=lambda r: -r["seconds"])
    fb_time = sum(r["seconds"] for r in fbs)
    for r in fbs:
        r["share_of_op_time"] = r["seconds"] / observer.total_time if observer.total_time else 0.0
        r["per_step"] = r["count"] / n_obs
        r["seconds"] = round(r["seconds"], 6)
    report["fallbacks"] = {
        "observed_steps": n_obs,
        "ops_observed": observer.ops_seen,
        "distinct_ops": len({r["op"] for r in fbs}),
        "calls": sum(r["count"] for r in fbs),
        "share_of_op_time": fb_time / observer.total_time if observer.total_time else 0.0,
        "sites": fbs,
        **limits.cite("fallback"),
    }

    # ---- 2. shadow numerics ------------------------------------------------------------------
    numerics: dict = {"enabled": bool(opts.shadow)}
    if opts.shadow:
        tr2 = ModuleTracker()
        shadow = ShadowNumerics(tr2, float64=opts.shadow_float64)
        # The CPU re-runs go single-threaded: on a small host, PyTorch's CPU
        # thread pool and the device's workers spinning for each other cost
        # more than the second thread gains (measured ~6x on GPT-2, 2 cores).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with _Phase(report, "shadow", prog, len(phases)) as ph:
                ctl = StepControl(opts.shadow_steps, "neuron", on_step=on_step_progress("shadow"))
                res = _seeded(program).run(
                    ctl, "neuron", CompilePatch("off"), contexts=[tr2, shadow]
                )
        finally:
            torch.set_num_threads(threads)
        add_phase("shadow", res, ph.seconds, opts.shadow_steps)
        numerics.update(
            {
                "steps": len(res.step_seconds),
                "compared_ops": shadow.compared,
                "float64_reference": opts.shadow_float64,
                "skipped_ops": shadow.skipped,
                "seconds": round(ph.seconds, 4),
                # Random ops draw from the device's generator, the CPU run from the CPU's:
                # loss curves can part by that alone.
                "random_ops": dict(shadow.random_ops),
                "first_divergence": shadow.first_divergence,
                "divergences": sorted(shadow.divergences.values(), key=lambda d: d["op_index"]),
                "by_module": [{"module": k, **v} for k, v in sorted(shadow.by_module.items())],
                "by_op": sorted(
                    ({"op": k, **v} for k, v in shadow.by_op.items()),
                    key=lambda d: -d["max_error_cpu"],
                ),
                "max_error_cpu": max(
                    (v["max_error_cpu"] for v in shadow.by_op.values()), default=0.0
                ),
            }
        )

    # ---- 3. CPU reference -----------------------------------------------------------------------
    cpu_steady = None
    if opts.cpu_reference:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # (as the shadow phase, and its cost stays predictable)
        try:
            with _Phase(report, "cpu", prog, len(phases)) as ph:
                ctl = StepControl(opts.steps, "cpu", on_step=on_step_progress("cpu"))
                cpu = _seeded(program).run(ctl, "cpu", CompilePatch("off"))
        finally:
            torch.set_num_threads(threads)
        add_phase("cpu", cpu, ph.seconds, opts.steps)
        cpu_steady = _median(cpu.step_seconds[1:] or cpu.step_seconds)
        numerics["loss"] = {
            "neuron": eager.losses,
            "cpu": cpu.losses,
            "max_rel_diff": _loss_diff(eager.losses, cpu.losses),
            "cpu_error": cpu.error,
        }
    # ---- 4./5. compile -----------------------------------------------------------------------
    comp: dict = {"enabled": bool(opts.compile)}
    compiled_steady = None
    if opts.compile:
        comp.update(
            _compile_phases(
                program, opts, report, phases, on_step_progress, add_phase, CompileProbe
            )
        )
        compiled_steady = comp.get("steady_step_seconds")
    report["numerics"] = numerics
    report["compile"] = comp

    # ---- time and memory ------------------------------------------------------------------------
    op_time = sorted(observer.op_time.items(), key=lambda kv: -kv[1])
    mod_time = sorted(observer.module_time.items(), key=lambda kv: -kv[1])
    fb_ops = {r["op"] for r in fbs}
    peak_model = max(0, peak - base_alloc)
    report["performance"] = {
        "eager_step_seconds": eager_steady,
        "compiled_step_seconds": compiled_steady,
        "cpu_step_seconds": cpu_steady,
        "op_time": [
            {
                "op": k,
                "seconds": round(v, 6),
                "calls": observer.op_count[k],
                "fallback": k in fb_ops,
            }
            for k, v in op_time[:40]
        ],
        "module_time": [{"module": k, "seconds": round(v, 6)} for k, v in mod_time[:40]],
        "peak_memory_bytes": peak_model,
        "hbm": [
            {
                "name": h["name"],
                "bytes": h["bytes"],
                "share": peak_model / h["bytes"],
                "fits": peak_model <= h["bytes"],
                "source": h["source"],
            }
            for h in limits.HBM
        ],
    }
    # ---- fidelity -------------------------------------------------------------------------
    fid = observer.fidelity
    report["fidelity"] = {
        "float64": [dict(v, **limits.cite("float64")) for v in fid.float64.values()],
        "int64": [dict(v, **limits.cite("int64")) for v in fid.int64.values()],
        "layouts": [dict(v, **limits.cite(v["kind"])) for v in fid.layouts.values()],
        "channels_last": [
            dict(v, **limits.cite("channels_last")) for v in fid.channels_last.values()
        ],
        "apis": [dict(v, **limits.cite(v["kind"])) for v in watch.findings()],
    }
    report["findings"] = findings(report)
    total = time.perf_counter() - t_start
    report["cost"] = _cost(report, total, eager_steady, opts)
    return report


def _compile_phases(program, opts, report, phases, on_step_progress, add_phase, CompileProbe):
    from .._compile import get_dynamo_metrics, reset_dynamo_metrics

    out: dict = {}
    cache = tempfile.mkdtemp(prefix="neuron-evaluate-cache-")
    saved = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = cache
    try:
        import torch._dynamo

        torch._dynamo.reset()
        reset_dynamo_metrics()
        probe = CompileProbe()
        with _Phase(report, "compile", opts.progress, len(phases)) as ph:
            ctl = StepControl(opts.steps, "neuron", on_step=on_step_progress("compile"))
            cp = CompilePatch("probe", probe)
            res = _seeded(program).run(ctl, "neuron", cp)
        add_phase("compile", res, ph.seconds, opts.steps)
        metrics = get_dynamo_metrics()
        steady = _median(res.step_seconds[1:]) if len(res.step_seconds) > 1 else None
        out.update(
            {
                "status": res.status,
                "error": res.error,
                "graphs": len(probe.graphs),
                "graph_list": [{k: v for k, v in g.items() if k != "error"} for g in probe.graphs],
                "graph_breaks": sorted(probe.breaks.values(), key=lambda b: -b["count"]),
                "unlowerable": [
                    dict(u, **limits.cite("unlowerable")) for u in probe.unlowerable.values()
                ],
                "recompiles": [dict(r, **limits.cite("recompile")) for r in probe.recompiles()],
                "torch_compile_calls": cp.calls,
                "dynamic_true": [
                    dict(c, **limits.cite("dynamic")) for c in cp.calls if c["dynamic"]
                ],
                "unsupported_mode": [
                    dict(c, **limits.cite("mode"))
                    for c in cp.calls
                    if c["mode"] not in (None, "default")
                ],
                "cold_first_step_seconds": res.step_seconds[0] if res.step_seconds else None,
                "step_seconds": res.step_seconds,
                "steady_step_seconds": steady,
                "losses": res.losses,
                "metrics": {
                    k: (round(v, 4) if isinstance(v, float) else v) for k, v in metrics.items()
                },
            }
        )
        # warm start: Dynamo forgets everything; the disk cache the cold run filled stays.
        torch._dynamo.reset()
        warm_steps = min(2, opts.steps)
        with _Phase(report, "warm", opts.progress, len(phases)) as ph:
            ctl = StepControl(warm_steps, "neuron", on_step=on_step_progress("warm"))
            res2 = _seeded(program).run(ctl, "neuron", CompilePatch("probe", CompileProbe()))
        add_phase("warm", res2, ph.seconds, warm_steps)
        out["warm_first_step_seconds"] = res2.step_seconds[0] if res2.step_seconds else None
        torch._dynamo.reset()
    finally:
        if saved is None:
            os.environ.pop("TORCH_NEURONX_NEFF_CACHE_DIR", None)
        else:
            os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = saved
        shutil.rmtree(cache, ignore_errors=True)
    return out


def _loss_diff(a, b):
    best = None
    for x, y in zip(a, b):
        if x is None or y is None:
            continue
        d = abs(x - y) / max(abs(y), 1e-12)
        best = d if best is None else max(best, d)
    return best


def _cost(report, total, eager_steady, opts):
    secs = {p["name"]: p["seconds"] for p in report["phases"]}
    comp = report.get("compile", {})
    # Compile time: what the compiled steps took beyond the fastest one (the
    # cold first step's compile, and any recompile for a new shape).
    steps = comp.get("step_seconds") or []
    compile_s = sum(t - min(steps) for t in steps) if steps else 0.0
    steps_s = (eager_steady or 0.0) * opts.steps
    base = steps_s + compile_s
    no_shadow = total - secs.get("shadow", 0.0)
    out = {
        "total_seconds": round(total, 3),
        "phase_seconds": secs,
        "steps_seconds": round(steps_s, 4),
        "compile_seconds": round(compile_s, 4),
        "report_ratio": round(no_shadow / base, 2) if base else None,
    }
    if "shadow" in secs and eager_steady:
        n = report["numerics"].get("steps") or 1
        out["shadow_ratio"] = round(secs["shadow"] / (eager_steady * n), 2)
    return out


def findings(report) -> list[dict]:
    """Every finding, flat, for the summary, thresholds and CI."""
    out = []

    def add(section, kind, message, location=None, module=None, cite=None):
        f = {
            "section": section,
            "kind": kind,
            "message": message,
            "location": location,
            "module": module,
        }
        if cite:
            f["limit"], f["source"] = cite.get("limit"), cite.get("source")
        out.append(f)

    runs = report["runs"]
    if not runs["ok"]:
        e = runs["error"] or {}
        add("runs", "error", f"{e.get('type')}: {e.get('message', '')[:300]}", e.get("location"))
    for r in report["fallbacks"]["sites"]:
        add(
            "fallbacks",
            "fallback",
            f"{r['op']} ran on the CPU fallback {r['count']}x "
            f"({100 * r['share_of_op_time']:.1f}% of op time; {'; '.join(r['signatures'][:2])})",
            r["location"],
            r["module"],
            limits.cite("fallback"),
        )
    num = report.get("numerics", {})
    for d in num.get("divergences", []):
        add(
            "numerics",
            "divergence",
            f"{d['op']} differs from the CPU by {d['error_cpu']:.3g} (relative; "
            f"tolerance {d['tolerance']:g}; CPU vs float64 "
            f"{'n/a' if d['cpu_error_f64'] is None else format(d['cpu_error_f64'], '.3g')})",
            d["location"],
            d["module"],
        )
    comp = report.get("compile", {})
    for b in comp.get("graph_breaks", []):
        add("compile", "graph_break", f"graph break: {b['reason']}", b["location"])
    for u in comp.get("unlowerable", []):
        add(
            "compile",
            "unlowerable",
            f"{u['op']} cannot be lowered by the neuron backend",
            u["location"],
            cite=u,
        )
    for r in comp.get("recompiles", []):
        add(
            "compile",
            "recompile",
            f"{r['graphs_compiled']} graphs for {r['frame'].split(' (')[0]} (shape changes): "
            f"{r['suggestion']}",
            r.get("location"),
            cite=r,
        )
    for c in comp.get("dynamic_true", []):
        add("compile", "dynamic", "torch.compile(dynamic=True)", c["location"], cite=c)
    for c in comp.get("unsupported_mode", []):
        add("compile", "mode", f"torch.compile(mode={c['mode']!r})", c["location"], cite=c)
    fid = report["fidelity"]
    for f in fid["float64"]:
        add(
            "fidelity",
            "float64",
            f"{f['op']} produces float64 {f['shapes'][:3]} ({f['count']}x): "
            "computed as float32 on TorchNeuron",
            f["location"],
            f["module"],
            f,
        )
    for f in fid["int64"]:
        add(
            "fidelity",
            "int64",
            f"{f['op']} produces int64 values in [{f['min']}, {f['max']}] (outside int32)",
            f["location"],
            f["module"],
            f,
        )
    for f in fid["layouts"]:
        add(
            "fidelity",
            f["kind"],
            f"{f['op']} produces a {f['kind']} tensor",
            f["location"],
            f["module"],
            f,
        )
    for f in fid["channels_last"]:
        add(
            "fidelity",
            "channels_last",
            f"{f['op']} on a channels_last input {f['shape']}",
            f["location"],
            f["module"],
            f,
        )
    for f in fid["apis"]:
        add("fidelity", f["kind"], f"{f['api']} used ({f['count']}x)", f["location"], cite=f)
    return out
