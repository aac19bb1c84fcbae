"""SimpleFSDP (+ tensor parallel) training step compiled vs eager, 2 ranks
(issue 21 item 3's target: compiled >= 1.2x its eager neuron step).

Runs tests/_compile_dist_workers.py's bench_simple_fsdp per mesh; each rank
times eager, compiled in program order (collective reordering off) and
compiled reordered, interleaved step by step, and prints median ms.
Usage: python bench/bench_compile_dist.py [MESH ...]   (default: 2x1 1x2)
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from _dist_harness import check_ranks  # noqa: E402


def main():
    meshes = sys.argv[1:] or ["2x1", "1x2"]
    for mesh in meshes:
        dp, tp = (int(v) for v in mesh.split("x"))
        outs = check_ranks(
            "bench_simple_fsdp", dp * tp, timeout=900, args=mesh, module="_compile_dist_workers"
        )
        for _, (_, out) in sorted(outs.items()):
            for line in out.splitlines():
                if line.startswith("BENCH "):
                    r = json.loads(line[6:])
                    ms = r["ms"]
                    print(
                        f"mesh {r['mesh']} rank {r['rank']}: "
                        + ", ".join(f"{k} {v:.1f} ms" for k, v in ms.items())
                        + f"; compiled/eager speed-up {ms['eager'] / ms['compiled, reordered']:.2f}x"
                    )


if __name__ == "__main__":
    main()
