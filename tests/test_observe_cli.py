"""neuron-ls and neuron-top against a running training script; neuron-top is
driven in a real terminal (tmux), quit with q and with Ctrl-C. Stats pages
are memfds found through /proc/<pid>/fd: a process killed with SIGKILL leaves
nothing behind (in /dev/shm or its $TMPDIR), and a forked child does not list
its parent's page as its own."""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent


def _tool(name):
    script = BIN / name
    if script.exists():
        return [str(script)]
    module = {
        "neuron-ls": "torch_neuronx.cli.neuron_ls",
        "neuron-top": "torch_neuronx.cli.neuron_top",
    }[name]
    return [sys.executable, "-m", module]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    stop = tmp_path_factory.mktemp("trainer") / "stop"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "observe_train_script.py"), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("ready"), proc.stderr.read()
    yield proc
    stop.touch()
    proc.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr.read()
    assert _shm_names_of(proc.pid) == []


def _shm_names_of(pid):
    """/dev/shm entries whose name carries `pid` as a number."""
    return [n for n in os.listdir("/dev/shm") if re.search(rf"(?<!\d){pid}(?!\d)", n)]


def test_neuron_ls_shows_the_process_using_the_core(trainer):
    # both forms at once (each run is mostly interpreter start-up)
    js_proc = subprocess.Popen(_tool("neuron-ls") + ["--json"], stdout=subprocess.PIPE, text=True)
    out = subprocess.run(_tool("neuron-ls"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "2 cores" in lines[0]
    # a core's rows: its own line plus continuation lines for more processes
    # (this test process may use the device too)
    i0 = next(i for i, ln in enumerate(lines) if ln.startswith("| nc0"))
    i1 = next(i for i, ln in enumerate(lines) if ln.startswith("| nc1"))
    nc1 = "\n".join(lines[i1:-1])
    assert "NeuronCore" in lines[i0] and "GiB" in lines[i0]
    row = next(ln for ln in lines[i0:i1] if str(trainer.pid) in ln)
    assert "python observe_train_script.py" in row
    assert str(trainer.pid) not in nc1
    js_out, _ = js_proc.communicate(timeout=60)
    import json

    info = json.loads(js_out)
    users = info["devices"][0]["processes"]
    assert any(u["pid"] == trainer.pid and u["memory_allocated"] >= 8 << 20 for u in users)


def _capture(sock, session):
    return subprocess.run(
        ["tmux", "-L", sock, "capture-pane", "-p", "-t", session], capture_output=True, text=True
    ).stdout


def _wait(pred, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (scripts/install-deps.sh)"
)
def test_neuron_top_in_a_terminal_quits_on_q_and_ctrl_c(trainer, tmp_path):
    # One interpreter runs neuron-top's main twice in the terminal (start-up is
    # the cost): the first run is quit with q, the second with Ctrl-C; each
    # must return 0 (marks written between them).
    sock = f"openneuron-test-{os.getpid()}"
    session = "top"
    marks = tmp_path / "marks"
    script = (
        "import sys; from torch_neuronx.cli.neuron_top import main\n"
        "m = open(sys.argv[1], 'a')\n"
        "for _ in range(2):\n"
        "    m.write(f'{main([\"--interval\", \"0.5\"])} '); m.flush()\n"
    )
    (tmp_path / "top.py").write_text(script)
    cmd = f"{sys.executable} {tmp_path / 'top.py'} {marks}"
    subprocess.run(
        ["tmux", "-L", sock, "new-session", "-d", "-s", session, "-x", "150", "-y", "30", cmd],
        check=True,
    )
    try:

        def shows_activity():
            screen = _capture(sock, session)
            rows = [ln for ln in screen.splitlines() if ln.startswith(str(trainer.pid))]
            if not rows:
                return False
            fields = rows[0].split()
            # PID CORE UTIL MEMORY(2 words) KERNELS/S FALLBACKS/S COMMAND
            return fields[1] == "nc0" and float(fields[5]) > 0 and float(fields[6]) > 0

        def marks_are(text):
            return lambda: marks.exists() and marks.read_text() == text

        for key, after in (("q", "0 "), ("C-c", "0 0 ")):
            assert _wait(shows_activity), _capture(sock, session)
            screen = _capture(sock, session)
            assert "nc0" in screen and "MiB" in screen and "KERNELS/S" in screen
            subprocess.run(["tmux", "-L", sock, "send-keys", "-t", session, key], check=True)
            assert _wait(marks_are(after), timeout=15), (
                marks.read_text() if marks.exists() else "",
                _capture(sock, session),
            )
        gone = _wait(
            lambda: subprocess.run(
                ["tmux", "-L", sock, "has-session", "-t", session], capture_output=True
            ).returncode
            != 0,
            timeout=15,
        )
        assert gone, _capture(sock, session)
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


def test_sigkilled_process_is_listed_while_alive_and_leaves_nothing_behind(tmp_path):
    from torch_neuronx.cli import neuron_ls, stats_pages

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, torch, torch_neuronx\n"
            "t = torch.ones(1 << 20, device='neuron')\n"
            "f = torch.compile(lambda x: (x * 2).relu().sum(), backend='neuron')\n"
            "f(t).cpu()\n"
            "print('ready', torch_neuronx._C._stats_page_path(), flush=True)\nsys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        # (PyTorch's own persistent cache would default to $TMPDIR too)
        env=dict(
            os.environ,
            TMPDIR=str(tmp),
            TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
            TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "cache"),
        ),
    )
    try:
        word, path = child.stdout.readline().split()
        assert word == "ready"
        # the page is the child's memfd, readable from here through /proc
        fd = path.rsplit("/", 1)[1]
        assert path == f"/proc/{child.pid}/fd/{fd}"
        assert os.readlink(path) == "/memfd:trn-stats (deleted)"
        assert (child.pid, path) in stats_pages.page_files()
        pids = lambda: {u["pid"] for d in neuron_ls.collect()["devices"] for u in d["processes"]}  # noqa: E731
        assert child.pid in pids()
        assert _shm_names_of(child.pid) == []
        os.kill(child.pid, 9)
        # not reaped yet: a zombie, which has no open files left
        assert _wait(
            lambda: Path(f"/proc/{child.pid}/stat").read_text().split(")")[1].split()[0] == "Z"
        )
        assert child.pid not in pids()
        assert not os.path.exists(path)
        assert _shm_names_of(child.pid) == []
        # its compile scratch root goes as soon as its janitor sees it gone
        assert _wait(lambda: list(tmp.iterdir()) == []), list(tmp.rglob("*"))
    finally:
        child.kill()
        child.wait()


