// `gridformer plan`: what a run will hold on each rank, computed from the config before anything
// is allocated (the model's parameter table and buffer plan, models/transformer_lm.h; the same
// code sizes the model when it is built): parameters, gradients, AdamW moments (a ZeRO-1 shard),
// the low-precision weight copy, activations and their largest buffers.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "runner/config/config.h"

namespace gf {

std::string human_bytes(double bytes);
// The plan for `ranks` ranks (the config's layout must fit them: see layout_error_message). With
// memory_per_rank > 0 (bytes) it says whether the largest rank fits, and sets *fits. With `json`, the same figures
// as an object: world_size, layout, parameters, global_batch, flops_per_step, largest_rank_bytes, [memory_per_rank,
// fits], and ranks: one entry per pipeline stage and tensor-parallel rank (bytes of each kind and their total).
// Where the ranks run: `hosts` hosts of ranks / hosts consecutive ranks each (mpirun's default placement), and the
// bandwidth between them in GB/s (plan --network-gbs, or what `probe --network` measured). A group whose ranks span
// two hosts sends at `gbs`; `source` says where it came from, for the report.
struct PlanHosts {
  int hosts = 1;
  double gbs = 0;
  double latency_us = 0;  // a message between hosts (probe --network's; 0 with --network-gbs alone)
  std::string source = "given";
};
// Whether some group of `size` ranks, `stride` apart in the grid's rank order (parallel/grid.h), spans two hosts of
// `per_host` consecutive ranks.
bool group_spans_hosts(int ranks, int per_host, int stride, int size);
std::string plan_report(const Config& cfg, int ranks, double memory_per_rank = 0, bool* fits = nullptr,
                        nlohmann::json* json = nullptr, const PlanHosts& where = {});

}  // namespace gf
