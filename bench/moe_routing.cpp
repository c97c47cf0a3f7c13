// The routing of each data-parallel rank's share of a training run's batches, from one-rank
// forwards: the independent side of bench/moe_alltoall.py's all-to-all byte count (the way
// tests/mpi/moe_mpi.cpp derives it at small scale).
//
//   build/bin/moe_routing --config CFG [--set key=value ...] --dp N --steps S
//
// Loads CFG as `gridformer train` does (with the --set overrides), then builds the model on ONE
// rank (data_parallel, expert_parallel, model_parallel forced to 1) for a micro-batch of
// runner_config.batch_size samples (what one data-parallel rank of the run holds), initialises its
// weights from `seed` as the trainer does, and, for step i = 1..S and data-parallel rank r < N,
// runs the forward on the samples that rank r reads at step i of an N-rank run
// (first = (i-1) G + r b, G = b N: runner/train/batch_source.h). The weights are never updated: the run
// it describes must leave them unchanged (learning rate 0), so that every step routes with the
// initial weights. One JSON line per (step, rank): the rows each expert of each MoE layer computes
// for that rank's tokens (kept_per_expert, after capacity) and the assignments before capacity.
// The fp32 GEMM backend is the trainer's (apply_machine_probe: GF_MACHINE_PROBE / GF_GEMM).
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/math/gemm.h"
#include "models/registry.h"
#include "parallel/communicator.h"
#include "parallel/parallel_context.h"
#include "runner/train/batch_source.h"
#include "runner/config/config.h"
#include "runner/report/machine_probe.h"

int main(int argc, char** argv) {
  gf::MpiEnvironment mpi(&argc, &argv);
  std::string config;
  std::vector<std::string> sets = {"parallel_config.data_parallel=1", "parallel_config.expert_parallel=1",
                                   "parallel_config.model_parallel=1"};
  int64_t dp = 1, steps = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "moe_routing: " << a << " needs a value\n";
      return 2;
    }
    if (a == "--config") config = argv[++i];
    else if (a == "--set") sets.push_back(argv[++i]);
    else if (a == "--dp") dp = std::atoll(argv[++i]);
    else if (a == "--steps") steps = std::atoll(argv[++i]);
    else {
      std::cerr << "usage: moe_routing --config CFG [--set key=value ...] --dp N --steps S\n";
      return 2;
    }
  }
  if (config.empty() || dp < 1 || steps < 1) {
    std::cerr << "usage: moe_routing --config CFG [--set key=value ...] --dp N --steps S\n";
    return 2;
  }
  try {
    const int threads = omp_get_max_threads();
    gf::gemm_set_threads(threads);
    const gf::MachineSetup machine = gf::apply_machine_probe(threads);
    const gf::Config cfg = gf::load_config(config, sets);
    const gf::ParallelContext one = gf::ParallelContext::single();
    auto model = gf::build_model(cfg.model, gf::model_layout(cfg), cfg.batch_size, one);
    model->init_weights(static_cast<uint64_t>(cfg.seed));
    const int64_t b = cfg.batch_size, G = b * dp, n = b * (cfg.model.seq_length + 1);
    auto data = gf::make_batch_source(cfg.train_data, cfg.model, steps * G, 0, "train_dataset");
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int64_t step = 1; step <= steps; ++step)
      for (int64_t r = 0; r < dp; ++r) {
        const int64_t first = (step - 1) * G + r * b;
        data->read(first, b, tokens.data());
        model->forward(tokens.data(), gf::StepInfo{step, first, true});
        nlohmann::json kept = nlohmann::json::array(), assigned = nlohmann::json::array(),
                       layers = nlohmann::json::array();
        for (const gf::MoeLayerStats& s : model->moe_stats()) {
          kept.push_back(s.kept_per_expert);
          assigned.push_back(s.tokens_per_expert);
          layers.push_back(s.layer);
        }
        const nlohmann::json j = {{"step", step},           {"dp_rank", r},        {"first_sample", first},
                                  {"samples", b},           {"layers", layers},    {"kept", kept},
                                  {"assigned", assigned},   {"gemm_backend", machine.gemm_backend}};
        std::cout << j.dump() << "\n";
      }
  } catch (const std::exception& e) {
    std::cerr << "moe_routing: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
