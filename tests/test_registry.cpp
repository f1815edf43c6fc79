// test_registry.cpp - ModelRegistry: lookups, sorted listing, near matches, priority and conflicts.
#include <doctest/doctest.h>

#include "mobius/error.hpp"
#include "mobius/registry.hpp"

using mobius::ModelRegistry;
using mobius::Registration;

namespace {
Registration reg(const std::string& type, const std::string& plugin = "p", int priority = 1) {
  Registration r;
  r.model_type = type;
  r.task = "text-generation";
  r.plugin = plugin;
  r.plugin_path = "/plugins/" + plugin + ".so";
  r.priority = priority;
  r.parse_config = [](mobius_context*, const std::string& s) { return s; };
  r.build = [](mobius_context*, const std::string&) {};
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mobius::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("registry: register, get, contains, size, sorted architectures") {
  ModelRegistry r;
  CHECK(r.size() == 0);
  r.register_architecture(reg("qwen2"));
  r.register_architecture(reg("llama"));
  r.register_architecture(reg("mistral"));
  CHECK(r.size() == 3);
  CHECK(r.contains("llama"));
  CHECK_FALSE(r.contains("gpt2"));
  CHECK(r.get("llama").model_type == "llama");
  CHECK(r.get_registration("gpt2") == nullptr);
  CHECK(r.architectures() == std::vector<std::string>{"llama", "mistral", "qwen2"});
}

TEST_CASE("registry: unknown model type lists near matches") {
  ModelRegistry r;
  r.register_architecture(reg("llama"));
  r.register_architecture(reg("qwen3"));
  r.register_architecture(reg("gemma2"));
  std::string e = error_of([&] { r.get("lama"); });
  CHECK(e.find("unknown model type 'lama'") != std::string::npos);
  CHECK(e.find("did you mean 'llama'") != std::string::npos);
  e = error_of([&] { r.get("qwen"); });
  CHECK(e.find("'qwen3'") != std::string::npos);
  e = error_of([&] { r.get("totally_different_thing"); });
  CHECK(e.find("did you mean") == std::string::npos);
  CHECK(e.find("3 registered") != std::string::npos);
  ModelRegistry empty;
  CHECK(error_of([&] { empty.get("llama"); }).find("no architectures") != std::string::npos);
}

TEST_CASE("registry: same type at the same priority is an error naming both") {
  ModelRegistry r;
  r.register_architecture(reg("llama", "vendor_a"));
  std::string e = error_of([&] { r.register_architecture(reg("llama", "vendor_b")); });
  CHECK(e.find("vendor_a") != std::string::npos);
  CHECK(e.find("vendor_b") != std::string::npos);
  CHECK(r.get("llama").plugin == "vendor_a");
}

TEST_CASE("registry: higher priority wins and the loser is recorded as shadowed") {
  ModelRegistry r;
  r.register_architecture(reg("llama", "installed", mobius::kPriorityDefault));
  r.register_architecture(reg("llama", "mine", mobius::kPriorityCommandLine));
  CHECK(r.get("llama").plugin == "mine");
  REQUIRE(r.shadowed().size() == 1);
  CHECK(r.shadowed()[0].plugin == "installed");
  r.register_architecture(reg("llama", "env", mobius::kPriorityEnvironment));
  CHECK(r.get("llama").plugin == "mine");
  CHECK(r.shadowed().size() == 2);
}

TEST_CASE("registry: register_all is all or nothing") {
  ModelRegistry r;
  r.register_architecture(reg("llama", "a"));
  std::vector<Registration> batch{reg("gemma", "b"), reg("llama", "b")};
  CHECK_THROWS_AS(r.register_all(std::move(batch)), mobius::Error);
  CHECK_FALSE(r.contains("gemma"));
  CHECK(r.size() == 1);
}

TEST_CASE("registry: isolated instances") {
  ModelRegistry a, b;
  a.register_architecture(reg("llama"));
  CHECK(a.contains("llama"));
  CHECK_FALSE(b.contains("llama"));
}

TEST_CASE("registry: registration without callbacks or name is refused") {
  ModelRegistry r;
  Registration bad = reg("x");
  bad.build = nullptr;
  CHECK_THROWS_AS(r.register_architecture(bad), mobius::Error);
  CHECK_THROWS_AS(r.register_architecture(reg("")), mobius::Error);
}
