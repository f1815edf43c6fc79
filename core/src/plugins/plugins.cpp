// plugins.cpp - discovery (manifests first, code last), the plugin-folder policy, Boost.DLL
// loading, ABI and manifest checks.
#include "mobius/plugins.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "checkpoint/checkpoint_files.hpp"  // path_within
#include "plugins/context.hpp"
#include "mobius/error.hpp"
#include "util/untrusted.hpp"

#ifndef MOBIUS_BUILD_ROOT
#define MOBIUS_BUILD_ROOT ""
#endif
#ifndef MOBIUS_PLUGIN_INSTALL_DIR
#define MOBIUS_PLUGIN_INSTALL_DIR "/usr/local/lib/mobius/plugins"
#endif
#ifndef MOBIUS_BINDIR
#define MOBIUS_BINDIR "/usr/local/bin"
#endif

namespace mobius {
namespace fs = std::filesystem;

namespace {

// The plugin-folder policy. A plugin is code the host runs, so where one may come from is narrow:
//  - The folder the user names (--plugin-path, MOBIUS_PLUGIN_PATH, the default) is resolved once
//    (realpath) and opened; from there on every name is looked up relative to the opened folder,
//    and nothing that is a symbolic link is followed, whatever it points to: subfolders,
//    manifests and libraries are opened with O_NOFOLLOW and must be folders and regular files.
//  - The plugin folder, the subfolder holding a plugin, its manifest and its library must be owned
//    by root or the current user and writable by no other user. A folder with the sticky bit
//    (like /tmp) may be writable by all, since only an entry's owner can rename or remove it; a
//    group counts as no other user when it is the owner's private group (same name, no other
//    member). The folders above the plugin folder are not checked.
//  - The library is loaded by its real path right after checking that the path still names the
//    file that was checked (device and inode). Nobody but its owner or root can swap it in
//    between (the rules above), and loading by path keeps $ORIGIN in a plugin's run path
//    meaning its own folder, so a vendor's plugin can ship private libraries beside it.
//  - A scan looks at no more than kMaxFolderEntries entries of one folder and kMaxScanEntries in
//    all below one plugin folder; the manifest is read within kManifestLimits and its shape is
//    checked, and every value it or the plugin hands over is printable text of bounded length.
constexpr size_t kMaxFolderEntries = 4096;
constexpr size_t kMaxScanEntries = 1u << 16;
constexpr size_t kMaxManifestString = 256;  // name, version, vendor, each model type, a task
constexpr size_t kMaxDescription = 4096;
constexpr size_t kMaxModelTypes = 4096;
constexpr const char* kLinkRule =
    "plugins are loaded only from folders and regular files inside the plugin folder, never "
    "through a link";
constexpr const char* kTrustRule =
    "plugins are loaded only from folders and files that no other user can change";

std::string os_error(int err) { return std::error_code(err, std::generic_category()).message(); }

// Length of the valid UTF-8 sequence at s[i], or 0 when the byte there does not start one.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char u = b(i);
  if (u < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (u >= 0xC2 && u <= 0xDF) n = 2;
  else if (u >= 0xE0 && u <= 0xEF) n = 3, lo = u == 0xE0 ? 0xA0 : 0x80, hi = u == 0xED ? 0x9F : 0xBF;
  else if (u >= 0xF0 && u <= 0xF4) n = 4, lo = u == 0xF0 ? 0x90 : 0x80, hi = u == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  return n;
}

// `s` with every byte that is not part of valid UTF-8 written as \xNN: printable() keeps bytes
// from 0x80 up as they are, and JSON output needs valid UTF-8.
std::string utf8_escaped(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) {
      const auto u = static_cast<unsigned char>(s[i++]);
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

// Valid UTF-8 that printable() leaves as it is: no control byte of any kind.
bool clean_text(std::string_view s) {
  return utf8_escaped(s) == s && printable(s, s.size()) == s;
}

// Untrusted text as it may appear in a message or in output.
std::string shown(std::string_view s, size_t max_bytes = 200) {
  return printable(utf8_escaped(s), max_bytes);
}
std::string quote_text(std::string_view s) { return quote_name(utf8_escaped(s)); }
std::string quoted_path(const fs::path& p) { return "'" + shown(p.native(), 1024) + "'"; }
// A path as a record shows it: itself when it is clean text, else with the bytes escaped.
fs::path shown_path(const fs::path& p) { return fs::path(shown(p.native(), 4096)); }
// An error message as a record keeps it: one line of printable text.
std::string shown_message(std::string m) {
  std::replace(m.begin(), m.end(), '\n', ' ');
  return shown(m, 4096);
}

// "'name' (uid N)", or "uid N" when the user has no name.
std::string user_text(uid_t uid) {
  std::vector<char> buf(16384);
  struct passwd pw {}, *res = nullptr;
  std::string id = "uid " + std::to_string(uid);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &res) == 0 && res && res->pw_name)
    return "user " + quote_text(res->pw_name) + " (" + id + ")";
  return id;
}
std::string group_text(gid_t gid) {
  std::vector<char> buf(16384);
  struct group gr {}, *res = nullptr;
  std::string id = "gid " + std::to_string(gid);
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &res) == 0 && res && res->gr_name)
    return "group " + quote_text(res->gr_name) + " (" + id + ")";
  return "group " + id;
}

