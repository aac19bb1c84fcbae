"""OpInfo names of the fused attention (torch_neuronx/csrc/aten/attention.cpp,
libtrn/src/kernels/nn/attention.c): F.scaled_dot_product_attention picks the
fused kernel through the _fused_sdp_choice stub (float32 / bfloat16 /
float16, 4-d inputs); other inputs take PyTorch's math path."""

OPS = {"nn.functional.scaled_dot_product_attention"}
