// test_plugins.cpp - plugin discovery and loading through the public loader, with real plugins
// built broken on purpose, and the CLI's `plugins` / `list` views of them.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>

#include "mobius/error.hpp"
#include "mobius/plugins.hpp"
#include "test_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

fs::path plugin_dir() { return env_or_empty("MOBIUS_TEST_PLUGIN_DIR"); }
fs::path conflict_dir() { return env_or_empty("MOBIUS_TEST_CONFLICT_DIR"); }

const PluginRecord* find(const std::vector<PluginRecord>& recs, const std::string& file_part) {
  for (const auto& r : recs)
    if (r.library.string().find(file_part) != std::string::npos ||
        r.manifest.string().find(file_part) != std::string::npos)
      return &r;
  return nullptr;
}

std::vector<PluginSearchDir> only(const fs::path& p, int prio = kPriorityCommandLine) {
  return {{p, prio, "--plugin-path"}};
}

}  // namespace

TEST_CASE("plugins: one good and four broken plugins; the good one loads") {
  REQUIRE_FALSE(plugin_dir().empty());
  PluginHost host;
  ModelRegistry reg;
  auto recs = host.load(only(plugin_dir()), reg);
  CHECK(recs.size() == 5);

  const PluginRecord* good = find(recs, "libtest_good.so");
  REQUIRE(good);
  CHECK(good->loaded);
  CHECK(good->error.empty());
  CHECK(good->name == "toy");
  CHECK(good->version == "1.2.3");
  CHECK(good->vendor == "mobius tests");
  CHECK(good->registered == std::vector<std::string>{"toy"});
  CHECK(reg.contains("toy"));
  CHECK(reg.get("toy").task == "feature-extraction");
  CHECK(reg.size() == 1);

  struct Expect {
    const char* file;
    const char* reason;
  };
  for (const Expect& e : {Expect{"libtest_notso.so", "cannot load as a shared object"},
                          Expect{"libtest_noentry.so", "missing entry point 'mobius_plugin_get_info'"},
                          Expect{"libtest_badabi.so", "built for ABI version 99, this host speaks ABI version 1"},
                          Expect{"libtest_regerror.so", "register failed: [regerror] refusing to register"}}) {
    CAPTURE(e.file);
    const PluginRecord* r = find(recs, e.file);
    REQUIRE(r);
    CHECK_FALSE(r->loaded);
    CHECK(r->error.find(e.reason) != std::string::npos);
    CHECK(r->error.find('\n') == std::string::npos);
  }
}

TEST_CASE("plugins: two plugins claiming one model type at the same priority") {
  PluginHost host;
  ModelRegistry reg;
  auto recs = host.load({{plugin_dir(), kPriorityCommandLine, "--plugin-path"},
                         {conflict_dir(), kPriorityCommandLine, "--plugin-path"}},
                        reg);
  const PluginRecord* clash = find(recs, "libtest_clash.so");
  REQUIRE(clash);
  CHECK_FALSE(clash->loaded);
  CHECK(clash->error.find("'toy'") != std::string::npos);
  CHECK(clash->error.find("libtest_good.so") != std::string::npos);
  CHECK(clash->error.find("libtest_clash.so") != std::string::npos);
  CHECK(reg.get("toy").plugin == "toy");
  CHECK_FALSE(reg.contains("clash_only"));  // all or nothing
}

TEST_CASE("plugins: --plugin-path wins over MOBIUS_PLUGIN_PATH and the loser is shadowed") {
  PluginHost host;
  ModelRegistry reg;
  auto recs = host.load({{plugin_dir(), kPriorityEnvironment, "MOBIUS_PLUGIN_PATH"},
                         {conflict_dir(), kPriorityCommandLine, "--plugin-path"}},
                        reg);
  CHECK(find(recs, "libtest_clash.so")->loaded);
  CHECK(find(recs, "libtest_good.so")->loaded);
  CHECK(reg.get("toy").plugin == "clash");
  REQUIRE(reg.shadowed().size() == 1);
  CHECK(reg.shadowed()[0].plugin == "toy");
  CHECK(reg.contains("clash_only"));
}

