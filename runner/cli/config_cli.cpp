// `gridformer config --from-hf` (runner/cli/config_cli.h).
#include "runner/cli/config_cli.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "models/weights/hf_config.h"
#include "runner/cli/rank_start.h"
#include "runner/config/arch_section.h"
#include "runner/config/config.h"

namespace gf::cli {

// `config --from-hf DIR`: the model section of a Hugging Face config.json, checked by reading it back.
int run_config_from_hf(const std::string& path) {
  try {
    const std::filesystem::path file =
        std::filesystem::is_directory(path) ? std::filesystem::path(path) / "config.json" : std::filesystem::path(path);
    std::ifstream in(file);
    if (!in) throw std::runtime_error(file.string() + ": cannot read (a Hugging Face model directory holds config.json)");
    nlohmann::json hf;
    try {
      hf = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(file.string() + ": not JSON (" + e.what() + ")");
    }
    const gf::ModelConfig m = gf::model_config_from_hf(hf, file.string());
    const gf::ArchConfigSection* section = gf::find_arch_section(m.type);
    if (section == nullptr || !section->model_yaml)
      throw std::runtime_error(file.string() + ": " + m.type + "'s model section cannot be written out");
    const std::string yaml = section->model_yaml(m);
    // Read back, the section must describe the model config.json describes.
    const gf::Config back = gf::load_config_string(yaml + "train_dataset: {data_loader: {type: RandomTokens}}\n", {},
                                                   "the model section of " + file.string());
    const gf::HfConfigCheck check = gf::check_hf_config(hf, back.model, file.string());
    if (!check.errors.empty() || !check.warnings.empty())
      throw std::logic_error("the model section written for " + file.string() + " does not read back as it: " +
                             (check.errors.empty() ? check.warnings : check.errors).front());
    std::cout << "# From " << file.string() << " (gridformer config --from-hf); paste over your config's model section.\n"
              << yaml;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << describe(e) << "\n";
    return kSetupError;
  }
}

}  // namespace gf::cli
