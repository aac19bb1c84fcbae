"""What is evaluated, and how one run of it is driven.

Owner: ``StepControl`` (counts training steps, records each step's loss and
time, stops the program after N steps) and the two kinds of program:
``ScriptProgram`` (the user's script, run unchanged with runpy; device mapping,
torch.compile interception) and ``ModelProgram`` (the Python API's model,
inputs, loss and optimizer). A step ends at each optimizer step (a global
optimizer post-hook) or, for a program that never builds a
``torch.optim.Optimizer``, at the end of each ``backward()``; the loss is the
scalar ``backward()`` was called on.
"""

from __future__ import annotations

import copy
import os
import runpy
import sys
import time
from dataclasses import dataclass, field

import torch

from .locations import exception_site, user_frame


class StopEvaluation(BaseException):
    """Raised from the step hooks after the last step (BaseException: the
    script's own ``except Exception`` must not swallow it)."""


@dataclass
class RunResult:
    status: str = "completed"  # completed | stopped | error
    error: "dict | None" = None
    losses: list = field(default_factory=list)
    step_seconds: list = field(default_factory=list)
    wall_seconds: float = 0.0


def _sync(device: str):
    if device == "neuron":
        torch.neuron.synchronize()


class _Patches:
    """Monkey-patches a phase installs; uninstall undoes them, last first."""

    _undo: list

    def uninstall(self):
        for u in reversed(self._undo):
            u()
        self._undo.clear()


class StepControl(_Patches):
    def __init__(self, max_steps: "int | None", device: str, on_step=None):
        self.max_steps = max_steps
        self.device = device
        self.on_step = on_step
        self.result = RunResult()
        self.steps = 0
        self._loss = None
        self._t_last = None
        self._has_optimizer = False
        self.stage = "forward"  # what the step was doing: forward | backward | optimizer step
        self._in_backward = False
        self._undo = []

    def install(self):
        ctl = self
        backward = torch.Tensor.backward

        def patched_backward(t, *args, **kwargs):
            if ctl._in_backward:
                # Re-entered: Tensor.backward hands itself to a TorchFunctionMode
                # (the device mapping), which calls Tensor.backward (this) again.
                return backward(t, *args, **kwargs)
            if t.numel() == 1:
                ctl._loss = t.detach()
            ctl.stage = "backward"  # (left so on an exception: the report names it)
            ctl._in_backward = True
            try:
                out = backward(t, *args, **kwargs)
            finally:
                ctl._in_backward = False
            ctl.stage = "forward"
            if not ctl._has_optimizer:
                ctl.step_end()
            return out

        torch.Tensor.backward = patched_backward
        self._undo.append(lambda: setattr(torch.Tensor, "backward", backward))
        opt_init = torch.optim.Optimizer.__init__

        def patched_init(o, *args, **kwargs):
            ctl._has_optimizer = True
            return opt_init(o, *args, **kwargs)

        torch.optim.Optimizer.__init__ = patched_init
        self._undo.append(lambda: setattr(torch.optim.Optimizer, "__init__", opt_init))
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        h0 = register_optimizer_step_pre_hook(
            lambda opt, args, kwargs: setattr(ctl, "stage", "optimizer step")
        )
        h = register_optimizer_step_post_hook(lambda opt, args, kwargs: ctl.step_end())
        self._undo += [h0.remove, h.remove]
        # Step 1 starts at the first module call (a global forward hook would
        # be traced into compiled graphs: this runs before compiled code).
        call = torch.nn.Module.__call__

        def first_call(m, *args, **kwargs):
            # (is_compiling first: Dynamo inlines this into submodule calls,
            # and must not guard on the start time.)
            if not torch.compiler.is_compiling() and ctl._t_last is None:
                _sync(ctl.device)
                ctl._t_last = time.perf_counter()
            return call(m, *args, **kwargs)

        torch.nn.Module.__call__ = first_call
        self._undo.append(lambda: setattr(torch.nn.Module, "__call__", call))
        return self

    def step_end(self):
        self.stage = "forward"
        _sync(self.device)
        now = time.perf_counter()
        self.steps += 1
        loss = None
        if self._loss is not None:
            try:
                loss = float(self._loss.float().item())
            except Exception:  # noqa: BLE001 - a loss that cannot be read is not plotted
                loss = None
        self._loss = None
        self.result.losses.append(loss)
        self.result.step_seconds.append(now - (self._t_last or now))
        if self.on_step is not None:
            self.on_step(self.steps)
        _sync(self.device)
        self._t_last = time.perf_counter()
        if self.max_steps is not None and self.steps >= self.max_steps:
            raise StopEvaluation()


