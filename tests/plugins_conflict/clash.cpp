// clash.cpp - a plugin that claims the model type "toy", which the good test plugin also claims.
#include "mobius/sdk/plugin.hpp"

namespace {
void register_all(mobius::PluginRegistrar& r) {
  r.add(
      "toy", "toy-projection", [](const nlohmann::json& c) { return c; },
      [](mobius::BuildContext&, const nlohmann::json&) {
        throw mobius::Error("[clash] never built in the tests");
      });
  r.add(
      "clash_only", "toy-projection", [](const nlohmann::json& c) { return c; },
      [](mobius::BuildContext&, const nlohmann::json&) {
        throw mobius::Error("[clash] never built in the tests");
      });
}
}  // namespace

MOBIUS_PLUGIN("clash", "2.0.0", "other vendor", register_all)
