// host_weights.cpp - the host's side of the C ABI for the weight plan: which checkpoint tensors
// make each initializer (as stored, stacked, transformed or laid out), which are ignored, and
// what a checkpoint tensor is (query_tensor). Runs guarded (host_calls.hpp).
#include <algorithm>
#include <cstdint>

#include "mobius/error.hpp"
#include "plugins/host_calls.hpp"
#include "util/untrusted.hpp"

namespace mobius::host {
namespace {

std::vector<std::string> names(const char* const* p, size_t n) {
  if (n && !p) throw Error("[abi] NULL tensor name list");
  if (n > (1u << 20)) throw Error("[abi] tensor name list too long");
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(str(p[i], "tensor name"));
    check_name(out.back(), "tensor");
  }
  return out;
}

mobius_status api_plan_tensor(mobius_context* ctx, const char* init, const char* tensor) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    count_planned(ctx, 1);
    ctx->plan.set_source(str(init, "initializer"),
                         StreamingWeightSource{str(tensor, "checkpoint tensor")});
  });
}

mobius_status api_plan_expert_bank(mobius_context* ctx, const char* init,
                                   const char* const* tensors, size_t n) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    if (n == 0) throw Error("[plan] expert bank " + quote_name(str(init, "initializer")) + " has no experts");
    count_planned(ctx, n);
    ctx->plan.set_source(str(init, "initializer"), StreamingExpertBankSource{names(tensors, n)});
  });
}

mobius_status api_plan_transformed(mobius_context* ctx, const char* init,
                                   const char* const* tensors, size_t n, mobius_transform_fn fn,
                                   void* user, void (*release)(void*)) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    if (!fn) throw Error("[plan] transform for " + quote_name(str(init, "initializer")) + " is NULL");
    count_planned(ctx, n);
    ctx->plan.set_source(str(init, "initializer"),
                         StreamingTransformedWeightSource{names(tensors, n), fn, user, release});
  });
}

mobius_status api_plan_layout(mobius_context* ctx, const char* init, const char* const* tensors,
                              size_t n, const mobius_weight_layout* layout) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    const std::string name = str(init, "initializer");
    const mobius_weight_layout l =
        read_abi_struct(layout, MOBIUS_WEIGHT_LAYOUT_SIZE_V1, "layout of " + quote_name(name));
    count_planned(ctx, n);
    ctx->plan.set_source(name, StreamingLayoutSource{names(tensors, n), l});
  });
}

mobius_status api_ignore_tensors(mobius_context* ctx, const char* pattern) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    ctx->plan.ignore(str(pattern, "pattern"));
  });
}

// Writes only the version-1 fields of `out`, which the caller's struct_size covers.
mobius_status api_query_tensor(mobius_context* ctx, const char* name, mobius_tensor_info* out) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    std::string n = str(name, "tensor name");
    read_abi_struct(out, MOBIUS_TENSOR_INFO_SIZE_V1, "query_tensor of " + quote_name(n) + ": result");
    if (!ctx->checkpoint) throw Error("[checkpoint] no checkpoint in this build");
    const TensorMeta* m = ctx->checkpoint->find(n);
    if (!m) throw Error("[checkpoint] no tensor " + quote_name(n));
    constexpr size_t kMaxDims = sizeof(out->dims) / sizeof(out->dims[0]);
    out->dtype = m->dtype;
    out->rank = static_cast<int32_t>(std::min<size_t>(m->shape.size(), INT32_MAX));
    if (m->shape.size() > kMaxDims)
      throw Error("[checkpoint] tensor " + quote_name(n) + " has rank " + std::to_string(m->shape.size()) +
                  "; query_tensor describes at most " + std::to_string(kMaxDims) + " dims");
    for (int32_t i = 0; i < out->rank; ++i) out->dims[i] = m->shape[static_cast<size_t>(i)];
  });
}

}  // namespace

void add_weight_calls(mobius_host_api& a) {
  a.plan_tensor = &api_plan_tensor;
  a.plan_expert_bank = &api_plan_expert_bank;
  a.plan_transformed = &api_plan_transformed;
  a.plan_layout = &api_plan_layout;
  a.weight_layout_size = MOBIUS_WEIGHT_LAYOUT_SIZE_V2;
  a.ignore_tensors = &api_ignore_tensors;
  a.query_tensor = &api_query_tensor;
}

}  // namespace mobius::host
