"""Whole-model training throughput and peak memory: neuron vs PyTorch CPU eager.

For each model of tests/model_zoo.py ("small" configs: a few layers of width
256, batch 8 x 64 tokens; ResNet 32 x 32 images) one AdamW training step
(forward, backward, optimizer) runs on neuron and on the CPU, interleaved
(neuron step, CPU step, ...) so both see the same machine load; the ratio
is what to read (>1: neuron is faster). Peak memory is the step's peak above
what was allocated before it (weights, grads and optimizer state are the
same on both): neuron's from its allocator statistics, the CPU's from the
profiler's allocation events.

Each round also runs one neuron step with Adaptive Eager switched off ("no
fusion", `torch_neuronx.eager_fusion.set_enabled(False)` around it), so
fusion on and off see the same load. Peak memory is with fusion on.

Each model also gets a "bf16" row: the same step with forward and loss under
torch.autocast(<device>, bfloat16) on both devices (as the issue's models
run; weights, gradients and AdamW stay float32).

    .venv/bin/python bench/bench_models.py [--steps N] [--models gpt2,llama] [--no-autocast]

`--solo` runs each side in its own process instead (`--threads` threads each):
as users run one device or the other, with no other runtime's idle threads in
the process (PyTorch's OpenMP workers spin for milliseconds after a CPU step).
Both processes stay alive and take turns, `--steps` steps each per turn over
`--rounds` rounds, the one not running blocked on its pipe. Turns are short on
purpose: this VM has speed phases of 20-25 % that last seconds to minutes and
move both sides (measured in one process running steps for a minute), so
sides measured minutes apart compare phases, not code. It prints each side's
median step and the median over rounds of the per-round ratio (the phase
cancels within a round). `--baseline TREE` adds a third process running
neuron from another checkout's build (an A/B of two builds against the CPU).

    .venv/bin/python bench/bench_models.py --solo [--threads 1] [--rounds 8] [--baseline ../main]

`--generate` times greedy `generate()` instead (the language models only:
prompt of 8 tokens, `--tokens` new tokens, batch `--batch`): neuron with
Adaptive Eager on, neuron with it off (`TORCH_NEURONX_EAGER_FUSION=0`) and
the CPU, each in its own process, as a user runs one of them. The processes
take turns of `--calls` timed calls after one untimed call (the threads the
previous side left spinning - MKL's OpenMP team, libtrn's stream worker -
land on that one), the side order reversed every other round. It prints the
min and median tokens/s of each, the ratios of the medians to CPU's and the
median over rounds of the round's on ÷ off (>1: neuron faster, fusion on
faster), and checks that fusion on and off generated the same tokens.
(Until session 40 the three sides shared one process, fusion toggled by
`set_enabled` around the "off" calls, in a rotation that always put "on"
right after the CPU side: it read fusion on 8-16 % slower than off, a cost
of that position, not of fusion; docs/performance.md, gen40.)

    .venv/bin/python bench/bench_models.py --generate [--size tiny] [--rounds 5] [--calls 2]

`--autocast-dtype float16` makes the autocast rows float16 instead (labelled
"f16"; no GradScaler: the timing is the point, not the training).
"""

import argparse
import copy
import itertools
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

import torch_neuronx  # noqa: E402,F401
import model_zoo as zoo  # noqa: E402

# The autocast rows' dtype (--autocast-dtype) and their label.
AUTOCAST = {"bfloat16": (torch.bfloat16, "bf16"), "float16": (torch.float16, "f16")}
autocast_dtype, autocast_label = AUTOCAST["bfloat16"]


def make_step(name, model, device, batch, autocast=False):
    """One AdamW training step; with `autocast`, forward and loss under
    torch.autocast(device, bfloat16) (weights and optimizer stay float32)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = zoo.to_device(batch, device)

    def step():
        opt.zero_grad()
        with torch.autocast(device_type=device, dtype=autocast_dtype, enabled=autocast):
            loss = zoo.loss_of(name, model, batch)
        loss.backward()
        opt.step()
        return loss.item()  # synchronizes, as a training loop that logs does

    return step


def zoo_batch(name):
    """The bench's training batch for zoo model `name` (seeded, on the CPU)."""
    gen = torch.Generator().manual_seed(0)
    return zoo.image_batch(32, 32, gen=gen) if name == "resnet" else zoo.lm_batch(8, 64, gen=gen)


