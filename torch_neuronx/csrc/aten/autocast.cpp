// aten/autocast.cpp - torch.autocast("neuron"): the same op policies as
// CUDA (TorchNeuron follows CUDA's lists), taken from ATen's shared lists so
// they track PyTorch. Ops in no list pass through (fallback/cpu_fallback.cpp).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace at::autocast {
namespace {

#define NEURON_LOW_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NEURON_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define NEURON_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define NEURON_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

// Refused under autocast, as on CUDA: fed the float16 output of a sigmoid,
// binary cross entropy loses the precision it needs near 0 and 1.
at::Tensor binary_cross_entropy_banned(const at::Tensor &, const at::Tensor &,
                                       const std::optional<at::Tensor> &, int64_t) {
    TORCH_CHECK(false,
                "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
                "autocast (on neuron as on CUDA): a sigmoid followed by binary cross entropy "
                "should be written as torch.nn.functional.binary_cross_entropy_with_logits or "
                "torch.nn.BCEWithLogitsLoss, which are safe to autocast.");
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
    m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_banned));
    AT_FORALL_LOWER_PRECISION_FP(NEURON_LOW_PRECISION_FP)
    AT_FORALL_FP32(NEURON_FP32)
    AT_FORALL_FP32_SET_OPT_DTYPE(NEURON_FP32_SET_OPT_DTYPE)
    AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
    AT_FORALL_PROMOTE(NEURON_PROMOTE)
}

}  // namespace
}  // namespace at::autocast