TEST_CASE("plugins: search path order is --plugin-path, MOBIUS_PLUGIN_PATH, default") {
  ::setenv("MOBIUS_PLUGIN_PATH", "/env/a:/env/b", 1);
  auto dirs = plugin_search_path({"/cli/x"});
  ::setenv("MOBIUS_PLUGIN_PATH", "", 1);
  REQUIRE(dirs.size() >= 3);
  CHECK(dirs[0].path == "/cli/x");
  CHECK(dirs[0].priority == kPriorityCommandLine);
  CHECK(dirs[1].path == "/env/a");
  CHECK(dirs[2].path == "/env/b");
  CHECK(dirs[2].priority == kPriorityEnvironment);
  for (size_t i = 3; i < dirs.size(); ++i) CHECK(dirs[i].origin == "default");
}

TEST_CASE("plugins: the build tree's CLI finds the built plugins without flags") {
  // The tests run from the build tree, so the default folder is <build>/plugins.
  auto dirs = default_plugin_dirs();
  REQUIRE(dirs.size() >= 1);
  CHECK(dirs[0].filename() == "plugins");
  CHECK(fs::exists(dirs[0].parent_path() / "build.ninja"));
}

TEST_CASE("plugins: manifest problems are reported before any code runs") {
  TempDir t;
  fs::copy_file(plugin_dir() / "libtest_good.so", t / "libtest_good.so");
  struct Case {
    const char* manifest;
    const char* reason;
  };
  const Case cases[] = {
      {"name: toy\nversion: 1\nabi_version: 2\nlibrary: libtest_good.so\nmodel_types: [toy]\n",
       "manifest declares ABI version 2, this host speaks ABI version 1"},
      {"name: toy\nversion: 1\nabi_version: 1\nlibrary: ../libtest_good.so\nmodel_types: [toy]\n",
       "must be a file name beside the manifest"},
      {"name: toy\nversion: 1\nabi_version: 1\nlibrary: /lib/libc.so.6\nmodel_types: [toy]\n",
       "must be a file name beside the manifest"},
      {"name: toy\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [toy]\n",
       "manifest has no 'version'"},
      {"name: toy\nversion: 1\nabi_version: one\nlibrary: libtest_good.so\nmodel_types: [toy]\n",
       "'abi_version' is not a number"},
      {"name: toy\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: []\n",
       "'model_types' must be a non-empty list"},
      {"name: [toy\n", "not valid YAML"},
      {"- a list\n", "not a YAML mapping"},
      {"name: toy\nversion: 1\nabi_version: 1\nlibrary: libmissing.so\nmodel_types: [toy]\n",
       "not found beside the manifest"},
      {"name: toy\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [toy, extra]\n",
       "manifest lists model types [extra, toy] but the plugin registered [toy]"},
      {"name: other\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [toy]\n",
       "manifest names the plugin 'other' but the library says 'toy'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.manifest);
    write_text(t / "plugin.yaml", c.manifest);
    PluginHost host;
    ModelRegistry reg;
    PluginRecord r = host.load_one(t / "plugin.yaml", kPriorityCommandLine, "test", reg);
    CHECK_FALSE(r.loaded);
    CHECK(r.error.find(c.reason) != std::string::npos);
    CHECK(reg.size() == 0);
  }
}

TEST_CASE("plugins: a library without a manifest and a missing folder are reported") {
  TempDir t;
  fs::create_directories(t / "sub");
  fs::copy_file(plugin_dir() / "libtest_good.so", t / "sub" / "libtest_good.so");
  PluginHost host;
  ModelRegistry reg;
  auto recs = host.load({{t.path(), kPriorityCommandLine, "--plugin-path"},
                         {t / "does-not-exist", kPriorityCommandLine, "--plugin-path"}},
                        reg);
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].error.find("no manifest") != std::string::npos);
  CHECK(recs[1].error.find("does not exist") != std::string::npos);
  CHECK(reg.size() == 0);
}

