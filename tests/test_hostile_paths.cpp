// test_hostile_paths.cpp - what mobius opens from a model folder, and where it writes, through the
// CLI: a Hugging Face cache snapshot (links into its repository's blobs) builds and passes parity;
// links anywhere else (another repository, /etc, /proc, /dev, a FIFO, out of a plain folder) are
// refused naming the link and its text, exit status 1, nothing written; OUT is never the
// checkpoint folder or a folder holding it; two builds into one OUT both succeed.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdio>
#include <map>

#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

const char* const kCommit = "0123456789abcdef0123456789abcdef01234567";

// Runtime files a hub repository has beside the weights (contents are not checked by mobius).
const std::map<std::string, std::string> kRuntimeTexts = {
    {"tokenizer.json", R"({"version": "1.0", "model": {"type": "BPE", "vocab": {}}})"},
    {"tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>"})"},
    {"generation_config.json", R"({"bos_token_id": 1, "eos_token_id": 2})"},
};

// A blob name as huggingface_hub writes them: 64 hex digits (here from the content and a salt).
std::string blob_name(const std::string& bytes, const std::string& salt) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : salt + '\n' + bytes) h = (h ^ c) * 1099511628211ull;
  char out[65];
  for (int i = 0; i < 4; ++i) {
    h = (h ^ static_cast<uint64_t>(i)) * 1099511628211ull;
    std::snprintf(out + 16 * i, 17, "%016llx", static_cast<unsigned long long>(h));
  }
  return std::string(out, 64);
}

// A fake huggingface_hub cache repository <cache>/models--<repo>/{blobs,refs/main,snapshots/<commit>}.
struct HubRepo {
  fs::path root;      // <cache>/models--<repo>
  fs::path snapshot;  // root/snapshots/<commit>
  std::map<std::string, std::string> blobs;  // file path in the snapshot -> blob name

  HubRepo(const fs::path& cache, const std::string& repo) : root(cache / ("models--" + repo)) {
    snapshot = root / "snapshots" / kCommit;
    fs::create_directories(root / "blobs");
    fs::create_directories(root / "refs");
    fs::create_directories(snapshot);
    write_text(root / "refs" / "main", kCommit);
  }

  // Stores bytes as a blob and links snapshot/<name> to it the way huggingface_hub does
  // ("../../blobs/<hash>", one more "../" per subfolder).
  void add(const std::string& name, const std::string& bytes) {
    const std::string blob = blob_name(bytes, name);
    write_text(root / "blobs" / blob, bytes);
    const fs::path link = snapshot / name;
    fs::create_directories(link.parent_path());
    std::string up = "../../";
    for (const auto& part : fs::path(name).parent_path()) {
      if (!part.empty()) up += "../";
    }
    std::error_code ec;
    fs::remove(link, ec);
    fs::create_symlink(up + "blobs/" + blob, link);
    blobs[name] = blob;
  }

  // Every checkpoint file of a golden case, and the runtime files above.
  void add_case(const std::string& c) {
    for (const auto& e : fs::directory_iterator(golden(c))) {
      const std::string name = e.path().filename().string();
      if (name == "case.json" || name == "reference.safetensors") continue;
      add(name, read_text(e.path()));
    }
    for (const auto& [name, text] : kRuntimeTexts) add(name, text);
  }

  // Replaces snapshot/<name> with a link whose text is exactly `text`.
  void relink(const std::string& name, const std::string& text) const {
    std::error_code ec;
    fs::remove(snapshot / name, ec);
    fs::create_symlink(text, snapshot / name);
  }
};

// Every regular file under dir with its bytes, links read as "link -> text".
std::map<std::string, std::string> snapshot_of(const fs::path& dir) {
  std::map<std::string, std::string> all;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    const std::string rel = fs::relative(it->path(), dir).string();
    if (fs::is_symlink(it->symlink_status())) {
      all[rel] = "link -> " + fs::read_symlink(it->path()).string();
    } else if (fs::is_regular_file(it->symlink_status())) {
      all[rel] = read_text(it->path());
    }
  }
  return all;
}

