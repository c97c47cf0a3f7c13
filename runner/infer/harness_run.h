// `gridformer eval`: lm-evaluation-harness's tasks (runner/infer/harness.h) on load_checkpoint's model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runner/config/config.h"
#include "runner/infer/harness.h"
#include "parallel/parallel_context.h"

namespace gf {

class Generator;

struct HarnessOptions {
  std::string tasks;      // --tasks: comma-separated
  std::string data;       // --data: DIR with <task>.jsonl
  std::string output;     // --output: results JSON (samples_<task>.jsonl beside it)
  int64_t batch = 8;      // --batch_size: requests side by side in one model call
  int64_t max_rows = 512; // token rows of one call (at least seq_length)
};

// Scores token requests with the generator: up to `slots` requests side by side, `max_rows` rows a call; a request
// longer than max_rows alone, in chunks. Collective over the generator's tensor and pipeline groups; on a pipeline
// stage before the last (no logits) the scores are left at {0, true}.
std::vector<Scored> score_requests(Generator& gen, const std::vector<TokenRequest>& reqs, int64_t slots, int64_t max_rows);
// score_requests over a data-parallel group (the requests dealt round-robin) and a pipeline group (the last stage
// scores): every rank given every score.
std::vector<Scored> score_shared(Generator& gen, const std::vector<TokenRequest>& reqs, int64_t slots, int64_t max_rows,
                                 const Communicator& dp, const Communicator& pp);
// Reads the tasks, builds and loads the model (build_for_generation), scores, prints the harness's table on stdout
// (rank 0) and writes the results JSON and samples. Throws for bad input before any scoring.
int run_harness(const Config& cfg, const ParallelContext& ctx, const HarnessOptions& opt);

}  // namespace gf
