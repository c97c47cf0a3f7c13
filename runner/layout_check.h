// The checks every rank runs on the parallel layout before any work: the grid must cover the
// ranks exactly, and the model must split the way the layout asks. Each problem names the YAML
// keys; the caller prints them once (from rank 0) with a layout that would fit.
#pragma once
#include <string>
#include <vector>

#include "runner/config.h"

namespace gf {

std::vector<std::string> layout_problems(const Config& cfg, int world_size);
// The parallel axes the config asks for that are not built yet (pipeline_stage > 1, expert_parallel
// > 1), whatever the rank count: part of layout_problems, and what `gridformer config` refuses.
std::vector<std::string> unbuilt_parallelism(const Config& cfg);
// Things the layout check lets run but the user should hear about: use_parallel: False with
// several ranks.
std::vector<std::string> layout_warnings(const Config& cfg, int world_size);
// "data_parallel: D, model_parallel: M, pipeline_stage: 1" for a layout of world_size ranks that
// passes every check with this model (the largest model_parallel not above the one asked for), or
// an empty string when there is none.
std::string suggest_layout(const Config& cfg, int world_size);
// The one message for a layout that does not fit `world_size` ranks, as the ranks print it and as
// `gridformer config --ranks N` (run_distribute.sh's check before launch) prints it: a first line,
// each problem on its own indented line, then a layout that fits (or that none does). Empty when
// the layout fits.
std::string layout_error_message(const Config& cfg, int world_size);

}  // namespace gf
