// aten/attention.cpp - F.scaled_dot_product_attention on neuron through
// libtrn's fused attention kernel (trn/attention.h).
//
// Selection works as for CPU's flash kernel: PyTorch's composite
// scaled_dot_product_attention asks the _fused_sdp_choice stub of the query's
// device which backend to run. Ours answers "overrideable" whenever the
// kernel handles the inputs (then aten::_scaled_dot_product_fused_attention_
// overrideable and, through autograd, its _backward run here), else "math"
// (PyTorch's decomposition into native matmul/softmax ops):
//   - float64 (the kernel computes in float32);
//   - inputs that are not 4-d [batch, heads, seq, dim], or nested;
//   - q/k/v of different dtypes, or a mask of another floating dtype;
//   - head counts that are not a multiple (PyTorch raises in math);
//   - fake tensors while torch.compile traces (the compiler lowers the
//     decomposed ops, not this fused op);
//   - the user disabled both the overrideable and flash backends
//     (torch.nn.attention.sdpa_kernel).
// Dropout draws one 64-bit seed from the device's generator and returns it
// as philox_seed, so the backward regenerates the same mask.
#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <torch/library.h>

#include <cmath>

#include "runtime/generator.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/attention.h"

namespace neuron {
namespace {

using at::Tensor;

bool is_fake(const Tensor &t) { return t.key_set().has(c10::DispatchKey::Python); }

// Whether the fused kernel takes these inputs (see the header comment).
bool kernel_takes(const Tensor &q, const Tensor &k, const Tensor &v,
                  const std::optional<Tensor> &mask, bool enable_gqa) {
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
    if (q.is_nested() || k.is_nested() || v.is_nested()) return false;
    if (is_fake(q) || is_fake(k) || is_fake(v)) return false;
    if (q.device() != k.device() || q.device() != v.device()) return false;
    if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type()) return false;
    auto dt = native_dtype(q.scalar_type());
    if (!dt) return false;
    const bool has_mask = mask.has_value() && mask->defined();
    std::optional<trn_dtype> mdt = has_mask ? native_dtype(mask->scalar_type()) : std::nullopt;
    if (has_mask && (!mdt || mask->dim() > 4 || mask->device() != q.device() ||
                     (mask->scalar_type() != at::kBool && mask->scalar_type() != q.scalar_type())))
        return false;
    if (!trn_attention_supports(*dt, has_mask, has_mask ? *mdt : TRN_DTYPE_F32)) return false;
    const int64_t B = q.size(0), H = q.size(1), Hk = k.size(1);
    if (k.size(0) != B || v.size(0) != B || v.size(1) != Hk) return false;
    if (q.size(3) != k.size(3) || k.size(2) != v.size(2)) return false;
    if (Hk == 0 || H % Hk != 0 || (H != Hk && !enable_gqa)) return false;
    if (has_mask) {
        const std::vector<int64_t> full{B, H, q.size(2), k.size(2)};
        if (!at::is_expandable_to(mask->sizes(), full)) return false;
    }
    return true;
}

int64_t fused_sdp_choice(const Tensor &q, const Tensor &k, const Tensor &v,
                         const std::optional<Tensor> &mask, double /*dropout_p*/,
                         bool /*is_causal*/, std::optional<double> /*scale*/, bool enable_gqa) {
    auto &ctx = at::globalContext();
    const bool fused_on = ctx.userEnabledOverrideableSDP() || ctx.userEnabledFlashSDP();
    if (fused_on && kernel_takes(q, k, v, mask, enable_gqa))
        return static_cast<int64_t>(at::SDPBackend::overrideable);
    TORCH_CHECK(ctx.userEnabledMathSDP(),
                "No viable backend for scaled_dot_product_attention on neuron: the fused kernel ",
                "does not take these inputs and the math backend is disabled");
    return static_cast<int64_t>(at::SDPBackend::math);
}

// The last dim contiguous; other strides stay as they are.
Tensor rows_contiguous(const Tensor &t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

void fill_strides(int64_t *dst, const Tensor &t) {
    for (int i = 0; i < 3; i++) dst[i] = t.stride(i);
}

// Fills the forward descriptor; q/k/v/out/lse must outlive the launch.
trn_attention_desc make_desc(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &mask,
                             const Tensor &out, const Tensor &lse, double dropout_p, bool is_causal,
                             std::optional<double> scale, uint64_t seed) {
    TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
                "scaled_dot_product_attention on neuron: expected 4-d query, key and value");
    auto dt = native_dtype(q.scalar_type());
    TORCH_CHECK(dt && q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
                "scaled_dot_product_attention on neuron: query, key and value must have one ",
                "floating dtype, got ", q.scalar_type(), ", ", k.scalar_type(), ", ",
                v.scalar_type());
    trn_attention_desc d{};
    d.dtype = *dt;
    d.batch = q.size(0);
    d.heads = q.size(1);
    d.kv_heads = k.size(1);
    d.q_len = q.size(2);
    d.kv_len = k.size(2);
    d.head_dim = q.size(3);
    d.v_dim = v.size(3);
    TORCH_CHECK(k.size(0) == d.batch && v.size(0) == d.batch && v.size(1) == d.kv_heads &&
                    k.size(3) == d.head_dim && v.size(2) == d.kv_len,
                "scaled_dot_product_attention on neuron: incompatible shapes query ", q.sizes(),
                ", key ", k.sizes(), ", value ", v.sizes());
    TORCH_CHECK(d.kv_heads > 0 ? d.heads % d.kv_heads == 0 : d.heads == 0,
                "scaled_dot_product_attention on neuron: number of heads in key/value must divide ",
                "the number of heads in query");
    d.q = q.data_ptr();
    fill_strides(d.q_strides, q);
    d.k = k.data_ptr();
    fill_strides(d.k_strides, k);
    d.v = v.data_ptr();
    fill_strides(d.v_strides, v);
    if (mask.defined()) {
        auto mdt = native_dtype(mask.scalar_type());
        TORCH_CHECK(mdt && trn_attention_supports(*dt, 1, *mdt),
                    "scaled_dot_product_attention on neuron: unsupported attn_mask dtype ",
                    mask.scalar_type());
        const Tensor m = mask.expand({d.batch, d.heads, d.q_len, d.kv_len});
        d.mask = m.data_ptr();
        d.mask_dtype = *mdt;
        for (int i = 0; i < 4; i++) d.mask_strides[i] = m.stride(i);
    }
    d.out = out.data_ptr();
    fill_strides(d.out_strides, out);
    d.lse = lse.defined() ? lse.data_ptr<float>() : nullptr;
    d.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(d.head_dim));
    d.causal = is_causal ? 1 : 0;
    d.dropout_p = dropout_p;
    d.seed = seed;
    return d;
}

