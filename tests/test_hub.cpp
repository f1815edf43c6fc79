// test_hub.cpp - models from the Hugging Face Hub: ids, revisions and the cache configuration
// as huggingface_hub reads them; then `mobius build --model org/name` and `mobius download`
// against a loopback hub (tests/hub_server.mjs, with a CDN on another host): the same model as
// from the local folder, huggingface_hub's cache layout, offline builds, resumed, retried and
// refused downloads, gated and missing repositories, concurrent processes; diffusers pipeline
// repositories (model_index.json and component folders) fetched, refused when hostile, rebuilt
// offline and built end to end. Nothing here reaches an address other than loopback.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>

#include <chrono>
#include <map>
#include <set>

#include "golden_util.hpp"
#include "hub_util.hpp"
#include "hub/http.hpp"
#include "hub/hub.hpp"
#include "hub/hub_cache.hpp"
#include "mobius/hub.hpp"
#include "util/digest.hpp"
#include "util/untrusted.hpp"

extern char** environ;

using namespace mobius;
using namespace mobius::test;

namespace {

// The golden diffusers pipelines (tests/golden-diffusers/<case>).
fs::path sd_golden(const std::string& c) {
  return fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "golden-diffusers" / c;
}

// dir/<stem>.safetensors split into <stem>-0000N-of-00002.safetensors (tensors alternating
// between the two) and <stem>.safetensors.index.json, as a sharded save_pretrained leaves it.
void shard_in_two(const fs::path& dir, const std::string& stem) {
  const std::string bytes = read_text(dir / (stem + ".safetensors"));
  uint64_t n = 0;
  REQUIRE(bytes.size() >= 8);
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  const char* data = bytes.data() + 8 + n;
  std::vector<StTensor> parts[2];
  nlohmann::json map = nlohmann::json::object();
  uint64_t total = 0;
  size_t i = 0;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t b = v["data_offsets"][0], e = v["data_offsets"][1];
    parts[i % 2].push_back({name, v["dtype"].get<std::string>(), v["shape"].get<std::vector<int64_t>>(),
                            std::vector<uint8_t>(data + b, data + e)});
    map[name] = stem + "-0000" + std::to_string(i % 2 + 1) + "-of-00002.safetensors";
    total += e - b;
    ++i;
  }
  REQUIRE(i >= 2);
  for (int k = 0; k < 2; ++k)
    write_safetensors(dir / (stem + "-0000" + std::to_string(k + 1) + "-of-00002.safetensors"), parts[k]);
  write_text(dir / (stem + ".safetensors.index.json"),
             nlohmann::json({{"metadata", {{"total_size", total}}}, {"weight_map", map}}).dump(2));
  fs::remove(dir / (stem + ".safetensors"));
}

// A pipeline repository from golden sd15-tiny: text_encoder (model.safetensors), unet sharded in
// two, vae (diffusion_pytorch_model.safetensors), tokenizer/, scheduler/, a feature_extractor/,
// safety_checker [null, null] (its folder there all the same), a component of unknown files, and
// files no build needs (README.md, fp16 and pickle variants, a folder model_index.json does not
// list).
fs::path sharded_pipeline_repo(const fs::path& dir) {
  copy_dir(sd_golden("sd15-tiny"), dir);
  fs::remove(dir / "case.json");
  fs::remove(dir / "reference.safetensors");
  shard_in_two(dir / "unet", "diffusion_pytorch_model");
  nlohmann::json index = nlohmann::json::parse(read_text(dir / "model_index.json"));
  index["feature_extractor"] = {"transformers", "CLIPImageProcessor"};
  index["custom"] = {"mylib", "Thing"};
  write_text(dir / "model_index.json", index.dump(2));
  fs::create_directories(dir / "feature_extractor");
  write_text(dir / "feature_extractor" / "preprocessor_config.json", R"({"crop_size": 224})");
  fs::create_directories(dir / "custom");
  write_text(dir / "custom" / "thing.txt", "unknown to mobius");
  fs::create_directories(dir / "safety_checker");
  write_text(dir / "safety_checker" / "config.json", "{}");
  write_text(dir / "safety_checker" / "model.safetensors", "never asked");
  fs::create_directories(dir / "extra");
  write_text(dir / "extra" / "config.json", "{}");
  write_text(dir / "README.md", "# a pipeline");
  write_text(dir / "unet" / "diffusion_pytorch_model.fp16.safetensors", "not needed");
  write_text(dir / "vae" / "diffusion_pytorch_model.bin", "not needed: safetensors comes first");
  write_text(dir / "text_encoder" / "pytorch_model.bin", "not needed: safetensors comes first");
  return dir;
}

// What a fetch of sharded_pipeline_repo leaves in the snapshot (with the weights or without).
std::set<std::string> sharded_pipeline_files(bool weights) {
  std::set<std::string> f = {"model_index.json",        "text_encoder/config.json",
                             "unet/config.json",        "vae/config.json",
                             "scheduler/scheduler_config.json", "feature_extractor/preprocessor_config.json",
                             "tokenizer/merges.txt",    "tokenizer/special_tokens_map.json",
                             "tokenizer/tokenizer_config.json", "tokenizer/vocab.json"};
  if (weights)
    for (const char* w : {"text_encoder/model.safetensors", "unet/diffusion_pytorch_model.safetensors.index.json",
                          "unet/diffusion_pytorch_model-00001-of-00002.safetensors",
                          "unet/diffusion_pytorch_model-00002-of-00002.safetensors",
                          "vae/diffusion_pytorch_model.safetensors"})
      f.insert(w);
  return f;
}

// The hub settings of an in-process fetch against `s`, with the cache under home.
hub::Config hub_config(const HubServer& s, const fs::path& home) {
  hub::Config c;
  c.home = home;
  c.cache = home / "hub";
  c.endpoint = s.endpoint();
  return c;
}

}  // namespace

