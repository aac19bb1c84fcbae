"""``neuron-evaluate`` / ``torch_neuronx.evaluate``: the migration evaluation
(does the program run on neuron, what falls back to the CPU, are the numbers
right, how does it compile, how fast, does it fit, what will differ on real
TorchNeuron) in one command or one call. See docs/evaluate.md.

Owner: the Python API. ``runner.py`` runs the phases, ``report.py`` /
``html.py`` present them, ``cli.py`` is the command.
"""

from __future__ import annotations

from .report import THRESHOLDS, Report
from .strict import NeuronStrictError

__all__ = ["evaluate", "evaluate_script", "Report", "THRESHOLDS", "NeuronStrictError"]


def evaluate(
    model,
    example_inputs,
    loss_fn=None,
    optimizer=None,
    steps: int = 4,
    *,
    shadow: bool = True,
    compile: bool = True,
    cpu_reference: bool = True,
    strict: bool = False,
    progress: bool = False,
    shadow_float64: str = "divergent",
) -> Report:
    """Evaluates ``steps`` training steps of ``model`` on neuron and returns a
    :class:`Report`. ``model`` and ``example_inputs`` may be on any device (a
    copy of the model is moved for each phase; the original is not touched).
    ``loss_fn(output) -> scalar`` (default: ``output.loss``, a scalar output,
    or the mean square of the output); ``optimizer``: an optimizer (its class
    and defaults are reused for each copy) or ``lambda params: ...``; None
    runs forward and backward only."""
    from .program import ModelProgram
    from .progress import Progress
    from .runner import Options, evaluate_program

    prog = ModelProgram(model, example_inputs, loss_fn=loss_fn, optimizer=optimizer, steps=steps)
    opts = Options(
        steps=steps,
        shadow=shadow,
        compile=compile,
        cpu_reference=cpu_reference,
        strict=strict,
        progress=Progress() if progress else None,
        shadow_float64=shadow_float64,
    )
    return Report(evaluate_program(prog, opts))


def evaluate_script(
    path: str, args=(), steps: int = 4, map_device: "str | None" = None, **kw
) -> Report:
    """The same for a script (what ``neuron-evaluate script.py args`` runs)."""
    from . import devmap
    from .program import ScriptProgram
    from .progress import Progress
    from .runner import Options, evaluate_program

    progress = kw.pop("progress", False)
    prog = ScriptProgram(path, list(args), devmap.parse(map_device))
    opts = Options(steps=steps, progress=Progress() if progress else None, **kw)
    return Report(evaluate_program(prog, opts))


class _CallableModule(__import__("types").ModuleType):
    """``torch_neuronx.evaluate(...)`` works whether the name resolves to this
    package or to the function (importing a submodule rebinds it)."""

    def __call__(self, *args, **kwargs):
        return evaluate(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallableModule
