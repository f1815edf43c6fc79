// policy.hpp - the plugin-folder policy: which folders and files a plugin may come from, and
// how text read from them (names, manifests, a plugin's own strings) is shown.
//
// The policy. A plugin is code the host runs, so where one may come from is narrow:
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
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint_files.hpp"  // OwnedFd

namespace mobius::plugin_policy {

namespace fs = std::filesystem;

inline constexpr size_t kMaxFolderEntries = 4096;
inline constexpr size_t kMaxScanEntries = 1u << 16;
inline constexpr size_t kMaxManifestString = 256;  // name, version, vendor, each model type, a task
inline constexpr size_t kMaxDescription = 4096;
inline constexpr size_t kMaxModelTypes = 4096;
inline constexpr const char* kLinkRule =
    "plugins are loaded only from folders and regular files inside the plugin folder, never "
    "through a link";
inline constexpr const char* kTrustRule =
    "plugins are loaded only from folders and files that no other user can change";

std::string os_error(int err);

// Valid UTF-8 that printable() leaves as it is: no control byte of any kind.
bool clean_text(std::string_view s);
// Untrusted text as it may appear in a message or in output.
std::string shown(std::string_view s, size_t max_bytes = 200);
std::string quote_text(std::string_view s);
std::string quoted_path(const fs::path& p);
// A path as a record shows it: itself when it is clean text, else with the bytes escaped.
fs::path shown_path(const fs::path& p);
// An error message as a record keeps it: one line of printable text.
std::string shown_message(std::string m);

// Why another user could change this file or folder, so no plugin may come from it; "" when
// none can.
std::string untrusted_reason(const struct stat& st);

// An opened folder and its real path: names below it are looked up through `fd`.
struct Folder {
  OwnedFd fd;
  fs::path path;
  struct stat st {};
};

// An opened regular file that passed the policy.
struct CheckedFile {
  OwnedFd fd;
  fs::path path;  // real path (not escaped), for messages through shown_path/quoted_path
  struct stat st {};
};

// "'<path>' is a symbolic link to '<target>'; ..." for the link `name` in `folder`.
std::string link_refusal(const Folder& folder, const std::string& name);
// Opens the folder the user named: resolved once, then opened; throws Error with the reason.
Folder open_named_folder(const fs::path& named);
// Opens the subfolder `name` of `parent`, never through a link.
Folder open_subfolder(const Folder& parent, const std::string& name);
// The names in a folder, sorted. Refuses a folder of more than kMaxFolderEntries entries, or one
// that would take the scan of its plugin folder past `budget` entries, having read only that many.
std::vector<std::string> folder_names(const Folder& f, size_t& budget);
// Opens `name` in `folder` as a file a plugin may come from: not through a link, a regular file
// that no other user can change. `what` names it in messages ("manifest", "library").
CheckedFile open_checked(const Folder& folder, const std::string& name, const std::string& what);
// Opens the library a manifest names, beside it, under the same policy.
CheckedFile open_library(const Folder& folder, const std::string& lib);

// The name dlopen() gets for the checked library: its real path, once it is known to still name
// the file that was checked.
struct LoadName {
  std::string name;
};
LoadName load_name(const CheckedFile& lib);

}  // namespace mobius::plugin_policy