TEST_CASE("hub: ids, revisions, names and settings are read as huggingface_hub reads them") {
  for (const char* ok : {"org/name", "Org-1/Name_2.x", "a/b", "_x/y_"}) CHECK_MESSAGE(hub::is_valid_repo_id(ok), ok);
  for (const char* bad : {"name", "org/na--me", "org/na..me", "org/name.git", "-org/name", "org/name-",
                          "org/.name", "a/b/c", "/abs/path", "./x/y", "org/", "/name", "org/na me",
                          "org/caf\xc3\xa9"})
    CHECK_MESSAGE(!hub::is_valid_repo_id(bad), bad);
  CHECK(hub::is_valid_repo_id("gpt2", /*require_namespace=*/false));
  CHECK(hub::is_valid_repo_id("org/" + std::string(96, 'a')));
  CHECK(!hub::is_valid_repo_id("org/" + std::string(97, 'a')));
  CHECK(!hub::is_valid_repo_id(std::string(97, 'a') + "/x"));

  auto spec = parse_hub_spec("org/name@v1.0");
  REQUIRE(spec);
  CHECK(spec->repo_id == "org/name");
  CHECK(spec->revision == "v1.0");
  CHECK(parse_hub_spec("org/name")->revision.empty());
  CHECK(parse_hub_spec("org/name@refs/pr/1"));
  CHECK_FALSE(parse_hub_spec("org/name@../x"));
  CHECK_FALSE(parse_hub_spec("org/name@"));
  CHECK_FALSE(parse_hub_spec("no/such/folder"));

  const std::string hash(40, 'a');
  for (const char* ok : {"main", "v1.0", "refs/pr/1", "release-2024", hash.c_str()})
    CHECK_MESSAGE(hub::is_valid_revision(ok), ok);
  for (const char* bad : {"", "..", "a/../b", "/main", "main/", ".hidden", "a b", "a\nb", "a:b", "x.lock", "a//b"})
    CHECK_MESSAGE(!hub::is_valid_revision(bad), bad);
  CHECK(hub::is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  CHECK(!hub::is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));

  for (const char* ok : {"model-00001-of-00002.safetensors", "sub/x.bin"}) CHECK(hub::is_safe_repo_path(ok));
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "./x", "a\\b", "x\n"})
    CHECK_MESSAGE(!hub::is_safe_repo_path(bad), bad);

  CHECK(hub::normalize_etag("W/\"abc\"") == "abc");
  CHECK(hub::normalize_etag("\"abc\"") == "abc");
  CHECK(hub::normalize_etag("abc") == "abc");
  CHECK(!hub::is_blob_name("../x"));
  CHECK(!hub::is_blob_name("a/b"));
  CHECK(!hub::is_blob_name(std::string(64, 'a') + ".incomplete"));  // another blob's download
  CHECK(!hub::is_blob_name(std::string(64, 'A')));                  // digests are lowercase
  CHECK(!hub::is_blob_name(std::string(63, 'a')));
  CHECK(!hub::is_blob_name("W/" + std::string(40, 'a')));
  CHECK(hub::is_blob_name(std::string(64, 'a')));
  CHECK(hub::is_blob_name(std::string(40, '0')));
  CHECK(hub::repo_folder_name("org/name") == "models--org--name");

  CHECK(hub::resolve_url("https://h.example", "org/n", "refs/pr/1", "sub dir/a+b.json") ==
        "https://h.example/org/n/resolve/refs%2Fpr%2F1/sub%20dir/a%2Bb.json");
  CHECK(http::is_relative_reference("/org/n/resolve/main/x"));
  CHECK(http::is_relative_reference("x?y=1"));
  CHECK_FALSE(http::is_relative_reference("https://cdn.example/x"));
  CHECK_FALSE(http::is_relative_reference("//cdn.example/x"));
  CHECK(http::same_origin("http://127.0.0.1:80/a", "http://127.0.0.1/b"));
  CHECK(http::same_origin("HTTPS://Hub.example/a", "https://hub.example:443"));
  CHECK_FALSE(http::same_origin("http://127.0.0.1:8080/a", "http://127.0.0.1:8081/a"));
  CHECK_FALSE(http::same_origin("http://127.0.0.2:8080/a", "http://127.0.0.1:8080/a"));
  CHECK(http::resolve_location("http://h:1/a/b?x", "/c/d").value() == "http://h:1/c/d");
  CHECK_FALSE(http::resolve_location("http://h:1/a", "file:///etc/passwd"));

  // FIPS 180-4 test vectors, and one fed in uneven pieces.
  CHECK(sha256_of("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_of("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string million(1000000, 'a');
  Sha256 s;
  for (size_t i = 0; i < million.size(); i += 997) s.update(million.data() + i, std::min<size_t>(997, million.size() - i));
  CHECK(s.hex_digest() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

  // The cache settings.
  isolate_env();
  TempDir t;
  const std::string old_home = env_or_empty("HOME");
  ::setenv("HOME", t.path().c_str(), 1);
  hub::Config c = hub::Config::from_env();
  CHECK(c.home == t.path() / ".cache" / "huggingface");
  CHECK(c.cache == t.path() / ".cache" / "huggingface" / "hub");
  CHECK(c.endpoint == "https://huggingface.co");
  CHECK(c.token.empty());
  CHECK_FALSE(c.offline);
  ::setenv("XDG_CACHE_HOME", (t / "xdg").c_str(), 1);
  CHECK(hub::Config::from_env().home == t / "xdg" / "huggingface");
  ::setenv("HF_HOME", "~/hf", 1);
  ::setenv("HF_ENDPOINT", "http://127.0.0.1:9/", 1);
  fs::create_directories(t / "hf");
  write_text(t / "hf" / "token", "  hf_from_file\n");
  for (const char* v : {"1", "true", "YES", "On"}) {
    ::setenv("HF_HUB_OFFLINE", v, 1);
    CHECK(hub::Config::from_env().offline);
  }
  ::setenv("HF_HUB_OFFLINE", "0", 1);
  c = hub::Config::from_env();
  CHECK_FALSE(c.offline);
  CHECK(c.home == t / "hf");
  CHECK(c.cache == t / "hf" / "hub");
  CHECK(c.endpoint == "http://127.0.0.1:9");
  CHECK(c.token == "hf_from_file");
  ::setenv("HF_TOKEN", "hf_env", 1);
  ::setenv("HF_HUB_CACHE", (t / "elsewhere").c_str(), 1);
  c = hub::Config::from_env();
  CHECK(c.token == "hf_env");
  CHECK(c.token_source == "HF_TOKEN");
  CHECK(c.cache == t / "elsewhere");
  ::setenv("HOME", old_home.c_str(), 1);
  isolate_env();
}

TEST_CASE("hub: shard names from an index are checked before anything is asked for") {
  TempDir t;
  write_text(t / "ok.json", R"({"metadata": {}, "weight_map": {"a": "m-2.safetensors", "b": "m-1.safetensors", "c": "m-2.safetensors", "d": "sub/m-3.safetensors"}})");
  CHECK(hub::index_shards(t / "ok.json", "ok.json") ==
        std::vector<std::string>{"m-1.safetensors", "m-2.safetensors", "sub/m-3.safetensors"});
  for (const std::string& bad : {std::string("/etc/passwd"), std::string("../m.safetensors"), std::string("a/../../m"),
                                 std::string("a\\..\\m"), std::string("m\xc2\x85.safetensors"), std::string("m\x1b[2J"),
                                 std::string("a//m"), std::string(2000, 'm')}) {
    CAPTURE(bad);
    write_text(t / "bad.json", nlohmann::json({{"weight_map", {{"a", "ok.safetensors"}, {"b", bad}}}}).dump());
    CHECK_THROWS_WITH_AS(hub::index_shards(t / "bad.json", "bad.json"),
                         doctest::Contains("is not a relative file name inside the repository"), Error);
  }
  write_text(t / "empty.json", R"({"weight_map": {}})");
  CHECK_THROWS_WITH_AS(hub::index_shards(t / "empty.json", "empty.json"), doctest::Contains("lists no shard"), Error);
  write_text(t / "none.json", R"({"weights": {}})");
  CHECK_THROWS_WITH_AS(hub::index_shards(t / "none.json", "none.json"), doctest::Contains("no 'weight_map' object"), Error);
}

TEST_CASE("hub: a build from a hub id equals the build from the folder; the cache is huggingface_hub's; offline rebuilds") {
  TempDir t;
  HubServer hub(t.path(), {{"token", "hf_secret"},
                           {"repos", repos({{"org/llama-tiny", golden("llama-tiny")},
                                            {"org/rope-sharded", golden("llama3-rope-tied")}})}});
  const fs::path home = t / "hf";
  for (const auto& [repo, golden_case] :
       std::vector<std::pair<std::string, std::string>>{{"org/llama-tiny", "llama-tiny"}, {"org/rope-sharded", "llama3-rope-tied"}}) {
    CAPTURE(repo);
    hub.reset();
    if (repo == "org/rope-sharded") hub.faults({{{"kind", "delay"}, {"server", "cdn"}, {"ms", 300}, {"times", -1}}});
    // A token is set: the hub gets it, the CDN (another host) never does.
    RunResult r = mobius_cli(hub_env(hub, home, "HF_TOKEN=hf_secret"),
                             "build --model " + repo + " " + quote((t / ("out-" + golden_case)).string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("built llama") != std::string::npos);
    REQUIRE(local_build(golden(golden_case), t / ("local-" + golden_case)).status == 0);
    CHECK(read_text(t / ("out-" + golden_case) / "model.onnx.data") ==
          read_text(t / ("local-" + golden_case) / "model.onnx.data"));
    CHECK(fs::exists(t / ("out-" + golden_case) / "config.json"));
    {
      // The provenance names the repository and the commit, and hashes the files as fetched.
      nlohmann::json prov = nlohmann::json::parse(read_text(t / ("out-" + golden_case) / "mobius_provenance.json"));
      CHECK(prov["source"]["repo"] == repo);
      CHECK(prov["source"]["revision"] == "main");
      CHECK(prov["source"]["commit"] == only_commit(home, repo));
      for (const auto& f : prov["files"])
        CHECK(f["sha256"] == sha256_of(read_text(golden(golden_case) / f["name"].get<std::string>())));
    }

    nlohmann::json log = hub.log();
    INFO(log.dump(1));
    std::set<std::string> allowed = {"config.json", "model.safetensors.index.json", "model.safetensors",
                                     "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (const auto& f : hub::optional_files()) allowed.insert(f);
    allowed.insert(hub::kSentenceModules);  // asked, absent
    for (const auto& e : requests(log, "hub")) {
      CHECK(allowed.count(e["file"].get<std::string>()));
      CHECK(e["auth"] == "Bearer hf_secret");
    }
    auto cdn = requests(log, "cdn");
    CHECK(!cdn.empty());
    for (const auto& e : cdn) {
      CHECK(e["auth"].is_null());
      CHECK("http://" + e["host"].get<std::string>() != hub.endpoint());  // another host
    }
    if (repo == "org/llama-tiny") {
      check_layout(home, repo, {"config.json", "model.safetensors"});
      const std::string weights = read_text(golden(golden_case) / "model.safetensors");
      CHECK(read_text(repo_dir(home, repo) / "blobs" / sha256_of(weights)) == weights);
    } else {
      check_layout(home, repo, {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                "model-00002-of-00002.safetensors"});
      // Both shards were in flight at once.
      CHECK(hub.control("stats")["maxCdnInFlight"].get<int>() >= 2);
    }
    // Missing optional files are recorded as huggingface_hub records them.
    CHECK(fs::exists(repo_dir(home, repo) / ".no_exist" / only_commit(home, repo) / "tokenizer.json"));

    // Online again: one HEAD (config.json at main), nothing downloaded.
    hub.reset();
    r = mobius_cli(hub_env(hub, home), "download -q " + repo);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output == (repo_dir(home, repo) / "snapshots" / only_commit(home, repo)).string() + "\n");
    log = hub.log();
    CHECK(log.size() == 1);
    CHECK(log[0]["method"] == "HEAD");
    hub.reset();

    // Offline, with an endpoint nobody listens on: the cache alone.
    fs::remove_all(t / "out-offline");
    r = mobius_cli("HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1 HF_HOME=" + quote(home.string()),
                   "build -q --model " + repo + " " + quote((t / "out-offline").string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(read_text(t / "out-offline" / "model.onnx.data") == read_text(t / ("local-" + golden_case) / "model.onnx.data"));
    CHECK(hub.log().empty());
  }
}

TEST_CASE("hub: the files a build needs, and only those") {
  TempDir t;
  const fs::path repo = t / "repo";
  copy_dir(golden("llama-tiny"), repo);
  write_text(repo / "tokenizer.json", R"({"version": "1.0", "model": {"type": "BPE"}})");
  write_text(repo / "tokenizer_config.json", R"({"model_max_length": 128})");
  write_text(repo / "generation_config.json", R"({"bos_token_id": 1})");
  write_text(repo / "README.md", "# a model");
  write_text(repo / "other.safetensors", "not needed");
  fs::create_directories(repo / "onnx");
  write_text(repo / "onnx" / "model.onnx", "not needed");
  const fs::path bin_repo = t / "bin-repo";
  fs::create_directories(bin_repo);
  fs::copy(golden("llama-tiny") / "config.json", bin_repo / "config.json");
  write_text(bin_repo / "pytorch_model.bin", "pickled weights");
  write_text(bin_repo / "README.md", "# a model");
  const fs::path no_weights = t / "no-weights";
  fs::create_directories(no_weights);
  fs::copy(golden("llama-tiny") / "config.json", no_weights / "config.json");
  HubServer hub(t.path(), {{"repos", repos({{"org/tok", repo}, {"org/bin", bin_repo}, {"org/cfg-only", no_weights}})}});
  const fs::path home = t / "hf";

  RunResult r = mobius_cli(hub_env(hub, home), "build -q --model org/tok " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  check_layout(home, "org/tok", {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"});
  std::set<std::string> asked;
  for (const auto& e : hub.log()) asked.insert(e["file"].get<std::string>());
  for (const char* never : {"README.md", "other.safetensors", "onnx/model.onnx", "case.json", "reference.safetensors"})
    CHECK_MESSAGE(!asked.count(never), never);
  CHECK(asked.count("vocab.json"));  // asked, absent: skipped
  // The runtime files reach OUT from the snapshot.
  CHECK(read_text(t / "out" / "tokenizer.json") == read_text(repo / "tokenizer.json"));
  CHECK(fs::exists(t / "out" / "generation_config.json"));

  // Without safetensors, pytorch_model.bin; `download` fetches only.
  hub.reset();
  r = mobius_cli(hub_env(hub, home), "download -q org/bin");
  INFO(r.output);
  REQUIRE(r.status == 0);
  check_layout(home, "org/bin", {"config.json", "pytorch_model.bin"});
  std::vector<std::string> weights_asked;
  for (const auto& e : requests(hub.log(), "hub", "HEAD")) {
    std::string f = e["file"];
    if (f.rfind("model", 0) == 0 || f.rfind("pytorch_model", 0) == 0) weights_asked.push_back(f);
  }
  CHECK(weights_asked == std::vector<std::string>{"model.safetensors.index.json", "model.safetensors",
                                                  "pytorch_model.bin.index.json", "pytorch_model.bin"});

  r = mobius_cli(hub_env(hub, home), "download -q org/cfg-only");
  CHECK(r.status == 1);
  CHECK(r.output.find("org/cfg-only has no weights") != std::string::npos);
  // --no-weights needs none.
  r = mobius_cli(hub_env(hub, home), "build -q --no-weights --model org/cfg-only " + quote((t / "out-nw").string()));
  INFO(r.output);
  CHECK(r.status == 0);
}

TEST_CASE("hub: a sentence-transformers repository: modules.json and each module's config; a hostile one is refused") {
  TempDir t;
  const fs::path st_case = fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "golden-encoders" / "st-bert-dense";
  const fs::path repo = t / "repo";
  copy_dir(st_case, repo);
  const fs::path hostile = t / "hostile";
  copy_dir(st_case, hostile);
  write_text(hostile / "modules.json",
             R"([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
                 {"idx": 1, "path": "../../etc", "type": "sentence_transformers.models.Pooling"}])");
  HubServer hub(t.path(), {{"repos", repos({{"org/st", repo}, {"org/hostile", hostile}})}});
  const fs::path home = t / "hf";
  RunResult r = mobius_cli(hub_env(hub, home), "build -q --runtime onnxruntime --model org/st " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  check_layout(home, "org/st", {"config.json", "model.safetensors", "modules.json", "1_Pooling/config.json",
                                "2_Dense/config.json", "2_Dense/model.safetensors", "3_Normalize/config.json",
                                "tokenizer.json", "tokenizer_config.json"});
  CHECK(read_text(t / "out" / "model.onnx").find("sentence_embedding") != std::string::npos);
  hub.reset();
  r = mobius_cli(hub_env(hub, home), "download -q org/hostile");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("modules.json: module 1's path '../../etc' is not a folder name") != std::string::npos);
  for (const auto& e : hub.log()) CHECK(e["file"].get<std::string>().find("etc") == std::string::npos);
}

TEST_CASE("hub: revisions: branch, tag, commit, @REV; refs/ as huggingface_hub writes it") {
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/llama-tiny", golden("llama-tiny")}})},
                           {"renamed", {{"org/old-name", "org/llama-tiny"}}}});
  const fs::path home = t / "hf";
  RunResult r = mobius_cli(hub_env(hub, home), "download -q org/llama-tiny@v1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string commit = only_commit(home, "org/llama-tiny");
  CHECK(read_text(repo_dir(home, "org/llama-tiny") / "refs" / "v1") == commit);
  CHECK_FALSE(fs::exists(repo_dir(home, "org/llama-tiny") / "refs" / "main"));

  // A commit hash needs no ref, and what the snapshot holds is not asked again.
  hub.reset();
  r = mobius_cli(hub_env(hub, home), "download -q org/llama-tiny --revision " + commit);
  REQUIRE(r.status == 0);
  CHECK(r.output == (repo_dir(home, "org/llama-tiny") / "snapshots" / commit).string() + "\n");
  CHECK_FALSE(fs::exists(repo_dir(home, "org/llama-tiny") / "refs" / commit));
  CHECK(hub.log().empty());

  r = mobius_cli(hub_env(hub, home), "build -q --model org/llama-tiny --revision nope " + quote((t / "o").string()));
  CHECK(r.status == 1);
  CHECK(r.output.find("revision 'nope' does not exist") != std::string::npos);
  r = mobius_cli(hub_env(hub, home), "download org/llama-tiny@v1 --revision main");
  CHECK(r.status == 1);
  CHECK(r.output.find("but --revision is 'main'") != std::string::npos);

  // A renamed repository answers a relative redirect, which is followed.
  r = mobius_cli(hub_env(hub, home), "download -q org/old-name");
  INFO(r.output);
  REQUIRE(r.status == 0);
  check_layout(home, "org/old-name", {"config.json", "model.safetensors"});
}

TEST_CASE("hub: a dropped connection resumes with Range; an interrupted file resumes from .incomplete") {
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/llama-tiny", golden("llama-tiny")}})}});
  const fs::path home = t / "hf";
  const std::string weights = read_text(golden("llama-tiny") / "model.safetensors");
  const std::string sha = sha256_of(weights);
  hub.faults({{{"kind", "drop"}, {"server", "cdn"}, {"file", "model.safetensors"}, {"after", 60000}}});
  RunResult r = mobius_cli(hub_env(hub, home), "download -q org/llama-tiny");
  INFO(r.output);
  REQUIRE(r.status == 0);
  auto gets = requests(hub.log(), "cdn", "GET", "model.safetensors");
  REQUIRE(gets.size() == 2);
  CHECK(gets[0]["dropped"] == 60000);
  CHECK(gets[1]["range"] == "bytes=60000-");
  CHECK(gets[1]["status"] == 206);
  CHECK(read_text(repo_dir(home, "org/llama-tiny") / "blobs" / sha) == weights);
  check_layout(home, "org/llama-tiny", {"config.json", "model.safetensors"});

  // A previous process stopped half-way: its .incomplete is where this one starts.
  const fs::path home2 = t / "hf2";
  fs::create_directories(repo_dir(home2, "org/llama-tiny") / "blobs");
  write_text(repo_dir(home2, "org/llama-tiny") / "blobs" / (sha + ".incomplete"), weights.substr(0, 12345));
  hub.reset();
  r = mobius_cli(hub_env(hub, home2), "download -q org/llama-tiny");
  INFO(r.output);
  REQUIRE(r.status == 0);
  gets = requests(hub.log(), "cdn", "GET");
  REQUIRE(gets.size() == 1);
  CHECK(gets[0]["range"] == "bytes=12345-");
  CHECK(read_text(repo_dir(home2, "org/llama-tiny") / "blobs" / sha) == weights);
}

TEST_CASE("hub: a corrupted download is refused and nothing is published") {
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/llama-tiny", golden("llama-tiny")}})}});
  const fs::path home = t / "hf";
  const std::string sha = sha256_of(read_text(golden("llama-tiny") / "model.safetensors"));
  hub.faults({{{"kind", "corrupt"}, {"server", "cdn"}, {"file", "model.safetensors"}, {"times", -1}}});
  RunResult r = mobius_cli(hub_env(hub, home), "build -q --model org/llama-tiny " + quote((t / "out").string()));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("model.safetensors is corrupt: its sha256 is") != std::string::npos);
  CHECK(r.output.find("the hub announced " + sha) != std::string::npos);
  const fs::path rd = repo_dir(home, "org/llama-tiny");
  CHECK_FALSE(fs::exists(rd / "blobs" / sha));
  CHECK_FALSE(fs::exists(rd / "blobs" / (sha + ".incomplete")));
  CHECK_FALSE(any_snapshot_has(home, "org/llama-tiny", "model.safetensors"));
  CHECK_FALSE(fs::exists(rd / "refs" / "main"));
  CHECK_FALSE(fs::exists(t / "out"));
  // Once the bytes are right, the same cache completes.
  hub.faults(nlohmann::json::array());
  r = mobius_cli(hub_env(hub, home), "build -q --model org/llama-tiny " + quote((t / "out").string()));
  INFO(r.output);
  CHECK(r.status == 0);
}

TEST_CASE("hub: 503 is retried after Retry-After; a hub that keeps failing is reported") {
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/llama-tiny", golden("llama-tiny")}})}});
  const fs::path home = t / "hf";
  hub.faults({{{"kind", "status"}, {"server", "hub"}, {"method", "HEAD"}, {"file", "config.json"}, {"status", 503}, {"retryAfter", 1}},
              {{"kind", "status"}, {"server", "cdn"}, {"file", "model.safetensors"}, {"status", 503}, {"retryAfter", 1}}});
  RunResult r = mobius_cli(hub_env(hub, home), "download -q org/llama-tiny");
  INFO(r.output);
  REQUIRE(r.status == 0);
  nlohmann::json log = hub.log();
  INFO(log.dump(1));
  for (const auto& [server, method] : std::vector<std::pair<std::string, std::string>>{{"hub", "HEAD"}, {"cdn", "GET"}}) {
    auto v = requests(log, server, method, server == "hub" ? "config.json" : "model.safetensors");
    REQUIRE(v.size() == 2);
    CHECK(v[0]["status"] == 503);
    CHECK(v[1]["status"] == 200);
    CHECK(v[1]["t"].get<int64_t>() - v[0]["t"].get<int64_t>() >= 950);
  }

  hub.reset();
  hub.faults({{{"kind", "status"}, {"server", "hub"}, {"status", 503}, {"retryAfter", 0}, {"times", -1}}});
  r = mobius_cli(hub_env(hub, t / "hf2"), "download -q org/llama-tiny");
  CHECK(r.status == 1);
  CHECK(r.output.find("answered 503 for config.json") != std::string::npos);
  CHECK(r.output.find("after 5 attempts") != std::string::npos);
  CHECK(hub.log().size() == 5);
}

TEST_CASE("hub: errors say what to do: gated, missing or private repository, missing file, no hub") {
  TempDir t;
  const fs::path no_config = t / "no-config";
  fs::create_directories(no_config);
  fs::copy(golden("llama-tiny") / "model.safetensors", no_config / "model.safetensors");
  const fs::path evil = t / "evil";
  fs::create_directories(evil);
  fs::copy(golden("llama-tiny") / "config.json", evil / "config.json");
  write_text(evil / "model.safetensors.index.json",
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "../../evil.safetensors"}})");
  nlohmann::json rs = repos({{"org/no-config", no_config}, {"org/evil", evil}});
  rs["org/gated"] = {{"dir", golden("llama-tiny").string()}, {"gated", true}};
  rs["org/private"] = {{"dir", golden("llama-tiny").string()}, {"private", true}};
  HubServer hub(t.path(), {{"token", "hf_secret"}, {"repos", rs}});
  const fs::path home = t / "hf";
  auto build = [&](const std::string& env, const std::string& model) {
    fs::remove_all(t / "out");
    return mobius_cli(hub_env(hub, home, env), "build -q --model " + model + " " + quote((t / "out").string()));
  };

  RunResult r = build("", "org/gated");
  CHECK(r.status == 1);
  CHECK(r.output.find("org/gated is a gated model: accept the conditions on the model page (" + hub.endpoint() +
                      "/org/gated), then set HF_TOKEN") != std::string::npos);
  r = build("HF_TOKEN=hf_wrong", "org/gated");
  CHECK(r.status == 1);
  CHECK(r.output.find("the token from HF_TOKEN has no access to it yet") != std::string::npos);
  r = build("HF_TOKEN=hf_secret", "org/gated");
  INFO(r.output);
  CHECK(r.status == 0);
  fs::remove_all(home);
  fs::create_directories(home);
  write_text(home / "token", "hf_secret\n");  // `hf auth login` stores it here
  r = build("", "org/gated");
  INFO(r.output);
  CHECK(r.status == 0);
  for (const auto& e : requests(hub.log(), "cdn")) CHECK(e["auth"].is_null());
  fs::remove(home / "token");

  r = build("", "org/nope");
  CHECK(r.status == 1);
  CHECK(r.output.find("org/nope was not found on " + hub.endpoint() +
                      ": the repository does not exist, or it is private; if it is private, set HF_TOKEN") != std::string::npos);
  r = build("", "org/private");
  CHECK(r.output.find("does not exist, or it is private") != std::string::npos);
  r = build("HF_TOKEN=hf_other", "org/private");
  CHECK(r.output.find("the token from HF_TOKEN cannot read it") != std::string::npos);
  r = build("HF_TOKEN=hf_secret", "org/private");
  CHECK(r.status == 0);

  r = build("", "org/no-config");
  CHECK(r.status == 1);
  CHECK(r.output.find("org/no-config: 'config.json' does not exist in the repository") != std::string::npos);

  hub.reset();
  r = build("", "org/evil");
  CHECK(r.status == 1);
  CHECK(r.output.find("shard '../../evil.safetensors' is not a relative file name") != std::string::npos);
  for (const auto& e : hub.log()) {
    CHECK(e["path"].get<std::string>().find("evil.safetensors") == std::string::npos);
    CHECK(e["file"] != "model-00001-of-00002.safetensors");  // refused before any shard was asked
  }

  r = mobius_cli("HF_ENDPOINT=http://127.0.0.1:1 HF_HOME=" + quote(home.string()),
                 "build -q --model org/llama-tiny " + quote((t / "out").string()));
  CHECK(r.status == 1);
  CHECK(r.output.find("cannot reach the hub at http://127.0.0.1:1") != std::string::npos);
  CHECK(r.output.find("HF_ENDPOINT is 'http://127.0.0.1:1'") != std::string::npos);

  r = mobius_cli(hub_env(hub, home), "build -q --model " + quote((t / "no" / "such" / "folder").string()) + " " +
                                         quote((t / "out").string()));
  CHECK(r.status == 1);
  CHECK(r.output.find("does not exist, and is not a hub id") != std::string::npos);
  r = mobius_cli(hub_env(hub, home), "build -q --model org/name--x " + quote((t / "out").string()));
  CHECK(r.output.find("does not exist, and is not a hub id") != std::string::npos);
  r = mobius_cli(hub_env(hub, home), "build -q --model " + quote(golden("llama-tiny").string()) + " --revision v1 " +
                                         quote((t / "out").string()));
  CHECK(r.output.find("--revision applies to hub ids") != std::string::npos);
}

TEST_CASE("hub: offline: from the cache alone, or an error naming what is missing") {
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/llama-tiny", golden("llama-tiny")},
                                            {"org/rope-sharded", golden("llama3-rope-tied")}})}});
  const fs::path home = t / "hf";
  const std::string offline = "HF_HUB_OFFLINE=1 HF_HOME=" + quote(home.string()) + " HF_ENDPOINT=" + hub.endpoint();
  RunResult r = mobius_cli(offline, "build -q --model org/llama-tiny " + quote((t / "out").string()));
  CHECK(r.status == 1);
  CHECK(r.output.find("org/llama-tiny is not in the cache " + (home / "hub").string() + " and HF_HUB_OFFLINE is set") !=
        std::string::npos);

  REQUIRE(mobius_cli(hub_env(hub, home), "download -q org/rope-sharded").status == 0);
  const std::string commit = only_commit(home, "org/rope-sharded");
  fs::remove(repo_dir(home, "org/rope-sharded") / "snapshots" / commit / "model-00002-of-00002.safetensors");
  hub.reset();
  r = mobius_cli(offline, "build -q --model org/rope-sharded " + quote((t / "out").string()));
  CHECK(r.status == 1);
  CHECK(r.output.find("shard 'model-00002-of-00002.safetensors' of org/rope-sharded is not in the cache") != std::string::npos);
  CHECK(r.output.find("HF_HUB_OFFLINE is set") != std::string::npos);
  r = mobius_cli(offline, "build -q --model org/rope-sharded@v1 " + quote((t / "out").string()));
  CHECK(r.output.find("org/rope-sharded@v1 is not in the cache") != std::string::npos);
  CHECK(hub.log().empty());

  // Online, the missing link is made again from the blob that is still there, without a GET.
  r = mobius_cli(hub_env(hub, home), "build -q --model org/rope-sharded " + quote((t / "out").string()));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(requests(hub.log(), "cdn").empty());
}

