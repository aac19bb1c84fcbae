"""Finds aten ops whose schema under-reports what they write.

The CPU fallback copies back only the arguments a schema marks as written
(Tensor(a!)). An op that writes an unmarked argument (native_batch_norm's
running stats) would silently lose that write on neuron. This script runs
PyTorch's OpInfo samples and nn ModuleInfo samples on CPU under a dispatch
mode that snapshots every tensor argument of every aten call and reports the
ops that changed an argument their schema does not mark as written.

Run:  .venv/bin/python scripts/audit_fallback_writes.py [max_samples_per_op]
The list it prints is what torch_neuronx/csrc/fallback/writes.cpp
must cover (docs/training-ops.md records the result).
"""

import sys
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

warnings.filterwarnings("ignore")


def _resolved(t):
    # Conjugate / negative views compare by the values they stand for.
    return t.detach().resolve_conj().resolve_neg()


class WriteAudit(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.found = {}  # op name -> set of argument names

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        schema = func._schema
        named = list(
            zip(schema.arguments, list(args) + [None] * (len(schema.arguments) - len(args)))
        )
        snaps = []
        for arg, val in named:
            if arg.kwarg_only:
                val = kwargs.get(arg.name)
            written = arg.alias_info is not None and arg.alias_info.is_write
            vals = val if isinstance(val, (list, tuple)) else [val]
            for v in vals:
                if (
                    isinstance(v, torch.Tensor)
                    and not written
                    and v.layout == torch.strided
                    and v.device.type == "cpu"
                    and not v.is_quantized
                ):
                    snaps.append((arg.name, v, _resolved(v).clone()))
        out = func(*args, **kwargs)
        for name, v, before in snaps:
            v = _resolved(v)
            same = (
                torch.equal(v, before)
                if not before.is_floating_point() and not before.is_complex()
                else bool(((v == before) | (v.isnan() & before.isnan())).all())
            )
            if not same:
                self.found.setdefault(str(func), set()).add(name)
        return out


def _run_ops(audit, max_samples):
    from torch.testing._internal.common_methods_invocations import op_db

    for op in op_db:
        if torch.float32 not in op.supported_dtypes("cpu"):
            continue
        try:
            samples = op.sample_inputs("cpu", torch.float32, requires_grad=False)
            for i, s in enumerate(samples):
                if i >= max_samples:
                    break
                with audit:
                    op(s.input, *s.args, **s.kwargs)
        except Exception:
            pass


def _run_modules(audit, max_samples):
    from torch.testing._internal.common_modules import module_db

    for mi in module_db:
        try:
            inputs = mi.module_inputs_func(
                mi, device="cpu", dtype=torch.float32, requires_grad=True, training=True
            )
            for i, mod_in in enumerate(inputs):
                if i >= max_samples or mod_in.forward_input is None:
                    continue
                ca, ck = mod_in.constructor_input.args, mod_in.constructor_input.kwargs
                m = mi.module_cls(*ca, **ck).train()
                fa, fk = mod_in.forward_input.args, mod_in.forward_input.kwargs
                with audit:
                    out = m(*fa, **fk)
                    leaves = [
                        t
                        for t in tree_flatten(out)[0]
                        if isinstance(t, torch.Tensor) and t.requires_grad
                    ]
                    if leaves:
                        sum(t.float().sum() for t in leaves).backward()
        except Exception:
            pass


def main():
    max_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    audit = WriteAudit()
    _run_modules(audit, max_samples)
    _run_ops(audit, max_samples)
    for op, names in sorted(audit.found.items()):
        print(f"{op}: writes unmarked {sorted(names)}")


if __name__ == "__main__":
    main()
