// test_plugins.cpp - plugin discovery and loading through the public loader, with real plugins
// built broken on purpose, and the CLI's `plugins` / `list` views of them.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <tuple>

#include "mobius/error.hpp"
#include "mobius/plugins.hpp"
#include "golden_util.hpp"
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

std::string cli() { return quote(env_or_empty("MOBIUS_CLI")); }

// `mobius plugins --plugin-path <dir>` (the build tree's own plugins are listed too).
RunResult cli_plugins(const fs::path& dir, const char* flags = "") {
  return run(cli() + " plugins " + flags + " --plugin-path " + quote(dir.string()));
}

// A copy of the well-formed test plugin (libtest_good.so, model type 'toy') in `dir`.
void copy_good(const fs::path& dir) {
  fs::create_directories(dir);
  fs::copy_file(plugin_dir() / "libtest_good.so", dir / "libtest_good.so");
  fs::copy_file(plugin_dir() / "good.plugin.yaml", dir / "good.plugin.yaml");
}

// A checkpoint the toy plugin builds.
void write_toy_checkpoint(const fs::path& dir) {
  fs::create_directories(dir);
  write_text(dir / "config.json", R"({"model_type": "toy", "hidden_size": 4, "out_size": 3})");
  write_safetensors(dir / "model.safetensors",
                    {f32_tensor("proj.weight", {3, 4}, std::vector<float>(12, 1.0f)),
                     f32_tensor("proj.bias", {3}, {0, 0, 0})});
}

// Bytes that would move the cursor, clear the screen or ring the bell: C0 but '\n', and DEL.
bool has_control_bytes(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\n') || u == 0x7F;
  });
}

const char* kLinkRule =
    "plugins are loaded only from folders and regular files inside the plugin folder, never "
    "through a link";
const char* kTrustRule = "plugins are loaded only from folders and files that no other user can change";

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
  CHECK(reg.get("toy").task == "toy-projection");
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
       "[plugin] manifest 'plugin.yaml': 'version' is missing"},
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
  CHECK(r.output.find("toy-projection") != std::string::npos);

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

TEST_CASE("plugins: nothing inside a plugin folder is loaded through a symbolic link") {
  TempDir t;
  const fs::path base = fs::canonical(t.path());
  const fs::path p = base / "plugins";
  copy_good(base / "outside");
  copy_good(p / "real");
  // A subfolder that is a link, to a folder outside and to one inside.
  fs::create_directory_symlink(base / "outside", p / "linked");
  fs::create_directory_symlink("real", p / "inner");
  // A manifest that is a link to one elsewhere, beside a real library.
  fs::create_directories(p / "m");
  fs::copy_file(plugin_dir() / "libtest_good.so", p / "m" / "libtest_good.so");
  fs::create_symlink(base / "outside" / "good.plugin.yaml", p / "m" / "plugin.yaml");
  // A real manifest whose library is a link, even to a library inside the plugin folder.
  fs::create_directories(p / "n");
  fs::copy_file(plugin_dir() / "good.plugin.yaml", p / "n" / "good.plugin.yaml");
  fs::create_symlink("../real/libtest_good.so", p / "n" / "libtest_good.so");
  // The folder the user names may itself be a link: it is resolved once.
  fs::create_directory_symlink(p, base / "named");

  RunResult r = cli_plugins(base / "named");
  INFO(r.output);
  CHECK(r.status == 0);
  const auto refused = [&](const fs::path& at, const std::string& what, const std::string& target) {
    CAPTURE(at);
    CHECK(r.output.find("error   " + at.string() + ": " + what + "'" + at.string() +
                        "' is a symbolic link to '" + target + "'; " + kLinkRule) !=
          std::string::npos);
  };
  refused(p / "linked", "", (base / "outside").string());
  refused(p / "inner", "", "real");
  refused(p / "m" / "plugin.yaml", "manifest ", (base / "outside" / "good.plugin.yaml").string());
  refused(p / "n" / "libtest_good.so", "library ", "../real/libtest_good.so");
  CHECK(r.output.find("loaded  toy 1.2.3 (mobius tests, ABI 1) " +
                      (p / "real" / "libtest_good.so").string()) != std::string::npos);
  CHECK(r.output.find((base / "outside").string() + "/libtest_good.so") == std::string::npos);

  // In-process: the one plugin of the real folder, nothing from outside.
  PluginHost host;
  ModelRegistry reg;
  auto recs = host.load(only(base / "named"), reg);
  CHECK(std::count_if(recs.begin(), recs.end(), [](const auto& x) { return x.loaded; }) == 1);
  CHECK(reg.get("toy").plugin_path == (p / "real" / "libtest_good.so").string());

  // load_one refuses a manifest that is a link, too.
  PluginHost host2;
  ModelRegistry reg2;
  PluginRecord one = host2.load_one(p / "m" / "plugin.yaml", kPriorityCommandLine, "test", reg2);
  CHECK_FALSE(one.loaded);
  CHECK(one.error.find("is a symbolic link to") != std::string::npos);
  CHECK(reg2.size() == 0);

  // `mobius build` with the plugin only behind a link: not loaded, and the warning says why.
  fs::create_directories(base / "only");
  fs::create_directory_symlink(base / "outside", base / "only" / "linked");
  write_toy_checkpoint(base / "ckpt");
  RunResult b = run(cli() + " build --plugin-path " + quote((base / "only").string()) + " --model " +
                    quote((base / "ckpt").string()) + " " + quote((base / "out").string()));
  INFO(b.output);
  CHECK(b.status != 0);
  CHECK(b.output.find("plugin " + (base / "only" / "linked").string() + " not loaded: '" +
                      (base / "only" / "linked").string() + "' is a symbolic link to '" +
                      (base / "outside").string() + "'") != std::string::npos);
  CHECK(b.output.find("unknown model type 'toy'") != std::string::npos);
  CHECK_FALSE(fs::exists(base / "out"));
}

