"""neuron-evaluate on programs planted to trip each finding: every planted
finding is reported at its line (the line marked ``PLANT-<kind>``), and
nothing else is reported. See docs/evaluate.md."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_neuronx
from torch_neuronx.evaluate import evaluate_script
from torch_neuronx.evaluate.compile_probe import bucket

PROGRAMS = Path(__file__).resolve().parent / "evaluate_programs"
ROOT = Path(__file__).resolve().parent.parent


def plant(path: Path, kind: str) -> str:
    lines = path.read_text().splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if f"PLANT-{kind}" in line]
    assert len(hits) == 1, (kind, hits)
    return f"{path}:{hits[0]}"


def found(report, section=None):
    return sorted(
        (f["kind"], f["location"]) for f in report.findings if section in (None, f["section"])
    )


@pytest.fixture(scope="module")
def eager_report():
    return evaluate_script(str(PROGRAMS / "planted_eager.py"), steps=4)


def test_planted_eager_findings_exact(eager_report):
    p = PROGRAMS / "planted_eager.py"
    expected = sorted(
        [
            ("fallback", plant(p, "fallback")),
            ("unlowerable", plant(p, "fallback")),
            ("divergence", plant(p, "divergence")),
            ("float64", plant(p, "float64")),  # the .double() copy
            ("float64", plant(p, "float64")),  # the mean over it
            ("int64", plant(p, "int64")),
        ]
    )
    assert found(eager_report) == expected
    assert eager_report.runs["ok"] and eager_report.runs["steps_completed"] == 4


def test_fallback_details(eager_report):
    fb = eager_report.fallbacks
    (site,) = fb["sites"]
    assert site["op"] == "aten::bucketize" and site["module"] == "Net.head" and not site["backward"]
    assert site["count"] == fb["observed_steps"] == 2  # once per observed step
    assert site["signatures"] == ["float32[4, 8], float32[2]"]  # input, boundaries
    assert 0 < site["share_of_op_time"] < 1
    assert "CPU fallback" in site.get("limit", fb["limit"])


def test_divergence_details(eager_report):
    num = eager_report.numerics
    d = num["first_divergence"]
    assert d["op"] == "evaluate_test::scale" and d["module"] == "Net" and not d["backward"]
    assert d["error_cpu"] > 0.05 and d["cpu_error_f64"] < 1e-6
    # Every other op agrees with the CPU to float32 rounding.
    others = [o for o in num["by_op"] if o["op"] != "evaluate_test::scale"]
    assert others and max(o["max_error_cpu"] for o in others) < 1e-5
    # The planted kernel shifts the output: the loss curves part.
    assert num["loss"]["max_rel_diff"] > 0.01


def test_fidelity_details(eager_report):
    fid = eager_report.fidelity
    assert {f["op"] for f in fid["float64"]} == {"aten::_to_copy", "aten::mean"}
    assert all("float32" in f["limit"] for f in fid["float64"])
    (i64,) = fid["int64"]
    assert i64["op"] == "aten::mul" and i64["max"] == 2 << 32 and i64["min"] == 0
    assert fid["apis"] == [] and fid["layouts"] == [] and fid["channels_last"] == []


def test_report_outputs(eager_report, tmp_path):
    data = json.loads(eager_report.to_json(tmp_path / "r.json"))
    assert data["findings"] == eager_report.findings
    html = eager_report.to_html(tmp_path / "r.html")
    # Self-contained: inline SVG, nothing fetched.
    assert "<svg" in html and "<polyline" in html
    assert "<script" not in html and "src=" not in html and "<link" not in html
    assert "aten::bucketize" in html and "Net.head" in html
    text = eager_report.summary()
    assert "aten::bucketize" in text and "first divergence evaluate_test::scale" in text
    assert eager_report.check(max_fallbacks=1, max_fidelity=10) == []
    fails = eager_report.check(max_fallbacks=0, max_rel_error=1e-3)
    assert len(fails) == 2 and fails[0].startswith("max-fallbacks: 1 > 0")


def test_planted_compile_graph_break_and_recompiles():
    p = PROGRAMS / "planted_compile.py"
    r = evaluate_script(str(p), steps=4, shadow=False, cpu_reference=False)
    assert found(r, "compile") == sorted(
        [
            ("graph_break", plant(p, "graph_break")),
            ("recompile", plant(p, "first_op")),  # forward's first op
            ("dynamic", plant(p, "dynamic")),
            ("mode", plant(p, "dynamic")),
        ]
    )
    (rc,) = r.compile["recompiles"]
    assert rc["varying"] == [{"input": "x", "dim": 0, "values": [3, 5, 6, 7], "buckets": [4, 8]}]
    assert len(rc["shapes_seen"]) == 4 and {"x": [3, 8]} in [
        {"x": s["x"]} for s in rc["shapes_seen"]
    ]
    assert r.compile["graph_breaks"][0]["reason"].startswith(
        "Call to `torch._dynamo.graph_break()`"
    )
    assert r.compile["cold_first_step_seconds"] > 0 and r.compile["warm_first_step_seconds"] > 0
    assert r.compile["unlowerable"] == [] and r.fallbacks["sites"] == []
    assert found(r, "fidelity") == []


def test_map_device_cuda_script_and_first_error():
    p = PROGRAMS / "planted_cuda.py"
    ok = evaluate_script(str(p), steps=3, map_device="cuda=neuron", shadow=False, compile=False)
    assert ok.runs["ok"] and ok.runs["steps_completed"] == 3
    assert found(ok) == [("distributions", plant(p, "distributions"))]
    assert ok.performance["peak_memory_bytes"] > 0  # it really ran on neuron
    assert ok.numerics["loss"]["max_rel_diff"] < 1e-4  # and agrees with the CPU
    bad = evaluate_script(
        str(p), ["1"], steps=5, map_device="cuda=neuron", shadow=False, compile=False
    )
    assert not bad.runs["ok"] and bad.runs["steps_completed"] == 2
    err = bad.runs["error"]
    assert err["type"] == "ValueError" and err["location"] == plant(p, "error")
    assert err["step"] == 3 and err["stage"] == "forward"  # after step 2's optimizer step
    assert "planted failure" in err["source"]


def test_strict_mode_raises_at_the_int64_line():
    p = PROGRAMS / "planted_eager.py"
    r = evaluate_script(
        str(p), steps=2, strict=True, shadow=False, compile=False, cpu_reference=False
    )
    err = r.runs["error"]
    assert err["type"] == "NeuronStrictError" and err["location"] == plant(p, "int64")
    assert err["step"] == 1 and err["stage"] == "forward"
    assert "outside int32" in err["message"] and "int32" in err["message"]


def test_strict_env_process_wide(python):
    r = python(
        """
        import warnings, torch
        from torch_neuronx.evaluate import NeuronStrictError
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.ones(2, device="neuron", dtype=torch.float64).sum()
        assert any("computes it as float32" in str(x.message) for x in w), [str(x.message) for x in w]
        small = torch.arange(4, device="neuron") * 1000  # within int32: fine
        try:
            torch.arange(4, device="neuron") * (1 << 31)
        except NeuronStrictError as e:
            print("raised", "outside int32" in str(e))
        try:
            torch.fft.rfft(torch.ones(8))
        except NeuronStrictError as e:
            print("fft", "torch.fft.rfft" in str(e))
        f = torch.compile(lambda x: x * 2 + 1, backend="neuron")
        print("compiled", f(torch.ones(3, device="neuron")).tolist())
    """,
        env={"TORCH_NEURONX_STRICT": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert (
        "raised True" in r.stdout
        and "fft True" in r.stdout
        and "compiled [3.0, 3.0, 3.0]" in r.stdout
    )


def test_cli_exit_status_and_files(tmp_path, capsys):
    from torch_neuronx.evaluate.cli import main

    p = PROGRAMS / "planted_eager.py"
    args = [
        "--steps",
        "2",
        "--no-shadow",
        "--no-compile",
        "--quiet",
        "--json",
        str(tmp_path / "r.json"),
        "--html",
        str(tmp_path / "r.html"),
    ]
    assert main(args + ["--max-fallbacks", "1", str(p)]) == 0
    out = capsys.readouterr().out
    assert "fallbacks: 1 ops" in out and "runs on neuron: yes" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["fallbacks"]["sites"][0]["location"] == plant(p, "fallback")
    assert (tmp_path / "r.html").read_text().startswith("<!doctype html>")
    assert main(args + ["--max-fallbacks", "0", str(p)]) == 1
    assert "FAIL max-fallbacks: 1 > 0" in capsys.readouterr().out
    assert main(["--map-device", "cuda", str(p)]) == 2
    assert "SRC=DST" in capsys.readouterr().err


def test_python_m_entry_point(tmp_path):
    """``python -m torch_neuronx.evaluate`` (what the neuron-evaluate console script runs)."""
    p = PROGRAMS / "planted_cuda.py"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch_neuronx.evaluate",
            "--steps",
            "2",
            "--no-shadow",
            "--no-compile",
            "--no-cpu",
            "--map-device",
            "cuda=neuron",
            "--json",
            str(tmp_path / "r.json"),
            str(p),
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "phase 1/1: eager on neuron" in r.stderr  # the progress display names the phase
    assert json.loads((tmp_path / "r.json").read_text())["runs"]["steps_completed"] == 2


def test_bucketing_suggestion():
    assert bucket([3, 5, 6, 7]) == [4, 8]
    assert bucket([17, 31, 32, 33]) == [32, 64]
    assert bucket([1000, 1100, 1300]) == [1024, 1152, 1408]


def test_python_api_gpt2_no_spurious_findings():
    """A real model (tiny GPT-2): it runs, nothing falls back, nothing
    diverges, nothing is flagged, and the loss curves agree."""
    import model_zoo

    torch.manual_seed(0)
    model = model_zoo.gpt2("tiny")
    ids = torch.randint(0, model_zoo.VOCAB, (2, 16))
    r = torch_neuronx.evaluate(
        model,
        {"input_ids": ids, "labels": ids},
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
        steps=2,
        compile=False,
    )
    assert r.runs["ok"] and r.runs["steps_completed"] == 2
    assert r.findings == [], r.findings
    assert r.numerics["compared_ops"] > 100 and r.numerics["max_error_cpu"] < 1e-4
    assert r.numerics["loss"]["max_rel_diff"] < 1e-4
    mods = {m["module"] for m in r.numerics["by_module"]}
    assert "GPT2LMHeadModel.transformer.h.0.attn" in mods
    assert r.performance["peak_memory_bytes"] > 0 and all(h["fits"] for h in r.performance["hbm"])
    # The model the caller passed is untouched (copies are evaluated).
    assert next(model.parameters()).device.type == "cpu"


def test_shadow_float64_reference_for_every_op():
    from torch.utils.module_tracker import ModuleTracker

    from torch_neuronx.evaluate.shadow import ShadowNumerics

    a = torch.randn(64, 64, device="neuron")
    for mode, want_f64 in (("all", True), ("divergent", False)):
        tracker = ModuleTracker()
        shadow = ShadowNumerics(tracker, float64=mode)
        with tracker, shadow:
            (a @ a).softmax(-1).add_(1.0)
        ops = shadow.by_op
        assert {"aten::mm", "aten::_softmax", "aten::add_"} <= set(ops)
        assert all(o["max_error_cpu"] < 1e-5 for o in ops.values())
        # float32 rounding vs float64: small, nonzero where the op rounds.
        assert (ops["aten::mm"]["max_error_f64"] > 0) == want_f64
        assert ops["aten::mm"]["max_error_f64"] < 1e-5
        assert shadow.divergences == {}


def test_example_train_step_script():
    """examples/train_step.py, unchanged: stopped after 3 optimizer steps,
    nothing falls back and nothing is flagged."""
    r = evaluate_script(
        str(ROOT / "examples" / "train_step.py"),
        ["--steps", "2"],
        steps=3,
        shadow=False,
        compile=False,
    )
    assert r.runs["ok"] and r.runs["status"] == "stopped" and r.runs["steps_completed"] == 3
    assert r.findings == [], r.findings
    assert r.fallbacks["ops_observed"] > 100
    assert "Block.attn" not in {
        m["module"] for m in r.performance["module_time"]
    }  # attn is a method
    assert {"Block.qkv", "Block.fc1", "Block.head"} <= {
        m["module"] for m in r.performance["module_time"]
    }
    assert len(r.numerics["loss"]["cpu"]) == 3


@pytest.mark.parametrize("name", ["llama", "resnet"])
def test_python_api_llama_resnet_no_spurious_findings(name):
    import torch.nn.functional as F

    import model_zoo

    torch.manual_seed(0)
    model = getattr(model_zoo, name)("tiny")
    if name == "resnet":
        batch = model_zoo.image_batch(4, 16)
        r = torch_neuronx.evaluate(
            model,
            (batch["x"],),
            loss_fn=lambda out: F.cross_entropy(out, batch["y"].to(out.device)),
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            steps=2,
            compile=False,
        )
    else:
        r = torch_neuronx.evaluate(
            model,
            model_zoo.lm_batch(2, 16),
            optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
            steps=2,
            compile=False,
        )
    assert r.runs["ok"] and r.findings == [], r.findings
    assert r.numerics["compared_ops"] > 100 and r.numerics["loss"]["max_rel_diff"] < 1e-4