TEST_CASE("plugins: the CLI lists good and broken plugins, exit code 0") {
  std::string cli = env_or_empty("MOBIUS_CLI");
  REQUIRE_FALSE(cli.empty());
  RunResult r = run(quote(cli) + " plugins --plugin-path " + quote(plugin_dir().string()));
  CHECK(r.status == 0);
  CHECK(r.output.find("loaded  toy 1.2.3 (mobius tests, ABI 1)") != std::string::npos);
  for (const char* f : {"libtest_notso.so", "libtest_noentry.so", "libtest_badabi.so", "libtest_regerror.so"}) {
    CAPTURE(f);
    auto pos = r.output.find(std::string("error   ") + (plugin_dir() / f).string());
    CHECK(pos != std::string::npos);
  }

  r = run(quote(cli) + " plugins --json --plugin-path " + quote(plugin_dir().string()), false);
  CHECK(r.status == 0);
  auto j = nlohmann::json::parse(r.output);
  int loaded = 0, failed = 0;
  for (const auto& p : j) (p["status"] == "loaded" ? loaded : failed)++;
  CHECK(loaded >= 1);
  CHECK(failed >= 4);

  r = run(quote(cli) + " list --plugin-path " + quote(plugin_dir().string()));
  CHECK(r.status == 0);
  CHECK(r.output.find("toy") != std::string::npos);
  CHECK(r.output.find("feature-extraction") != std::string::npos);

  r = run(quote(cli) + " list --json --plugin-path " + quote(plugin_dir().string()), false);
  CHECK(r.status == 0);
  j = nlohmann::json::parse(r.output);
  bool has_toy = false;
  for (const auto& a : j) has_toy |= a["model_type"] == "toy" && a["plugin"] == "toy";
  CHECK(has_toy);
}

TEST_CASE("plugins: a plugin that crashes or hangs while registering is skipped, the host lives") {
  TempDir t;
  ::setenv("MOBIUS_PLUGIN_CACHE", (t / "scan.json").c_str(), 1);
  ::setenv("MOBIUS_PLUGIN_SCAN_TIMEOUT", "2", 1);
  fs::path crash_dir = env_or_empty("MOBIUS_TEST_CRASH_DIR");
  REQUIRE_FALSE(crash_dir.empty());
  auto load = [&] {
    PluginHost host;
    ModelRegistry reg;
    auto recs = host.load({{crash_dir, kPriorityCommandLine, "--plugin-path"},
                           {plugin_dir(), kPriorityCommandLine, "--plugin-path"}},
                          reg);
    CHECK(reg.contains("toy"));  // every other plugin still works
    return recs;
  };
  auto t0 = std::chrono::steady_clock::now();
  auto recs = load();
  const PluginRecord* crash = find(recs, "libtest_crash.so");
  const PluginRecord* hang = find(recs, "libtest_hang.so");
  REQUIRE(crash);
  REQUIRE(hang);
  CHECK_FALSE(crash->loaded);
  CHECK(crash->error.find("crashed while loading or registering (signal 11") != std::string::npos);
  CHECK_FALSE(hang->loaded);
  CHECK(hang->error.find("hung while loading or registering") != std::string::npos);
  CHECK(find(recs, "libtest_good.so")->loaded);

  // Remembered: the second discovery does not run them again (no 2 s wait for the hang).
  auto t1 = std::chrono::steady_clock::now();
  recs = load();
  auto t2 = std::chrono::steady_clock::now();
  CHECK(find(recs, "libtest_hang.so")->error.find("remembered from an earlier scan") != std::string::npos);
  CHECK(find(recs, "libtest_crash.so")->error.find("remembered") != std::string::npos);
  CHECK(std::chrono::duration<double>(t2 - t1).count() < std::chrono::duration<double>(t1 - t0).count());

  // A changed file is probed again.
  fs::path copy = t / "plugins";
  fs::create_directories(copy);
  fs::copy_file(crash_dir / "libtest_crash.so", copy / "libtest_crash.so");
  fs::copy_file(crash_dir / "crash.plugin.yaml", copy / "crash.plugin.yaml");
  PluginHost host;
  ModelRegistry reg;
  auto r = host.load_one(copy / "crash.plugin.yaml", kPriorityCommandLine, "test", reg);
  CHECK(r.error.find("crashed while loading") != std::string::npos);
  CHECK(r.error.find("remembered") == std::string::npos);

  // The CLI lives through them too.
  RunResult cli = run(quote(env_or_empty("MOBIUS_CLI")) + " plugins --plugin-path " + quote(crash_dir.string()));
  CHECK(cli.status == 0);
  CHECK(cli.output.find("libtest_crash.so") != std::string::npos);
  ::unsetenv("MOBIUS_PLUGIN_SCAN_TIMEOUT");
}

