"""OpInfo names of the native training-step ops: layer norm
(libtrn/src/kernels/norm/layer_norm.c), nll_loss and dropout (loss.c, dropout.c), mse_loss
and isposinf/isneginf (torch_neuronx/csrc/aten/train.cpp,
aten/elementwise.cpp). The activation backward kernels are checked through
the activations' gradients (ops_elementwise.py)."""

OPS = {
    "nn.functional.layer_norm",
    "native_layer_norm",
    "nn.functional.nll_loss",
    "nn.functional.cross_entropy",
    "nn.functional.mse_loss",
    "nn.functional.dropout",
    "native_dropout_backward",
    "isposinf",
    "isneginf",
}