bool has_temp_folder(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".mobius-tmp-") != std::string::npos) return true;
  }
  return false;
}

// The command must fail with exit status 1 and `reason` in its message, without writing OUT.
void expect_refused(const fs::path& model, const fs::path& out, const std::string& reason) {
  RunResult r = run("timeout 120 " + quote(env_or_empty("MOBIUS_CLI")) + " build -q --model " +
                    quote(model.string()) + " " + quote(out.string()));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("mobius: error: " + reason) != std::string::npos);
  CHECK_FALSE(fs::exists(fs::symlink_status(out)));
  CHECK_FALSE(has_temp_folder(out.parent_path()));
}

void expect_parity(const fs::path& out, const std::string& c) {
  RunResult p = parity(out, c);
  INFO(p.output);
  CHECK(p.status == 0);
  CHECK(p.output.find(" 0 failed") != std::string::npos);
}

}  // namespace

TEST_CASE("hostile paths: a hub cache snapshot of one file builds, copies its runtime files, passes parity") {
  TempDir t;
  HubRepo repo(t / "hub", "org--llama-tiny");
  repo.add_case("llama-tiny");
  RunResult r = build_cli(repo.snapshot, t / "out");
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (const auto& [name, text] : kRuntimeTexts) {
    CAPTURE(name);
    CHECK(fs::is_regular_file(fs::symlink_status(t / "out" / name)));
    CHECK(read_text(t / "out" / name) == text);
  }
  CHECK(fs::is_regular_file(fs::symlink_status(t / "out" / "config.json")));
  CHECK(read_text(t / "out" / "config.json") == read_text(golden("llama-tiny") / "config.json"));
  expect_parity(t / "out", "llama-tiny");
}

TEST_CASE("hostile paths: a sharded hub cache snapshot builds, reached through links, shards in a subfolder") {
  SUBCASE("llama3-rope-tied through snapshots/main, a link to the commit") {
    TempDir t;
    HubRepo repo(t / "hub", "org--llama3");
    repo.add_case("llama3-rope-tied");
    fs::create_directory_symlink(kCommit, repo.root / "snapshots" / "main");
    RunResult r = build_cli(repo.root / "snapshots" / "main", t / "out");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(read_text(t / "out" / "tokenizer.json") == kRuntimeTexts.at("tokenizer.json"));
    expect_parity(t / "out", "llama3-rope-tied");
  }
  SUBCASE("gemma2-softcap-sliding through a link to the snapshot, shards under weights/") {
    TempDir t;
    HubRepo repo(t / "hub", "org--gemma2");
    const fs::path g = golden("gemma2-softcap-sliding");
    nlohmann::json index = nlohmann::json::parse(read_text(g / "model.safetensors.index.json"));
    for (auto& [tensor, shard] : index["weight_map"].items()) {
      const std::string name = shard.get<std::string>();
      if (!repo.blobs.count("weights/" + name)) repo.add("weights/" + name, read_text(g / name));
      shard = "weights/" + name;
    }
    repo.add("model.safetensors.index.json", index.dump());
    repo.add("config.json", read_text(g / "config.json"));
    fs::create_directory_symlink(repo.snapshot, t / "model");
    RunResult r = build_cli(t / "model", t / "out");
    INFO(r.output);
    REQUIRE(r.status == 0);
    expect_parity(t / "out", "gemma2-softcap-sliding");
  }
}

