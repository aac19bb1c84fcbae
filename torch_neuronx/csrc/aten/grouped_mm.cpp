// aten/grouped_mm.cpp - torch._grouped_mm and torch._scaled_grouped_mm on
// neuron, run by libtrn's grouped-mm kernel (trn/grouped_mm.h).
//
// Checks and messages follow PyTorch CPU's _grouped_mm (int32 offs, output
// dtype equal to the inputs', no bias); the output is a new contiguous
// tensor whose rows past offs[-1] are left unwritten, as on CPU. offs is
// passed to the kernel as a device pointer and never read here, so the group
// sizes may change from call to call without a host synchronisation or a
// recompilation. Autograd is PyTorch's own formula (backward is two more
// _grouped_mm calls on transposed views, which the kernel takes as they
// are).
//
// _scaled_grouped_mm (PyTorch CPU has no kernel for it): float8 operands
// with rowwise float32 scales, the 2d x 3d (MoE forward) and 3d x 3d
// layouts: operands widened exactly to float32, the float32 grouped
// product, then the scales of each row's group applied to the float32 sums.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <trn/grouped_mm.h>

#include "aten/float8.h"
#include "observe/op_tracking.h"
#include "runtime/device.h"

namespace neuron {
namespace {

using at::Tensor;

void strides3(int64_t out[3], const Tensor &t) {
    if (t.dim() == 3) {
        for (int i = 0; i < 3; ++i) out[i] = t.stride(i);
    } else {
        out[0] = 0;
        out[1] = t.stride(0);
        out[2] = t.stride(1);
    }
}

// Shapes and layout of a grouped product; the checks of PyTorch CPU.
struct Plan {
    trn_gmm_layout layout;
    int64_t groups, m, n, k;
    std::vector<int64_t> out_sizes;
};

Plan plan_of(const Tensor &a, const Tensor &b, const std::optional<Tensor> &offs) {
    TORCH_CHECK(a.dim() == 2 || a.dim() == 3, "mat_a has to be 2 or 3d");
    TORCH_CHECK(b.dim() == 2 || b.dim() == 3, "mat_b has to be 2 or 3d");
    const bool a3 = a.dim() == 3, b3 = b.dim() == 3;
    TORCH_CHECK(a.size(-1) == b.size(-2), "contraction dimension of mat_a and mat_b must match");
    TORCH_CHECK(offs.has_value() == (!a3 || !b3), a3 && b3 ? "Offsets not supported for 3d inputs"
                                                           : "Offsets required for 2d inputs");
    if (offs) {
        TORCH_CHECK(offs->dim() == 1, "offs has to be 1D");
        TORCH_CHECK(offs->scalar_type() == at::kInt, "Offsets have to be int32");
        TORCH_CHECK(offs->device() == a.device(), "offs must be on ", a.device(), ", got ",
                    offs->device());
    }
    Plan p{};
    if (!a3 && b3) {
        p = {TRN_GMM_2D_3D, b.size(0), a.size(0), b.size(2), a.size(1), {a.size(0), b.size(2)}};
        TORCH_CHECK(offs->size(0) == b.size(0), "offs must have ", b.size(0), " entries, got ",
                    offs->size(0));
    } else if (a3 && b3) {
        TORCH_CHECK(a.size(0) == b.size(0), "batch sizes of mat_a and mat_b must match");
        p = {TRN_GMM_3D_3D, a.size(0), a.size(1),
             b.size(2),     a.size(2), {a.size(0), a.size(1), b.size(2)}};
    } else if (a3 && !b3) {
        p = {TRN_GMM_3D_2D, a.size(0), a.size(1), b.size(1), a.size(2), {a.size(1), b.size(1)}};
        TORCH_CHECK(offs->size(0) == a.size(0), "offs must have ", a.size(0), " entries, got ",
                    offs->size(0));
    } else {
        p = {TRN_GMM_2D_2D, offs->size(0), a.size(0),
             b.size(1),     a.size(1),     {offs->size(0), a.size(0), b.size(1)}};
    }
    TORCH_CHECK(p.groups >= 1, "grouped_mm needs at least one group");
    return p;
}

void launch(const Plan &p, const Tensor &a, const Tensor &b, const std::optional<Tensor> &offs,
            const Tensor &out) {
    if (out.numel() == 0) return;
    trn_grouped_mm_desc d{};
    d.dtype = *native_dtype(a.scalar_type());
    d.layout = p.layout;
    d.groups = p.groups;
    d.m = p.m;
    d.n = p.n;
    d.k = p.k;
    d.a = a.const_data_ptr();
    strides3(d.a_strides, a);
    d.b = b.const_data_ptr();
    strides3(d.b_strides, b);
    d.c = out.data_ptr();
    strides3(d.c_strides, out);
    d.offs = offs ? offs->const_data_ptr<int32_t>() : nullptr;
    TRN_CHECK(trn_grouped_mm_launch(current_trn_stream(out.device().index()), &d));
}

Tensor grouped_mm(const Tensor &a, const Tensor &b, const std::optional<Tensor> &offs,
                  const std::optional<Tensor> &bias, std::optional<at::ScalarType> out_dtype) {
    TORCH_CHECK(a.scalar_type() == b.scalar_type(),
                "mat_a and mat_b must have the same dtype, got ", a.scalar_type(), " and ",
                b.scalar_type());
    auto d = native_dtype(a.scalar_type());
    TORCH_CHECK(d && trn_grouped_mm_supports(*d),
                "grouped_mm on neuron supports float32, bfloat16 and float16, got ",
                a.scalar_type());
    TORCH_CHECK(!out_dtype || *out_dtype == a.scalar_type(),
                "Grouped gemm output dtype must match `mat_a` dtype");
    TORCH_CHECK(!bias.has_value(), "Bias not supported yet");
    TORCH_CHECK(b.device() == a.device(), "mat_b must be on ", a.device(), ", got ", b.device());
    const Plan p = plan_of(a, b, offs);
    Tensor out = at::empty(p.out_sizes, a.options());
    launch(p, a, b, offs, out);
    tracking::record_executed("aten::_grouped_mm");
    return out;
}

// Group index of each of the m rows: how many offs entries are <= row.
Tensor row_groups(const Tensor &offs, int64_t m) {
    Tensor rows = at::arange(m, offs.options().dtype(at::kInt));
    return rows.unsqueeze(1).ge(offs.unsqueeze(0)).sum(1);
}

Tensor scaled_grouped_mm(const Tensor &a, const Tensor &b, const Tensor &scale_a,
                         const Tensor &scale_b, const std::optional<Tensor> &offs,
                         const std::optional<Tensor> &bias,
                         const std::optional<Tensor> &scale_result,
                         std::optional<at::ScalarType> out_dtype, bool use_fast_accum) {
    (void)use_fast_accum;  // float32 accumulation always
    TORCH_CHECK(is_float8(a.scalar_type()) && is_float8(b.scalar_type()) &&
                    a.scalar_type() != at::kFloat8_e8m0fnu &&
                    b.scalar_type() != at::kFloat8_e8m0fnu,
                "_scaled_grouped_mm: mat_a and mat_b must be float8, got ", a.scalar_type(),
                " and ", b.scalar_type());
    TORCH_CHECK(!bias.has_value() && !scale_result.has_value(),
                "_scaled_grouped_mm: bias and scale_result are not supported");
    const at::ScalarType ot = out_dtype.value_or(at::kBFloat16);
    TORCH_CHECK(ot == at::kBFloat16 || ot == at::kFloat,
                "_scaled_grouped_mm: out_dtype must be bfloat16 or float32, got ", ot);
    TORCH_CHECK(scale_a.scalar_type() == at::kFloat && scale_b.scalar_type() == at::kFloat,
                "_scaled_grouped_mm: scales must be float32");
    const Plan p = plan_of(a, b, offs);
    TORCH_CHECK(p.layout == TRN_GMM_2D_3D || p.layout == TRN_GMM_3D_3D,
                "_scaled_grouped_mm on neuron supports 2d x 3d and 3d x 3d operands");
    // Rowwise scales: one per row of A (per group for a 3-d A), one per
    // column of each group's B.
    const int64_t G = p.groups, m = p.m, n = p.n;
    const bool a3 = p.layout == TRN_GMM_3D_3D;
    TORCH_CHECK(scale_a.numel() == (a3 ? G * m : m), "_scaled_grouped_mm: scale_a must have ",
                a3 ? G * m : m, " values, got ", scale_a.numel());
    TORCH_CHECK(scale_b.numel() == G * n, "_scaled_grouped_mm: scale_b must have ", G * n,
                " values, got ", scale_b.numel());
    Tensor wa = a.to(at::kFloat), wb = b.to(at::kFloat);
    Tensor acc = at::empty(p.out_sizes, a.options().dtype(at::kFloat));
    launch(p, wa, wb, offs, acc);
    Tensor sb = scale_b.reshape({G, n});
    Tensor scaled;
    if (a3) {
        scaled = acc * scale_a.reshape({G, m, 1}) * sb.unsqueeze(1);
    } else {
        // Rows past offs[-1] take the last group's scales (never read).
        Tensor gid = row_groups(*offs, m).clamp_max(G - 1);
        scaled = acc * scale_a.reshape({m, 1}) * sb.index_select(0, gid);
    }
    tracking::record_executed("aten::_scaled_grouped_mm");
    return scaled.to(ot);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_grouped_mm", TORCH_FN(grouped_mm));
    m.impl("_scaled_grouped_mm", TORCH_FN(scaled_grouped_mm));
}

}  // namespace
}  // namespace neuron