class CompilePatch(_Patches):
    """torch.compile in a run: ``mode='off'`` returns the function unchanged
    (eager phases see every op); ``mode='probe'`` compiles with the probe
    backend, and also compiles each top-level module the script calls, so an
    eager script is evaluated compiled too. The script's own torch.compile
    calls are recorded (``dynamic=True``, ``mode``)."""

    def __init__(self, mode: str, probe=None, auto_modules: bool = True):
        self.mode = mode
        self.probe = probe
        self.auto_modules = auto_modules
        self.calls: list[dict] = []
        self._undo = []

    def install(self):
        orig = torch.compile
        me = self

        def patched(
            model=None,
            *,
            fullgraph=False,
            dynamic=None,
            backend="inductor",
            mode=None,
            options=None,
            disable=False,
        ):
            me.calls.append(
                {
                    "location": user_frame(2),
                    "dynamic": dynamic,
                    "mode": mode,
                    "backend": backend
                    if isinstance(backend, str)
                    else getattr(backend, "__name__", "?"),
                    "fullgraph": fullgraph,
                }
            )
            if model is None:
                return lambda m: patched(
                    m,
                    fullgraph=fullgraph,
                    dynamic=dynamic,
                    backend=backend,
                    mode=mode,
                    options=options,
                    disable=disable,
                )
            if me.mode == "off" or disable:
                return model
            return orig(
                model,
                fullgraph=fullgraph,
                dynamic=False if dynamic else dynamic,
                backend=me.probe.backend,
            )

        torch.compile = patched
        self._undo.append(lambda: setattr(torch, "compile", orig))
        if self.mode == "probe" and self.auto_modules:
            call = torch.nn.Module.__call__
            depth = [0]
            probe = self.probe

            def module_call(m, *args, **kwargs):
                if torch.compiler.is_compiling():
                    return call(m, *args, **kwargs)
                if (
                    depth[0] == 0
                    and m._compiled_call_impl is None
                    and not isinstance(m, torch._dynamo.eval_frame.OptimizedModule)
                ):
                    m.compile(backend=probe.backend)
                depth[0] += 1
                try:
                    return call(m, *args, **kwargs)
                finally:
                    depth[0] -= 1

            torch.nn.Module.__call__ = module_call
            self._undo.append(lambda: setattr(torch.nn.Module, "__call__", call))
        return self


class ScriptProgram:
    kind = "script"

    def __init__(self, path: str, args: list[str], mapping: "dict[str, str] | None" = None):
        self.path = os.path.abspath(path)
        self.args = list(args)
        self.mapping = dict(mapping or {})
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"neuron-evaluate: no such script: {path}")

    def describe(self) -> str:
        return " ".join([os.path.relpath(self.path)] + self.args)

    def device_mapping(self, target: str) -> dict[str, str]:
        """The mapping that runs this script on ``target`` ('neuron' or 'cpu')."""
        m = {src: (target if dst == "neuron" else dst) for src, dst in self.mapping.items()}
        if target == "cpu":
            m.setdefault("neuron", "cpu")
        return {k: v for k, v in m.items() if k != v}

    def run(
        self, control: StepControl, target: str, compile_patch: CompilePatch, contexts=()
    ) -> RunResult:
        from . import devmap

        res = control.result
        argv, path0 = sys.argv, list(sys.path)
        sys.argv = [self.path] + self.args
        sys.path.insert(0, os.path.dirname(self.path))
        t0 = time.perf_counter()
        control.install()
        compile_patch.install()
        try:
            # A CPU run draws random factories (torch.randn(device=...)) from
            # the device's generator, as the device run does.
            draw = {src: "neuron" for src, dst in self.mapping.items() if dst == "neuron"}
            draw["neuron"] = "neuron"
            with (
                devmap.mapped(self.device_mapping(target), draw if target == "cpu" else None),
                _enter_all(contexts),
            ):
                runpy.run_path(self.path, run_name="__main__")
        except StopEvaluation:
            res.status = "stopped"
        except SystemExit as e:
            if e.code not in (None, 0):
                res.status = "error"
                res.error = {"type": "SystemExit", "message": f"exit status {e.code}"}
        except Exception as e:  # noqa: BLE001 - the report's "runs?" answer
            res.status = "error"
            res.error = dict(
                exception_site(e, self.path), step=control.steps + 1, stage=control.stage
            )
        finally:
            compile_patch.uninstall()
            control.uninstall()
            sys.argv = argv
            sys.path[:] = path0
        res.wall_seconds = time.perf_counter() - t0
        return res


