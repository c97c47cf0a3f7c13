// `gridformer config` and `gridformer plan` (runner/cli/config_cli.h).
#include "runner/cli/config_cli.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "models/weights/hf_config.h"
#include "runner/cli/convert.h"
#include "runner/cli/probe_network.h"
#include "runner/cli/rank_start.h"
#include "runner/config/arch_section.h"
#include "runner/config/config.h"
#include "runner/config/layout_check.h"
#include "runner/report/plan.h"
#include "runner/report/plan_search.h"
#include "runner/train/batch_source.h"

namespace gf::cli {
namespace {

// The layout's problems for `ranks` ranks (all of them when ranks > 0, else those that hold whatever the
// rank count), as the message `config` and `plan` print; empty when there are none.
std::string layout_message(const gf::Config& cfg, const std::string& config_path, int ranks) {
  std::string msg = ranks > 0 ? gf::layout_error_message(cfg, ranks) : "";
  if (const auto problems = gf::config_layout_problems(cfg); msg.empty() && !problems.empty()) {
    msg = config_path + ": " + std::to_string(problems.size()) + " problem(s) in the config:";
    for (const auto& u : problems) msg += "\n  " + u;
  }
  return msg;
}

// plan --hosts: the hosts must split the ranks evenly.
std::string hosts_problem(const ConfigPlanRequest& c, int ranks) {
  if (c.hosts > 1 && ranks % c.hosts != 0)
    return "plan --hosts " + std::to_string(c.hosts) + ": " + std::to_string(ranks) +
           " rank(s) do not split evenly over the hosts (each host runs ranks / hosts consecutive ranks)";
  return "";
}

// Where the ranks run, and where the bandwidth between hosts came from.
gf::PlanHosts hosts_of(const ConfigPlanRequest& c) {
  return {c.hosts, c.network_gbs, c.network_latency_us,
          c.network_probe.empty() ? "given" : "probe --network: " + c.network_probe};
}

// `plan --search`: the layouts for --ranks (or the config's own count) ranked by modelled step time.
int run_plan_search(const ConfigPlanRequest& c) {
  const gf::Config cfg = gf::load_config(c.config_path, c.sets);
  const int n = c.ranks > 0 ? c.ranks : static_cast<int>(cfg.parallel.ranks());
  if (const std::string e = hosts_problem(c, n); !e.empty()) {
    std::cerr << "error: " << e << "\n";
    return 2;
  }
  const double bound =
      c.memory_per_rank.empty() ? 0.0 : static_cast<double>(gf::parse_byte_size(c.memory_per_rank, "--memory-per-rank"));
  const gf::SearchResult r = gf::search_layouts(c.config_path, c.sets, n, bound, hosts_of(c));
  std::cout << (c.json ? gf::search_json(r, c.top).dump(1) + "\n" : gf::search_report(r, c.top, bound));
  if (r.ranked.empty() && r.unranked.empty()) {
    std::cerr << "error: no layout of " << n << " rank(s) " << (bound > 0 ? "fits --memory-per-rank " + c.memory_per_rank : "passes the checks")
              << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

// `config` (plan false) prints the resolved config; `plan` what each rank will hold. Both check the layout first.
int run_config_or_plan(const ConfigPlanRequest& given, bool plan) {
  ConfigPlanRequest c = given;
  try {
    if (plan && !c.network_probe.empty()) {
      if (c.hosts <= 1) {
        std::cerr << "error: plan --network-probe prices the links between hosts: give --hosts H (H > 1) too\n";
        return 2;
      }
      const gf::NetworkLink l = network_probe_link(c.network_probe);
      c.network_gbs = l.gbs;
      c.network_latency_us = l.latency_us;
    }
    if (plan && c.hosts > 1 && !(c.network_gbs > 0)) {
      std::cerr << "error: plan --hosts " << c.hosts << " needs the bandwidth between two hosts: --network-probe FILE "
                << "(what `mpirun -np 2 --host A,B gridformer probe --network` measured) or --network-gbs G in GB/s "
                << "(e.g. 12.5 for 100 Gb/s Ethernet)\n";
      return 2;
    }
    if (plan && c.search) return run_plan_search(c);
    const gf::Config cfg = gf::load_config(c.config_path, c.sets);
    for (const auto& w : cfg.warnings) std::cerr << "warning: " << w << "\n";
    const int n = !plan || c.ranks > 0 ? c.ranks
                                       : static_cast<int>(cfg.parallel.ranks());
    if (const std::string e = plan ? hosts_problem(c, n) : ""; !e.empty()) {
      std::cerr << "error: " << e << "\n";
      return 2;
    }
    if (const std::string msg = layout_message(cfg, c.config_path, n); !msg.empty()) {
      std::cerr << "error: " << msg << "\n";
      return 2;
    }
    // The data as train opens it: a problem is the pre-flight's error under --ranks (what run_distribute.sh
    // and msrun_launcher.sh run before starting any rank), a warning otherwise (the config still prints).
    if (const std::string data = plan ? "" : gf::data_problem(cfg); !data.empty()) {
      if (c.ranks > 0) {
        std::cerr << "error: " << data << "\n";
        return kSetupError;
      }
      std::cerr << "warning: train would refuse this config's data: " << data << "\n";
    }
    if (!plan) {
      std::cout << gf::dump_resolved(cfg);
      return 0;
    }
    const double bound =
        c.memory_per_rank.empty() ? 0.0 : static_cast<double>(gf::parse_byte_size(c.memory_per_rank, "--memory-per-rank"));
    bool fits = true;
    nlohmann::json json;
    const std::string text = gf::plan_report(cfg, n, bound, &fits, c.json ? &json : nullptr, hosts_of(c));
    std::cout << (c.json ? json.dump(1) + "\n" : text);
    if (!fits) {
      std::cerr << "error: the largest rank does not fit in --memory-per-rank " << c.memory_per_rank
                << ": more ranks, ZeRO (parallel.enable_parallel_optimizer, parallel_config.zero_stage), recompute or "
                   "bfloat16 moments lower it\n";
      return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << describe(e) << "\n";
    return kSetupError;
  }
}


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
