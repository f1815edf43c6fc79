// info.cpp - `mobius info OUT`: the subcommand over the library's describe_folder (mobius/info.hpp).
#include "info.hpp"

#include <string>

#include <CLI/CLI.hpp>

#include "mobius/info.hpp"

namespace mobius::cli {

namespace fs = std::filesystem;

int run_info(const fs::path& out, const InfoOptions& opts, std::ostream& os) {
  describe_folder(out, os, !opts.json);
  return 0;
}

std::unique_ptr<InfoCommand> add_info_command(CLI::App& app) {
  auto cmd = std::make_unique<InfoCommand>();
  cmd->app = app.add_subcommand(
      "info", "Show what a built model folder holds: runtime, graph inputs and outputs, weights, provenance");
  cmd->app->footer(
      "For wiring a built model into an app: the runtime the folder is laid out for (ort-genai,\n"
      "onnxruntime, transformers.js), each graph's inputs and outputs with dtype and shape (named\n"
      "dims by name, static by size, unknown as '?'), opset imports, node count, weight dtypes,\n"
      "initializers and bytes, graph and external data file sizes, the runtime config and the\n"
      "provenance (mobius_provenance.json). Problems found (a missing or short data file, an\n"
      "external data location that is a path) are listed. The folder is only read, never\n"
      "changed; external data files are looked at, not opened.\n"
      "Exit status 1 when OUT is not a mobius output or a graph cannot be read.");
  cmd->app->add_option("out", cmd->out, "Folder written by `mobius build`")->required()->type_name("OUT");
  cmd->app->add_flag("--json", cmd->opts.json, "Print the same facts as one JSON object");
  return cmd;
}

}  // namespace mobius::cli
