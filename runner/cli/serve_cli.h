// `gridformer serve`'s command line (runner/infer/serve.h is what it runs).
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runner/infer/serve.h"

namespace gf {

struct ServeCli {
  std::string config_path, load_ckpt;
  std::vector<std::string> sets;
  ServeOptions opt;
};

CLI::App* add_serve(CLI::App& app, ServeCli& c);

}  // namespace gf
