// test_hub_hostile.cpp - a hostile hub (tests/hub_server.mjs with the misbehaviours of
// tests/hub_hostile.mjs), one misbehaviour per repository. Each refusal: a non-zero exit, one
// line naming the file and the reason, no control character printed, OUT as it was, and nothing
// in the cache a later offline build would trust (every blob hashes to its name), so that an
// offline rebuild refuses or builds the right model. A silent or trickling hub fails within
// the documented bounds. Nothing here reaches an address other than loopback.
#include <doctest/doctest.h>

#include <chrono>

#include "hub_util.hpp"
#include "util/untrusted.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

// A llama-tiny repository with a tokenizer.json, as the hostile hub serves it.
fs::path tiny_repo(const fs::path& dir) {
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(golden("llama-tiny") / f, dir / f);
  write_text(dir / "tokenizer.json", R"({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}})");
  return dir;
}

std::string git_sha1_of(const std::string& bytes) {
  GitBlobSha1 h(bytes.size());
  h.update(bytes.data(), bytes.size());
  return h.hex_digest();
}

// Every blob of the cache is what its name says, and no download left an empty .incomplete.
void check_cache_trustworthy(const fs::path& home) {
  std::error_code ec;
  if (!fs::exists(home / "hub", ec)) return;
  for (const auto& repo : fs::directory_iterator(home / "hub")) {
    const fs::path blobs = repo.path() / "blobs";
    if (!fs::is_directory(blobs)) continue;
    for (const auto& e : fs::directory_iterator(blobs)) {
      const std::string name = e.path().filename().string();
      CAPTURE(e.path());
      REQUIRE(e.is_regular_file());
      const std::string bytes = read_text(e.path());
      if (e.path().extension() == ".incomplete") {
        CHECK(!bytes.empty());  // a resumable download, never an empty one
        CHECK((is_sha256_hex(e.path().stem().string()) || is_sha1_hex(e.path().stem().string())));
        continue;
      }
      if (is_sha256_hex(name))
        CHECK(sha256_of(bytes) == name);
      else if (is_sha1_hex(name))
        CHECK(git_sha1_of(bytes) == name);
      else
        FAIL("a blob named by something other than a digest");
    }
  }
}

// OUT holds an earlier model: after a refusal it must be exactly as it was.
void earlier_model(const fs::path& out) {
  fs::create_directories(out);
  write_text(out / "mobius_provenance.json", "{\"earlier\": true}\n");
  write_text(out / "model.onnx", "earlier model");
}
void check_untouched(const fs::path& out) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"mobius_provenance.json", "model.onnx"});
  CHECK(read_text(out / "model.onnx") == "earlier model");
  for (const auto& e : fs::directory_iterator(out.parent_path()))
    CHECK_MESSAGE(e.path().filename().string().find("mobius-tmp") == std::string::npos, e.path());
}

// One line (the error), naming `file` and saying `reason`, without control characters.
void check_refusal(const RunResult& r, const std::string& file, const std::string& reason) {
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK(r.output.find("[hub]") != std::string::npos);
  CHECK(r.output.find(file) != std::string::npos);
  CHECK(r.output.find(reason) != std::string::npos);
  for (unsigned char c : r.output) CHECK_MESSAGE((c == '\n' || (c >= 0x20 && c != 0x7f)), int(c));
}