def test_forked_child_neither_lists_nor_writes_the_parents_page():
    import json
    import torch
    import torch_neuronx
    from torch_neuronx.cli import stats_pages

    (torch.ones(4, device="neuron") + 1).cpu()
    path = torch_neuronx._C._stats_page_path()
    assert path == f"/proc/{os.getpid()}/fd/{path.rsplit('/', 1)[1]}"
    before = torch_neuronx.metrics.get_counter_value("kernel_launches", 0)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running pytest's exit
        try:
            os.close(r)
            (torch.ones(4, device="neuron") * 3).cpu()  # counts in its private copy
            links = []
            for fd in os.listdir("/proc/self/fd"):
                try:
                    links.append(os.readlink(f"/proc/self/fd/{fd}"))
                except OSError:
                    pass
            os.write(
                w,
                json.dumps(
                    {
                        "path": torch_neuronx._C._stats_page_path(),
                        "memfd": stats_pages.MEMFD_LINK in links,
                    }
                ).encode(),
            )
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = json.loads(f.read())
    os.waitpid(pid, 0)
    assert got == {"path": "", "memfd": False}
    listed = dict(stats_pages.page_files())
    assert listed.get(os.getpid()) == path and pid not in listed
    # the child's launches did not land in this process's page
    page = stats_pages.parse(Path(path).read_bytes(), stats_pages.counter_names())
    assert page.pid == os.getpid()
    assert page.devices[0].counters["kernel_launches"] == before
