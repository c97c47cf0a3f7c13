// `gridformer config` and `gridformer plan` (runner/cli/config_cli.cpp).
#pragma once
#include <string>
#include <vector>

namespace gf::cli {

// What `config` and `plan` were asked (their command-line options).
struct ConfigPlanRequest {
  std::string config_path;
  std::vector<std::string> sets;
  int ranks = 0;                // --ranks (0: not given)
  std::string memory_per_rank;  // plan --memory-per-rank
  bool json = false;            // plan --json
  bool search = false;          // plan --search
  int top = 5;                  // plan --search --top
  int hosts = 1;                // plan --hosts
  double network_gbs = 0;       // plan --network-gbs
  double network_latency_us = 0;  // from --network-probe's file (none with --network-gbs alone)
  std::string network_probe;    // plan --network-probe (probe --network's file; network_gbs from it)
};

// `config` (plan false) prints the resolved config; `plan` what each rank will hold, or with search the layouts for
// the ranks ranked by modelled step time. Both check the layout first. Returns the exit status.
int run_config_or_plan(const ConfigPlanRequest& c, bool plan);

// `config --from-hf DIR`: the model section of a Hugging Face config.json (DIR/config.json, or the file), checked by
// reading it back; printed on stdout. Returns the exit status (2 with a message on stderr for a problem).
int run_config_from_hf(const std::string& path);

}  // namespace gf::cli