// True when the file's group is its owner's private group: the owner's primary group, with the
// owner's name and no member listed (the layout of a umask 002 system).
bool private_group(const struct stat& st) {
  std::vector<char> pbuf(16384), gbuf(16384);
  struct passwd pw {}, *pres = nullptr;
  struct group gr {}, *gres = nullptr;
  if (::getpwuid_r(st.st_uid, &pw, pbuf.data(), pbuf.size(), &pres) != 0 || !pres) return false;
  if (::getgrgid_r(st.st_gid, &gr, gbuf.data(), gbuf.size(), &gres) != 0 || !gres) return false;
  if (pres->pw_gid != st.st_gid || !pres->pw_name || !gres->gr_name) return false;
  if (std::strcmp(pres->pw_name, gres->gr_name) != 0) return false;
  for (char** m = gres->gr_mem; m && *m; ++m)
    if (std::strcmp(*m, pres->pw_name) != 0) return false;
  return true;
}

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Why another user could change this file or folder, so no plugin may come from it; "" when
// none can.
std::string untrusted_reason(const struct stat& st) {
  const bool sticky = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return "is owned by " + user_text(st.st_uid) + ", neither root nor the current user";
  if ((st.st_mode & S_IWOTH) && !sticky)
    return "is writable by every user (mode " + mode_text(st.st_mode) + ")";
  if ((st.st_mode & S_IWGRP) && !sticky && !private_group(st))
    return "is writable by members of " + group_text(st.st_gid) + ", mode " + mode_text(st.st_mode);
  return "";
}

using Fd = OwnedFd;

// An opened folder and its real path: names below it are looked up through `fd`.
struct Folder {
  Fd fd;
  fs::path path;
  struct stat st {};
};

// An opened regular file that passed the policy.
struct CheckedFile {
  Fd fd;
  fs::path path;  // real path (not escaped), for messages through shown_path/quoted_path
  struct stat st {};
};

// "'<path>' is a symbolic link to '<target>'; ..." for the link `name` in `folder`.
std::string link_refusal(const Folder& folder, const std::string& name) {
  std::string target(4096, '\0');
  const ssize_t n = ::readlinkat(folder.fd.get(), name.c_str(), target.data(), target.size());
  target.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return quoted_path(folder.path / name) + " is a symbolic link to " + quote_text(target) + "; " +
         kLinkRule;
}

bool is_link(const Folder& folder, const std::string& name) {
  struct stat st {};
  return ::fstatat(folder.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISLNK(st.st_mode);
}

// Opens the folder the user named: resolved once, then opened; throws Error with the reason.
Folder open_named_folder(const fs::path& named) {
  const fs::path p = named.empty() ? fs::path(".") : named;
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(p.c_str(), nullptr), &std::free);
  if (!real) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) throw Error("plugin folder does not exist or is not a folder");
    throw Error("plugin folder cannot be resolved: " + os_error(err));
  }
  Folder f;
  f.path = real.get();
  const int fd = ::open(real.get(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOTDIR) throw Error("plugin folder does not exist or is not a folder");
    throw Error("plugin folder " + quoted_path(f.path) + " cannot be opened: " + os_error(err));
  }
  f.fd = Fd(fd);
  if (::fstat(fd, &f.st) != 0) throw Error("plugin folder " + quoted_path(f.path) + " cannot be read");
  return f;
}

// Opens the subfolder `name` of `parent`, never through a link.
Folder open_subfolder(const Folder& parent, const std::string& name) {
  Folder f;
  f.path = parent.path / name;
  const int fd = ::openat(parent.fd.get(), name.c_str(),
                          O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (is_link(parent, name)) throw Error(link_refusal(parent, name));
    throw Error("folder " + quoted_path(f.path) + " cannot be opened: " + os_error(err));
  }
  f.fd = Fd(fd);
  if (::fstat(fd, &f.st) != 0) throw Error("folder " + quoted_path(f.path) + " cannot be read");
  return f;
}

