"""TorchNeuron's compile surface (issue 21, item 2): NEURON_CC_FLAGS and
``options={"compiler_args": ...}`` hold neuronx-cc flags. The optimisation
level maps onto the C compiler's -O; every other flag is logged once as not
applicable and none reaches the C compiler, whose own extra flags come from
TORCH_NEURONX_CC_EXTRA_FLAGS. TORCH_NEURONX_DISABLE_NEFF_CACHE is an alias
of the cache switch; torch_neuronx.neuron_dynamo_backend's helpers import."""

import os

import pytest
import torch
import torch._dynamo

import torch_neuronx  # noqa: F401
from torch_neuronx._compile import config, jobs
from torch_neuronx._compile.backend import NeuronCompileError

TORCHNEURON_FLAGS = (
    "--model-type=transformer -O1 --auto-cast=none --lnc 2 --target trn2 "
    "--enable-saturate-infinity --enable-mixed-precision-accumulation"
)


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path / "debug"))
    monkeypatch.setenv("TORCH_NEURONX_COMPILE_THREADS", "0")
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", raising=False)
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    torch._dynamo.reset()
    jobs._memory_cache.clear()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def _commands(tmp_path):
    d = tmp_path / "debug"
    return [p.read_text() for p in sorted(d.glob("*.cmd"))]


def _run(fn, *args, **compile_kw):
    x = torch.randn(5, 7)
    g = torch.compile(fn, backend="neuron", **compile_kw)
    torch.testing.assert_close(g(x.to("neuron")).cpu(), fn(x), rtol=1e-5, atol=1e-6)


def test_parse_maps_optimisation_level_and_ignores_the_rest():
    level, ignored = config.parse_neuron_cc_flags(TORCHNEURON_FLAGS)
    assert level == 1
    assert ignored == [
        "--model-type=transformer",
        "--auto-cast=none",
        "--lnc 2",
        "--target trn2",
        "--enable-saturate-infinity",
        "--enable-mixed-precision-accumulation",
    ]
    assert config.parse_neuron_cc_flags("--optlevel 3")[0] == 3
    assert config.parse_neuron_cc_flags("--optlevel=0")[0] == 0
    assert config.parse_neuron_cc_flags("-O3 -O1")[0] == 1  # the last one wins
    assert config.parse_neuron_cc_flags("")[0] == 2  # the default
    # A C flag put there by habit is no neuronx-cc flag: ignored too.
    assert config.parse_neuron_cc_flags("-march=skylake -ffast-math") == (
        2,
        ["-march=skylake", "-ffast-math"],
    )
    with pytest.raises(NeuronCompileError, match="optimisation level 'x'"):
        config.parse_neuron_cc_flags("--optlevel x")


def test_neuron_cc_flags_reach_only_the_opt_level(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_CC_FLAGS", TORCHNEURON_FLAGS + " -march=skylake")
    _run(lambda x: torch.tanh(x) * 3 + 1)
    cmds = _commands(tmp_path)
    assert cmds, "no compile ran"
    for cmd in cmds:
        argv = cmd.split()
        assert "-O1" in argv and "-O2" not in argv, cmd
        for bad in (
            "--model-type",
            "--auto-cast",
            "--lnc",
            "--target",
            "trn2",
            "-march=skylake",
            "--enable",
        ):
            assert not any(a.startswith(bad) for a in argv), (bad, cmd)


def test_not_applicable_flags_are_logged_once(monkeypatch):
    logged = []
    monkeypatch.setattr(config, "_logged_flags", set())
    from torch_neuronx import _logging

    monkeypatch.setattr(_logging, "log", lambda level, comp, msg: logged.append((level, comp, msg)))
    for _ in range(3):
        config.cc_settings("--model-type=transformer --bogus")
    msgs = [m for _, _, m in logged]
    assert len(msgs) == 2, msgs
    assert "`--model-type=transformer` does not apply" in msgs[0]
    assert (
        "`--bogus` is not a neuronx-cc flag" in msgs[1]
        and "TORCH_NEURONX_CC_EXTRA_FLAGS" in msgs[1]
    )
    assert all(level == _logging.WARNING and comp == "compile" for level, comp, _ in logged)


def test_compiler_args_option_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_CC_FLAGS", "-O1")
    _run(lambda x: x.exp() - x, options={"compiler_args": "--model-type=transformer -O3"})
    _run(lambda x: x.cos() - x, options={"compiler_args": ["--optlevel", "0", "--lnc=2"]})
    opts = [[a for a in c.split() if a.startswith("-O")] for c in _commands(tmp_path)]
    assert sorted(opts) == [["-O0"], ["-O3"]], opts


def test_extra_c_flags_go_to_the_c_compiler_and_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "TORCH_NEURONX_CC_EXTRA_FLAGS", "-DOPENNEURON_TEST_FLAG=1  -fno-tree-vectorize"
    )
    _run(lambda x: x * 5 - 1)
    (cmd,) = _commands(tmp_path)
    assert "-DOPENNEURON_TEST_FLAG=1" in cmd.split() and "-fno-tree-vectorize" in cmd.split()
    # Different flags, different objects: a changed flag recompiles.
    a = config.cc_settings()
    monkeypatch.setenv("TORCH_NEURONX_CC_EXTRA_FLAGS", "-fno-tree-vectorize")
    assert config.cc_settings().key() != a.key()
    monkeypatch.setenv(
        "NEURON_CC_FLAGS", "--model-type=transformer"
    )  # not applicable: same objects
    assert config.cc_settings().key() == config.CcSettings(2, "-fno-tree-vectorize").key()


