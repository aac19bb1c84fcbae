"""OpInfo names of the native order statistics (libtrn/src/kernels/sort/select.c,
torch_neuronx/csrc/aten/select.cpp): kthvalue, median and nanmedian,
whole-tensor and along a dim. Indices of tied values are compared by the
value they select (TIE_ORDER_FREE in exclusions.py)."""

OPS = {"kthvalue", "median", "nanmedian"}