TEST_CASE("hub: a cache laid out by huggingface_hub builds offline") {
  // What `hf download org/py-made` leaves: blobs named by ETag, relative links, refs/main.
  TempDir t;
  const fs::path rd = t / "hf" / "hub" / "models--org--py-made";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const std::string weights = read_text(golden("llama-tiny") / "model.safetensors");
  const std::string config_etag = "a9993e364706816aba3e25717850c26c9cd0d89d";
  fs::create_directories(rd / "blobs");
  fs::create_directories(rd / "snapshots" / commit);
  fs::create_directories(rd / "refs");
  write_text(rd / "blobs" / sha256_of(weights), weights);
  fs::copy(golden("llama-tiny") / "config.json", rd / "blobs" / config_etag);
  fs::create_symlink("../../blobs/" + sha256_of(weights), rd / "snapshots" / commit / "model.safetensors");
  fs::create_symlink("../../blobs/" + config_etag, rd / "snapshots" / commit / "config.json");
  write_text(rd / "refs" / "main", commit);
  isolate_env();
  REQUIRE(local_build(golden("llama-tiny"), t / "local").status == 0);
  for (const std::string& model : {std::string("org/py-made"), "org/py-made@" + commit}) {
    CAPTURE(model);
    fs::remove_all(t / "out");
    RunResult r = mobius_cli("HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1 HF_HOME=" + quote((t / "hf").string()),
                             "build -q --model " + model + " " + quote((t / "out").string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(read_text(t / "out" / "model.onnx.data") == read_text(t / "local" / "model.onnx.data"));
  }
  // HF_HUB_CACHE alone points at it too.
  fs::remove_all(t / "out");
  RunResult r = mobius_cli("HF_HUB_OFFLINE=1 HF_HUB_CACHE=" + quote((t / "hf" / "hub").string()) +
                               " HF_HOME=" + quote((t / "elsewhere").string()),
                           "build -q --model org/py-made " + quote((t / "out").string()));
  INFO(r.output);
  CHECK(r.status == 0);
}

TEST_CASE("hub: two builds of the same repository at once both succeed, each blob downloaded once") {
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/rope-sharded", golden("llama3-rope-tied")}})}});
  const fs::path home = t / "hf";
  hub.faults({{{"kind", "delay"}, {"server", "cdn"}, {"ms", 400}, {"times", -1}}});
  std::string cmd;
  for (int i = 0; i < 2; ++i) {
    std::string n = std::to_string(i);
    cmd += "( env " + hub_env(hub, home) + " " + quote(env_or_empty("MOBIUS_CLI")) + " build -q --model org/rope-sharded " +
           quote((t / ("out" + n)).string()) + " > " + quote((t / ("log" + n)).string()) + " 2>&1; echo $? > " +
           quote((t / ("rc" + n)).string()) + " ) & ";
  }
  RunResult r = run(cmd + "wait");
  for (int i = 0; i < 2; ++i) {
    std::string n = std::to_string(i);
    INFO(read_text(t / ("log" + n)));
    CHECK(read_text(t / ("rc" + n)) == "0\n");
  }
  CHECK(read_text(t / "out0" / "model.onnx.data") == read_text(t / "out1" / "model.onnx.data"));
  std::map<std::string, int> gets;
  for (const auto& e : requests(hub.log(), "cdn", "GET")) gets[e["file"]]++;
  CHECK(gets == std::map<std::string, int>{{"model-00001-of-00002.safetensors", 1}, {"model-00002-of-00002.safetensors", 1}});
  check_layout(home, "org/rope-sharded", {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors"});
  size_t blobs = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(repo_dir(home, "org/rope-sharded") / "blobs")) ++blobs;
  CHECK(blobs == 4);
  CHECK(fs::exists(home / "hub" / ".locks" / "models--org--rope-sharded"));
}

TEST_CASE("hub: a write that fails (disk full, file too large) publishes nothing; the next run resumes") {
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/llama-tiny", golden("llama-tiny")}})}});
  const fs::path home = t / "hf";
  const std::string weights = read_text(golden("llama-tiny") / "model.safetensors");
  const std::string sha = sha256_of(weights);
  // A file size limit fails the write (EFBIG, SIGXFSZ ignored) as a full disk does (ENOSPC).
  RunResult r = run("trap '' XFSZ; ulimit -f 100; env " + hub_env(hub, home) + " " +
                    quote(env_or_empty("MOBIUS_CLI")) + " download -q org/llama-tiny");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("cannot write") != std::string::npos);
  CHECK(r.output.find("resumes on the next run") != std::string::npos);
  const fs::path rd = repo_dir(home, "org/llama-tiny");
  CHECK_FALSE(fs::exists(rd / "blobs" / sha));
  CHECK_FALSE(any_snapshot_has(home, "org/llama-tiny", "model.safetensors"));
  CHECK_FALSE(fs::exists(rd / "refs" / "main"));
  REQUIRE(fs::exists(rd / "blobs" / (sha + ".incomplete")));
  const uintmax_t partial = fs::file_size(rd / "blobs" / (sha + ".incomplete"));
  CHECK(partial > 0);
  CHECK(partial < weights.size());

  hub.reset();
  r = mobius_cli(hub_env(hub, home), "download -q org/llama-tiny");
  INFO(r.output);
  REQUIRE(r.status == 0);
  auto gets = requests(hub.log(), "cdn", "GET");
  REQUIRE(gets.size() == 1);
  CHECK(gets[0]["range"] == "bytes=" + std::to_string(partial) + "-");
  CHECK(read_text(rd / "blobs" / sha) == weights);
  check_layout(home, "org/llama-tiny", {"config.json", "model.safetensors"});
}

TEST_CASE("hub: one progress bar on a terminal, none with --quiet") {
  if (run("command -v script").status != 0) return;  // util-linux's script gives the run a terminal
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/rope-sharded", golden("llama3-rope-tied")}})}});
  auto on_tty = [&](const fs::path& home, const std::string& args) {
    return run("env " + hub_env(hub, home) + " script -qec " +
               quote(quote(env_or_empty("MOBIUS_CLI")) + " " + args) + " /dev/null");
  };
  RunResult r = on_tty(t / "hf", "download org/rope-sharded");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("download [") != std::string::npos);
  CHECK(r.output.find("3/3 files") != std::string::npos);  // the two shards and config.json; the index came first
  CHECK(r.output.find("/s  ") != std::string::npos);
  r = on_tty(t / "hf2", "download -q org/rope-sharded");
  CHECK(r.status == 0);
  CHECK(r.output.find("download [") == std::string::npos);
}

TEST_CASE("hub: a diffusers pipeline: model_index.json, each component's config and weights, the known small files") {
  TempDir t;
  const fs::path src = sharded_pipeline_repo(t / "sd-repo");
  HubServer hub(t.path(), {{"repos", repos({{"org/sd", src}})}});
  const fs::path home = t / "hf";
  RunResult r = mobius_cli(hub_env(hub, home), "download -q org/sd");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string commit = only_commit(home, "org/sd");
  const fs::path snap = repo_dir(home, "org/sd") / "snapshots" / commit;
  // `download` prints the snapshot folder, which is a pipeline folder the build takes.
  CHECK(r.output == snap.string() + "\n");
  check_layout(home, "org/sd", sharded_pipeline_files(true));
  for (const std::string& f : sharded_pipeline_files(true)) CHECK(read_text(snap / f) == read_text(src / f));
  CHECK_FALSE(fs::exists(snap / "custom"));  // no file of it has a known name: it stays empty
  CHECK_FALSE(fs::exists(snap / "config.json"));

  nlohmann::json log = hub.log();
  INFO(log.dump(1));
  std::map<std::string, int> heads;
  for (const auto& e : requests(log, "hub")) {
    const std::string f = e["file"];
    if (e["method"] == "HEAD")
      heads[f]++;
    else  // small files come from the hub itself, weights from the CDN
      CHECK_MESSAGE(!f.ends_with(".safetensors"), f);
  }
  for (const auto& [f, n] : heads) CHECK_MESSAGE(n == 1, f);
  CHECK(heads.count("config.json"));
  CHECK(heads.count("model_index.json"));
  for (const auto& [f, n] : heads) {
    CAPTURE(f);
    // Nothing of an absent ([null, null]) component, of a folder the index does not list, or of
    // a lower-ranked weight format once one is found.
    CHECK(f.rfind("safety_checker/", 0) != 0);
    CHECK(f.rfind("extra/", 0) != 0);
    CHECK(f != "README.md");
    CHECK(f.find(".bin") == std::string::npos);
    CHECK(f.find("fp16") == std::string::npos);
  }
  // A model component's weights are looked for in order: the first name present wins.
  std::vector<std::string> te_weights;
  for (const auto& e : requests(log, "hub", "HEAD")) {
    const std::string f = e["file"];
    if (f.rfind("text_encoder/", 0) == 0 && f != "text_encoder/config.json") te_weights.push_back(f);
  }
  CHECK(te_weights == std::vector<std::string>{"text_encoder/diffusion_pytorch_model.safetensors.index.json",
                                               "text_encoder/diffusion_pytorch_model.safetensors",
                                               "text_encoder/pytorch_model.safetensors.index.json",
                                               "text_encoder/pytorch_model.safetensors",
                                               "text_encoder/model.safetensors.index.json",
                                               "text_encoder/model.safetensors"});
  // The tokenizer and scheduler folders are probed for their known files only, never as models'.
  CHECK(heads.count("tokenizer/config.json"));
  CHECK(heads.count("tokenizer/vocab.json"));
  CHECK(heads.count("custom/tokenizer.json"));
  CHECK_FALSE(heads.count("tokenizer/model.safetensors"));
  std::map<std::string, int> gets;
  for (const auto& e : requests(log, "cdn", "GET")) gets[e["file"]]++;
  CHECK(gets == std::map<std::string, int>{{"text_encoder/model.safetensors", 1},
                                           {"unet/diffusion_pytorch_model-00001-of-00002.safetensors", 1},
                                           {"unet/diffusion_pytorch_model-00002-of-00002.safetensors", 1},
                                           {"vae/diffusion_pytorch_model.safetensors", 1}});
  // Absent files are recorded as huggingface_hub records them, under their component's folder.
  const fs::path no_exist = repo_dir(home, "org/sd") / ".no_exist" / commit;
  for (const char* f : {"config.json", "tokenizer/config.json", "scheduler/config.json", "custom/config.json",
                        "vae/diffusion_pytorch_model.safetensors.index.json", "tokenizer/tokenizer.json"})
    CHECK_MESSAGE(fs::exists(no_exist / f), f);

  // Again: two HEADs (config.json, then model_index.json at main), everything else cached or
  // known to be absent.
  hub.reset();
  r = mobius_cli(hub_env(hub, home), "download -q org/sd");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output == snap.string() + "\n");
  log = hub.log();
  CHECK(log.size() == 2);
  // At the commit itself, not even those.
  hub.reset();
  r = mobius_cli(hub_env(hub, home), "download -q org/sd@" + commit);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output == snap.string() + "\n");
  CHECK(hub.log().empty());

  // Offline, with an endpoint nobody listens on: the snapshot, from the cache alone.
  const std::string offline = "HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1 HF_HOME=" + quote(home.string());
  r = mobius_cli(offline, "download -q org/sd");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output == snap.string() + "\n");

  // Offline, what is missing is named: a shard, a component's weights, a whole component, the index.
  struct Gap {
    std::vector<std::string> remove;
    std::string message;
  };
  for (const Gap& g : std::vector<Gap>{
           {{"unet/diffusion_pytorch_model-00002-of-00002.safetensors"},
            "shard 'unet/diffusion_pytorch_model-00002-of-00002.safetensors' of org/sd is not in the cache"},
           {{"text_encoder/model.safetensors"}, "the weights of component 'text_encoder' of org/sd ("},
           {{"vae"}, "component 'vae' of org/sd is not in the cache (no vae/config.json"},
           {{"model_index.json"}, "config.json (or model_index.json, for a diffusers pipeline) of org/sd is not in the cache"}}) {
    CAPTURE(g.message);
    for (const auto& f : g.remove) fs::remove_all(snap / f);
    r = mobius_cli(offline, "download -q org/sd");
    CHECK(r.status == 1);
    CHECK(r.output.find(g.message) != std::string::npos);
    CHECK(r.output.find("HF_HUB_OFFLINE is set") != std::string::npos);
    // Online, the links are made again from the blobs that are still there, without a GET.
    hub.reset();
    r = mobius_cli(hub_env(hub, home), "download -q org/sd");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(requests(hub.log(), "cdn").empty());
  }
  check_layout(home, "org/sd", sharded_pipeline_files(true));
}

