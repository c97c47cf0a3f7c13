// The checks every rank runs on the parallel layout before any work: the grid must cover the
// ranks exactly, and the model must split the way the layout asks. Each problem names the YAML
// keys; the caller prints them once (from rank 0) with a layout that would fit.
#pragma once
#include <string>
#include <vector>

#include "runner/config/config.h"

namespace gf {

std::vector<std::string> layout_problems(const Config& cfg, int world_size);
// Pipeline parallelism's rules, whatever the rank count: the layers split over pipeline_stage x
// pipeline_chunks virtual stages as model_config.offset asks (at least one layer each:
// parallel/pipeline/partition.h); and with pipeline_stage > 1, micro_batch_num >= pipeline_stage (and a
// multiple of it for the interleaved schedule), gradient_accumulation_steps 1 (micro_batch_num
// accumulates there), no recompute under zero_bubble_h1. Each message names the keys and a value that works.
std::vector<std::string> pipeline_problems(const Config& cfg);
// Expert parallelism's rules, whatever the rank count: expert_parallel >= 1; > 1 only for a MoE model
// (moe_config.expert_num > 1) whose expert_num it divides; and it divides data_parallel (experts are
// carved from data parallelism: groups of expert_parallel data-parallel ranks share the experts).
// Each message names the keys and an expert_parallel that works.
std::vector<std::string> expert_parallel_problems(const Config& cfg);
// Hybrid sharding's rule: the shard group's size (hybrid_shard_degree / optimizer_weight_shard_size)
// divides the data-parallel x context group, and with experts their data-parallel group; the message
// names the keys and a size that works.
std::vector<std::string> shard_problems(const Config& cfg);
// The three above: the layout rules that hold whatever the rank count. Part of layout_problems, and what
// `gridformer config` and `gridformer plan` refuse when no rank count is given.
std::vector<std::string> config_layout_problems(const Config& cfg);
// Things the layout check lets run but the user should hear about: use_parallel: False with
// several ranks.
std::vector<std::string> layout_warnings(const Config& cfg, int world_size);
// "data_parallel: D, model_parallel: M, pipeline_stage: P" for a layout of world_size ranks that
// splits this model (the largest pipeline_stage, then model_parallel, not above the ones asked for,
// that divide world_size, split the heads and widths, and leave every virtual stage a layer), or an
// empty string when there is none. A config that asks for expert_parallel other than 1 gets
// ", expert_parallel: E" too: the largest not above its own that divides D and moe_config.expert_num.
std::string suggest_layout(const Config& cfg, int world_size);
// The one message for a layout that does not fit `world_size` ranks, as the ranks print it and as
// `gridformer config --ranks N` (run_distribute.sh's check before launch) prints it: a first line,
// each problem on its own indented line, then a layout that fits (or that none does). Empty when
// the layout fits.
std::string layout_error_message(const Config& cfg, int world_size);

}  // namespace gf
