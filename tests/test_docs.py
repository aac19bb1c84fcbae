"""Docs that are generated must match the code."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ops_doc_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_ops_doc.py"), "--check"])
    assert r.returncode == 0, "docs/ops.md is stale: run python scripts/gen_ops_doc.py"


def test_env_vars_doc_names_every_variable_the_code_reads():
    doc = (ROOT / "docs" / "env-vars.md").read_text()
    for var in [
        "NEURON_RT_VISIBLE_CORES",
        "NEURON_RT_NUM_CORES",
        "TORCH_NEURONX_HBM_SIZE",
        "TORCH_NEURONX_DEBUG_PROTECT_MEMORY",
        "TORCH_NEURONX_ENABLE_ASYNC_NRT",
        "NEURON_LAUNCH_BLOCKING",
        "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS",
    ]:
        assert f"`{var}`" in doc, var
    sources = "".join(p.read_text() for p in (ROOT / "libtrn" / "src").rglob("*.c"))
    sources += "".join(p.read_text() for p in (ROOT / "torch_neuronx" / "csrc").rglob("*.cpp"))
    for var in set(re.findall(r'"((?:TORCH_NEURONX|NEURON)_[A-Z_]+)"', sources)):
        assert f"`{var}`" in doc, f"{var} is read by the code but not documented"