TEST_CASE("hostile paths: links out of a hub cache snapshot are refused, naming the link and its text") {
  TempDir t;
  HubRepo repo(t / "hub", "org--llama-tiny");
  repo.add_case("llama-tiny");
  HubRepo other(t / "hub", "org--other");
  other.add("model.safetensors", read_text(golden("llama-tiny") / "model.safetensors"));
  other.add("config.json", read_text(golden("llama-tiny") / "config.json"));
  const std::string other_weights =
      "../../../models--org--other/blobs/" + other.blobs.at("model.safetensors");
  const std::string outside = ", which resolves outside the checkpoint folder and this "
                              "repository's blobs folder";
  const std::string passwd = read_text("/etc/passwd");

  struct Case {
    std::string what, file, text, reason;
  };
  const std::vector<Case> cases = {
      {"weights linked to another repository's blob", "model.safetensors", other_weights,
       "[safetensors] model.safetensors: not a regular file: 'model.safetensors' is a symbolic "
       "link to '" + other_weights + "'" + outside},
      {"config.json linked to another repository's blob", "config.json",
       "../../../models--org--other/blobs/" + other.blobs.at("config.json"),
       "[config] " + (repo.snapshot / "config.json").string() +
           ": not a regular file: 'config.json' is a symbolic link to "
           "'../../../models--org--other/blobs/" + other.blobs.at("config.json") + "'" + outside},
      {"weights linked to /etc/passwd", "model.safetensors", "/etc/passwd",
       "[safetensors] model.safetensors: not a regular file: 'model.safetensors' is a symbolic "
       "link to '/etc/passwd'" + outside},
      {"weights linked to /proc/self/environ", "model.safetensors", "/proc/self/environ",
       "[safetensors] model.safetensors: not a regular file: 'model.safetensors' is a symbolic "
       "link to '/proc/self/environ'" + outside},
      {"weights linked to /proc/self/mem", "model.safetensors", "/proc/self/mem",
       "[safetensors] model.safetensors: not a regular file: 'model.safetensors' is a symbolic "
       "link to '/proc/self/mem'" + outside},
      {"weights linked to /dev/zero", "model.safetensors", "/dev/zero",
       "[safetensors] model.safetensors: not a regular file: 'model.safetensors' is a symbolic "
       "link to '/dev/zero'" + outside},
      {"tokenizer.json linked to /etc/passwd", "tokenizer.json", "/etc/passwd",
       "[checkpoint] tokenizer.json: not a regular file: 'tokenizer.json' is a symbolic link to "
       "'/etc/passwd'" + outside},
      {"generation_config.json linked to /proc/self/environ", "generation_config.json",
       "/proc/self/environ",
       "[checkpoint] generation_config.json: not a regular file: 'generation_config.json' is a "
       "symbolic link to '/proc/self/environ'" + outside},
      {"blobs reached through a detour out of the repository", "model.safetensors",
       "../../../models--org--llama-tiny/../models--org--other/blobs/" +
           other.blobs.at("model.safetensors"),
       "[safetensors] model.safetensors: not a regular file: 'model.safetensors' is a symbolic "
       "link to '../../../models--org--llama-tiny/../models--org--other/blobs/" +
           other.blobs.at("model.safetensors") + "'" + outside},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    repo.relink(c.file, c.text);
    RunResult r = run("timeout 120 " + quote(env_or_empty("MOBIUS_CLI")) + " build -q --model " +
                      quote(repo.snapshot.string()) + " " + quote((t / "out").string()));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("mobius: error: " + c.reason) != std::string::npos);
    // Nothing read from the target reaches the message.
    CHECK(r.output.find("root:") == std::string::npos);
    CHECK(r.output.find(passwd.substr(0, 8)) == std::string::npos);
    CHECK(r.output.find("header length") == std::string::npos);
    CHECK_FALSE(fs::exists(t / "out"));
    CHECK_FALSE(has_temp_folder(t.path()));
    repo.relink(c.file, "../../blobs/" + repo.blobs.at(c.file));
  }
  // The repository is intact: it still builds.
  RunResult ok = build_cli(repo.snapshot, t / "out");
  INFO(ok.output);
  CHECK(ok.status == 0);
}

