// The bytes one rank sends in a training step, per process group, counted from the config: every collective
// the step runs (the layers' tensor-parallel all-reduces or, under sequence parallel, their all-gathers and
// reduce-scatters, the vocabulary-parallel head's, the gradient all-reduce's buckets or ZeRO-1's reduce-scatter
// and all-gather, the scalars of the loss and the gradient norm) at the ring's bytes for the rank's position
// (parallel/communicator.h ring_*_sent). `gridformer plan` prints it; the trainer logs it beside what its
// communicators counted, so a difference shows (tests/integration/plan_bytes.sh holds them equal).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gf {

struct Config;
struct StageOptions;
class Placement;

struct StepComm {
  double tensor = 0;  // bytes sent in the tensor-parallel group
  double data = 0;    // in the data-parallel group (the gradient reduction's, and the loss's)
  double pipeline = 0;  // in the pipeline group: the stage-to-stage activations and gradients, the step's scalars
  double embedding = 0;  // in the tied embedding's group (its copies on the first and last stage summed)
  double context = 0;    // in the context-parallel group and its Ulysses and ring subgroups (the attention's exchanges)
  double expert_data = 0;  // in the expert-data group (the ranks holding the same experts): the experts' gradients
  // In the expert-parallel group: the MoE layers' dispatch and the experts' part of the gradient norm. The allgather
  // dispatcher's is exact; the all-to-all's follows the routing, and is the count under balanced routing (each
  // token's choices spread evenly over the experts): expert_expected says so.
  double expert = 0;
  bool expert_expected = false;
  // Of `data`, under hybrid sharding: what goes in the shard groups (the reduce-scatters, gathers and norm) and
  // across the replicas (each slice's sum); the rest of `data` in the whole data group.
  double data_shard = 0, data_replica = 0;
  // The messages of all of the above: a step of a ring collective, a point-to-point send (a pipeline hand-off, a ring
  // attention block), an all-to-all's send to each other rank (MPI's own, one a peer). The step-time model prices
  // each at the link's latency.
  double messages = 0;
  // The same per group (with `data_shard` and `data_replica` the parts of `data`, as for the bytes).
  struct Messages {
    double tensor = 0, data = 0, data_shard = 0, data_replica = 0, pipeline = 0, embedding = 0, context = 0,
           expert_data = 0, expert = 0;
  } group_messages;
  // Empty where the count is the step's; otherwise what the count leaves out (pipeline, context or expert
  // parallelism, ZeRO-2/3, ...), and the figures above are not given.
  std::string not_modelled;
};

// The rank of pipeline stage `stage` running `chunks` (one StageOptions{} without a pipeline), at position tp_pos
// of its tensor-parallel group and dp_pos of its data-parallel group, holding `params` (its stage's
// tensor-parallel share of the parameter arena). loss_mask: the training data carries a loss mask (SFT data),
// whose trained targets are counted over the data-parallel group every step, as eod_mask_loss's are.
StepComm step_comm(const Config& cfg, const Placement& params, const std::vector<StageOptions>& chunks, int stage,
                   int tp_pos, int dp_pos, bool loss_mask = false);

}  // namespace gf
