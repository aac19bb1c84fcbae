"""The HTML report: one self-contained file (inline CSS and SVG, no script,
nothing fetched), readable offline.

Owner: the page layout and the three kinds of plot (``_lines``: loss curves;
``_bars``: time per op / module, error per layer, log scale where asked).
"""

from __future__ import annotations

import html
import math

_CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;margin-top:1.6em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
td.u{overflow-wrap:anywhere;min-width:12em}
table.fx{table-layout:fixed;width:100%}table.fx td{overflow-wrap:anywhere;min-width:0}th{background:#f4f4f4}
.ok{color:#1a7f37}.bad{color:#c62828}.muted{color:#777}code{background:#f6f6f6;padding:0 3px}
svg text{font:11px sans-serif}"""


def e(x) -> str:
    return html.escape("" if x is None else str(x))


def _lines(series: dict, title: str, w=640, h=260) -> str:
    pts = [
        (k, [(i + 1, v) for i, v in enumerate(vs) if v is not None and math.isfinite(v)])
        for k, vs in series.items()
    ]
    allv = [v for _, p in pts for _, v in p]
    if not allv:
        return f"<p class=muted>{e(title)}: no values</p>"
    n = max(len(vs) for vs in series.values())
    lo, hi = min(allv), max(allv)
    if hi == lo:
        hi, lo = hi + 1e-6 + abs(hi) * 1e-3, lo - 1e-6 - abs(lo) * 1e-3
    x0, y0, pw, ph = 50, 20, w - 70, h - 50

    def sx(i):
        return x0 + (i - 1) * pw / max(1, n - 1)

    def sy(v):
        return y0 + ph - (v - lo) * ph / (hi - lo)

    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    out = [
        f'<svg width="{w}" height="{h}" role="img"><title>{e(title)}</title>',
        f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#aaa"/>',
        f'<text x="{x0}" y="12">{e(title)}</text>',
        f'<text x="5" y="{y0 + 10}">{hi:.4g}</text><text x="5" y="{y0 + ph}">{lo:.4g}</text>',
        f'<text x="{x0}" y="{h - 15}">step 1</text><text x="{x0 + pw - 40}" y="{h - 15}">step {n}</text>',
    ]
    for j, (name, p) in enumerate(pts):
        c = colors[j % len(colors)]
        d = " ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, v in p)
        # Curves that agree lie on each other: each later one is thinner and
        # dashed, so every curve stays visible where they coincide.
        width, dash = (
            (6, "") if j == 0 else (3.5, "") if j == 1 else (1.5, ' stroke-dasharray="6 4"')
        )
        out.append(
            f'<polyline fill="none" stroke="{c}" stroke-width="{width}" stroke-opacity="0.85"{dash} '
            f'points="{d}"/>'
        )
        out += [f'<circle cx="{sx(i):.1f}" cy="{sy(v):.1f}" r="2.5" fill="{c}"/>' for i, v in p]
        out.append(f'<text x="{x0 + pw - 120}" y="{y0 + 14 + 14 * j}" fill="{c}">{e(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def _bars(items: list, title: str, unit: str = "", log=False, highlight=(), w=760) -> str:
    items = [(k, v) for k, v in items if v is not None and math.isfinite(v)][:30]
    if not items:
        return f"<p class=muted>{e(title)}: no values</p>"
    bh, lw = 16, 300
    h = 24 + bh * len(items)
    if log:
        floor = 1e-12
        vals = [math.log10(max(v, floor)) for _, v in items]
        # (The axis starts at the smallest nonzero value: zeros do not stretch it.)
        lo = min((lv for lv, (_, v) in zip(vals, items) if v > 0), default=0.0)
        span = max(1e-9, max(vals) - lo + 1)
        # (An exact zero has no bar: log scale has no place for it.)
        scale = [(lv - lo + 1) / span if v > 0 else 0.0 for lv, (_, v) in zip(vals, items)]
    else:
        top = max(v for _, v in items) or 1.0
        scale = [v / top for _, v in items]
    out = [
        f'<svg width="{w}" height="{h}" role="img"><title>{e(title)}</title><text x="0" y="12">{e(title)}</text>'
    ]
    for i, ((k, v), s) in enumerate(zip(items, scale)):
        y = 20 + i * bh
        c = "#d62728" if k in highlight else "#1f77b4"
        label = k if len(k) <= 48 else "…" + k[-47:]
        out.append(
            f'<text x="0" y="{y + 11}">{e(label)}</text>'
            f'<rect x="{lw}" y="{y + 2}" width="{max(1.0, s * (w - lw - 90)):.1f}" height="{bh - 4}" '
            f'fill="{c}"/><text x="{lw + s * (w - lw - 90) + 4:.1f}" y="{y + 11}">{v:.3g}{e(unit)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _table(rows: list, cols: list, widths: "list[int] | None" = None) -> str:
    """``widths`` (percent per column): a fixed layout the page's width, for
    tables of long prose that would otherwise run past it."""
    if not rows:
        return "<p class=muted>none</p>"
    head = "".join(f"<th>{e(c)}</th>" for c, _ in cols)
    body = "".join("<tr>" + "".join(_cell(f(r)) for _, f in cols) + "</tr>" for r in rows)
    if widths:
        cg = "".join(f'<col style="width:{w}%">' for w in widths)
        return f"<table class=fx><colgroup>{cg}</colgroup><tr>{head}</tr>{body}</table>"
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(x) -> str:
    # Only cells holding addresses or paths may break anywhere (a long URL or
    # file:line would otherwise widen the table past the page; words must not).
    text = e(x)
    return f"<td class=u>{text}</td>" if "/" in text else f"<td>{text}</td>"


def render(r: dict) -> str:
    H = [
        f"<!doctype html><html><head><meta charset=utf-8><title>neuron-evaluate: {e(r['program'])}</title>"
        f"<style>{_CSS}</style></head><body><h1>neuron-evaluate</h1><p><code>{e(r['program'])}</code> — "
        f"{r['steps_requested']} steps{' (strict)' if r.get('strict') else ''}</p>"
    ]
    runs = r["runs"]
    H.append("<h2>Runs on neuron?</h2>")
    if runs["ok"]:
        H.append(f"<p class=ok>Yes: {runs['steps_completed']} steps ({e(runs['status'])}).</p>")
    else:
        er = runs["error"] or {}
        H.append(
            f"<p class=bad>No: <code>{e(er.get('type'))}: {e(er.get('message'))}</code><br>at "
            f"<code>{e(er.get('location'))}</code>: <code>{e(er.get('source'))}</code></p>"
        )
    H.append(
        _table(
            r["phases"],
            [
                ("phase", lambda p: p["name"]),
                ("status", lambda p: p["status"]),
                ("steps", lambda p: p["steps"]),
                ("seconds", lambda p: p["seconds"]),
            ],
        )
    )
    fb = r["fallbacks"]
    H.append(
        f"<h2>CPU fallbacks</h2><p>{fb['distinct_ops']} ops, {fb['calls']} calls in {fb['observed_steps']} "
        f"observed steps: {100 * fb['share_of_op_time']:.1f}% of eager op time. <span class=muted>"
        f"{e(fb['limit'])} ({e(fb['source'])})</span></p>"
    )
    H.append(
        _table(
            fb["sites"],
            [
                ("op", lambda s: s["op"]),
                ("calls", lambda s: s["count"]),
                ("share", lambda s: f"{100 * s['share_of_op_time']:.1f}%"),
                ("module", lambda s: s["module"]),
                ("source", lambda s: s["location"]),
                ("pass", lambda s: "backward" if s["backward"] else "forward"),
                ("inputs", lambda s: " | ".join(s["signatures"])),
            ],
        )
    )
    num = r.get("numerics", {})
    H.append("<h2>Numerics</h2>")
    if num.get("loss"):
        H.append(
            _lines(
                {
                    "neuron": num["loss"]["neuron"],
                    "cpu": num["loss"]["cpu"],
                    **(
                        {"neuron compiled": r["compile"].get("losses", [])}
                        if r.get("compile", {}).get("losses")
                        else {}
                    ),
                },
                "loss per step",
            )
        )
    if num.get("enabled"):
        fd = num.get("first_divergence")
        H.append(
            f"<p>Shadow mode compared {num.get('compared_ops', 0)} device ops with the CPU and float64. "
            + (
                f"<span class=bad>First divergence: <code>{e(fd['op'])}</code> in <code>{e(fd['module'])}"
                f"</code> at <code>{e(fd['location'])}</code> (error {fd['error_cpu']:.3g}).</span>"
                if fd
                else "<span class=ok>No op diverges beyond tolerance.</span>"
            )
            + "</p>"
        )
        div = {d["module"] for d in num.get("divergences", [])}
        H.append(
            _bars(
                [(m["module"], m["max_error_cpu"]) for m in num.get("by_module", [])],
                "max relative error vs CPU, per module (log scale)",
                log=True,
                highlight=div,
            )
        )
        H.append(
            "<h3>Ops that diverge</h3>"
            + _table(
                num.get("divergences", []),
                [
                    ("op", lambda d: d["op"]),
                    ("module", lambda d: d["module"]),
                    ("source", lambda d: d["location"]),
                    ("error vs cpu", lambda d: f"{d['error_cpu']:.3g}"),
                    ("error vs f64", lambda d: _g(d["error_f64"])),
                    ("cpu vs f64", lambda d: _g(d["cpu_error_f64"])),
                ],
            )
        )
    c = r.get("compile", {})
    if c.get("enabled"):
        H.append(
            f"<h2>torch.compile(backend=\"neuron\")</h2><p>{c.get('graphs', 0)} graphs; cold first step "
            f"{_s(c.get('cold_first_step_seconds'))}, warm first step {_s(c.get('warm_first_step_seconds'))}, "
            f"steady step {_s(c.get('steady_step_seconds'))}.</p>"
        )
        if c.get("status") == "error":
            er = c.get("error") or {}
            H.append(
                f"<p class=bad>The compiled run failed: <code>{e(er.get('type'))}: {e(er.get('message'))}"
                f"</code> at <code>{e(er.get('location'))}</code></p>"
            )
        H.append(
            "<h3>Graph breaks</h3>"
            + _table(
                c.get("graph_breaks", []),
                [
                    ("reason", lambda b: b["reason"]),
                    ("source", lambda b: b["location"]),
                    ("count", lambda b: b["count"]),
                ],
            )
        )
        H.append(
            "<h3>Ops that cannot be lowered</h3>"
            + _table(
                c.get("unlowerable", []),
                [
                    ("op", lambda u: u["op"]),
                    ("source", lambda u: u["location"]),
                    ("limit", lambda u: u["limit"]),
                ],
            )
        )
        H.append(
            "<h3>Recompiles from shape changes</h3>"
            + _table(
                c.get("recompiles", []),
                [
                    ("graph", lambda x: x["frame"]),
                    ("graphs", lambda x: x["graphs_compiled"]),
                    ("shapes seen", lambda x: x["shapes_seen"]),
                    ("suggestion", lambda x: x["suggestion"]),
                ],
            )
        )
    p = r["performance"]
    H.append(
        f"<h2>Time and memory</h2><p>Steady step: eager {_s(p['eager_step_seconds'])}, compiled "
        f"{_s(p['compiled_step_seconds'])}, CPU {_s(p['cpu_step_seconds'])}.</p>"
    )
    fbo = {o["op"] for o in p["op_time"] if o["fallback"]}
    H.append(
        _bars(
            [(o["op"], o["seconds"]) for o in p["op_time"]],
            "eager time per op (s; red: CPU fallback)",
            " s",
            highlight=fbo,
        )
    )
    H.append(
        _bars(
            [(m["module"], m["seconds"]) for m in p["module_time"]],
            "eager op time per module (s)",
            " s",
        )
    )
    H.append(
        f"<p>Peak device memory: {p['peak_memory_bytes']} bytes "
        f"({p['peak_memory_bytes'] / 2**20:.1f} MiB).</p>"
    )
    H.append(
        _table(
            p["hbm"],
            [
                ("one logical NeuronCore", lambda h: h["name"]),
                ("HBM", lambda h: f"{h['bytes'] / 2**30:.1f} GiB"),
                ("peak share", lambda h: f"{100 * h['share']:.3g}%"),
                ("fits", lambda h: "yes" if h["fits"] else "NO"),
                ("source", lambda h: h["source"]),
            ],
        )
    )
    H.append("<h2>TorchNeuron fidelity and all findings</h2>")
    H.append(
        _table(
            r["findings"],
            [
                ("section", lambda f: f["section"]),
                ("kind", lambda f: f["kind"]),
                ("finding", lambda f: f["message"]),
                ("source", lambda f: f["location"]),
                ("module", lambda f: f["module"]),
                ("documented limit", lambda f: f.get("limit")),
                ("citation", lambda f: f.get("source")),
            ],
            widths=[10, 11, 20, 16, 8, 19, 16],
        )
    )
    cost = r.get("cost", {})
    H.append(f"<p class=muted>Evaluation took {cost.get('total_seconds')} s.</p></body></html>")
    return "\n".join(H)


def _g(x):
    return "n/a" if x is None else f"{x:.3g}"


def _s(x):
    if x is None:
        return "n/a"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"
