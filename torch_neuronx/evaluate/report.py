"""The report object: terminal summary, JSON, thresholds.

Owner: ``Report`` (what ``torch_neuronx.evaluate`` returns and the CLI
writes) and ``THRESHOLDS`` (the CLI's ``--max-*`` options: each names the
report value it bounds; a value above its bound fails the run).
"""

from __future__ import annotations

import json
import math


def _fmt_s(s):
    if s is None:
        return "n/a"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def _fmt_b(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def _max_rel_error(r):
    return r.get("numerics", {}).get("max_error_cpu", 0.0)


# name -> (help, value from the report)
THRESHOLDS = {
    "max_fallbacks": (
        "distinct ops that ran on the CPU fallback",
        lambda r: r["fallbacks"]["distinct_ops"],
    ),
    "max_fallback_share": (
        "share (0..1) of eager op time spent in CPU fallbacks",
        lambda r: r["fallbacks"]["share_of_op_time"],
    ),
    "max_rel_error": (
        "largest relative error of a device op vs the CPU (shadow numerics)",
        _max_rel_error,
    ),
    "max_divergent_ops": (
        "ops that diverge from the CPU beyond tolerance",
        lambda r: len(r.get("numerics", {}).get("divergences", [])),
    ),
    "max_loss_diff": (
        "largest relative difference of neuron vs CPU loss over the steps",
        lambda r: r.get("numerics", {}).get("loss", {}).get("max_rel_diff") or 0.0,
    ),
    "max_graph_breaks": (
        "graph breaks under torch.compile",
        lambda r: sum(b["count"] for b in r.get("compile", {}).get("graph_breaks", [])),
    ),
    "max_recompiles": (
        "extra graphs compiled for changing shapes",
        lambda r: sum(x["graphs_compiled"] - 1 for x in r.get("compile", {}).get("recompiles", [])),
    ),
    "max_unlowerable": (
        "ops the neuron compiler cannot lower",
        lambda r: len(r.get("compile", {}).get("unlowerable", [])),
    ),
    "max_fidelity": (
        "TorchNeuron-fidelity findings (float64, int64, unsupported APIs, ...)",
        lambda r: sum(1 for f in r["findings"] if f["section"] == "fidelity"),
    ),
    "max_memory_share": (
        "peak device memory as a share of one Trn2 logical NeuronCore's HBM (LNC=2)",
        lambda r: r["performance"]["hbm"][0]["share"],
    ),
}


class Report:
    """What an evaluation measured. ``data`` is the JSON document; the
    sections are also attributes (``report.fallbacks``, ``report.findings``)."""

    def __init__(self, data: dict):
        self.data = data

    def __getattr__(self, name):
        try:
            return self.__dict__["data"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self):
        return f"<neuron-evaluate report: {self.data['program']}, {len(self.data['findings'])} findings>"

    def to_json(self, path=None) -> str:
        text = json.dumps(self.data, indent=1, default=str, allow_nan=True)
        if path:
            with open(path, "w") as f:
                f.write(text)
        return text

    def to_html(self, path=None) -> str:
        from .html import render

        text = render(self.data)
        if path:
            with open(path, "w") as f:
                f.write(text)
        return text

    def check(self, **bounds) -> list[str]:
        """Thresholds exceeded, as sentences (empty: all within bounds), plus
        a failed run. ``bounds``: THRESHOLDS' names, None = not checked."""
        out = []
        if not self.data["runs"]["ok"]:
            out.append("the program did not run on the device")
        for name, bound in bounds.items():
            if bound is None:
                continue
            help_, get = THRESHOLDS[name]
            value = get(self.data)
            if value > bound or (isinstance(value, float) and math.isnan(value)):
                out.append(f"{name.replace('_', '-')}: {value:.4g} > {bound:g} ({help_})")
        self.data["threshold_failures"] = out
        return out

    def summary(self) -> str:
        r = self.data
        L = [f"neuron-evaluate: {r['program']}"]
        runs = r["runs"]
        if runs["ok"]:
            L.append(f"  runs on neuron: yes ({runs['steps_completed']} steps, {runs['status']})")
        else:
            e = runs["error"] or {}
            L.append(
                f"  runs on neuron: NO - {e.get('type')} in step {e.get('step')} ({e.get('stage')}): "
                f"{e.get('message', '')[:200]}"
            )
            if e.get("location"):
                L.append(f"      at {e['location']}: {e.get('source', '')}")
            if e.get("script_location"):
                L.append(f"      from {e['script_location']}: {e.get('script_source', '')}")
        fb = r["fallbacks"]
        L.append(
            f"  fallbacks: {fb['distinct_ops']} ops, {fb['calls']} calls in {fb['observed_steps']} observed "
            f"steps, {100 * fb['share_of_op_time']:.1f}% of op time"
        )
        for s in fb["sites"][:8]:
            L.append(
                f"    {s['op']:28s} x{s['count']:<5d} {100 * s['share_of_op_time']:5.1f}%  "
                f"{s['module']}  {s['location']}"
            )
        num = r.get("numerics", {})
        if num.get("enabled"):
            fd = num.get("first_divergence")
            L.append(
                f"  numerics (shadow, {num.get('compared_ops', 0)} ops compared): max rel error vs CPU "
                f"{num.get('max_error_cpu', 0):.3g}; "
                + (
                    f"first divergence {fd['op']} in {fd['module']} at {fd['location']} "
                    f"({fd['error_cpu']:.3g})"
                    if fd
                    else "no op diverges"
                )
            )
        loss = num.get("loss")
        if loss and loss.get("max_rel_diff") is not None:
            L.append(
                f"  loss neuron vs cpu: max rel diff {loss['max_rel_diff']:.3g} over {len(loss['neuron'])} "
                f"steps (last {_last(loss['neuron'])} vs {_last(loss['cpu'])})"
            )
            if loss.get("cpu_error"):
                ce = loss["cpu_error"]
                L.append(
                    f"    (the CPU reference run failed in step {ce.get('step')}: {ce.get('type')}: "
                    f"{ce.get('message', '')[:160]} at {ce.get('location')})"
                )
            if num.get("random_ops"):
                L.append(
                    f"    (the program draws random numbers on the device: {', '.join(sorted(num['random_ops']))};"
                    " the CPU run draws its own, so the curves may differ by that alone)"
                )
        c = r.get("compile", {})
        if c.get("enabled"):
            m = c.get("metrics", {})
            L.append(
                f"  compile: {c.get('graphs', 0)} graphs, {sum(b['count'] for b in c.get('graph_breaks', []))} "
                f"breaks, {len(c.get('unlowerable', []))} unlowerable ops, "
                f"{len(c.get('recompiles', []))} shape recompiles; cold first step "
                f"{_fmt_s(c.get('cold_first_step_seconds'))}, warm {_fmt_s(c.get('warm_first_step_seconds'))},"
                f" steady {_fmt_s(c.get('steady_step_seconds'))} ({m.get('compiles', 0)} C compiles)"
            )
            if c.get("status") == "error":
                e = c.get("error") or {}
                L.append(
                    f"    compiled run failed: {e.get('type')}: {e.get('message', '')[:200]} at "
                    f"{e.get('location')}"
                )
        p = r["performance"]
        L.append(
            f"  step time: eager {_fmt_s(p['eager_step_seconds'])}, compiled "
            f"{_fmt_s(p['compiled_step_seconds'])}, cpu {_fmt_s(p['cpu_step_seconds'])}"
        )
        h = p["hbm"]
        L.append(
            f"  peak device memory {_fmt_b(p['peak_memory_bytes'])}: "
            + ", ".join(
                f"{x['name']} {100 * x['share']:.2g}% of {_fmt_b(x['bytes'])}" for x in h[:3:2]
            )
        )
        fid = [f for f in r["findings"] if f["section"] != "fallbacks"]
        if fid:
            L.append(f"  findings ({len(fid)}):")
            for f in fid[:25]:
                L.append(
                    f"    [{f['kind']}] {f['message'][:160]}"
                    + (f"  at {f['location']}" if f["location"] else "")
                )
        cost = r.get("cost", {})
        L.append(
            f"  evaluation took {cost.get('total_seconds')} s (report {cost.get('report_ratio')}x steps+compile"
            + (f", shadow {cost['shadow_ratio']}x its steps" if "shadow_ratio" in cost else "")
            + ")"
        )
        for t in r.get("threshold_failures", []):
            L.append(f"  FAIL {t}")
        return "\n".join(L)


def _last(xs):
    xs = [x for x in xs if x is not None]
    return f"{xs[-1]:.5g}" if xs else "n/a"