TEST_CASE("plugins: a plugin that another user could change is refused") {
  TempDir t;
  const fs::path base = fs::canonical(t.path());
  copy_good(base / "ww");
  fs::permissions(base / "ww", fs::perms::all);
  copy_good(base / "p" / "sub");
  fs::permissions(base / "p" / "sub", fs::perms::all);
  copy_good(base / "q");
  fs::permissions(base / "q" / "good.plugin.yaml", static_cast<fs::perms>(0666));
  copy_good(base / "r");
  fs::permissions(base / "r" / "libtest_good.so", static_cast<fs::perms>(0757));
  // A sticky folder writable by all, like /tmp, may hold a private folder with a plugin.
  copy_good(base / "st" / "sub");
  fs::permissions(base / "st", static_cast<fs::perms>(01777));

  const auto expect = [&](const fs::path& dir, const fs::path& at, const std::string& what) {
    RunResult r = cli_plugins(dir);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("error   " + at.string() + ": " + what + "; " + kTrustRule) !=
          std::string::npos);
    CHECK(r.output.find("loaded  toy") == std::string::npos);
  };
  expect(base / "ww", base / "ww",
         "plugin folder '" + (base / "ww").string() + "' is writable by every user (mode 0777)");
  expect(base / "p", base / "p" / "sub",
         "folder '" + (base / "p" / "sub").string() + "' is writable by every user (mode 0777)");
  const fs::path manifest = base / "q" / "good.plugin.yaml";
  expect(base / "q", manifest,
         "manifest '" + manifest.string() + "' is writable by every user (mode 0666)");
  const fs::path lib = base / "r" / "libtest_good.so";
  expect(base / "r", lib, "library '" + lib.string() + "' is writable by every user (mode 0757)");

  RunResult r = cli_plugins(base / "st");
  INFO(r.output);
  CHECK(r.output.find("loaded  toy 1.2.3 (mobius tests, ABI 1) " +
                      (base / "st" / "sub" / "libtest_good.so").string()) != std::string::npos);

  if (::geteuid() != 0) {
    MESSAGE("not root: files of another user cannot be made here; that part is skipped");
    return;
  }
  // Owned by another user that is not root: the library, or the folder holding it.
  copy_good(base / "o");
  REQUIRE(::chown((base / "o" / "libtest_good.so").c_str(), 65534, 65534) == 0);
  copy_good(base / "of" / "sub");
  REQUIRE(::chown((base / "of" / "sub").c_str(), 65534, 65534) == 0);
  // Writable by a group that is not the owner's own.
  copy_good(base / "g");
  REQUIRE(::chown((base / "g" / "libtest_good.so").c_str(), 0, 65534) == 0);
  fs::permissions(base / "g" / "libtest_good.so", static_cast<fs::perms>(0775));
  for (const auto& [dir, at, what] :
       {std::tuple{base / "o", base / "o" / "libtest_good.so", std::string("library")},
        std::tuple{base / "of", base / "of" / "sub", std::string("folder")},
        std::tuple{base / "g", base / "g" / "libtest_good.so", std::string("library")}}) {
    RunResult o = cli_plugins(dir);
    INFO(o.output);
    const std::string head = "error   " + at.string() + ": " + what + " '" + at.string() + "' is ";
    const size_t pos = o.output.find(head);
    REQUIRE(pos != std::string::npos);
    const std::string line = o.output.substr(pos, o.output.find('\n', pos) - pos);
    if (dir == base / "g")
      CHECK(line.find("is writable by members of group '") != std::string::npos);
    else
      CHECK(line.find("(uid 65534), neither root nor the current user; ") != std::string::npos);
    CHECK(line.find(kTrustRule) != std::string::npos);
    CHECK(o.output.find("loaded  toy") == std::string::npos);
  }
}

