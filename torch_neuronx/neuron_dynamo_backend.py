"""TorchNeuron's public compile helper namespace (torch_neuronx.neuron_dynamo_backend)."""
from ._compile import get_dynamo_metrics, neuron_backend, reset_dynamo_metrics


def __getattr__(name):
    # NEFFCompilationError: TorchNeuron's name for a failed graph compile.
    if name in ("NEFFCompilationError", "NeuronCompileError"):
        from ._compile.backend import NeuronCompileError
        return NeuronCompileError
    raise AttributeError(name)


__all__ = ["neuron_backend", "get_dynamo_metrics", "reset_dynamo_metrics", "NEFFCompilationError"]
