// policy.cpp - the plugin-folder policy (policy.hpp): opening folders and files without links,
// the ownership and mode checks, and text from plugins shown safely.
#include "plugins/policy.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <system_error>

#include "mobius/error.hpp"
#include "util/untrusted.hpp"

namespace mobius::plugin_policy {

std::string os_error(int err) { return std::error_code(err, std::generic_category()).message(); }

namespace {

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

}  // namespace

bool clean_text(std::string_view s) {
  return utf8_escaped(s) == s && printable(s, s.size()) == s;
}

std::string shown(std::string_view s, size_t max_bytes) {
  return printable(utf8_escaped(s), max_bytes);
}
std::string quote_text(std::string_view s) { return quote_name(utf8_escaped(s)); }
std::string quoted_path(const fs::path& p) { return "'" + shown(p.native(), 1024) + "'"; }
fs::path shown_path(const fs::path& p) { return fs::path(shown(p.native(), 4096)); }
std::string shown_message(std::string m) {
  std::replace(m.begin(), m.end(), '\n', ' ');
  return shown(m, 4096);
}

namespace {

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

}  // namespace

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

std::string link_refusal(const Folder& folder, const std::string& name) {
  std::string target(4096, '\0');
  const ssize_t n = ::readlinkat(folder.fd.get(), name.c_str(), target.data(), target.size());
  target.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return quoted_path(folder.path / name) + " is a symbolic link to " + quote_text(target) + "; " +
         kLinkRule;
}

namespace {

bool is_link(const Folder& folder, const std::string& name) {
  struct stat st {};
  return ::fstatat(folder.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISLNK(st.st_mode);
}
}  // namespace


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
  f.fd = OwnedFd(fd);
  if (::fstat(fd, &f.st) != 0) throw Error("plugin folder " + quoted_path(f.path) + " cannot be read");
  return f;
}

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
  f.fd = OwnedFd(fd);
  if (::fstat(fd, &f.st) != 0) throw Error("folder " + quoted_path(f.path) + " cannot be read");
  return f;
}

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
  f.fd = OwnedFd(fd);
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

LoadName load_name(const CheckedFile& lib) {
  struct stat st {};
  if (::stat(lib.path.c_str(), &st) != 0 || st.st_dev != lib.st.st_dev || st.st_ino != lib.st.st_ino)
    throw Error("library " + quoted_path(lib.path) + " changed while it was being loaded");
  return LoadName{lib.path.native()};
}

}  // namespace mobius::plugin_policy
