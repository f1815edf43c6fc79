// host_budget.cpp - the build budget (host_calls.hpp): how many nodes, values, initializers and
// planned tensors a plugin's graph may have, and how many bytes its weights may take, so a
// config describing an impossible model fails before memory or disk runs out.
#include <cstdint>
#include <optional>

#include "mobius/error.hpp"
#include "plugins/host_calls.hpp"
#include "util/untrusted.hpp"

namespace mobius::host {
namespace {

uint64_t saturating_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
uint64_t saturating_mul(uint64_t a, uint64_t b) {
  return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

std::string bytes_text(uint64_t n) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (n < 1024) return std::to_string(n) + " bytes";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

// The keys that size a model, named by every budget message: the budget is reached when the
// config describes a much larger model than any real one (or than its checkpoint holds).
constexpr const char* kSizeKeys =
    "num_hidden_layers, hidden_size, intermediate_size, vocab_size, the head counts and the "
    "expert counts in config.json";

[[noreturn]] void over_budget(const std::string& what) {
  throw Error(ErrorKind::Config,
              "[config] the graph exceeds the build's budget: " + what + " (check " + kSizeKeys + ")");

}  // namespace

}

void count_node(mobius_context* ctx, const std::string& name) {
  mobius_build_budget& b = ctx->budget;
  if (++b.nodes > b.max_nodes)
    over_budget("more than " + std::to_string(b.max_nodes) + " nodes, at node " + quote_name(name) +
                "; no real model needs that many");
}

void count_value_info(mobius_context* ctx, const std::string& name) {
  mobius_build_budget& b = ctx->budget;
  if (++b.value_infos > b.max_value_infos)
    over_budget("more than " + std::to_string(b.max_value_infos) +
                " graph inputs, outputs and value types, at " + quote_name(name));
}

void count_planned(mobius_context* ctx, size_t n) {
  mobius_build_budget& b = ctx->budget;
  b.planned_tensors = saturating_add(b.planned_tensors, n);
  if (b.planned_tensors > b.max_planned_tensors)
    over_budget("the weight plan names more than " + std::to_string(b.max_planned_tensors) +
                " checkpoint tensors");
}

void count_initializer(mobius_context* ctx, const std::string& name, int32_t dtype,
                       const std::vector<int64_t>& dims) {
  mobius_build_budget& b = ctx->budget;
  if (!b.max_bytes) {
    if (ctx->checkpoint) {
      uint64_t total = 0;
      for (const auto& t : ctx->checkpoint->tensors()) total = saturating_add(total, t.nbytes);
      b.max_bytes = saturating_add(saturating_mul(total, b.checkpoint_factor), b.checkpoint_slack);
    } else {
      b.max_bytes = b.max_bytes_without_checkpoint;
    }
  }
  if (++b.initializers > b.max_initializers)
    over_budget("more than " + std::to_string(b.max_initializers) + " initializers, at " +
                quote_name(name));
  uint64_t n = dtype_size(dtype);
  for (int64_t d : dims) n = saturating_mul(n, static_cast<uint64_t>(d));
  b.initializer_bytes = saturating_add(b.initializer_bytes, n);
  if (b.initializer_bytes <= *b.max_bytes) return;
  const std::string limit =
      ctx->checkpoint ? bytes_text(*b.max_bytes) + " (" + std::to_string(b.checkpoint_factor) +
                            " times the checkpoint's tensors plus " + bytes_text(b.checkpoint_slack) +
                            "), so the config describes a larger model than the checkpoint holds"
                      : bytes_text(*b.max_bytes) +
                            " for a build without weights, more than any released model needs";
  over_budget("initializer " + quote_name(name) + " (" + bytes_text(n) +
              ") takes the weights past the budget of " + limit);
}

}  // namespace mobius::host