using FwdResult =
    std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor>;

FwdResult sdpa_forward(const Tensor &query, const Tensor &key, const Tensor &value,
                       const std::optional<Tensor> &attn_bias, double dropout_p, bool is_causal,
                       bool /*return_debug_mask*/, std::optional<double> scale) {
    TORCH_CHECK(dropout_p >= 0 && dropout_p <= 1,
                "dropout probability has to be between 0 and 1, but got ", dropout_p);
    const Tensor q = rows_contiguous(query), k = rows_contiguous(key), v = rows_contiguous(value);
    const Tensor mask = attn_bias.has_value() ? *attn_bias : Tensor();
    TORCH_CHECK(q.dim() == 4, "scaled_dot_product_attention on neuron: expected 4-d query");
    const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Ev = v.dim() == 4 ? v.size(3) : 0;
    // [B, L, H, Ev] storage seen as [B, H, L, Ev], as CPU's flash kernel: the
    // usual transpose(1, 2).reshape(B, L, H * Ev) that follows is then free.
    Tensor out = at::empty({B, L, H, Ev}, q.options()).transpose(1, 2);
    Tensor lse = at::empty({B, H, L}, q.options().dtype(at::kFloat));
    const uint64_t seed = dropout_p > 0 ? draw_key(std::nullopt, q.device().index()) : 0;
    trn_attention_desc d = make_desc(q, k, v, mask, out, lse, dropout_p, is_causal, scale, seed);
    // Keys in one tile and a backward to come: the kernel keeps the softmax
    // probabilities, returned as cum_seq_q (unused for dense inputs) so that
    // autograd hands them to the backward, which then skips the score
    // product and its exponentials.
    Tensor probs;
    const int64_t pn = trn_attention_probs_floats(&d);
    const bool grad = at::GradMode::is_enabled() &&
                      (query.requires_grad() || key.requires_grad() || value.requires_grad());
    if (pn > 0 && grad) {
        probs = at::empty({pn}, q.options().dtype(at::kFloat));
        d.probs = probs.data_ptr<float>();
    }
    TRN_CHECK(trn_attention_launch(current_trn_stream(q.device().index()), &d));
    tracking::record_executed("aten::_scaled_dot_product_fused_attention_overrideable");
    Tensor seed_t = at::scalar_tensor(static_cast<int64_t>(seed), at::dtype(at::kLong));
    Tensor offset_t = at::scalar_tensor(static_cast<int64_t>(0), at::dtype(at::kLong));
    return {out,    lse,      probs,   Tensor(), c10::SymInt(L), c10::SymInt(k.size(2)),
            seed_t, offset_t, Tensor()};
}

