// `gridformer plan --search`: every layout of the config's model for N ranks of one host, each checked as `train`
// would check it and planned as `plan` plans it (runner/report/plan.h), ranked by the modelled step time
// (runner/report/step_time.h) among those that fit the memory bound.
//
// What varies: data_parallel x model_parallel x pipeline_stage x context_parallel = N; sequence parallel (mp > 1);
// the context-parallel algorithm (ring, Ulysses); expert_parallel (MoE: dividing the data-parallel degree and the
// experts); ZeRO stage 0-3 (data x context > 1); for pipelines the schedule (1F1B, ZB-H1, interleaved with two
// chunks a stage) and the micro-batch count (pp, 2 pp, 4 pp or the config's micro batch); without one, the
// micro batch (all of the rank's samples, or accumulated over 2, 4 or the config's micro batch); full recompute,
// tried only where the same layout without it does not fit. The global batch stays the config's: a data-parallel
// degree that does not divide it is skipped. What is not searched: hybrid sharding, selective recompute, several
// hosts beyond the bandwidth given between them (a group that spans hosts sends at it: PlanHosts), and the layouts
// whose bytes plan does not count yet (they are listed apart, unranked).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include "runner/report/plan.h"
#include <yaml-cpp/yaml.h>

namespace gf {

struct SearchCandidate {
  std::vector<std::pair<std::string, std::string>> sets;  // key, value: what this layout sets over the config
  std::string label;                                      // "dp2 ZeRO-1, micro batch 4", ...
  double seconds = 0;                                     // modelled step time (when not_modelled is empty)
  double compute = 0, optimizer = 0, communication = 0;
  std::string not_modelled;                               // why it has no modelled time
  double largest_rank_bytes = 0;
  double cross_host_bytes = 0;                            // a step's bytes in groups that span hosts
  int64_t micro_batch = 1;
  std::string shape;                                      // "dp2 mp1 pp1 cp1 ep1"
  bool fits = true;
};

struct SearchResult {
  int ranks = 0;
  PlanHosts where;
  int64_t global_batch = 0;
  YAML::Node resolved;      // the config's own resolved tree (the snippets show what differs from it)
  int tried = 0;            // layouts checked
  int refused = 0;          // refused by the config or layout check
  int batch_skipped = 0;    // data-parallel degrees that do not divide the global batch
  std::string first_refusal;  // one refusal's message, for the summary
  std::vector<SearchCandidate> ranked;    // fit and modelled, fastest first
  std::vector<SearchCandidate> unranked;  // fit, no modelled time
  std::vector<SearchCandidate> too_big;   // do not fit memory_per_rank (smallest first)
};

// Searches the layouts of `config_path` (with the user's `sets` applied first) for `ranks` ranks. Throws ConfigError
// when the config itself does not load.
SearchResult search_layouts(const std::string& config_path, const std::vector<std::string>& sets, int ranks,
                            double memory_per_rank, const PlanHosts& where = {});

// The report: a summary line, the best `top` as parallel_config snippets with their memory and modelled time, then the
// fitting layouts it could not rank.
std::string search_report(const SearchResult& r, int top, double memory_per_rank);
// With `top`, ranked (the best `top`), unranked, too_big (a count) and best_per_shape (the fastest ranked layout of each
// dp x mp x pp x cp x ep, fastest first), each layout with its label, sets, largest_rank_bytes and modelled seconds.
nlohmann::json search_json(const SearchResult& r, int top);
// The fastest ranked layout of each parallel shape, fastest first.
std::vector<const SearchCandidate*> best_per_shape(const SearchResult& r);

}  // namespace gf