TEST_CASE("hub: a pipeline with --no-weights: configs, tokenizer and scheduler files, no weights") {
  TempDir t;
  const fs::path src = sharded_pipeline_repo(t / "sd-repo");
  HubServer hub(t.path(), {{"repos", repos({{"org/sd", src}})}});
  const fs::path home = t / "hf";
  const hub::Config cfg = hub_config(hub, home);
  HubOptions opts;
  opts.weights = false;
  opts.quiet = true;
  const ModelSource m = hub::online_snapshot(cfg, "org/sd", "main", opts);
  CHECK(m.repo_id == "org/sd");
  CHECK(m.commit == only_commit(home, "org/sd"));
  CHECK(m.dir == repo_dir(home, "org/sd") / "snapshots" / m.commit);
  check_layout(home, "org/sd", sharded_pipeline_files(false));
  nlohmann::json log = hub.log();
  INFO(log.dump(1));
  CHECK(requests(log, "cdn").empty());
  for (const auto& e : requests(log, "hub")) {
    const std::string f = e["file"];
    CAPTURE(f);
    CHECK(f.find(".safetensors") == std::string::npos);
    CHECK(f.find(".bin") == std::string::npos);
  }
  // Offline: enough without weights; with them, the first component lacking its weights is named.
  CHECK(hub::offline_snapshot(cfg, "org/sd", "main", false).dir == m.dir);
  CHECK_THROWS_WITH_AS(hub::offline_snapshot(cfg, "org/sd", "main", true),
                       doctest::Contains("the weights of component 'text_encoder' of org/sd"), Error);
  // The build takes the snapshot as a pipeline: every graph, with zeros for weights.
  RunResult r = mobius_cli(hub_env(hub, home), "build -q --no-weights --model org/sd " + quote((t / "out").string()));
  INFO(r.output);
  CHECK(r.status == 0);
  for (const char* g : {"text_encoder", "unet", "vae_encoder", "vae_decoder"})
    CHECK_MESSAGE(fs::exists(t / "out" / g / "model.onnx"), g);
  CHECK(requests(hub.log(), "cdn").empty());
}

