// host_calls.hpp - what the files implementing mobius_host_api share: the guard every entry
// runs in (an exception becomes a status plus last_error, never crossing the C ABI), argument
// checks, the build budget, and each part's entries for the table (host_api.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "mobius/plugin.h"
#include "plugins/context.hpp"

namespace mobius::host {

// Records `message` as the last error without ever throwing itself.
void record(mobius_context* ctx, const char* message) noexcept;

// Runs f; any exception is recorded as the last error of `ctx` (or of the thread, without one).
template <class F>
mobius_status guarded(mobius_context* ctx, F&& f) noexcept {
  try {
    f();
    return MOBIUS_OK;
  } catch (const std::bad_alloc&) {
    record(ctx, "[internal] out of memory");
  } catch (const std::exception& e) {
    record(ctx, e.what());
  } catch (...) {
    record(ctx, "[internal] unknown exception in the host");
  }
  return MOBIUS_ERROR;
}

// A C string argument that must not be NULL; `what` names it in the error.
std::string str(const char* s, const char* what);
// A value or tensor name: not empty, at most 4096 bytes.
void check_name(const std::string& name, const char* what);
bool known_dtype(int32_t dt);

// The build budget (mobius_build_budget in context.hpp), host_budget.cpp: each count throws a
// config error naming what went past it.
void count_node(mobius_context* ctx, const std::string& name);
void count_value_info(mobius_context* ctx, const std::string& name);
void count_planned(mobius_context* ctx, size_t n);
void count_initializer(mobius_context* ctx, const std::string& name, int32_t dtype,
                       const std::vector<int64_t>& dims);

// The table's entries for building graphs (host_graph.cpp) and planning weights from the
// checkpoint (host_weights.cpp).
void add_graph_calls(mobius_host_api& api);
void add_weight_calls(mobius_host_api& api);

}  // namespace mobius::host