struct Hostile {
  const char* kind;
  const char* file;    // the file the message names
  const char* reason;  // what it says about it
  const char* env;     // extra settings of the run
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("hub hostile: every misbehaviour is refused cleanly; the cache holds nothing untrue; offline rebuilds are right or refused") {
  const std::vector<Hostile> cases = {
      {"etag-incomplete", "tokenizer.json", "that is not a git blob sha1", ""},
      {"etag-sha256", "tokenizer.json", "that is not a git blob sha1", ""},
      {"etag-lfs-sha1", "model.safetensors", "that is not a sha256", ""},
      {"etag-wrong", "config.json", "is corrupt: its git blob sha1 is", ""},
      {"config-bytes", "config.json", "is corrupt: its git blob sha1 is", ""},
      {"short-body", "config.json", "config.json", ""},
      {"short-head", "config.json", "and its metadata announced", ""},
      {"gzip", "config.json", "Content-Encoding 'gzip' although only identity was accepted", ""},
      {"huge-declared", "config.json", "announced config.json at 10737418240 bytes, over the 16.0 MiB", ""},
      {"huge-stream", "config.json", "is larger than the 16.0 MiB a config.json may have", ""},
      {"trickle-headers", "config.json", "no complete answer within 2 s (HF_HUB_ETAG_TIMEOUT is 2 s)", "HF_HUB_ETAG_TIMEOUT=2"},
      {"trickle-body", "config.json", "below the minimum of 1024 bytes/s (HF_HUB_DOWNLOAD_TIMEOUT is 2 s", "HF_HUB_DOWNLOAD_TIMEOUT=2"},
      {"trickle-lfs", "model.safetensors", "below the minimum of 1024 bytes/s", "HF_HUB_DOWNLOAD_TIMEOUT=2"},
      {"redirect-scheme", "model.safetensors", "to an unusable location 'file:///etc/passwd'", ""},
      {"redirect-loop", "model.safetensors", "too many times", ""},
      {"huge-size", "model.safetensors", "and its metadata announced 4611686018427387904", ""},
      {"spliced-resume", "model.safetensors", "org/spliced-resume", ""},  // refused, or given up after its drops
      {"escape-message", "config.json", "answered 418 for config.json", ""},
      {"huge-header", "config.json", "config.json", ""},
  };
  TempDir t;
  nlohmann::json rs = nlohmann::json::object();
  for (const Hostile& h : cases)
    rs[std::string("org/") + h.kind] = {{"dir", tiny_repo(t / "repos" / h.kind).string()}, {"hostile", {{"kind", h.kind}}}};
  HubServer hub(t.path(), {{"repos", rs}});
  REQUIRE(local_build(tiny_repo(t / "local-src"), t / "local").status == 0);
  const std::string expected = read_text(t / "local" / "model.onnx.data");
  for (const Hostile& h : cases) {
    CAPTURE(h.kind);
    const fs::path home = t / "hf" / h.kind;
    const fs::path out = t / "out" / h.kind;
    earlier_model(out);
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = mobius_cli(hub_env(hub, home, h.env),
                             "build -q --model org/" + std::string(h.kind) + " " + quote(out.string()));
    const double took = seconds_since(t0);
    MESSAGE(h.kind << " (" << took << " s): " << r.output);
    check_refusal(r, h.file, h.reason);
    check_untouched(out);
    check_cache_trustworthy(home);
    CHECK(took < 60);
    // Offline, from what the failed run left: the right model or a refusal.
    fs::remove_all(t / "offline");
    RunResult off = mobius_cli("HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1 HF_HOME=" + quote(home.string()),
                               "build -q --model org/" + std::string(h.kind) + " " + quote((t / "offline").string()));
    INFO(off.output);
    if (off.status == 0) CHECK(read_text(t / "offline" / "model.onnx.data") == expected);
  }
  // The endless stream stopped at the limit: a few MiB in flight at most, never gigabytes.
  for (const auto& e : requests(hub.log(), "hub", "GET", "config.json"))
    if (e.contains("sent")) CHECK(e["sent"].get<double>() < 64.0 * (1 << 20));
  // Nothing was downloaded of what was announced too large.
  for (const auto& e : hub.log())
    if (e["path"].get<std::string>().find("/huge-declared/") != std::string::npos) CHECK(e["method"] == "HEAD");
}

TEST_CASE("hub hostile: a silent hub fails within the documented bound with the default timeouts") {
  TempDir t;
  HubServer hub(t.path(), {{"repos", {{"org/silent", {{"dir", tiny_repo(t / "repo").string()},
                                                      {"hostile", {{"kind", "silent"}}}}}}}});
  const fs::path out = t / "out";
  earlier_model(out);
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = mobius_cli(hub_env(hub, t / "hf"), "build -q --model org/silent " + quote(out.string()));
  const double took = seconds_since(t0);
  check_refusal(r, "config.json", "no complete answer within 10 s (HF_HUB_ETAG_TIMEOUT is 10 s)");
  check_untouched(out);
  // Two attempts of 10 s and a 1 s wait between them: 21 s, well under a minute.
  CHECK(took >= 20);
  CHECK(took < 30);
  CHECK(requests(hub.log(), "hub", "HEAD", "config.json").size() == 2);
}

TEST_CASE("hub hostile: what the protocol allows still builds byte for byte: 429 then success, a bad timeout setting is refused") {
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/tiny", tiny_repo(t / "repo")}})}});
  REQUIRE(local_build(t / "repo", t / "local").status == 0);
  hub.faults({{{"kind", "status"}, {"server", "hub"}, {"method", "HEAD"}, {"file", "config.json"}, {"status", 429}, {"retryAfter", 1}},
              {{"kind", "status"}, {"server", "cdn"}, {"file", "model.safetensors"}, {"status", 429}, {"retryAfter", 1}}});
  RunResult r = mobius_cli(hub_env(hub, t / "hf"), "build -q --model org/tiny " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(read_text(t / "out" / "model.onnx.data") == read_text(t / "local" / "model.onnx.data"));
  check_cache_trustworthy(t / "hf");

  for (const char* bad : {"0", "-3", "ten", "1e9"}) {
    RunResult b = mobius_cli(hub_env(hub, t / "hf2", std::string("HF_HUB_DOWNLOAD_TIMEOUT=") + bad),
                             "download -q org/tiny");
    INFO(b.output);
    CHECK(b.status != 0);
    CHECK(b.output.find("HF_HUB_DOWNLOAD_TIMEOUT is '" + std::string(bad) + "': expected a positive number of seconds") !=
          std::string::npos);
  }
}

TEST_CASE("hub hostile: no empty .incomplete is left for downloads that never started") {
  // The hub refuses the weights' download outright: the run fails before any byte came.
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/tiny", tiny_repo(t / "repo")}})}});
  hub.faults({{{"kind", "status"}, {"server", "cdn"}, {"file", "model.safetensors"}, {"status", 403}, {"times", -1}}});
  RunResult r = mobius_cli(hub_env(hub, t / "hf"), "download -q org/tiny");
  INFO(r.output);
  CHECK(r.status != 0);
  for (const auto& e : fs::directory_iterator(repo_dir(t / "hf", "org/tiny") / "blobs"))
    CHECK_MESSAGE(e.path().extension() != ".incomplete", e.path());
  check_cache_trustworthy(t / "hf");
}

TEST_CASE("hub hostile: address spaces in every spelling, as private network access classifies them") {
  using net::AddressSpace;
  const std::vector<std::pair<const char*, AddressSpace>> cases = {
      {"127.0.0.1", AddressSpace::Local},        {"127.1", AddressSpace::Local},
      {"2130706433", AddressSpace::Local},       {"0x7f000001", AddressSpace::Local},
      {"0177.0.0.1", AddressSpace::Local},       {"0x7f.1", AddressSpace::Local},
      {"0.0.0.0", AddressSpace::Local},          {"0", AddressSpace::Local},
      {"[::1]", AddressSpace::Local},            {"::", AddressSpace::Local},
      {"[::ffff:127.0.0.1]", AddressSpace::Local}, {"::ffff:7f00:1", AddressSpace::Local},
      {"10.1.2.3", AddressSpace::Private},       {"012.1.2.3", AddressSpace::Private},
      {"167772161", AddressSpace::Private},      {"172.16.0.1", AddressSpace::Private},
      {"172.31.255.255", AddressSpace::Private}, {"192.168.1.1", AddressSpace::Private},
      {"169.254.169.254", AddressSpace::Private}, {"0xa9fea9fe", AddressSpace::Private},
      {"100.64.0.1", AddressSpace::Private},     {"[fd00::1]", AddressSpace::Private},
      {"fc00::", AddressSpace::Private},         {"[fe80::1%25eth0]", AddressSpace::Private},
      {"fe80::1%eth0", AddressSpace::Private},   {"[::ffff:10.0.0.1]", AddressSpace::Private},
      {"[::ffff:a9fe:a9fe]", AddressSpace::Private}, {"64:ff9b::10.0.0.1", AddressSpace::Private},
      {"2002:c0a8:0101::1", AddressSpace::Private}, {"::10.0.0.1", AddressSpace::Private},
      {"8.8.8.8", AddressSpace::Public},         {"172.32.0.1", AddressSpace::Public},
      {"172.15.255.255", AddressSpace::Public},  {"203.0.113.10", AddressSpace::Public},
      {"[2606:4700::1]", AddressSpace::Public},  {"[::ffff:8.8.8.8]", AddressSpace::Public},
      {"11.0.0.1", AddressSpace::Public},        {"134744072", AddressSpace::Public},
  };
  for (const auto& [host, space] : cases) {
    CAPTURE(host);
    std::optional<AddressSpace> s = net::literal_space(host);
    REQUIRE(s.has_value());
    CHECK(*s == space);
  }
  for (const char* name : {"huggingface.co", "cdn-lfs.hf.co", "10.0.0.1.nip.io", "256.1.1.1", "1.2.3.4.5", "09.1.1.1", ""})
    CHECK_MESSAGE(!net::literal_space(name), name);
  CHECK(net::parse_ipv4("0x") == 0u);  // inet_aton's reading
  CHECK(net::parse_ipv4("1.2.65535") == 0x0102ffffu);
  CHECK(!net::parse_ipv4("1.2.65536"));
  CHECK(!net::parse_ipv4("1.256.3.4"));

  // The rule: no step towards more private addresses, no https to http.
  const auto pub = AddressSpace::Public;
  CHECK(!net::refuse_redirect("https://hub.test/x", "https://8.8.8.8/blob", pub));
  CHECK(net::refuse_redirect("https://hub.test/x", "http://8.8.8.8/blob", pub)->find("leaves https for http") != std::string::npos);
  CHECK(net::refuse_redirect("http://8.8.4.4/x", "http://127.0.0.1:8080/", pub)->find("loopback address") != std::string::npos);
  CHECK(net::refuse_redirect("http://8.8.4.4/x", "http://[::ffff:192.168.0.1]/", pub));
  CHECK(net::refuse_redirect("http://8.8.4.4/x", "http://localhost/", pub));  // a name that resolves to loopback
  CHECK(!net::refuse_redirect("http://127.0.0.1/x", "http://10.0.0.1/", AddressSpace::Local));
  CHECK(!net::refuse_redirect("http://127.0.0.1/x", "http://127.0.0.2/", AddressSpace::Local));
  CHECK(!net::refuse_redirect("http://10.0.0.1/x", "http://192.168.0.1/", AddressSpace::Private));
  CHECK(net::refuse_redirect("http://10.0.0.1/x", "http://127.0.0.1/", AddressSpace::Private));
}

TEST_CASE("hub hostile: a connection to an address more private than allowed is refused at the socket") {
  // A name can resolve elsewhere when the connection is made than when it was checked: the
  // address connected to is checked too. Here the server is on loopback and the request may
  // reach public addresses only.
  TempDir t;
  HubServer hub(t.path(), {{"repos", nlohmann::json::object()}});
  http::Client c;
  http::Request req;
  req.url = hub.endpoint() + "/_control/log";
  req.max_space = net::AddressSpace::Public;
  try {
    c.perform(req);
    FAIL("connected");
  } catch (const http::TransportError& e) {
    CHECK(e.kind() == http::TransportError::Kind::Refused);
    CHECK(std::string(e.what()).find("127.0.0.1 (a loopback address)") != std::string::npos);
  }
  req.max_space = net::AddressSpace::Local;
  CHECK(c.perform(req).status == 200);
}

TEST_CASE("hub hostile: the provenance takes a hub file's sha256 only as mobius verified it") {
  // The download checks every LFS blob against its sha256 and records what it verified in the
  // digest cache; the build's provenance takes it from there ("digest-cache"). A blob mobius did
  // not verify (put in the cache by anything else) is hashed by the build ("computed").
  TempDir t;
  HubServer hub(t.path(), {{"repos", repos({{"org/tiny", tiny_repo(t / "repo")}})}});
  const std::string cache_env = "MOBIUS_CACHE_DIR=" + quote((t / "digests").string());
  RunResult r = mobius_cli(hub_env(hub, t / "hf", cache_env), "build -q --model org/tiny " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  auto source_of = [&](const fs::path& out, const std::string& name) {
    const nlohmann::json prov = nlohmann::json::parse(read_text(out / "mobius_provenance.json"));
    for (const auto& f : prov["files"])
      if (f["name"] == name) {
        CHECK(f["sha256"] == sha256_of(read_text(t / "repo" / name)));
        return f["sha256_source"].get<std::string>();
      }
    FAIL("not in the provenance: " << name);
    return std::string();
  };
  CHECK(source_of(t / "out", "model.safetensors") == "digest-cache");
  CHECK(source_of(t / "out", "config.json") == "computed");

  // The same blob rewritten in place by something else (same name, other inode state): hashed.
  const fs::path blob = repo_dir(t / "hf", "org/tiny") / "blobs" / sha256_of(read_text(t / "repo" / "model.safetensors"));
  const std::string bytes = read_text(blob);
  fs::remove(blob);
  write_text(blob, bytes);
  r = mobius_cli("HF_HUB_OFFLINE=1 HF_HOME=" + quote((t / "hf").string()) + " " + cache_env,
                 "build -q --model org/tiny " + quote((t / "out2").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(source_of(t / "out2", "model.safetensors") == "computed");
}