std::tuple<Tensor, Tensor, Tensor, Tensor>
sdpa_backward(const Tensor &grad_out, const Tensor &query, const Tensor &key, const Tensor &value,
              const Tensor &attn_bias, std::array<bool, 4> grad_input_mask, const Tensor &out,
              const Tensor &logsumexp, const Tensor &cum_seq_q, const Tensor & /*cum_seq_k*/,
              c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal,
              const Tensor &philox_seed, const Tensor & /*philox_offset*/,
              std::optional<double> scale) {
    const Tensor q = rows_contiguous(query), k = rows_contiguous(key), v = rows_contiguous(value);
    const Tensor o = rows_contiguous(out), go = rows_contiguous(grad_out);
    TORCH_CHECK(
        logsumexp.scalar_type() == at::kFloat && logsumexp.dim() == 3,
        "scaled_dot_product_attention backward on neuron: logsumexp must be float32 [B, H, L]");
    const Tensor lse = logsumexp.contiguous();
    uint64_t seed = 0;
    if (dropout_p > 0) {
        TORCH_CHECK(
            philox_seed.defined() && philox_seed.numel() == 1,
            "scaled_dot_product_attention backward on neuron: the forward's seed is missing");
        seed = static_cast<uint64_t>(philox_seed.item<int64_t>());
    }
    trn_attention_backward_desc bd{};
    bd.fwd = make_desc(q, k, v, attn_bias, o, lse, dropout_p, is_causal, scale, seed);
    // The forward's kept probabilities (see sdpa_forward), when they match.
    const int64_t pn = trn_attention_probs_floats(&bd.fwd);
    if (pn > 0 && cum_seq_q.defined() && cum_seq_q.device() == q.device() &&
        cum_seq_q.scalar_type() == at::kFloat && cum_seq_q.dim() == 1 && cum_seq_q.numel() == pn &&
        cum_seq_q.is_contiguous())
        bd.fwd.probs = const_cast<float *>(cum_seq_q.data_ptr<float>());
    TORCH_CHECK(go.sizes() == o.sizes(),
                "scaled_dot_product_attention backward on neuron: grad_out ", go.sizes(),
                " does not match out ", o.sizes());
    TORCH_CHECK(go.scalar_type() == q.scalar_type(),
                "scaled_dot_product_attention backward on neuron: grad_out dtype ",
                go.scalar_type(), " differs from query's ", q.scalar_type());
    bd.dout = go.data_ptr();
    fill_strides(bd.dout_strides, go);
    Tensor dq, dk, dv, dmask;
    // dq/dk/dv are always computed (one pass yields all three); masks only
    // decide what is returned.
    // [B, L, H, E] storage seen as [B, H, L, E], as CPU's flash kernel
    // returns them: the model's transpose(1, 2).reshape(...) of each gradient
    // (back through its head split) is then a view, not a copy.
    dq = at::empty({q.size(0), q.size(2), q.size(1), q.size(3)}, q.options()).transpose(1, 2);
    dk = at::empty({k.size(0), k.size(2), k.size(1), k.size(3)}, k.options()).transpose(1, 2);
    dv = at::empty({v.size(0), v.size(2), v.size(1), v.size(3)}, v.options()).transpose(1, 2);
    bd.dq = dq.data_ptr();
    bd.dk = dk.data_ptr();
    bd.dv = dv.data_ptr();
    fill_strides(bd.dq_strides, dq);
    fill_strides(bd.dk_strides, dk);
    fill_strides(bd.dv_strides, dv);
    const bool want_bias = grad_input_mask[3] && attn_bias.defined();
    if (want_bias) {
        dmask = at::zeros({q.size(0), q.size(1), q.size(2), k.size(2)}, q.options());
        bd.dmask = dmask.data_ptr();
    }
    TRN_CHECK(trn_attention_backward_launch(current_trn_stream(q.device().index()), &bd));
    tracking::record_executed("aten::_scaled_dot_product_fused_attention_overrideable_backward");
    Tensor dbias;
    if (want_bias) dbias = dmask.sum_to_size(attn_bias.sizes()).to(attn_bias.scalar_type());
    return {grad_input_mask[0] ? dq : Tensor(), grad_input_mask[1] ? dk : Tensor(),
            grad_input_mask[2] ? dv : Tensor(), dbias};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    // torch._fused_sdp_choice(...) called directly gives the same answer.
    m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
    m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(sdpa_forward));
    m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(sdpa_backward));
}

}  // namespace
}  // namespace neuron

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &neuron::fused_sdp_choice)
}