TEST_CASE("plugins: a folder reached twice through the search path is not a library without a manifest") {
  // As with `--plugin-path <plugins>/llama` and the default <plugins>: the family folder is found
  // directly and again as a subfolder; its library belongs to the manifest seen the first time.
  TempDir t;
  fs::create_directories(t / "family");
  fs::copy_file(plugin_dir() / "libtest_good.so", t / "family" / "libtest_good.so");
  fs::copy_file(plugin_dir() / "good.plugin.yaml", t / "family" / "good.plugin.yaml");
  PluginHost host;
  ModelRegistry reg;
  auto recs = host.load({{t / "family", kPriorityCommandLine, "--plugin-path"},
                         {t.path(), kPriorityDefault, "default"}},
                        reg);
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].loaded);
  CHECK(recs[0].origin == "--plugin-path");

  // The same folder twice.
  PluginHost host2;
  ModelRegistry reg2;
  recs = host2.load({{plugin_dir(), kPriorityCommandLine, "--plugin-path"},
                     {plugin_dir(), kPriorityEnvironment, "MOBIUS_PLUGIN_PATH"}},
                    reg2);
  CHECK(recs.size() == 5);
  for (const auto& r : recs) CHECK(r.error.find("no manifest") == std::string::npos);

  // And through the CLI, with the build tree's own plugins.
  auto dirs = default_plugin_dirs();
  REQUIRE_FALSE(dirs.empty());
  RunResult cli = run(quote(env_or_empty("MOBIUS_CLI")) + " plugins --plugin-path " +
                      quote((dirs[0] / "llama").string()));
  INFO(cli.output);
  CHECK(cli.status == 0);
  CHECK(cli.output.find("no manifest") == std::string::npos);
  CHECK(cli.output.find("error") == std::string::npos);
}

TEST_CASE("plugins: a build reads every manifest but runs only the plugin of its model type") {
  TempDir t;
  ::setenv("MOBIUS_PLUGIN_CACHE", (t / "scan.json").c_str(), 1);
  ::setenv("MOBIUS_PLUGIN_SCAN_TIMEOUT", "5", 1);
  fs::path crash_dir = env_or_empty("MOBIUS_TEST_CRASH_DIR");
  auto t0 = std::chrono::steady_clock::now();
  PluginHost host;
  ModelRegistry reg;
  auto recs = host.load({{crash_dir, kPriorityCommandLine, "--plugin-path"},
                         {plugin_dir(), kPriorityCommandLine, "--plugin-path"}},
                        reg, {"toy"});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(secs < 4);  // the hanging plugin was never probed
  CHECK(reg.architectures() == std::vector<std::string>{"toy"});
  CHECK(find(recs, "libtest_good.so")->loaded);
  for (const char* f : {"libtest_crash.so", "libtest_hang.so", "libtest_regerror.so",
                        "libtest_noentry.so", "libtest_badabi.so", "libtest_notso.so"}) {
    CAPTURE(f);
    const PluginRecord* r = find(recs, f);
    REQUIRE(r);
    CHECK(r->deferred);
    CHECK_FALSE(r->loaded);
    CHECK(r->error.empty());
    CHECK_FALSE(r->model_types.empty());  // its manifest was read
  }
  // None of their code ran, not even in a probe.
  std::string cache = fs::exists(t / "scan.json") ? read_text(t / "scan.json") : "";
  CHECK(cache.find("libtest_crash.so") == std::string::npos);
  CHECK(cache.find("libtest_hang.so") == std::string::npos);

  // A manifest that cannot be read is still reported.
  fs::create_directories(t / "bad");
  write_text(t / "bad" / "plugin.yaml", "name: [broken\n");
  PluginHost host2;
  ModelRegistry reg2;
  recs = host2.load({{t / "bad", kPriorityCommandLine, "--plugin-path"}}, reg2, {"toy"});
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].error.find("not valid YAML") != std::string::npos);

  // `mobius build` with those folders on its path: no probe, no warning about them.
  fs::create_directories(t / "ckpt");
  write_text(t / "ckpt" / "config.json", R"({"model_type": "toy", "hidden_size": 4, "out_size": 3})");
  write_safetensors(t / "ckpt" / "model.safetensors",
                    {f32_tensor("proj.weight", {3, 4}, std::vector<float>(12, 1.0f)),
                     f32_tensor("proj.bias", {3}, {0, 0, 0})});
  RunResult r = run(quote(env_or_empty("MOBIUS_CLI")) + " build --plugin-path " +
                    quote(crash_dir.string()) + " --plugin-path " + quote(plugin_dir().string()) +
                    " --model " + quote((t / "ckpt").string()) + " " + quote((t / "out").string()));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("not loaded") == std::string::npos);
  CHECK(r.output.find("built toy") != std::string::npos);
  ::unsetenv("MOBIUS_PLUGIN_SCAN_TIMEOUT");
}
