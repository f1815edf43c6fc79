// info.hpp - `mobius info OUT`: what an app needs to use a built model folder (the facts
// mobius/info.hpp's describe_folder gathers); `--json` prints them as one JSON object.
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