TEST_CASE("hub: a hostile model_index.json or component index is refused before anything is asked for it") {
  TempDir t;
  nlohmann::json rs = nlohmann::json::object();
  const std::vector<std::string> bad_names = {"..", ".", ".git", "unet/../x", "/etc", "a\\b", "sub/unet",
                                              std::string("x\x1b[2J"), std::string(200, 'u')};
  for (size_t i = 0; i < bad_names.size(); ++i) {
    const fs::path d = t / ("bad" + std::to_string(i));
    fs::create_directories(d / "unet");
    fs::copy(sd_golden("sd15-tiny") / "unet" / "config.json", d / "unet" / "config.json");
    write_text(d / "model_index.json",
               nlohmann::json({{"_class_name", "StableDiffusionPipeline"},
                               {"unet", {"diffusers", "UNet2DConditionModel"}},
                               {bad_names[i], {"diffusers", "UNet2DConditionModel"}}})
                   .dump());
    rs["org/bad" + std::to_string(i)] = {{"dir", d.string()}};
  }
  // A component whose index names a shard outside the component's folder.
  const fs::path escape = t / "escape";
  copy_dir(sd_golden("sd15-tiny"), escape);
  write_text(escape / "unet" / "diffusion_pytorch_model.safetensors.index.json",
             R"({"weight_map": {"a": "diffusion_pytorch_model-00001-of-00002.safetensors", "b": "../text_encoder/model.safetensors"}})");
  rs["org/escape"] = {{"dir", escape.string()}};
  const fs::path shape = t / "shape";
  fs::create_directories(shape);
  write_text(shape / "model_index.json", R"({"_class_name": "X", "unet": ["diffusers"]})");
  rs["org/shape"] = {{"dir", shape.string()}};
  const fs::path neither = t / "neither";
  fs::create_directories(neither);
  write_text(neither / "README.md", "# nothing to build");
  rs["org/neither"] = {{"dir", neither.string()}};
  HubServer hub(t.path(), {{"repos", rs}});
  const fs::path home = t / "hf";

  for (size_t i = 0; i < bad_names.size(); ++i) {
    const std::string repo = "org/bad" + std::to_string(i);
    CAPTURE(repo);
    hub.reset();
    RunResult r = mobius_cli(hub_env(hub, home), "build -q --model " + repo + " " + quote((t / "out").string()));
    CHECK(r.status == 1);
    const std::string commit = only_commit(home, repo);
    CHECK(r.output.find("[hub] " + repo + " (commit " + commit + "): model_index.json: component " +
                        quote_name(bad_names[i]) + " is not a folder name") != std::string::npos);
    CHECK(r.output.find("nothing was requested for it") != std::string::npos);
    CHECK(r.output.find('\x1b') == std::string::npos);
    // Nothing of any component was asked, not even of the good one: the index is read whole first.
    for (const auto& e : hub.log()) {
      CHECK((e["file"] == "config.json" || e["file"] == "model_index.json"));
    }
    CHECK_FALSE(fs::exists(repo_dir(home, repo) / "refs" / "main"));
    CHECK_FALSE(fs::exists(t / "out"));
    // Offline, at the commit the index came from, the same refusal.
    r = mobius_cli("HF_HUB_OFFLINE=1 HF_HOME=" + quote(home.string()), "download -q " + repo + "@" + commit);
    CHECK(r.status == 1);
    CHECK(r.output.find("is not a folder name") != std::string::npos);
  }

  hub.reset();
  RunResult r = mobius_cli(hub_env(hub, home), "download -q org/escape");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("[hub] org/escape (commit " + only_commit(home, "org/escape") +
                      "): unet/diffusion_pytorch_model.safetensors.index.json: shard "
                      "'../text_encoder/model.safetensors' is not a relative file name inside the "
                      "component folder 'unet/'") != std::string::npos);
  for (const auto& e : hub.log()) {
    const std::string f = e["file"].is_string() ? e["file"].get<std::string>() : "";
    CHECK(f.find("00001-of-00002") == std::string::npos);  // refused before any shard was asked
    CHECK(e["path"].get<std::string>().find("..") == std::string::npos);
  }
  CHECK_FALSE(fs::exists(repo_dir(home, "org/escape") / "refs" / "main"));

  r = mobius_cli(hub_env(hub, home), "download -q org/shape");
  CHECK(r.status == 1);
  CHECK(r.output.find("model_index.json: component 'unet': expected [library, class], got 1 entries") !=
        std::string::npos);

  // Neither config.json nor model_index.json: the language model's message, with the other name.
  r = mobius_cli(hub_env(hub, home), "download -q org/neither");
  CHECK(r.status == 1);
  CHECK(r.output.find("org/neither: 'config.json' does not exist in the repository, nor does "
                      "'model_index.json' (a diffusers pipeline's index)") != std::string::npos);
  CHECK(hub::is_component_name("text_encoder_2"));
  CHECK(hub::is_component_name("unet.v2"));
  CHECK_FALSE(hub::is_component_name(""));
  CHECK_FALSE(hub::is_component_name(".unet"));
}

