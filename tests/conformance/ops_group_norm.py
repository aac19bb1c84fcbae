"""OpInfo names of the native group norm and RMS norm ops
(libtrn/src/kernels/norm/group_norm.c and rms_norm.c, torch_neuronx/csrc/
aten/group_norm.cpp and aten/rms_norm.cpp): native_group_norm and
_fused_rms_norm with their backwards (F.group_norm / F.rms_norm reach them
through CompositeImplicit aten::group_norm / aten::rms_norm)."""

OPS = {"nn.functional.group_norm", "native_group_norm", "nn.functional.rms_norm"}