TEST_CASE("hostile paths: FIFOs never block a build, linked or planted as a blob") {
  TempDir t;
  HubRepo repo(t / "hub", "org--llama-tiny");
  repo.add_case("llama-tiny");
  REQUIRE(::mkfifo((t / "fifo").c_str(), 0600) == 0);
  repo.relink("model.safetensors", (t / "fifo").string());
  expect_refused(repo.snapshot, t / "out",
                 "[safetensors] model.safetensors: not a regular file: 'model.safetensors' is a "
                 "symbolic link to '" + (t / "fifo").string() +
                     "', which resolves outside the checkpoint folder and this repository's "
                     "blobs folder");
  // A FIFO in the repository's own blobs: opened without blocking, refused by its type.
  const std::string blob = repo.blobs.at("model.safetensors");
  fs::remove(repo.root / "blobs" / blob);
  REQUIRE(::mkfifo((repo.root / "blobs" / blob).c_str(), 0600) == 0);
  repo.relink("model.safetensors", "../../blobs/" + blob);
  expect_refused(repo.snapshot, t / "out",
                 "[safetensors] model.safetensors: not a regular file ('model.safetensors' is a "
                 "symbolic link to '../../blobs/" + blob + "')");
}

TEST_CASE("hostile paths: a blob that is itself a link is refused") {
  TempDir t;
  HubRepo repo(t / "hub", "org--llama-tiny");
  repo.add_case("llama-tiny");
  const std::string blob = repo.blobs.at("tokenizer.json");
  fs::remove(repo.root / "blobs" / blob);
  fs::create_symlink("/etc/passwd", repo.root / "blobs" / blob);
  expect_refused(repo.snapshot, t / "out",
                 "[checkpoint] tokenizer.json: not a regular file: 'tokenizer.json' is a symbolic "
                 "link to '../../blobs/" + blob + "', a blob that is itself a symbolic link");
}

TEST_CASE("hostile paths: a link's text is quoted safely and cut when long") {
  TempDir t;
  HubRepo repo(t / "hub", "org--llama-tiny");
  repo.add_case("llama-tiny");
  repo.relink("model.safetensors", "/tmp/\x1b]0;owned\x07" + std::string(600, 'a'));
  RunResult r = run(quote(env_or_empty("MOBIUS_CLI")) + " build -q --model " +
                    quote(repo.snapshot.string()) + " " + quote((t / "out").string()));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("'model.safetensors' is a symbolic link to '/tmp/\\x1b]0;owned\\x07aaa") !=
        std::string::npos);
  CHECK(r.output.find('\x1b') == std::string::npos);
  CHECK(r.output.find("aaa...'") != std::string::npos);
  CHECK(r.output.size() < 600);
  CHECK_FALSE(fs::exists(t / "out"));
}

