// digest_cache.hpp - sha256 digests of checkpoint files that earlier builds computed, kept in the
// user's cache so that building the same plain folder again does not read every byte twice.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <string>

namespace mobius {

// The cache folder: $MOBIUS_CACHE_DIR, else $XDG_CACHE_HOME/mobius, else ~/.cache/mobius, with
// digests/ below it. MOBIUS_CACHE_DIR=none turns the cache off (empty path).
std::filesystem::path digest_cache_dir();

// The digest recorded for the open file `fd` (at `path`, recorded for information only), when a record names the same file as
// it is now: the same device and inode, size, modification time and status-change time (to the
// nanosecond; any write, truncation, rename onto it or chmod changes the last). Empty otherwise,
// and on any error: the cache is an optimisation, never a reason to fail.
std::string cached_sha256(int fd, const std::filesystem::path& path);

// Records `sha256` for the file `fd`, if the file is still as `before` (its fstat when the hash
// started), so a file modified while it was hashed is not recorded. Errors are ignored.
void remember_sha256(int fd, const std::filesystem::path& path, const struct stat& before,
                     const std::string& sha256);

}  // namespace mobius
