"""The script tests/test_ecosystem_accelerate.py starts with
``accelerate launch --num_processes 2``: a Trainer run and a plain
Accelerator loop, unchanged from single-process use (no set_device, no
device index anywhere). Each rank writes what it saw to OUT/rank{N}.json.

    accelerate launch --num_processes 2 tests/_ecosystem_launch.py OUT [cpu]
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import _ecosystem as eco  # noqa: E402

out, cpu = sys.argv[1], "cpu" in sys.argv[2:]
rank = int(os.environ.get("RANK", "0"))
tr = eco.trainer(os.path.join(out, "trainer"), cpu)
tr.train()
result = {
    "trainer_device": str(tr.args.device),
    "model_device": str(next(tr.model.parameters()).device),
    "world_size": tr.args.world_size,
    "losses": eco.losses(tr),
    "eval_loss": tr.evaluate()["eval_loss"],
}
result.update(eco.accelerator_loop(cpu, os.path.join(out, "state")))
if not cpu:
    import torch_neuronx

    result["current_device"] = torch.neuron.current_device()
    result["fallbacks"] = sorted(set(torch_neuronx.get_fallback_ops()))
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(result, f)