TEST_CASE("hostile paths: a plain folder's links out are refused, config.json's too") {
  TempDir t;
  copy_case("llama-tiny", t / "elsewhere");
  SUBCASE("weights: a relative link escaping the folder") {
    copy_case("llama-tiny", t / "ckpt");
    fs::remove(t / "ckpt" / "model.safetensors");
    fs::create_symlink("../elsewhere/model.safetensors", t / "ckpt" / "model.safetensors");
    expect_refused(t / "ckpt", t / "out",
                   "[safetensors] model.safetensors: not a regular file: 'model.safetensors' is a "
                   "symbolic link to '../elsewhere/model.safetensors', which resolves outside the "
                   "checkpoint folder");
  }
  SUBCASE("config.json: a link out of the folder") {
    copy_case("llama-tiny", t / "ckpt");
    fs::remove(t / "ckpt" / "config.json");
    fs::create_symlink("../elsewhere/config.json", t / "ckpt" / "config.json");
    expect_refused(t / "ckpt", t / "out",
                   "[config] " + (t / "ckpt" / "config.json").string() +
                       ": not a regular file: 'config.json' is a symbolic link to "
                       "'../elsewhere/config.json', which resolves outside the checkpoint folder");
  }
  SUBCASE("config.json: a link to /etc/passwd") {
    copy_case("llama-tiny", t / "ckpt");
    fs::remove(t / "ckpt" / "config.json");
    fs::create_symlink("/etc/passwd", t / "ckpt" / "config.json");
    expect_refused(t / "ckpt", t / "out",
                   "[config] " + (t / "ckpt" / "config.json").string() +
                       ": not a regular file: 'config.json' is a symbolic link to '/etc/passwd', "
                       "which resolves outside the checkpoint folder");
  }
  SUBCASE("a runtime file: a link to /dev/zero") {
    copy_case("llama-tiny", t / "ckpt");
    fs::create_symlink("/dev/zero", t / "ckpt" / "tokenizer.json");
    expect_refused(t / "ckpt", t / "out",
                   "[checkpoint] tokenizer.json: not a regular file: 'tokenizer.json' is a "
                   "symbolic link to '/dev/zero', which resolves outside the checkpoint folder");
  }
  SUBCASE("a shard: a link into a sibling cache repository's blobs") {
    TempDir h;
    HubRepo other(h / "hub", "org--other");
    other.add("model.safetensors", read_text(golden("llama-tiny") / "model.safetensors"));
    const fs::path ckpt = t / "ckpt";
    fs::create_directories(ckpt);
    write_text(ckpt / "config.json", read_text(golden("llama-tiny") / "config.json"));
    const std::string target = (other.root / "blobs" / other.blobs.at("model.safetensors")).string();
    fs::create_symlink(target, ckpt / "model-00001-of-00001.safetensors");
    nlohmann::json index = {{"weight_map", nlohmann::json::object()}};
    auto reader = open_safetensors_checkpoint(golden("llama-tiny"));
    for (const auto& m : reader->tensors()) index["weight_map"][m.name] = "model-00001-of-00001.safetensors";
    write_text(ckpt / "model.safetensors.index.json", index.dump());
    expect_refused(ckpt, t / "out",
                   "[safetensors] model.safetensors.index.json: shard "
                   "'model-00001-of-00001.safetensors' resolves outside the checkpoint folder: "
                   "'model-00001-of-00001.safetensors' is a symbolic link to '" + target + "'");
  }
}

TEST_CASE("hostile paths: OUT is never the checkpoint folder or a folder holding it") {
  TempDir t;
  const fs::path m = t / "models" / "m";
  copy_case("llama-tiny", m);
  write_text(m / "model.onnx", "an earlier export kept with the checkpoint");
  // The parent holds a model.onnx too, so only the checkpoint rule can refuse it.
  write_text(t / "models" / "model.onnx", "another file");
  const auto before = snapshot_of(t / "models");
  const std::string cli = quote(env_or_empty("MOBIUS_CLI"));
  const std::string same = "is the checkpoint folder " + m.string() + "; refusing to write";
  const std::string holds = "contains the checkpoint folder " + m.string() + "; refusing";
  struct Case {
    std::string what, command, reason;
  };
  fs::create_directory_symlink(m, t / "link-to-m");
  fs::create_directory_symlink(t / "models", t / "link-to-models");
  const std::vector<Case> cases = {
      {"--model M M", cli + " build -q --model " + quote(m.string()) + " " + quote(m.string()), same},
      {"relative, with ..", "cd " + quote((t / "models").string()) + " && " + cli +
                                " build -q --model m ./m/../m", same},
      {"M/..", cli + " build -q --model " + quote(m.string()) + " " + quote(m.string() + "/.."), holds},
      {"M/../.. (an ancestor further up)",
       cli + " build -q --model " + quote(m.string()) + " " + quote(m.string() + "/../.."), holds},
      {"OUT a link to M", cli + " build -q --model " + quote(m.string()) + " " +
                              quote((t / "link-to-m").string()), same},
      {"OUT a link to M's parent", cli + " build -q --model " + quote(m.string()) + " " +
                                       quote((t / "link-to-models").string()), holds},
      {"M reached through a link, OUT the real folder",
       cli + " build -q --model " + quote((t / "link-to-m").string()) + " " + quote(m.string()),
       same},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    RunResult r = run(c.command);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("mobius: error: [save] ") != std::string::npos);
    CHECK(r.output.find(c.reason) != std::string::npos);
    CHECK(snapshot_of(t / "models") == before);
    CHECK_FALSE(has_temp_folder(t.path()));
    CHECK_FALSE(has_temp_folder(t / "models"));
  }
  CHECK(fs::is_symlink(t / "link-to-m"));
  // A folder inside the checkpoint folder is a different folder: building there is allowed.
  RunResult ok = build_cli(m, m / "onnx");
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK(fs::exists(m / "onnx" / "model.onnx"));
}