TEST_CASE("plugins: manifests are read within limits and their shape is checked") {
  TempDir t;
  fs::copy_file(plugin_dir() / "libtest_good.so", t / "libtest_good.so");
  const std::string good =
      "name: toy\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [toy]\n";
  const auto many = [](const char* prefix, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::string(prefix) + std::to_string(i);
    return s;
  };
  const auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  struct Case {
    std::string manifest;
    std::string reason;
  };
  const std::string m = "[plugin] manifest 'plugin.yaml': ";
  const Case cases[] = {
      {good + "# " + std::string(100 << 10, 'x') + "\n", m + "larger than 64 KiB (102"},
      {good + "description: [a" + repeat(",a", 20000) + "]\n", m + "more than 16384 values"},
      {good + "description: " + std::string(40, '[') + "\n", m + "values nest deeper than 16 levels"},
      {"name: " + std::string(300, 'n') + "\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [toy]\n",
       m + "'name' is longer than 256 bytes (300)"},
      {good + "vendor: " + std::string(257, 'v') + "\n", m + "'vendor' is longer than 256 bytes (257)"},
      {good + "description: " + std::string(5000, 'd') + "\n", m + "'description' is longer than 4096 bytes (5000)"},
      {"name: toy\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [" + many("t", 5000) + "]\n",
       m + "'model_types' lists more than 4096 entries (5000)"},
      {"name: toy\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [" + std::string(300, 't') + "]\n",
       m + "an entry of 'model_types' is longer than 256 bytes (300)"},
      {"name: toy\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [[toy]]\n",
       m + "an entry of 'model_types' is not a string"},
      {"name: toy\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [toy, toy]\n",
       m + "'model_types' lists 'toy' twice"},
      {"name: {a: b}\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [toy]\n",
       m + "'name' is not a string"},
      {good + "name: toy\n", m + "key 'name' appears twice"},
      {"name: toy\nversion: ''\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [toy]\n",
       m + "'version' is empty"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.reason);
    write_text(t / "plugin.yaml", c.manifest);
    PluginHost host;
    ModelRegistry reg;
    PluginRecord r = host.load_one(t / "plugin.yaml", kPriorityCommandLine, "test", reg);
    CHECK_FALSE(r.loaded);
    CHECK(r.error.find(c.reason) != std::string::npos);
    CHECK(r.name.empty());  // nothing of a refused manifest is kept
    CHECK(reg.size() == 0);
  }

  // A manifest of 2 million keys is refused at once, in the CLI's own process.
  const fs::path huge = t / "huge";
  fs::create_directories(huge);
  fs::copy_file(plugin_dir() / "libtest_good.so", huge / "libtest_good.so");
  {
    std::ofstream out(huge / "plugin.yaml", std::ios::binary);
    out << good;
    for (int i = 0; i < 2000000; ++i) out << 'k' << i << ": v\n";
  }
  auto t0 = std::chrono::steady_clock::now();
  RunResult r = cli_plugins(huge);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(secs < 10);
  CHECK(r.output.find("error   " + (fs::canonical(huge) / "plugin.yaml").string() + ": " + m +
                      "larger than 64 KiB (") != std::string::npos);

  // A folder of more than 4096 entries is not scanned; the other folders are.
  const fs::path p = fs::canonical(t.path()) / "plugins";
  fs::create_directories(p / "crowd");
  for (int i = 0; i < 5000; ++i) write_text(p / "crowd" / ("f" + std::to_string(i)), "");
  copy_good(p / "fine");
  r = cli_plugins(p);
  INFO(r.output);
  CHECK(r.output.find("error   " + (p / "crowd").string() + ": folder '" + (p / "crowd").string() +
                      "' holds more than 4096 entries; it is not scanned for plugins") !=
        std::string::npos);
  CHECK(r.output.find("loaded  toy 1.2.3 (mobius tests, ABI 1) " +
                      (p / "fine" / "libtest_good.so").string()) != std::string::npos);
}