// The names in a folder, sorted. Refuses a folder of more than kMaxFolderEntries entries, or one
// that would take the scan of its plugin folder past `budget` entries, having read only that many.
std::vector<std::string> folder_names(const Folder& f, size_t& budget) {
  const int fd = ::openat(f.fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error("folder " + quoted_path(f.path) + " cannot be read: " + os_error(errno));
  DIR* dir = ::fdopendir(fd);
  if (!dir) {
    const int err = errno;
    ::close(fd);
    throw Error("folder " + quoted_path(f.path) + " cannot be read: " + os_error(err));
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(dir, &::closedir);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if (names.size() == kMaxFolderEntries)
      throw Error("folder " + quoted_path(f.path) + " holds more than " +
                  std::to_string(kMaxFolderEntries) + " entries; it is not scanned for plugins");
    if (budget == 0)
      throw Error("folder " + quoted_path(f.path) + " is not scanned: the plugin folder holds more than " +
                  std::to_string(kMaxScanEntries) + " entries in all");
    --budget;
    names.emplace_back(e->d_name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Opens `name` in `folder` as a file a plugin may come from: not through a link, a regular file
// that no other user can change. `what` names it in messages ("manifest", "library").
CheckedFile open_checked(const Folder& folder, const std::string& name, const std::string& what) {
  CheckedFile f;
  f.path = folder.path / name;
  const int fd = ::openat(folder.fd.get(), name.c_str(),
                          O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    if (is_link(folder, name)) throw Error(what + " " + link_refusal(folder, name));
    if (err == ENOENT) throw Error(what + " " + quoted_path(f.path) + " not found");
    throw Error(what + " " + quoted_path(f.path) + " cannot be opened: " + os_error(err));
  }
  f.fd = Fd(fd);
  if (::fstat(fd, &f.st) != 0)
    throw Error(what + " " + quoted_path(f.path) + " cannot be read: " + os_error(errno));
  if (!S_ISREG(f.st.st_mode))
    throw Error(what + " " + quoted_path(f.path) + " is not a regular file");
  if (std::string why = untrusted_reason(f.st); !why.empty())
    throw Error(what + " " + quoted_path(f.path) + " " + why + "; " + kTrustRule);
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return f;
}

bool is_manifest(std::string_view f) {
  return f == "plugin.yaml" || (f.size() > 12 && f.substr(f.size() - 12) == ".plugin.yaml");
}
bool is_manifest_path(const fs::path& p) { return is_manifest(std::string_view(p.filename().native())); }

bool is_library(std::string_view f) { return f.size() > 3 && f.substr(f.size() - 3) == ".so"; }

// Up to 16 entries, each shown, comma-separated: "a, b, ... (40 in all)".
std::string join_shown(const std::vector<std::string>& v) {
  std::string s;
  const size_t n = std::min<size_t>(v.size(), 16);
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + shown(v[i], kMaxManifestString);
  if (n < v.size()) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

// Reads and checks the manifest `name` in `folder` into `rec`; returns its library's file name,
// or "" for a manifest-only pack (no library: `aliases` only).
// Throws mobius::Error with the reason; `rec` is filled only when the manifest is valid.
std::string read_manifest(const Folder& folder, const std::string& name, PluginRecord& rec) {
  const CheckedFile file = open_checked(folder, name, "manifest");
  const std::string what = "manifest " + quote_text(name);
  const auto fail = [&](const std::string& reason) -> void {
    throw Error("[plugin] " + what + ": " + reason);
  };
  const size_t max = kManifestLimits.max_bytes;
  if (static_cast<uint64_t>(file.st.st_size) > max)
    fail("larger than " + std::to_string(max >> 10) + " KiB (" + std::to_string(file.st.st_size) +
         " bytes)");
  // At most one byte past the limit: a file that grew since fstat is refused by the parser.
  std::string text(max + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t r = ::read(file.fd.get(), text.data() + got, text.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("cannot be read: " + os_error(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  text.resize(got);
  const YAML::Node y = parse_yaml_limited(text, what, kManifestLimits);

  if (!y.IsMap()) fail("is not a YAML mapping");
  std::set<std::string> keys;
  for (auto it = y.begin(); it != y.end(); ++it) {
    if (!it->first.IsScalar()) fail("has a key that is not a string");
    const std::string& k = it->first.Scalar();
    // Keys of a later manifest format are skipped, so a newer plugin's manifest still reads here
    // (its size and value count are bounded by kManifestLimits).
    if (!keys.insert(k).second) fail("key " + quote_text(k) + " appears twice");
  }
  // A string value: present when required, at most `max_len` bytes of printable text.
  const auto string_at = [&](const YAML::Node& n, const std::string& key, size_t max_len) {
    if (!n.IsScalar()) fail(key + " is not a string");
    const std::string& s = n.Scalar();
    if (s.size() > max_len)
      fail(key + " is longer than " + std::to_string(max_len) + " bytes (" +
           std::to_string(s.size()) + ")");
    if (!clean_text(s)) fail(key + " is not printable text: " + quote_text(s));
    return s;
  };
  const auto text_of = [&](const char* key, bool required, size_t max_len = kMaxManifestString) {
    const std::string k = std::string("'") + key + "'";
    const YAML::Node n = y[key];
    if (!n) {
      if (required) fail(k + " is missing");
      return std::string();
    }
    std::string s = string_at(n, k, max_len);
    if (required && s.empty()) fail(k + " is empty");
    return s;
  };
  std::string plugin_name = text_of("name", true);
  std::string version = text_of("version", true);
  std::string vendor = text_of("vendor", false);
  std::string description = text_of("description", false, kMaxDescription);
  // aliases: {new_type: existing_type, ...}: model types built by another registration.
  std::map<std::string, std::string> aliases;
  if (const YAML::Node a = y["aliases"]) {
    if (!a.IsMap() || a.size() == 0)
      fail("'aliases' must be a non-empty mapping of model type to model type "
           "(e.g. {my_new_arch: llama})");
    if (a.size() > kMaxModelTypes)
      fail("'aliases' has more than " + std::to_string(kMaxModelTypes) + " entries (" +
           std::to_string(a.size()) + ")");
    for (auto it = a.begin(); it != a.end(); ++it) {
      std::string from = string_at(it->first, "a key of 'aliases'", kMaxManifestString);
      std::string to = string_at(it->second, "the value of alias " + quote_text(from), kMaxManifestString);
      if (from.empty() || to.empty()) fail("'aliases' holds an empty model type");
      if (from == to) fail("alias " + quote_text(from) + " names itself");
      if (!aliases.emplace(std::move(from), std::move(to)).second)
        fail("'aliases' lists " + quote_text(it->first.Scalar()) + " twice");
    }
  }
  const YAML::Node lib_node = y["library"];
  const bool manifest_only = !lib_node;
  if (manifest_only && aliases.empty())
    fail("'library' is missing (only a pack that declares 'aliases' has no library)");
  uint32_t abi_version = 0;
  std::string lib;
  if (!manifest_only || y["abi_version"]) {
    const std::string abi = text_of("abi_version", true);
    if (abi.size() > 7 || abi.find_first_not_of("0123456789") != std::string::npos)
      fail("'abi_version' is not a number: " + quote_text(abi));
    abi_version = static_cast<uint32_t>(std::stoul(abi));
  }
  if (!manifest_only) {
    lib = string_at(lib_node, "'library'", NAME_MAX);
    if (lib.empty() || lib == "." || lib == ".." || lib.find('/') != std::string::npos)
      fail("'library' must be a file name beside the manifest, got " + quote_text(lib));
  }
  const YAML::Node types = y["model_types"];
  std::vector<std::string> model_types;
  if (types || !manifest_only) {
    if (!types || !types.IsSequence() || types.size() == 0)
      fail("'model_types' must be a non-empty list");
    if (types.size() > kMaxModelTypes)
      fail("'model_types' lists more than " + std::to_string(kMaxModelTypes) + " entries (" +
           std::to_string(types.size()) + ")");
    std::set<std::string> unique;
    for (const auto& t : types) {
      std::string s = string_at(t, "an entry of 'model_types'", kMaxManifestString);
      if (s.empty()) fail("'model_types' holds an empty entry");
      if (!unique.insert(s).second) fail("'model_types' lists " + quote_text(s) + " twice");
      model_types.push_back(std::move(s));
    }
  }
  if (manifest_only && !model_types.empty()) {
    // A pack without code registers nothing but its aliases.
    std::vector<std::string> names;
    for (const auto& [from, to] : aliases) names.push_back(from);
    std::vector<std::string> listed = model_types;
    std::sort(listed.begin(), listed.end());
    if (listed != names)
      fail("'model_types' lists [" + join_shown(listed) + "], but a pack without a library "
           "registers only its aliases [" + join_shown(names) + "]");
  }
  for (const auto& [from, to] : aliases)
    if (!manifest_only && std::find(model_types.begin(), model_types.end(), from) != model_types.end())
      fail("model type " + quote_text(from) + " is both in 'model_types' and an alias");
  if (manifest_only && model_types.empty())
    for (const auto& [from, to] : aliases) model_types.push_back(from);

  rec.name = std::move(plugin_name);
  rec.version = std::move(version);
  rec.vendor = std::move(vendor);
  rec.description = std::move(description);
  rec.abi_version = abi_version;
  rec.model_types = std::move(model_types);
  rec.aliases = std::move(aliases);
  if (!lib.empty()) rec.library = shown_path(folder.path / lib);
  return lib;
}

// Opens the library a manifest names, beside it, under the same policy.
CheckedFile open_library(const Folder& folder, const std::string& lib) {
  try {
    return open_checked(folder, lib, "library");
  } catch (const Error&) {
    struct stat st {};
    if (::fstatat(folder.fd.get(), lib.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
      throw Error("library " + quote_text(lib) + " not found beside the manifest");
    throw;
  }
}

// The name dlopen() gets for the checked library: its real path, once it is known to still name
// the file that was checked.
struct LoadName {
  std::string name;
};
LoadName load_name(const CheckedFile& lib) {
  struct stat st {};
  if (::stat(lib.path.c_str(), &st) != 0 || st.st_dev != lib.st.st_dev || st.st_ino != lib.st.st_ino)
    throw Error("library " + quoted_path(lib.path) + " changed while it was being loaded");
  return LoadName{lib.path.native()};
}

}  // namespace

std::vector<fs::path> default_plugin_dirs() {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (!ec) {
    fs::path exe_dir = exe.parent_path();
    std::string build_root = MOBIUS_BUILD_ROOT;
    if (!build_root.empty()) {
      fs::path br = fs::canonical(build_root, ec);
      if (!ec && path_within(br, exe_dir) && fs::is_directory(br / "plugins")) {
        out.push_back(br / "plugins");
        return out;  // run from the build tree: its plugins, never an installed copy
      }
    }
    fs::path rel = fs::path(MOBIUS_PLUGIN_INSTALL_DIR).lexically_relative(MOBIUS_BINDIR);
    if (!rel.empty()) {
      fs::path p = (exe_dir / rel).lexically_normal();
      if (fs::is_directory(p)) out.push_back(p);
    }
  }
  // The configured folder only when the one beside the executable is missing: a moved or staged
  // install must not also load the original install's plugins.
  fs::path installed = MOBIUS_PLUGIN_INSTALL_DIR;
  if (out.empty() && fs::is_directory(installed) &&
      std::find(out.begin(), out.end(), installed) == out.end()) {
    std::error_code e2;
    bool dup = false;
    for (const auto& o : out) dup |= fs::equivalent(o, installed, e2);
    if (!dup) out.push_back(installed);
  }
  return out;
}

std::vector<PluginSearchDir> plugin_search_path(const std::vector<std::string>& cli_paths) {
  std::vector<PluginSearchDir> dirs;
  for (const auto& p : cli_paths) dirs.push_back({p, kPriorityCommandLine, "--plugin-path"});
  if (const char* env = std::getenv("MOBIUS_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty()) dirs.push_back({item, kPriorityEnvironment, "MOBIUS_PLUGIN_PATH"});
  }
  for (const auto& p : default_plugin_dirs()) dirs.push_back({p, kPriorityDefault, "default"});
  return dirs;
}

// Runs the plugin's code: load, info and ABI check, register into `registry`. Throws with the
// reason. Used in-process, and in a child process to probe a plugin not yet known to be safe.
void run_plugin(PluginRecord& rec, const CheckedFile& file, int priority, ModelRegistry& registry,
                boost::dll::shared_library& lib) {
  const LoadName ln = load_name(file);
  try {
    lib.load(boost::dll::fs::path(ln.name),
             boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    // Boost folds the loader's reason into a longer message; ask the loader again for it. A
    // name that failed to load is not taken, so asking again is safe.
    std::string reason = e.what();
    if (void* h = ::dlopen(ln.name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      ::dlclose(h);
    } else if (const char* dl = ::dlerror()) {
      reason = dl;
    }
    // The loader names the file by the name it got: show the library's path instead.
    const std::string path = rec.library.string();
    for (size_t at = reason.find(ln.name); at != std::string::npos;
         at = reason.find(ln.name, at + path.size()))
      reason.replace(at, ln.name.size(), path);
    throw Error("cannot load as a shared object: " + shown(reason, 1024));
  }
  if (!lib.has(MOBIUS_PLUGIN_GET_INFO_SYMBOL))
    throw Error(std::string("missing entry point '") + MOBIUS_PLUGIN_GET_INFO_SYMBOL +
                "' (not a mobius plugin?)");
  auto get_info = lib.get<const mobius_plugin_info*()>(MOBIUS_PLUGIN_GET_INFO_SYMBOL);
  const mobius_plugin_info* raw_info = nullptr;
  try {
    raw_info = get_info();
  } catch (...) {
    throw Error("mobius_plugin_get_info let an exception cross the C ABI");
  }
  if (!raw_info || !MOBIUS_HAS_FIELD(raw_info, mobius_plugin_info, abi_version))
    throw Error("mobius_plugin_get_info returned no valid info");
  if (raw_info->abi_version != MOBIUS_ABI_VERSION)
    throw Error("plugin was built for ABI version " + std::to_string(raw_info->abi_version) +
                ", this host speaks ABI version " + std::to_string(MOBIUS_ABI_VERSION));
  const mobius_plugin_info info_v =
      read_abi_struct(raw_info, MOBIUS_PLUGIN_INFO_SIZE_V1, "mobius_plugin_get_info's info");
  const mobius_plugin_info* info = &info_v;
  std::string iname = info->name ? info->name : "";
  if (iname != rec.name)
    throw Error("manifest names the plugin " + quote_text(rec.name) + " but the library says " +
                quote_text(iname));
  if (!lib.has(MOBIUS_PLUGIN_REGISTER_SYMBOL))
    throw Error(std::string("missing entry point '") + MOBIUS_PLUGIN_REGISTER_SYMBOL + "'");
  auto reg_fn = lib.get<mobius_status(const mobius_host_api*, mobius_registrar*)>(
      MOBIUS_PLUGIN_REGISTER_SYMBOL);

  mobius_registrar reg;
  reg.plugin_name = rec.name;
  reg.plugin_path = rec.library.string();
  reg.version = rec.version;
  reg.vendor = rec.vendor;
  reg.priority = priority;
  try {
    run_plugin_register(reg_fn, reg);
  } catch (const std::exception& e) {
    throw Error(std::string("register failed: ") + shown(e.what(), 1024));
  }
  std::vector<std::string> a, b = rec.model_types;
  for (const auto& r : reg.registrations) a.push_back(r.model_type);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b)
    throw Error("manifest lists model types [" + join_shown(b) + "] but the plugin registered [" +
                join_shown(a) + "]");
  // The model types are the manifest's, checked; the task is shown by `mobius list`.
  for (const auto& r : reg.registrations)
    if (r.task.size() > kMaxManifestString || !clean_text(r.task))
      throw Error("model type " + quote_text(r.model_type) +
                  " was registered with a task that is not printable text of at most " +
                  std::to_string(kMaxManifestString) + " bytes: " + quote_text(r.task));
  for (const auto& r : reg.registrations) rec.registered.push_back(r.model_type);
  registry.register_all(std::move(reg.registrations));
}

// Probes plugins in a child process and remembers the ones that crashed or hung until their
// file changes (and the ones that loaded cleanly, so they are not probed again).
class PluginScanner {
 public:
  PluginScanner() : path_(cache_path()) { load(); }

  // "" when the plugin may be loaded in-process; else why it must be skipped.
  std::string check(const PluginRecord& rec, const CheckedFile& file) {
    std::string id = identity(file.st);
    std::string key = rec.library.string();
    if (auto it = cache_.find(key); it != cache_.end() && it->is_object() && it->value("id", "") == id) {
      if (it->value("status", "") == "ok") return "";
      return it->value("error", "failed in an earlier scan") +
             " (remembered from an earlier scan; probed again when the file changes)";
    }
    std::string err = probe(rec, file);
    if (err.empty()) {
      cache_[key] = {{"id", id}, {"status", "ok"}};
      save();
    } else if (err.rfind("crashed", 0) == 0 || err.rfind("hung", 0) == 0) {
      cache_[key] = {{"id", id}, {"status", "failed"}, {"error", err}};
      save();
    }
    return err;
  }

 private:
  static fs::path cache_path() {
    if (const char* p = std::getenv("MOBIUS_PLUGIN_CACHE")) return p;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "mobius" / "plugin-scan.json";
    if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "mobius" / "plugin-scan.json";
    return {};
  }

  // Size, modification time and inode: a rebuilt or replaced file is probed again.
  static std::string identity(const struct stat& st) {
    return std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_ino);
  }

  static int timeout_ms() {
    if (const char* t = std::getenv("MOBIUS_PLUGIN_SCAN_TIMEOUT")) {
      double s = std::atof(t);
      if (s > 0) return static_cast<int>(s * 1000);
    }
    return 10000;
  }

  void load() {
    if (path_.empty()) return;
    std::ifstream in(path_, std::ios::binary);
    if (!in) return;
    try {
      // Read within the same limits as any other JSON: a damaged or planted cache file must not
      // nest deep enough to overflow the stack when it is written back.
      in.seekg(0, std::ios::end);
      const auto size = static_cast<size_t>(std::max<std::streamoff>(0, in.tellg()));
      if (size > kConfigLimits.max_bytes) return;
      in.seekg(0);
      std::string text(size, '\0');
      in.read(text.data(), static_cast<std::streamsize>(size));
      text.resize(static_cast<size_t>(in.gcount()));
      nlohmann::json j = parse_json_limited(text, path_.string(), kConfigLimits);
      if (j.is_object()) cache_ = std::move(j);
    } catch (const std::exception&) {
      // A damaged cache only costs a rescan.
    }
  }

  void save() const {
    if (path_.empty()) return;
    std::error_code ec;
    fs::create_directories(path_.parent_path(), ec);
    fs::path tmp = path_.string() + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream out(tmp);
      if (!out) return;
      out << cache_.dump(1);
    }
    fs::rename(tmp, path_, ec);
    if (ec) fs::remove(tmp, ec);
  }

  // Loads and registers the plugin in a forked child; reports what happened to it.
  static std::string probe(const PluginRecord& rec, const CheckedFile& file) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return "";  // cannot probe: load in-process as before
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return "";
    }
    if (pid == 0) {
      ::close(fds[0]);
      // The host's own crash handlers (a test framework's, say) must not report the child's.
      for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGINT})
        ::signal(sig, SIG_DFL);
      std::string answer = "ok";
      try {
        PluginRecord r = rec;
        ModelRegistry scratch;
        boost::dll::shared_library lib;
        run_plugin(r, file, 0, scratch, lib);
      } catch (const std::exception& e) {
        answer = std::string("error:") + e.what();
      }
      const char* p = answer.data();
      size_t n = answer.size();
      while (n > 0) {
        ssize_t w = ::write(fds[1], p, n);
        if (w <= 0) break;
        p += w;
        n -= static_cast<size_t>(w);
      }
      ::_exit(0);  // no destructors, no atexit handlers of the parent's state
    }
    ::close(fds[1]);
    std::string answer;
    bool timed_out = false;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms());
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) {
        timed_out = true;
        break;
      }
      pollfd pfd{fds[0], POLLIN, 0};
      int r = ::poll(&pfd, 1, static_cast<int>(left));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        timed_out = r == 0;
        break;
      }
      char buf[4096];
      ssize_t got = ::read(fds[0], buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      if (answer.size() < 65536) answer.append(buf, static_cast<size_t>(got));
    }
    ::close(fds[0]);
    if (timed_out) ::kill(pid, SIGKILL);
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (timed_out)
      return "hung while loading or registering (no answer within " +
             std::to_string(timeout_ms() / 1000.0).substr(0, 4) + " s); skipped";
    if (WIFSIGNALED(st))
      return "crashed while loading or registering (signal " + std::to_string(WTERMSIG(st)) + ", " +
             strsignal(WTERMSIG(st)) + "); skipped";
    if (answer == "ok") return "";
    if (answer.rfind("error:", 0) == 0) return answer.substr(6);
    return "exited while loading or registering (status " +
           std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : -1) + "); skipped";
  }

  fs::path path_;
  nlohmann::json cache_ = nlohmann::json::object();
};

struct PluginHost::Impl {
  PluginScanner scan;
  std::vector<boost::dll::shared_library> libs;
  std::set<fs::path> seen;  // manifests and libraries already considered (real paths, as shown)
  // Model types a load() asked for; empty: every plugin runs.
  std::set<std::string> wanted;

  PluginRecord load_manifest(const Folder& folder, const std::string& name, int priority,
                             const std::string& origin, ModelRegistry& registry);
  void scan_folder(const Folder& folder, const std::vector<std::string>& names, bool is_root,
                   const PluginSearchDir& dir, ModelRegistry& registry,
                   std::vector<PluginRecord>& out);
  void resolve_aliases(std::vector<PluginRecord>& records, ModelRegistry& registry,
                       PluginHost& host);
};

// Registers the aliases of every loaded manifest: alias -> a copy of the registration of the
// type it names, under the alias's name and the declaring manifest's priority. An alias may
// name another alias; one that names a type nobody registers (or a cycle) makes its manifest a
// plugin error like any other. When only some model types were asked for, a plugin deferred
// because its types were not asked for is loaded after all if a wanted alias names one of them.
void PluginHost::Impl::resolve_aliases(std::vector<PluginRecord>& records,
                                       ModelRegistry& registry, PluginHost& host) {
  auto has_aliases = [](const PluginRecord& r) { return r.loaded && !r.aliases.empty(); };
  if (std::none_of(records.begin(), records.end(), has_aliases)) return;
  const std::set<std::string> asked = wanted;
  std::set<const PluginRecord*> failed;
  for (bool progress = true; progress;) {
    progress = false;
    for (auto& rec : records) {
      if (!has_aliases(rec) || failed.count(&rec)) continue;
      for (const auto& [from, to] : rec.aliases) {
        if (std::find(rec.registered.begin(), rec.registered.end(), from) != rec.registered.end())
          continue;
        if (!asked.empty() && !asked.count(from)) continue;
        const Registration* target = registry.get_registration(to);
        if (!target) {
          // A deferred plugin that declares the target: load it now.
          for (size_t i = 0; i < records.size() && !target; ++i) {
            PluginRecord& d = records[i];
            if (!d.deferred || d.manifest.empty() ||
                std::find(d.model_types.begin(), d.model_types.end(), to) == d.model_types.end())
              continue;
            wanted = {to};
            PluginRecord again = host.load_one(d.manifest, d.priority, d.origin, registry);
            wanted = asked;
            records[i] = std::move(again);
            target = registry.get_registration(to);
            progress = true;
          }
          if (!target) continue;
        }
        Registration r = *target;
        r.model_type = from;
        r.alias_of = to;
        r.target_plugin = target->alias_of.empty() ? target->plugin : target->target_plugin;
        r.target_path = target->alias_of.empty() ? target->plugin_path : target->target_path;
        r.plugin = rec.name;
        r.plugin_path = rec.manifest.string();
        r.version = rec.version;
        r.vendor = rec.vendor;
        r.priority = rec.priority;
        try {
          registry.register_architecture(std::move(r));
        } catch (const std::exception& e) {
          rec.error = shown_message(std::string("[plugin] alias ") + quote_text(from) + ": " + e.what());
          rec.loaded = false;
          failed.insert(&rec);
          break;
        }
        rec.registered.push_back(from);
        progress = true;
      }
    }
  }
  for (auto& rec : records) {
    if (!has_aliases(rec)) continue;
    for (const auto& [from, to] : rec.aliases) {
      if (std::find(rec.registered.begin(), rec.registered.end(), from) != rec.registered.end())
        continue;
      if (!asked.empty() && !asked.count(from)) continue;
      rec.error = shown_message(
          "[plugin] alias " + quote_text(from) + " names model type " + quote_text(to) +
          (rec.aliases.count(to) || std::any_of(records.begin(), records.end(), [&](const PluginRecord& o) {
             return o.aliases.count(to) > 0;
           })
               ? ", an alias that does not resolve (a cycle, or an alias of a type no plugin registers)"
               : ", which no loaded plugin registers"));
      rec.loaded = false;
      break;
    }
  }
}

namespace {

// A record for what was refused before any manifest was read: a folder or a file, and why.
PluginRecord refused(const fs::path& path, const PluginSearchDir& dir, const std::string& why,
                     bool is_manifest_path = false) {
  PluginRecord rec;
  (is_manifest_path ? rec.manifest : rec.library) = shown_path(path);
  rec.origin = dir.origin;
  rec.priority = dir.priority;
  rec.error = shown_message(why);
  return rec;
}

}  // namespace

PluginRecord PluginHost::Impl::load_manifest(const Folder& folder, const std::string& name,
                                             int priority, const std::string& origin,
                                             ModelRegistry& registry) {
  PluginRecord rec;
  rec.origin = origin;
  rec.priority = priority;
  rec.manifest = shown_path(folder.path / name);
  try {
    const std::string lib_name = read_manifest(folder, name, rec);
    if (lib_name.empty()) {
      // A manifest-only pack: no code to run. Its aliases are registered once every plugin has
      // loaded (resolve_aliases), as the types they name may come from any folder.
      rec.deferred = !wanted.empty() &&
                     std::none_of(rec.model_types.begin(), rec.model_types.end(),
                                  [&](const std::string& t) { return wanted.count(t) > 0; });
      rec.loaded = !rec.deferred;
      return rec;
    }
    if (rec.abi_version != MOBIUS_ABI_VERSION)
      throw Error("manifest declares ABI version " + std::to_string(rec.abi_version) +
                  ", this host speaks ABI version " + std::to_string(MOBIUS_ABI_VERSION));
    const CheckedFile lib = open_library(folder, lib_name);

    // A command that needs only some model types reads the other plugins' manifests alone.
    if (!wanted.empty() &&
        std::none_of(rec.model_types.begin(), rec.model_types.end(),
                     [&](const std::string& t) { return wanted.count(t) > 0; })) {
      rec.deferred = true;
      return rec;
    }

    // A plugin not yet known to be safe runs first in a child process: if it crashes or hangs
    // while loading or registering, only the child dies (GStreamer's plugin scanner does this).
    if (std::string err = scan.check(rec, lib); !err.empty()) throw Error(err);
    boost::dll::shared_library dl;
    run_plugin(rec, lib, priority, registry, dl);
    libs.push_back(std::move(dl));
    rec.loaded = true;
  } catch (const std::exception& e) {
    rec.error = shown_message(e.what());
  }
  return rec;
}

// One folder of a scan: its manifests in name order, then the libraries no manifest claimed.
void PluginHost::Impl::scan_folder(const Folder& folder, const std::vector<std::string>& names,
                                   bool is_root, const PluginSearchDir& dir,
                                   ModelRegistry& registry, std::vector<PluginRecord>& out) {
  std::vector<std::string> manifests, libraries;
  for (const auto& n : names) {
    if (!is_manifest(n) && !is_library(n)) continue;
    if (!clean_text(n)) {
      out.push_back(refused(folder.path / n, dir,
                            quoted_path(folder.path / n) +
                                " has a name that is not printable text; it is not loaded"));
      continue;
    }
    (is_manifest(n) ? manifests : libraries).push_back(n);
  }
  if (manifests.empty() && libraries.empty()) return;
  // The plugin folder itself was checked before its scan began.
  if (!is_root) {
    if (std::string why = untrusted_reason(folder.st); !why.empty()) {
      out.push_back(refused(folder.path, dir,
                            "folder " + quoted_path(folder.path) + " " + why + "; " + kTrustRule));
      return;
    }
  }
  std::set<fs::path> claimed;
  bool refused_manifest = false;  // one that was refused before it named its library
  for (const auto& m : manifests) {
    if (!seen.insert(shown_path(folder.path / m)).second) continue;
    PluginRecord rec = load_manifest(folder, m, dir.priority, dir.origin, registry);
    refused_manifest |= rec.library.empty() && rec.aliases.empty();
    if (!rec.library.empty()) {
      // Its library is accounted for, also when the same folder is reached again through
      // another entry of the search path (then the manifest is skipped as seen).
      claimed.insert(rec.library);
      seen.insert(rec.library);
    }
    out.push_back(std::move(rec));
  }
  for (const auto& l : libraries) {
    const fs::path p = shown_path(folder.path / l);
    if (claimed.count(p) || !seen.insert(p).second) continue;
    struct stat st {};
    const bool link = ::fstatat(folder.fd.get(), l.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISLNK(st.st_mode);
    out.push_back(refused(folder.path / l, dir,
                          link               ? link_refusal(folder, l)
                          : refused_manifest ? "no manifest: none beside the library could be read"
                                             : "no manifest: expected plugin.yaml (or "
                                               "<name>.plugin.yaml) beside the library"));
  }
}

PluginHost::PluginHost() : impl_(std::make_unique<Impl>()) {}
PluginHost::~PluginHost() = default;

PluginRecord PluginHost::load_one(const fs::path& path, int priority, const std::string& origin,
                                  ModelRegistry& registry) {
  const PluginSearchDir dir{path.parent_path(), priority, origin};
  if (!is_manifest_path(path))
    return refused(path, dir,
                   "no manifest: expected plugin.yaml (or <name>.plugin.yaml) beside the library");
  Folder folder;
  try {
    folder = open_named_folder(path.parent_path());
  } catch (const std::exception& e) {
    return refused(path, dir, e.what(), true);
  }
  if (std::string why = untrusted_reason(folder.st); !why.empty())
    return refused(path, dir,
                   "folder " + quoted_path(folder.path) + " " + why + "; " + kTrustRule, true);
  return impl_->load_manifest(folder, path.filename().native(), priority, origin, registry);
}

std::vector<PluginRecord> PluginHost::load(const std::vector<PluginSearchDir>& dirs,
                                           ModelRegistry& registry,
                                           const std::vector<std::string>& only_model_types) {
  impl_->wanted = std::set<std::string>(only_model_types.begin(), only_model_types.end());
  struct Reset {
    std::set<std::string>& w;
    ~Reset() { w.clear(); }
  } reset{impl_->wanted};
  std::vector<PluginRecord> out;
  // Higher priority first, so a type from --plugin-path wins over the installed one and the
  // lower one is recorded as shadowed.
  std::vector<PluginSearchDir> order = dirs;
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.priority > b.priority; });
  for (const auto& d : order) {
    // The folder as named, resolved once; below it, nothing through a link.
    Folder root;
    try {
      root = open_named_folder(d.path);
    } catch (const std::exception& e) {
      if (d.origin != "default") out.push_back(refused(d.path, d, e.what()));
      continue;
    }
    if (std::string why = untrusted_reason(root.st); !why.empty()) {
      out.push_back(refused(root.path, d,
                            "plugin folder " + quoted_path(root.path) + " " + why + "; " + kTrustRule));
      continue;
    }
    size_t budget = kMaxScanEntries;
    std::vector<std::string> names;
    try {
      names = folder_names(root, budget);
    } catch (const std::exception& e) {
      out.push_back(refused(root.path, d, e.what()));
      continue;
    }
    // Candidates: the folder itself and its immediate subfolders (not meson's *.p folders).
    std::vector<std::string> subfolders;
    for (const auto& n : names) {
      struct stat st {};
      if (::fstatat(root.fd.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        if (n.size() > 2 && n.compare(n.size() - 2, 2, ".p") == 0) continue;
        if (!clean_text(n)) {
          out.push_back(refused(root.path / n, d,
                                quoted_path(root.path / n) +
                                    " has a name that is not printable text; it is not scanned"));
          continue;
        }
        subfolders.push_back(n);
      } else if (S_ISLNK(st.st_mode) && !is_manifest(n) && !is_library(n)) {
        // A link to a folder would have been scanned as a subfolder: say why it is not.
        struct stat target {};
        if (::fstatat(root.fd.get(), n.c_str(), &target, 0) == 0 && S_ISDIR(target.st_mode))
          out.push_back(refused(root.path / n, d, link_refusal(root, n)));
      }
    }
    impl_->scan_folder(root, names, true, d, registry, out);
    for (const auto& s : subfolders) {
      Folder sub;
      std::vector<std::string> sub_names;
      try {
        sub = open_subfolder(root, s);
        sub_names = folder_names(sub, budget);
      } catch (const std::exception& e) {
        out.push_back(refused(root.path / s, d, e.what()));
        if (budget == 0) break;
        continue;
      }
      impl_->scan_folder(sub, sub_names, false, d, registry, out);
    }
  }
  impl_->resolve_aliases(out, registry, *this);
  return out;
}

}  // namespace mobius
