"""OpInfo names of the losses composed from native ops in
torch_neuronx/csrc/aten/loss.cpp (sgn, smooth_l1 / huber, binary cross
entropy, log_sigmoid, xlogy) and the Python-level losses built on them
(l1_loss, binary_cross_entropy_with_logits, kl_div)."""

OPS = {
    "nn.functional.l1_loss",
    "nn.functional.smooth_l1_loss",
    "nn.functional.huber_loss",
    "nn.functional.binary_cross_entropy",
    "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.kl_div",
    "sgn",
    "xlogy",
    "nn.functional.logsigmoid",
}