TEST_CASE("plugins: control bytes from a manifest, a folder or a plugin never reach the terminal") {
  const fs::path hostile = env_or_empty("MOBIUS_TEST_HOSTILE_PLUGIN_DIR");
  REQUIRE_FALSE(hostile.empty());
  TempDir t;
  const fs::path base = fs::canonical(t.path());
  // Values of manifests: escapes as YAML writes them, a byte that is not UTF-8.
  const std::string tail = "abi_version: 1\nlibrary: libtest_good.so\nmodel_types: [toy]\n";
  const struct {
    const char* folder;
    std::string manifest;
    std::string reason;
  } manifests[] = {
      {"vendor", "name: toy\nversion: 1\nvendor: \"mobius\\e[2J\\a tests\"\n" + tail,
       "'vendor' is not printable text: 'mobius\\x1b[2J\\x07 tests'"},
      {"name", "name: \"to\\ry\"\nversion: 1\n" + tail, "'name' is not printable text: 'to\\x0dy'"},
      {"utf8", "name: to\xffy\nversion: 1\n" + tail, "'name' is not printable text: 'to\\xffy'"},
      {"version", "name: toy\nversion: \"1\\e]0;owned\\a\"\n" + tail,
       "'version' is not printable text: '1\\x1b]0;owned\\x07'"},
      {"library",
       "name: toy\nversion: 1\nabi_version: 1\nlibrary: \"lib\\e[2J.so\"\nmodel_types: [toy]\n",
       "'library' is not printable text: 'lib\\x1b[2J.so'"},
      {"type", "name: toy\nversion: 1\nabi_version: 1\nlibrary: libtest_good.so\nmodel_types: [\"t\\eoy\"]\n",
       "an entry of 'model_types' is not printable text: 't\\x1boy'"},
  };
  const fs::path p = base / "plugins";
  for (const auto& c : manifests) {
    fs::create_directories(p / c.folder);
    fs::copy_file(plugin_dir() / "libtest_good.so", p / c.folder / "libtest_good.so");
    write_text(p / c.folder / "plugin.yaml", c.manifest);
  }
  // A folder whose name holds an escape sequence.
  const std::string evil = "ev\x1b[2Jil";
  copy_good(p / evil);

  RunResult r = cli_plugins(p);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_FALSE(has_control_bytes(r.output));
  for (const auto& c : manifests) {
    CAPTURE(c.reason);
    CHECK(r.output.find("error   " + (p / c.folder / "plugin.yaml").string() +
                        ": [plugin] manifest 'plugin.yaml': " + c.reason) != std::string::npos);
  }
  CHECK(r.output.find("error   " + (p / "ev\\x1b[2Jil").string() + ": '" +
                      (p / "ev\\x1b[2Jil").string() +
                      "' has a name that is not printable text; it is not scanned") !=
        std::string::npos);
  CHECK(r.output.find("loaded  toy") == std::string::npos);

  r = cli_plugins(p, "--json");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_FALSE(has_control_bytes(r.output));
  CHECK(r.output.find("\\u001b") == std::string::npos);  // not even escaped by JSON
  CHECK(nlohmann::json::parse(r.output).is_array());

  // Values of a plugin: its name, the task of its model type, its error message.
  r = cli_plugins(hostile);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_FALSE(has_control_bytes(r.output));
  CHECK(r.output.find("manifest names the plugin 'hostile_name' but the library says "
                      "'hostile_name\\x1b[2J\\x07'") != std::string::npos);
  CHECK(r.output.find("model type 'hostile_task' was registered with a task that is not printable "
                      "text of at most 256 bytes: 'feature\\x1b[31m-extraction\\x0d'") !=
        std::string::npos);
  CHECK(r.output.find("register failed: \\x1b]0;owned\\x07cannot register\\x1b[2J") !=
        std::string::npos);
  for (const char* flags : {"list", "list --json", "plugins --json"}) {
    CAPTURE(flags);
    RunResult l = run(cli() + " " + flags + " --plugin-path " + quote(hostile.string()));
    INFO(l.output);
    CHECK(l.status == 0);
    CHECK_FALSE(has_control_bytes(l.output));
    CHECK(l.output.find("\\u001b") == std::string::npos);
    CHECK(l.output.find("hostile_task ") == std::string::npos);  // not registered
  }
}