def paired_steps(name, autocast=False):
    """make_step on copies of one seeded model and batch, per device, and each device's sync."""
    torch.manual_seed(0)
    cpu_model = zoo.MODELS[name]("small")
    batch = zoo_batch(name)
    steps = {
        dev: make_step(name, copy.deepcopy(cpu_model).to(dev), dev, batch, autocast)
        for dev in ("cpu", "neuron")
    }
    return steps, {"cpu": lambda: None, "neuron": torch.neuron.synchronize}


def cpu_peak_bytes(step) -> int:
    """Peak of live CPU allocations during one step, above the level at its start.

    Two steps are profiled and the second one is measured: the profiler
    drops the frees of blocks allocated before it started, and the first
    profiled step of a process also counted one-time allocations (GPT-2
    bf16: 41.2 MiB the first time, 28.9 MiB in every later or second step),
    which made the neuron/CPU memory ratios look better than they are."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
        with record_function("measured_step"):
            step()
    events = prof.profiler.kineto_results.events()
    window = next(e for e in events if e.name() == "measured_step")
    mem = sorted(
        (e.start_ns(), e.nbytes())
        for e in events
        if e.name() == "[memory]" and str(e.device_type()) == "DeviceType.CPU"
    )
    live, start, peak = 0, None, 0
    for t, n in mem:
        if start is None and t >= window.start_ns():
            start = live
        live += n
        if start is not None and t <= window.end_ns():
            peak = max(peak, live - start)
    return peak


def neuron_peak_bytes(step) -> int:
    torch.neuron.synchronize()
    base = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    step()
    torch.neuron.synchronize()
    return torch.neuron.max_memory_allocated() - base


def bench(name, steps, warmup, autocast=False):
    pair, _ = paired_steps(name, autocast)
    run_dev, run_cpu = pair["neuron"], pair["cpu"]
    for _ in range(warmup):
        run_dev()
        run_cpu()
    # Adaptive Eager compiles fused groups in the background after their second
    # sighting; time the steady state, not steps that race those compiles.
    torch_neuronx.eager_fusion.wait_for_compiles()

    # Neuron with fusion, neuron without, CPU: one step each per round, the
    # order changed every round. A fixed order biased the side that follows the
    # CPU step: PyTorch's OpenMP threads keep spinning for a while after a
    # parallel region and took a core from it (fusion "on" measured 5-12 %
    # behind "off" on ResNet with no fused group at all). A rotation keeps the
    # cycle (on after CPU in two rounds of three, gen40); the six orders in
    # turn put each neuron side after the CPU step equally often, within a
    # round and across the rounds' boundaries.
    def run_off():
        torch_neuronx.eager_fusion.set_enabled(False)
        try:
            run_dev()
        finally:
            torch_neuronx.eager_fusion.set_enabled(True)

    sides = [run_dev, run_off, run_cpu]
    total = [0.0, 0.0, 0.0]
    orders = list(itertools.permutations(range(3)))
    for i in range(steps):
        for k in orders[i % len(orders)]:
            t = time.perf_counter()
            sides[k]()
            total[k] += time.perf_counter() - t
    t_dev, t_off, t_cpu = total
    mem_dev = neuron_peak_bytes(run_dev)
    mem_cpu = cpu_peak_bytes(run_cpu)
    return steps / t_dev, steps / t_off, steps / t_cpu, mem_dev, mem_cpu


def make_generate(model, device, ids, tokens):
    """Greedy generate() of `tokens` new tokens; returns the token ids on the
    host (generate() itself reads a value every token to test for EOS)."""
    ids = ids.to(device)
    mask = torch.ones_like(ids)

    def run():
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
                pad_token_id=0,
            )
        return out.cpu()

    return run


# --generate's sides: (device, TORCH_NEURONX_EAGER_FUSION or None to leave it as it is).
GENERATE_SIDES = {"on": ("neuron", None), "off": ("neuron", "0"), "cpu": ("cpu", None)}


def generate_serve(side):
    """Child of --generate: reads `model size batch tokens calls` lines and
    answers each with `TIMES` (seconds of `calls` timed generate() calls, after
    one untimed call) and `IDS` (the tokens generated, for the on / off check).
    The model is built and warmed up (fused groups compiled) at its first line."""
    device = GENERATE_SIDES[side][0]
    runs = {}
    # Whether Adaptive Eager is on in this process, for the parent to check.
    print(f"READY {int(torch_neuronx.eager_fusion.is_enabled())}", flush=True)
    for line in sys.stdin:
        name, size, batch, tokens, calls = line.split()
        key = (name, size, batch, tokens)
        if key not in runs:
            torch.manual_seed(0)
            model = zoo.MODELS[name](size).eval().to(device)
            ids = torch.randint(
                0, zoo.VOCAB, (int(batch), 8), generator=torch.Generator().manual_seed(0)
            )
            runs[key] = make_generate(model, device, ids, int(tokens))
            for _ in range(2):
                runs[key]()
            if device == "neuron":
                torch_neuronx.eager_fusion.wait_for_compiles()
        run = runs[key]
        out = run()  # untimed: the previous side's spinning threads
        times = []
        for _ in range(int(calls)):
            t = time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
        print("TIMES " + " ".join(f"{x:.6f}" for x in times), flush=True)
        print("IDS " + ",".join(str(int(v)) for v in out.flatten()), flush=True)


def start_generate_sides(threads):
    """One --generate-serve child per side of GENERATE_SIDES, imports done."""
    import subprocess

    here = os.path.abspath(__file__)
    procs = {}
    for key, (_, fusion) in GENERATE_SIDES.items():
        env = dict(os.environ)
        if threads:
            env.update(OMP_NUM_THREADS=str(threads), TORCH_NEURONX_NUM_THREADS=str(threads))
        if fusion is not None:
            env["TORCH_NEURONX_EAGER_FUSION"] = fusion
        procs[key] = subprocess.Popen(
            [sys.executable, here, "--generate-serve", key],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
    for key, p in procs.items():
        line = p.stdout.readline()
        while not line.startswith("READY"):
            if p.poll() is not None:
                raise RuntimeError("a --generate child failed to start")
            line = p.stdout.readline()
        if key != "cpu" and line.split()[1] != ("1" if key == "on" else "0"):
            raise RuntimeError(
                f"--generate side {key}: fusion is {'on' if key == 'off' else 'off'}"
            )
    return procs


def bench_generate(procs, name, size, batch, tokens, rounds, calls):
    """tokens/s of each side (sorted) and on ÷ off per round, the sides in turns."""
    import statistics

    def turn(key):
        p = procs[key]
        p.stdin.write(f"{name} {size} {batch} {tokens} {calls}\n")
        p.stdin.flush()
        times, ids = p.stdout.readline(), p.stdout.readline()
        if not times.startswith("TIMES ") or not ids.startswith("IDS "):
            raise RuntimeError(f"--generate child {key} failed on {name}")
        return [batch * tokens / float(x) for x in times.split()[1:]], ids

    keys = list(procs)
    rate = {k: [] for k in keys}
    on_off = []
    outs = {}
    for r in range(rounds):
        # Reversed every other round: no side always follows the same one.
        turn_rate = {}
        for key in keys if r % 2 == 0 else keys[::-1]:
            turn_rate[key], outs[key] = turn(key)
            rate[key] += turn_rate[key]
        on_off.append(statistics.median(turn_rate["on"]) / statistics.median(turn_rate["off"]))
    if outs["on"] != outs["off"]:
        raise AssertionError(f"{name}: generate() differs with fusion on and off")
    return {k: sorted(v) for k, v in rate.items()}, sorted(on_off)


def main_generate(args):
    import statistics

    procs = start_generate_sides(args.threads)
    threads = args.threads or "default"
    print(
        f"greedy generate(), {args.tokens} new tokens, batch {args.batch}, {args.size} configs, "
        f"{threads} threads; sides in their own processes (fusion on, off, CPU), {args.rounds} "
        f"rounds x {args.calls} calls; load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'model':8s} {'neuron tok/s (min/med)':>23s} {'no fusion':>16s} {'cpu':>16s} "
        f"{'on/cpu':>7s} {'off/cpu':>7s} {'on/off':>6s} {'range':>11s}"
    )
    for name in args.models.split(","):
        if name not in ("gpt2", "llama"):
            continue
        r, on_off = bench_generate(
            procs, name, args.size, args.batch, args.tokens, args.rounds, args.calls
        )

        def cell(v):
            return f"{v[0]:7.1f} / {statistics.median(v):7.1f}"

        med = {k: statistics.median(v) for k, v in r.items()}
        print(
            f"{name:8s} {cell(r['on']):>23s} {cell(r['off']):>16s} {cell(r['cpu']):>16s} "
            f"{med['on'] / med['cpu']:7.2f} {med['off'] / med['cpu']:7.2f} "
            f"{statistics.median(on_off):6.3f} {on_off[0]:5.3f}-{on_off[-1]:<5.3f}",
            flush=True,
        )
    for p in procs.values():
        p.stdin.close()
        p.wait()
    print(f"load after: {os.getloadavg()[0]:.1f}")


def solo_child(side, rows, steps, warmup):
    """Times `rows` on one device only, prints one `SOLO model bf16 seconds` line each."""
    for name, ac in rows:
        step = solo_step(side, name, ac, warmup)
        t = time.perf_counter()
        for _ in range(steps):
            step()
        print(f"SOLO {name} {int(ac)} {(time.perf_counter() - t) / steps:.6f}", flush=True)


def solo_step(side, name, ac, warmup):
    """A warmed-up training step of `name` on `side` alone (fused groups compiled)."""
    torch.manual_seed(0)
    step = make_step(name, zoo.MODELS[name]("small").to(side), side, zoo_batch(name), ac)
    for _ in range(warmup):
        step()
    if side == "neuron":
        torch_neuronx.eager_fusion.wait_for_compiles()
    return step


def solo_serve(side, warmup):
    """Child of --solo: reads `name bf16 steps` lines, answers each with the
    per-step seconds of that many steps; the step of the current row is kept
    between turns and rebuilt when the row changes."""
    row, step = None, None
    print("READY", flush=True)
    for line in sys.stdin:
        name, ac, n = line.split()
        if row != (name, ac):
            row, step = (name, ac), None
            step = solo_step(side, name, ac == "1", warmup)
        times = []
        for _ in range(int(n)):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        print("TIMES " + " ".join(f"{x:.6f}" for x in times), flush=True)


def main_solo(args, rows):
    import statistics
    import subprocess

    env = dict(os.environ)
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), TORCH_NEURONX_NUM_THREADS=str(args.threads))
    here = os.path.abspath(__file__)
    sides = {"neuron": (None, "neuron"), "cpu": (None, "cpu")}
    if args.baseline:
        sides = {"base": (os.path.abspath(args.baseline), "neuron"), **sides}
    procs = {}
    for key, (tree, side) in sides.items():
        e = dict(env, PYTHONPATH=tree) if tree else env
        cmd = [sys.executable, here, "--solo-serve", side, "--warmup", str(args.warmup)]
        cmd += ["--autocast-dtype", args.autocast_dtype]
        procs[key] = subprocess.Popen(
            cmd, env=e, cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    for p in procs.values():  # imports done before any turn is timed
        while p.stdout.readline().strip() != "READY":
            if p.poll() is not None:
                raise RuntimeError("a --solo child failed to start")

    def turn(key, name, ac):
        p = procs[key]
        p.stdin.write(f"{name} {int(ac)} {args.steps}\n")
        p.stdin.flush()
        line = p.stdout.readline()
        if not line.startswith("TIMES "):
            raise RuntimeError(f"--solo child {key} failed on {name}")
        return statistics.median(float(x) for x in line.split()[1:]) * 1e3

    threads = args.threads or "default"
    keys = list(procs)
    print(f"training step (AdamW), each side alone in its process, {threads} threads, turns of")
    print(
        f"{args.steps} steps alternated over {args.rounds} rounds; ms = median of the turns' medians;"
    )
    print("ratio = median over rounds of the round's CPU ÷ neuron (> 1: neuron faster)")
    head = f"{'model':13s} {'neuron ms':>10s} {'cpu ms':>8s} {'ratio':>6s} {'range':>11s}"
    if args.baseline:
        head += f" {'base ms':>8s} {'base ratio':>10s} {'new÷base':>8s}"
    print(head, flush=True)
    for name, ac in rows:
        ms = {k: [] for k in keys}
        for r in range(args.rounds):
            order = keys if r % 2 == 0 else keys[::-1]
            if r == 0:  # build and warm every side before the first timed turn
                for k in order:
                    turn(k, name, ac)
            for k in order:
                ms[k].append(turn(k, name, ac))
        med = {k: statistics.median(v) for k, v in ms.items()}
        ratio = sorted(c / n for c, n in zip(ms["cpu"], ms["neuron"]))
        label = name + (" " + autocast_label if ac else "")
        line = (
            f"{label:13s} {med['neuron']:10.1f} {med['cpu']:8.1f} {statistics.median(ratio):6.2f} "
            f"{ratio[0]:5.2f}-{ratio[-1]:<5.2f}"
        )
        if args.baseline:
            base = statistics.median(c / b for c, b in zip(ms["cpu"], ms["base"]))
            speed = statistics.median(b / n for b, n in zip(ms["base"], ms["neuron"]))
            line += f" {med['base']:8.1f} {base:10.2f} {speed:8.2f}"
        print(line, flush=True)
    for p in procs.values():
        p.stdin.close()
        p.wait()
    print(f"load after: {os.getloadavg()[0]:.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--steps", type=int, default=5, help="rounds (training mode: 6 runs each side order once)"
    )
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--models", default=",".join(zoo.MODELS))
    ap.add_argument(
        "--no-autocast", action="store_true", help="skip the bf16-autocast row of each model"
    )
    ap.add_argument("--generate", action="store_true", help="time greedy generate()")
    ap.add_argument("--size", default="small", help="model config for --generate")
    ap.add_argument("--batch", type=int, default=1, help="batch for --generate")
    ap.add_argument("--tokens", type=int, default=32, help="new tokens for --generate")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (--generate, --solo)")
    ap.add_argument("--calls", type=int, default=2, help="timed calls per turn (--generate)")
    ap.add_argument("--solo", action="store_true", help="each side in its own process")
    ap.add_argument(
        "--threads", type=int, default=0, help="threads per side for --solo, --generate"
    )
    ap.add_argument("--baseline", help="--solo: also time neuron from this checkout's build")
    ap.add_argument("--solo-child", choices=("neuron", "cpu"), help=argparse.SUPPRESS)
    ap.add_argument("--solo-serve", choices=("neuron", "cpu"), help=argparse.SUPPRESS)
    ap.add_argument("--generate-serve", choices=tuple(GENERATE_SIDES), help=argparse.SUPPRESS)
    ap.add_argument(
        "--autocast-dtype", choices=tuple(AUTOCAST), default="bfloat16", help="autocast rows' dtype"
    )
    args = ap.parse_args()
    global autocast_dtype, autocast_label
    autocast_dtype, autocast_label = AUTOCAST[args.autocast_dtype]
    if args.generate_serve:
        generate_serve(args.generate_serve)
        return
    if args.generate:
        main_generate(args)
        return
    rows = [
        (n, ac)
        for n in args.models.split(",")
        for ac in (False, True)
        if not (ac and args.no_autocast)
    ]
    if args.solo_serve:
        solo_serve(args.solo_serve, args.warmup)
        return
    if args.solo_child:
        solo_child(args.solo_child, rows, args.steps, args.warmup)
        return
    if args.solo:
        main_solo(args, rows)
        return
    torch_neuronx.clear_op_tracking()
    print(f"training step (AdamW), {torch.get_num_threads()} CPU threads; ratio > 1: neuron faster")
    print(
        f"{'model':13s} {'neuron step/s':>14s} {'no fusion':>10s} {'cpu step/s':>11s} {'ratio':>6s} "
        f"{'off/cpu':>7s}   {'neuron peak MiB':>15s} {'cpu peak MiB':>12s} {'ratio':>6s}"
    )
    for name, ac in rows:
        sd, so, sc, md, mc = bench(name, args.steps, args.warmup, ac)
        label = name + (" " + autocast_label if ac else "")
        print(
            f"{label:13s} {sd:14.2f} {so:10.2f} {sc:11.2f} {sd / sc:6.2f} {so / sc:7.2f}   "
            f"{md / 2**20:15.1f} {mc / 2**20:12.1f} {md / max(mc, 1):6.2f}",
            flush=True,
        )
    fallbacks = sorted(set(torch_neuronx.get_fallback_ops()))
    print("ops on the CPU fallback:", ", ".join(fallbacks) if fallbacks else "none")


if __name__ == "__main__":
    main()