TEST_CASE("hub: `mobius build --model org/sd` of a diffusers pipeline equals the build from the folder; offline too") {
  TempDir t;
  const fs::path sd = sd_golden("sd15-tiny");
  HubServer hub(t.path(), {{"repos", repos({{"org/sd", sd}})}});
  const fs::path home = t / "hf";
  RunResult r = mobius_cli(hub_env(hub, home), "build --model org/sd " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(local_build(sd, t / "local").status == 0);
  for (const char* g : {"text_encoder", "unet", "vae_encoder", "vae_decoder"}) {
    CAPTURE(g);
    REQUIRE(fs::exists(t / "out" / g / "model.onnx"));
    CHECK(read_text(t / "out" / g / "model.onnx") == read_text(t / "local" / g / "model.onnx"));
    CHECK(read_text(t / "out" / g / "model.onnx.data") == read_text(t / "local" / g / "model.onnx.data"));
  }
  for (const char* f : {"model_index.json", "tokenizer/vocab.json", "tokenizer/merges.txt",
                        "tokenizer/tokenizer_config.json", "tokenizer/special_tokens_map.json",
                        "scheduler/scheduler_config.json"})
    CHECK_MESSAGE(read_text(t / "out" / f) == read_text(sd / f), f);
  nlohmann::json prov = nlohmann::json::parse(read_text(t / "out" / "mobius_provenance.json"));
  CHECK(prov["pipeline"] == "StableDiffusionPipeline");
  CHECK(prov["source"]["repo"] == "org/sd");
  CHECK(prov["source"]["revision"] == "main");
  CHECK(prov["source"]["commit"] == only_commit(home, "org/sd"));
  CHECK(prov["skipped"].empty());
  // Only what the build needs was fetched: not the golden case's own files.
  std::set<std::string> asked;
  for (const auto& e : hub.log()) asked.insert(e["file"].get<std::string>());
  CHECK_FALSE(asked.count("case.json"));
  CHECK_FALSE(asked.count("reference.safetensors"));
  check_layout(home, "org/sd",
               {"model_index.json", "text_encoder/config.json", "text_encoder/model.safetensors", "unet/config.json",
                "unet/diffusion_pytorch_model.safetensors", "vae/config.json", "vae/diffusion_pytorch_model.safetensors",
                "scheduler/scheduler_config.json", "tokenizer/merges.txt", "tokenizer/special_tokens_map.json",
                "tokenizer/tokenizer_config.json", "tokenizer/vocab.json"});

  // Offline, with an endpoint nobody listens on: the same build from the cache alone.
  hub.reset();
  r = mobius_cli("HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1 HF_HOME=" + quote(home.string()),
                 "build -q --model org/sd " + quote((t / "out-offline").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (const char* g : {"text_encoder", "unet", "vae_encoder", "vae_decoder"})
    CHECK(read_text(t / "out-offline" / g / "model.onnx.data") == read_text(t / "local" / g / "model.onnx.data"));
  CHECK(hub.log().empty());
}
