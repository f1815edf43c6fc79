// info.hpp - `mobius info OUT`: what an app needs to use a built model folder.
//
// Prints the runtime the folder is laid out for, each graph's inputs and outputs (dtype, shape),
// opset imports, node and initializer counts, weight dtypes and bytes, file sizes, the runtime
// config and the provenance; `--json` prints the same facts as one JSON object. The folder is
// only read, never changed, and only the files a mobius output holds are opened: the graphs, the
// runtime config (genai_config.json, config.json) and mobius_provenance.json. External data
// files are looked at (their size), never opened, and a location that is not a plain file name
// beside its graph is reported, not followed.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <memory>
#include <string>

namespace CLI {
class App;
}

namespace mobius::cli {

struct InfoOptions {
  bool json = false;  // one JSON object instead of text
};

// Prints the facts about the folder `out` to `os` and returns 0. A folder that is not a mobius
// output, or a graph that cannot be read or parsed, throws mobius::Error naming the folder or
// file (main prints it and exits 1). Problems found in a readable folder (a missing data file, a
// location with a path separator, a malformed provenance field) are listed in the output.
int run_info(const std::filesystem::path& out, const InfoOptions& opts, std::ostream& os);

// The `info` subcommand, registered on `app`; after parsing, `if (*cmd->app) return cmd->run(std::cout);`.
struct InfoCommand {
  CLI::App* app = nullptr;
  std::string out;
  InfoOptions opts;
  int run(std::ostream& os) const { return run_info(out, opts, os); }
};
std::unique_ptr<InfoCommand> add_info_command(CLI::App& app);

}  // namespace mobius::cli