class ModelProgram:
    kind = "model"

    def __init__(self, model, example_inputs, loss_fn=None, optimizer=None, steps: int = 5):
        self.base = copy.deepcopy(model).to("cpu")
        # A tuple/list: positional arguments; a dict: keyword arguments.
        self.inputs = (
            example_inputs if isinstance(example_inputs, (tuple, list, dict)) else (example_inputs,)
        )
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.steps = steps
        self.where = user_frame(3)

    def describe(self) -> str:
        return f"{type(self.base).__name__} (torch_neuronx.evaluate at {self.where})"

    def _make_optimizer(self, params):
        o = self.optimizer
        if o is None:
            return None
        if isinstance(o, torch.optim.Optimizer):
            import inspect

            accepted = inspect.signature(type(o).__init__).parameters
            return type(o)(params, **{k: v for k, v in o.defaults.items() if k in accepted})
        return o(params)

    def _loss(self, out):
        if self.loss_fn is not None:
            return self.loss_fn(out)
        if hasattr(out, "loss") and out.loss is not None:
            return out.loss
        if isinstance(out, torch.Tensor):
            return out if out.numel() == 1 else out.float().pow(2).mean()
        if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
            return out[0].float().pow(2).mean()
        raise TypeError(
            "torch_neuronx.evaluate: pass loss_fn=... (the model's output is not a tensor)"
        )

    def run(
        self, control: StepControl, target: str, compile_patch: CompilePatch, contexts=()
    ) -> RunResult:
        from torch.utils._pytree import tree_map

        res = control.result
        t0 = time.perf_counter()
        control.install()
        try:
            with _enter_all(contexts):
                model = copy.deepcopy(self.base).to(target)
                opt = self._make_optimizer(model.parameters())
                if compile_patch.mode == "probe":
                    model = torch.compile(model, backend=compile_patch.probe.backend)
                moved = tree_map(
                    lambda x: x.to(target) if isinstance(x, torch.Tensor) else x,
                    dict(self.inputs) if isinstance(self.inputs, dict) else list(self.inputs),
                )
                args, kwargs = ((), moved) if isinstance(moved, dict) else (moved, {})
                for _ in range(self.steps):
                    if opt is not None:
                        opt.zero_grad()
                    loss = self._loss(model(*args, **kwargs))
                    loss.backward()
                    if opt is not None:
                        opt.step()
        except StopEvaluation:
            res.status = "stopped"
        except Exception as e:  # noqa: BLE001
            res.status = "error"
            res.error = dict(exception_site(e), step=control.steps + 1, stage=control.stage)
        finally:
            control.uninstall()
        res.wall_seconds = time.perf_counter() - t0
        return res


class _enter_all:
    def __init__(self, contexts):
        self.contexts = list(contexts)
        self.entered = []

    def __enter__(self):
        for c in self.contexts:
            c.__enter__()
            self.entered.append(c)
        return self

    def __exit__(self, *exc):
        while self.entered:
            self.entered.pop().__exit__(None, None, None)
        return False
