// mobius/info.hpp - what a built model folder holds, for the app that will use it (`mobius info`).
//
// The runtime the folder is laid out for, each graph's inputs and outputs (dtype, shape), opset
// imports, node and initializer counts, weight dtypes and bytes, file sizes, the runtime config
// and the provenance. The folder is only read, never changed, and only the files a mobius output
// holds are opened: the graphs, the runtime config (genai_config.json, config.json) and
// mobius_provenance.json. External data files are looked at (their size), never opened, and a
// location that is not a plain file name beside its graph is reported, not followed.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>

namespace mobius {

// The facts about the folder `out` as one JSON object (ASCII only: every string from a file is
// escaped), as `mobius info --json` prints it; `text` true: as `mobius info` prints them. A
// folder that is not a mobius output, or a graph that cannot be read or parsed, throws
// mobius::Error naming the folder or file. Problems found in a readable folder (a missing data
// file, a location with a path separator, a malformed provenance field) are listed in the output.
void describe_folder(const std::filesystem::path& out, std::ostream& os, bool text = false);
std::string describe_folder_json(const std::filesystem::path& out);

}  // namespace mobius
