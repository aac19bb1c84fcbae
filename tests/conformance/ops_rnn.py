"""OpInfo names of the native recurrent-cell ops (libtrn/src/kernels/nn/rnn_cell.c,
torch_neuronx/csrc/aten/rnn_cell.cpp): _thnn_fused_lstm_cell,
_thnn_fused_lstm_cell_backward_impl, _thnn_fused_gru_cell,
_thnn_fused_gru_cell_backward.

None: PyTorch 2.13's op_db has no OpInfo entry for these ops nor for
nn.LSTM / nn.GRU / nn.RNN and their cells (those are ModuleInfo entries in
common_modules.module_db). Their conformance test is tests/test_rnn.py, which
runs every sample of those six ModuleInfo entries plus layer / cell / packed
sequence / dtype cases on neuron and CPU and compares outputs, final states
and all input, state and parameter gradients, with no CPU fallback allowed."""

OPS: set[str] = set()
