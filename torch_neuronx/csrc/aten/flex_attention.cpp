// aten/flex_attention.cpp - Python bindings of libtrn's block-sparse
// FlexAttention kernels and of the score_mod / mask_mod builder
// (trn/flex_attention.h).
//
// Owns: torch_neuronx._C._FlexMods, _flex_mods_compile,
// _flex_attention_forward and _flex_attention_backward. Converts and checks
// only: torch_neuronx/_flex_attention.py renders the modification functions,
// allocates the outputs with the strides PyTorch's FlexAttention gives them
// and calls these from the flex_attention higher-order ops' neuron kernels.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "observe/op_tracking.h"
#include "runtime/bindings.h"
#include "runtime/device.h"
#include "runtime/trn_check.h"
#include "trn/flex_attention.h"

namespace py = pybind11;

namespace neuron {
namespace {

using at::Tensor;

struct FlexMods {
    trn_flex_mods *m = nullptr;
    ~FlexMods() { trn_flex_mods_free(m); }
};

void fill3(int64_t *dst, const Tensor &t) {
    for (int i = 0; i < 3; i++) dst[i] = t.stride(i);
}

void check_operand(const Tensor &t, const char *name, const Tensor &q) {
    TORCH_CHECK(t.defined() && t.dim() == 4, "flex_attention on neuron: ", name,
                " must be a 4-d tensor");
    TORCH_CHECK(t.device() == q.device(), "flex_attention on neuron: ", name, " is on ", t.device(),
                ", query on ", q.device());
    TORCH_CHECK(t.scalar_type() == q.scalar_type(), "flex_attention on neuron: ", name,
                " has dtype ", t.scalar_type(), ", query ", q.scalar_type());
    TORCH_CHECK(t.size(3) <= 1 || t.stride(3) == 1, "flex_attention on neuron: ", name,
                " must have a contiguous last dim");
}

const int32_t *block_ptr(const std::optional<Tensor> &t, const Tensor &q, const char *name,
                         int64_t dims) {
    if (!t.has_value() || !t->defined()) return nullptr;
    TORCH_CHECK(t->scalar_type() == at::kInt && t->is_contiguous() && t->dim() == dims &&
                    t->device() == q.device(),
                "flex_attention on neuron: block mask ", name, " must be a contiguous int32 ", dims,
                "-d tensor on ", q.device());
    return t->data_ptr<int32_t>();
}

trn_flex_attention_desc make_desc(const Tensor &q, const Tensor &k, const Tensor &v,
                                  const Tensor &out, const Tensor &lse, const Tensor &max,
                                  const Tensor &kv_num, const Tensor &kv_idx,
                                  const std::optional<Tensor> &full_num,
                                  const std::optional<Tensor> &full_idx, int64_t q_block,
                                  int64_t kv_block, double scale, const FlexMods &mods,
                                  const std::vector<Tensor> &buffers) {
    check_operand(q, "query", q);
    check_operand(k, "key", q);
    check_operand(v, "value", q);
    check_operand(out, "out", q);
    auto dt = native_dtype(q.scalar_type());
    TORCH_CHECK(dt && trn_flex_attention_supports(*dt),
                "flex_attention on neuron: unsupported dtype ", q.scalar_type());
    trn_flex_attention_desc d{};
    d.dtype = *dt;
    d.batch = q.size(0);
    d.heads = q.size(1);
    d.kv_heads = k.size(1);
    d.q_len = q.size(2);
    d.kv_len = k.size(2);
    d.head_dim = q.size(3);
    d.v_dim = v.size(3);
    TORCH_CHECK(k.size(0) == d.batch && v.size(0) == d.batch && v.size(1) == d.kv_heads &&
                    k.size(3) == d.head_dim && v.size(2) == d.kv_len &&
                    out.sizes() == at::IntArrayRef({d.batch, d.heads, d.q_len, d.v_dim}),
                "flex_attention on neuron: incompatible shapes query ", q.sizes(), ", key ",
                k.sizes(), ", value ", v.sizes(), ", out ", out.sizes());
    d.q = q.data_ptr();
    fill3(d.q_strides, q);
    d.k = k.data_ptr();
    fill3(d.k_strides, k);
    d.v = v.data_ptr();
    fill3(d.v_strides, v);
    d.out = out.data_ptr();
    fill3(d.out_strides, out);
    for (const Tensor *t : {&lse, &max})
        TORCH_CHECK(
            !t->defined() || (t->scalar_type() == at::kFloat && t->is_contiguous() &&
                              t->numel() == d.batch * d.heads * d.q_len),
            "flex_attention on neuron: logsumexp / max must be contiguous float32 [B, H, L]");
    d.lse = lse.defined() ? lse.data_ptr<float>() : nullptr;
    d.max = max.defined() ? max.data_ptr<float>() : nullptr;
    d.scale = scale;
    d.q_block = q_block;
    d.kv_block = kv_block;
    d.kv_num_blocks = block_ptr(kv_num, q, "kv_num_blocks", 3);
    d.kv_indices = block_ptr(kv_idx, q, "kv_indices", 4);
    d.mask_batch = kv_idx.size(0);
    d.mask_heads = kv_idx.size(1);
    d.mask_q_blocks = kv_idx.size(2);
    d.mask_kv_blocks = kv_idx.size(3);
    TORCH_CHECK(kv_num.sizes() == kv_idx.sizes().slice(0, 3),
                "flex_attention on neuron: kv_num_blocks ", kv_num.sizes(),
                " does not match kv_indices ", kv_idx.sizes());
    d.full_kv_num_blocks = block_ptr(full_num, q, "full_kv_num_blocks", 3);
    d.full_kv_indices = block_ptr(full_idx, q, "full_kv_indices", 4);
    if (d.full_kv_num_blocks)
        TORCH_CHECK(d.full_kv_indices && full_idx->sizes() == kv_idx.sizes() &&
                        full_num->sizes() == kv_num.sizes(),
                    "flex_attention on neuron: full block tensors do not match the partial ones");
    TORCH_CHECK(mods.m != nullptr, "flex_attention on neuron: no compiled score_mod");
    d.score_fn = trn_flex_mods_score(mods.m);
    d.grad_fn = trn_flex_mods_grad(mods.m);
    TORCH_CHECK(buffers.size() <= TRN_FLEX_MAX_BUFFERS,
                "flex_attention on neuron: ", buffers.size(), " captured tensors (at most ",
                TRN_FLEX_MAX_BUFFERS, ")");
    d.buffers.count = static_cast<int>(buffers.size());
    for (size_t i = 0; i < buffers.size(); i++) {
        const Tensor &t = buffers[i];
        TORCH_CHECK(t.device() == q.device() && t.dim() <= 4 && t.is_contiguous(),
                    "flex_attention on neuron: captured tensor ", i,
                    " must be a contiguous neuron tensor of at most 4 dims on ", q.device());
        d.buffers.data[i] = t.data_ptr();
        for (int j = 0; j < 4; j++) {
            d.buffers.sizes[i][j] = j < t.dim() ? t.size(j) : 1;
            d.buffers.strides[i][j] = j < t.dim() ? t.stride(j) : 0;
        }
        d.buffers.nbytes[i] = static_cast<int64_t>(t.numel() * t.element_size());
    }
    return d;
}

void register_flex(py::module_ &m) {
    py::class_<FlexMods, std::shared_ptr<FlexMods>>(m, "_FlexMods")
        .def_property_readonly("from_cache",
                               [](const FlexMods &f) { return trn_flex_mods_from_cache(f.m) != 0; })
        .def_property_readonly(
            "has_grad", [](const FlexMods &f) { return trn_flex_mods_grad(f.m) != nullptr; });
    m.def("_flex_mods_compile",
          [](const std::string &source, const std::string &include_dir,
             const std::optional<std::string> &cache_dir,
             const std::optional<std::string> &debug_dir, const std::string &name, int opt_level,
             const std::string &cc_flags) {
              return guarded([&] {
                  auto mods = std::make_shared<FlexMods>();
                  trn_compile_options o{};  // C compiler settings as for compiled graphs
                  o.include_dir = include_dir.c_str();
                  o.cache_dir = cache_dir ? cache_dir->c_str() : nullptr;
                  o.debug_dir = debug_dir ? debug_dir->c_str() : nullptr;
                  o.name = name.c_str();
                  o.opt_level = opt_level;
                  o.cc_flags = cc_flags.empty() ? nullptr : cc_flags.c_str();
                  trn_status st;
                  {
                      py::gil_scoped_release nogil;
                      st = trn_flex_mods_compile(source.c_str(), &o, &mods->m);
                  }
                  TRN_CHECK(st);
                  return mods;
              });
          });
    m.def("_flex_attention_forward",
          [](const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &out,
             const std::optional<Tensor> &lse, const std::optional<Tensor> &max,
             const Tensor &kv_num, const Tensor &kv_idx, const std::optional<Tensor> &full_num,
             const std::optional<Tensor> &full_idx, int64_t q_block, int64_t kv_block, double scale,
             const FlexMods &mods, const std::vector<Tensor> &buffers) {
              guarded([&] {
                  trn_flex_attention_desc d = make_desc(
                      q, k, v, out, lse.value_or(Tensor()), max.value_or(Tensor()), kv_num, kv_idx,
                      full_num, full_idx, q_block, kv_block, scale, mods, buffers);
                  TRN_CHECK(trn_flex_attention_launch(current_trn_stream(q.device().index()), &d));
                  tracking::record_executed("higher_order::flex_attention");
              });
          });
    m.def("_flex_attention_backward",
          [](const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &out,
             const Tensor &lse, const Tensor &dout, const std::optional<Tensor> &dlse,
             const Tensor &dq, const Tensor &dk, const Tensor &dv, const Tensor &kv_num,
             const Tensor &kv_idx, const std::optional<Tensor> &full_num,
             const std::optional<Tensor> &full_idx, int64_t q_block, int64_t kv_block, double scale,
             const FlexMods &mods, const std::vector<Tensor> &buffers) {
              guarded([&] {
                  trn_flex_attention_backward_desc bd{};
                  bd.fwd = make_desc(q, k, v, out, lse, Tensor(), kv_num, kv_idx, full_num,
                                     full_idx, q_block, kv_block, scale, mods, buffers);
                  TORCH_CHECK(lse.defined(), "flex_attention backward on neuron: no logsumexp");
                  check_operand(dout, "grad_out", q);
                  check_operand(dq, "grad_query", q);
                  check_operand(dk, "grad_key", q);
                  check_operand(dv, "grad_value", q);
                  TORCH_CHECK(dout.sizes() == out.sizes() && dq.sizes() == q.sizes() &&
                                  dk.sizes() == k.sizes() && dv.sizes() == v.sizes(),
                              "flex_attention backward on neuron: gradient shapes do not match");
                  bd.dout = dout.data_ptr();
                  fill3(bd.dout_strides, dout);
                  if (dlse.has_value() && dlse->defined()) {
                      TORCH_CHECK(dlse->scalar_type() == at::kFloat && dlse->is_contiguous() &&
                                      dlse->numel() == lse.numel(),
                                  "flex_attention backward on neuron: grad_logsumexp must be "
                                  "contiguous float32 [B, H, L]");
                      bd.dlse = dlse->data_ptr<float>();
                  }
                  bd.dq = dq.data_ptr();
                  fill3(bd.dq_strides, dq);
                  bd.dk = dk.data_ptr();
                  fill3(bd.dk_strides, dk);
                  bd.dv = dv.data_ptr();
                  fill3(bd.dv_strides, dv);
                  TRN_CHECK(trn_flex_attention_backward_launch(
                      current_trn_stream(q.device().index()), &bd));
                  tracking::record_executed("higher_order::flex_attention_backward");
              });
          });
}

BindingsRegistrar reg_flex(register_flex);

}  // namespace
}  // namespace neuron