def test_opt_level_changes_the_cache_key(monkeypatch):
    base = config.cc_settings().key()
    monkeypatch.setenv("NEURON_CC_FLAGS", "-O3")
    assert config.cc_settings().key() != base


def test_disable_neff_cache_alias(tmp_path, monkeypatch):
    assert config.caching_enabled()
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")
    assert not config.caching_enabled() and config.cache_dir() is None
    for _ in range(2):
        torch._dynamo.reset()
        _run(lambda x: x.sigmoid() + 2)
    m = torch.neuron.get_dynamo_metrics()
    assert m["compiles"] == 2 and m["cache_hits"] == 0, m
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").glob("*.so"))


def test_neuron_dynamo_backend_helpers_import(tmp_path):
    from torch_neuronx import neuron_dynamo_backend as ndb
    from torch_neuronx.neuron_dynamo_backend import (
        NEFFCompilationError,
        NEFFExecutionError,  # noqa: F401
        create_neuron_backend,
        get_dynamo_metrics,
        get_model_name,
        get_rank,
        load_mlir,
        neuron_backend,
        reset_dynamo_metrics,
        save_fx_graph_all_formats,
        save_fx_graph_txt,
        set_model_name,
    )

    for name in ndb.__all__:
        assert getattr(ndb, name) is not None, name
    assert NEFFCompilationError is NeuronCompileError and issubclass(
        NEFFExecutionError, RuntimeError
    )
    assert get_rank() == 0
    x = torch.randn(3, 4)
    torch.testing.assert_close(
        torch.compile(lambda x: x * x, backend=neuron_backend)(x.to("neuron")).cpu(), x * x
    )
    # A backend with options bound; the default model name names the debug artifacts.
    set_model_name("mymodel")
    try:
        assert get_model_name() == "mymodel"
        be = create_neuron_backend({"compiler_args": "-O1"})
        torch.testing.assert_close(
            torch.compile(lambda x: x - 3, backend=be)(x.to("neuron")).cpu(), x - 3
        )
    finally:
        set_model_name(None)
    (cmd,) = [c for c in (tmp_path / "debug").glob("mymodel_*.cmd")]
    assert "-O1" in cmd.read_text().split()
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    assert "add" in open(save_fx_graph_txt(gm, str(tmp_path / "g.txt"))).read()
    txt, py = save_fx_graph_all_formats(gm, str(tmp_path / "g2"))
    assert "def forward" in open(py).read()
    with pytest.raises(NeuronCompileError, match="not to StableHLO/MLIR"):
        load_mlir("x.mlir")


def test_missing_c_compiler_says_gcc_is_needed(monkeypatch):
    monkeypatch.setenv("CC", "openneuron-no-such-compiler")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    g = torch.compile(lambda x: x.exp() + 4, backend="neuron")
    with pytest.raises(Exception) as info:
        g(torch.ones(3, device="neuron"))
    msg = str(info.value)
    assert "cannot run the C compiler `openneuron-no-such-compiler`" in msg, msg
    assert "needs a C compiler: install gcc" in msg and "apt-get install gcc" in msg, msg