TEST_CASE("plugins: libraries are loaded from the file that was checked") {
  // Every library is checked, then loaded by its real path; the loader still tells one library
  // from the next across hosts in one process.
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    PluginHost a;
    ModelRegistry ra;
    auto recs = a.load(only(plugin_dir()), ra);
    CHECK(ra.get("toy").plugin == "toy");
    CHECK(ra.get("toy").plugin_path == (plugin_dir() / "libtest_good.so").string());
    const PluginRecord* notso = find(recs, "libtest_notso.so");
    REQUIRE(notso);
    // The loader's reason names the library, not the descriptor it was loaded through.
    CHECK(notso->error.find("cannot load as a shared object: " +
                            (plugin_dir() / "libtest_notso.so").string()) != std::string::npos);
    CHECK(notso->error.find("/proc/self/fd") == std::string::npos);
    PluginHost b;
    ModelRegistry rb;
    b.load(only(conflict_dir()), rb);
    CHECK(rb.get("toy").plugin == "clash");
    CHECK(rb.contains("clash_only"));
  }
}

TEST_CASE("plugins: a manifest-only pack registers an existing architecture under another name") {
  TempDir t;
  ::setenv("MOBIUS_PLUGIN_CACHE", (t / "scan.json").c_str(), 1);
  fs::create_directories(t / "pack");
  write_text(t / "pack" / "plugin.yaml",
             "name: my-pack\nversion: 1.2.0\nvendor: example\n"
             "description: llama under another name\naliases: {my_new_arch: llama}\n");
  const std::string pack = " --plugin-path " + quote((t / "pack").string());

  // `list` says where the alias comes from and what builds it; `plugins` shows the pack.
  RunResult l = run(cli() + " list" + pack);
  INFO(l.output);
  REQUIRE(l.status == 0);
  const size_t at = l.output.find("my_new_arch");
  REQUIRE(at != std::string::npos);
  const std::string line = l.output.substr(at, l.output.find('\n', at) - at);
  CHECK(line.find("my-pack 1.2.0 (example)") != std::string::npos);
  CHECK(line.find("alias of llama, built by plugin llama") != std::string::npos);
  CHECK(line.find((t / "pack" / "plugin.yaml").string()) != std::string::npos);
  RunResult p = cli_plugins(t / "pack");
  INFO(p.output);
  CHECK(p.output.find("my-pack 1.2.0 (example, manifest only)") != std::string::npos);
  CHECK(p.output.find("alias my_new_arch -> llama") != std::string::npos);
  RunResult j = run(cli() + " list --json" + pack, false);
  auto arr = nlohmann::json::parse(j.output);
  bool found = false;
  for (const auto& e : arr)
    if (e["model_type"] == "my_new_arch") {
      found = true;
      CHECK(e["alias_of"] == "llama");
      CHECK(e["builder_plugin"] == "llama");
      CHECK(e["plugin"] == "my-pack");
    }
  CHECK(found);

  // End to end: a checkpoint whose config says my_new_arch builds through the llama builder
  // (the build loads only the plugins its model type needs: the llama plugin is loaded because
  // the alias names it) and matches transformers' logits for the same weights.
  copy_case("llama-tiny", t / "ckpt", [](nlohmann::json& c) { c["model_type"] = "my_new_arch"; });
  RunResult b = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime" + pack);
  INFO(b.output);
  REQUIRE(b.status == 0);
  RunResult q = parity(t / "out", "llama-tiny");
  INFO(q.output);
  CHECK(q.status == 0);
  // Without the pack the type is unknown: only the llama pack's fallback builds it, because its
  // tensors are exactly llama's (test_fallback.cpp); one tensor short, it stays unknown.
  copy_case("llama-tiny", t / "short", [](nlohmann::json& c) { c["model_type"] = "my_new_arch"; },
            [](StTensor& s) { return s.name != "model.norm.weight"; });
  RunResult u = build_cli(t / "short", t / "out2", "--runtime onnxruntime");
  CHECK(u.status != 0);
  CHECK(u.output.find("unknown model type 'my_new_arch'") != std::string::npos);
  CHECK(u.output.find("it lacks 'model.norm.weight'") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out2"));

  // An alias of a type nobody registers, and aliases that only name each other, are plugin
  // errors: reported by `plugins`, and a build of that type fails cleanly.
  fs::create_directories(t / "orphan");
  write_text(t / "orphan" / "plugin.yaml",
             "name: orphan-pack\nversion: 1.0.0\naliases: {orphan_arch: no_such_type}\n");
  RunResult o = cli_plugins(t / "orphan");
  INFO(o.output);
  CHECK(o.output.find("alias 'orphan_arch' names model type 'no_such_type', which no loaded "
                      "plugin registers") != std::string::npos);
  copy_case("llama-tiny", t / "ckpt2", [](nlohmann::json& c) { c["model_type"] = "orphan_arch"; });
  RunResult ob = build_cli(t / "ckpt2", t / "out3",
                           "--runtime onnxruntime --plugin-path " + quote((t / "orphan").string()));
  INFO(ob.output);
  CHECK(ob.status == 1);
  CHECK(ob.output.find("no_such_type") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out3"));
  fs::create_directories(t / "cycle");
  write_text(t / "cycle" / "plugin.yaml", "name: cycle-pack\nversion: 1.0.0\naliases: {a_arch: b_arch, b_arch: a_arch}\n");
  RunResult c = cli_plugins(t / "cycle");
  INFO(c.output);
  CHECK(c.output.find("an alias that does not resolve") != std::string::npos);
  // An alias of an alias resolves.
  fs::create_directories(t / "chain");
  write_text(t / "chain" / "plugin.yaml", "name: chain-pack\nversion: 1.0.0\naliases: {second_arch: my_new_arch}\n");
  RunResult ch = run(cli() + " list" + pack + " --plugin-path " + quote((t / "chain").string()));
  INFO(ch.output);
  CHECK(ch.output.find("alias of my_new_arch, built by plugin llama") != std::string::npos);
}

TEST_CASE("plugins: the aliases of a manifest are checked") {
  TempDir t;
  struct Case {
    const char* manifest;
    const char* reason;
  } cases[] = {
      {"name: p\nversion: 1\n", "'library' is missing (only a pack that declares 'aliases' has no library)"},
      {"name: p\nversion: 1\naliases: [llama]\n", "'aliases' must be a non-empty mapping"},
      {"name: p\nversion: 1\naliases: {}\n", "'aliases' must be a non-empty mapping"},
      {"name: p\nversion: 1\naliases: {x: x}\n", "alias 'x' names itself"},
      {"name: p\nversion: 1\naliases: {x: [llama]}\n", "the value of alias 'x' is not a string"},
      {"name: p\nversion: 1\naliases: {x: llama}\nmodel_types: [y]\n",
       "'model_types' lists [y], but a pack without a library registers only its aliases [x]"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.manifest);
    fs::remove_all(t / "m");
    fs::create_directories(t / "m");
    write_text(t / "m" / "plugin.yaml", c.manifest);
    PluginHost host;
    ModelRegistry reg;
    auto recs = host.load(only(t / "m"), reg);
    REQUIRE(recs.size() == 1);
    CHECK_FALSE(recs[0].loaded);
    CHECK(recs[0].error.find(c.reason) != std::string::npos);
  }
}

TEST_CASE("plugins: a task's row decides the default runtime, refuses the runtimes it cannot run, and holds the plugin to its graph") {
  const fs::path dir = env_or_empty("MOBIUS_TEST_TASKS_DIR");
  REQUIRE_FALSE(dir.empty());
  PluginHost host;
  ModelRegistry reg;
  auto recs = host.load(only(dir), reg);
  REQUIRE(recs.size() == 1);
  INFO(recs[0].error);
  REQUIRE(recs[0].loaded);
  // text-encoding runs in ONNX Runtime alone: that is the folder a build lays out by default.
  CHECK(reg.get("task_encoder").task == "text-encoding");
  CHECK(reg.get("task_encoder").default_runtime == "onnxruntime");
  // A task the table does not list keeps the host's default.
  {
    PluginHost h2;
    ModelRegistry r2;
    h2.load(only(plugin_dir()), r2);
    CHECK(r2.get("toy").default_runtime.empty());
  }
  TempDir t;
  auto checkpoint = [&](const std::string& type) {
    const fs::path ck = t / ("ckpt-" + type);
    fs::create_directories(ck);
    write_text(ck / "config.json", R"({"model_type": ")" + type + R"(", "hidden_size": 4})");
    write_safetensors(ck / "model.safetensors", {f32_tensor("embed.weight", {8, 4}, std::vector<float>(32, 0.5f))});
    return ck;
  };
  auto build = [&](const fs::path& ck, const fs::path& out, const std::string& extra) {
    return run(cli() + " build -q --plugin-path " + quote(dir.string()) + " --model " + quote(ck.string()) + " " +
               quote(out.string()) + " " + extra);
  };
  RunResult ok = build(checkpoint("task_encoder"), t / "ok", "");
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK(nlohmann::json::parse(read_text(t / "ok" / "mobius_provenance.json"))["runtime"] == "onnxruntime");
  CHECK_FALSE(fs::exists(t / "ok" / "genai_config.json"));
  for (const char* rt : {"ort-genai", "transformers.js"}) {
    RunResult r = build(checkpoint("task_encoder"), t / "refused", std::string("--runtime ") + rt);
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find("task_encoder is a text encoder (task text-encoding), which " +
                        std::string(rt[0] == 'o' ? "ONNX Runtime GenAI" : "transformers.js") + " does not run") !=
          std::string::npos);
    CHECK(r.output.find("--runtime onnxruntime lays its folder out for ONNX Runtime") != std::string::npos);
    CHECK_FALSE(fs::exists(t / "refused"));
  }
  RunResult broken = build(checkpoint("task_encoder_unpooled"), t / "broken", "");
  INFO(broken.output);
  CHECK(broken.status != 0);
  CHECK(broken.output.find("task_encoder_unpooled (task text-encoding): the graph has no output 'pooler_output', "
                           "which the task promises") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "broken"));
}