TEST_CASE("hostile paths: two builds into one OUT at once both succeed, OUT one complete model") {
  TempDir t;
  copy_case("llama-tiny", t / "ckpt");
  const std::string cli = quote(env_or_empty("MOBIUS_CLI"));
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    // Most rounds start with no OUT (both may see it absent; the second rename then meets the
    // first's model); the last starts from an earlier model.
    if (round < 9) fs::remove_all(t / "out");
    const std::string one = cli + " build -q -j 1 --model " + quote((t / "ckpt").string()) + " " +
                            quote((t / "out").string());
    RunResult r = run("(" + one + ") & a=$!; (" + one + ") & b=$!; wait $a; ra=$?; wait $b; rb=$?; " +
                      "echo \"status $ra $rb\"");
    INFO(r.output);
    CHECK(r.output.find("status 0 0") != std::string::npos);
    CHECK(fs::is_regular_file(t / "out" / "model.onnx"));
    CHECK(fs::is_regular_file(t / "out" / "model.onnx.data"));
    CHECK(fs::is_regular_file(t / "out" / "config.json"));
    CHECK_FALSE(has_temp_folder(t.path()));
    if (round == 0 || round == 9) expect_parity(t / "out", "llama-tiny");
  }
}

// The moment two concurrent builds collide, made certain: rename() is interposed so that another
// build's complete model lands in OUT just before this build's rename into a fresh OUT.
TEST_CASE("hostile paths: a model another build put in OUT just before the rename is exchanged") {
  TempDir t;
  RunResult cc = run("command -v cc");
  if (cc.status != 0) {
    MESSAGE("no C compiler to build the rename interposer; skipped");
    return;
  }
  write_text(t / "first_rename.c", R"(#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
/* rename(from, to): when `to` is $FIRST_RENAME_TO, first moves $FIRST_RENAME_FROM there. */
int rename(const char* from, const char* to) {
  int (*real)(const char*, const char*) =
      (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
  const char* target = getenv("FIRST_RENAME_TO");
  const char* first = getenv("FIRST_RENAME_FROM");
  if (target && first && strcmp(to, target) == 0) real(first, to);
  return real(from, to);
}
)");
  RunResult built = run("cc -shared -fPIC -o " + quote((t / "first_rename.so").string()) + " " +
                        quote((t / "first_rename.c").string()) + " -ldl");
  INFO(built.output);
  REQUIRE(built.status == 0);
  copy_case("llama-tiny", t / "ckpt");
  // The other build's result: a complete model of the same checkpoint, with a marker file.
  REQUIRE(build_cli(t / "ckpt", t / "other").status == 0);
  write_text(t / "other" / "marker", "the other build");
  const fs::path out = t / "out";
  RunResult r = run("FIRST_RENAME_TO=" + quote(out.string()) + " FIRST_RENAME_FROM=" +
                    quote((t / "other").string()) + " LD_PRELOAD=" +
                    quote((t / "first_rename.so").string()) + " " +
                    quote(env_or_empty("MOBIUS_CLI")) + " build -q --model " +
                    quote((t / "ckpt").string()) + " " + quote(out.string()));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_FALSE(fs::exists(t / "other"));           // it did land in OUT first
  CHECK_FALSE(fs::exists(out / "marker"));         // and was then replaced by this build's model
  CHECK(fs::is_regular_file(out / "model.onnx"));
  CHECK(fs::is_regular_file(out / "model.onnx.data"));
  CHECK_FALSE(has_temp_folder(t.path()));
  expect_parity(out, "llama-tiny");
}
