// A first model of a training step's time, from the config and this machine's probe (runner/report/machine_probe.h):
//   compute       the rank's share of the step's model FLOPs (Megatron's count), with the forwards recompute runs
//                 again (recompute_share)
//                 at the probe's GEMM rate for the compute dtype, scaled to the rank's threads;
//   optimizer     AdamW's pass over the rank's shard (weights, gradients and both moments read, three written)
//                 at the probe's triad bandwidth, scaled to the rank's share of the cores as the products are;
//   communication every byte the step sends (runner/report/step_comm.h) at a link bandwidth: given, or within a host
//                 half the triad (a shared-memory message is written once and read once), none hidden behind compute;
//                 the bytes of groups that span hosts (plan --hosts) at the bandwidth given between hosts; and each
//                 message at its link's latency (probe --network's: this host's, and between hosts the one plan names);
//   the pipeline  compute and optimizer stretched by the schedule's bubble, priced by its simulator with each virtual
//                 stage's own work (priced_bubble below): unequal stages (the head on the last) idle the others.
// `gridformer plan` prints it and every run logs it beside the measured step time, so its error is seen (attention's
// softmax, the norms and the other memory-bound work are not in it: on small models it runs short).
#pragma once
#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"

namespace gf {

struct Config;
struct MachineProbe;
struct StepComm;

struct StepTimeInputs {
  double flops = 0;          // the rank's model FLOPs a step (without recompute's)
  double recompute = 0;      // recompute's FLOPs as a share of them (recompute_share)
  bool bf16 = false;         // the products in bf16 (the probe's bf16 rate), else fp32 (its fp32 backend's)
  double shard_floats = 0;   // the parameters this rank's optimizer updates
  double moment_bytes = 4;   // per moment element
  double sent_bytes = 0;     // all groups, a step
  double bubble = 0;         // the pipeline schedule's, 0..1
  int threads = 1;           // the rank's
  int ranks_per_host = 1;    // the ranks sharing this host's cores (more than its cores: each gets cores / ranks)
  double link_gbs = 0;       // GB/s; 0: within a host, half the probe's triad
  double cross_bytes = 0;    // a step's bytes in groups that span hosts (not in sent_bytes)
  double cross_gbs = 0;      // GB/s between hosts (plan --network-gbs, or probe --network's file)
  std::string cross_source = "given";  // where cross_gbs came from, for the basis
  // Messages: each costs its link's latency (runner/report/network_link.h): within a host the host's network probe
  // (none without one, and the basis says so), between hosts probe --network's (none with --network-gbs alone).
  double messages = 0, cross_messages = 0;
  double latency_us = 0, cross_latency_us = 0;
  std::string latency_source;  // the host's probe file, or why there is none
};

struct StepTime {
  double seconds = 0, compute = 0, optimizer = 0, communication = 0;
  std::string basis;      // the rates used, for the log
  std::string not_modelled;  // non-empty: no figure, and why (no probe, or one of a busy machine)
};

StepTime model_step_time(const StepTimeInputs& in, const MachineProbe* probe);

// The inputs the config gives (recompute, dtypes) with the rank's FLOPs, optimizer shard, counted bytes, bubble and
// threads: what plan and the trainer's end-of-run line both model.
StepTimeInputs step_time_inputs(const Config& cfg, double flops, double shard_floats, const StepComm& sent, double bubble,
                                int threads, int ranks_per_host);

// The FLOPs recompute adds to a step, as a share of its model FLOPs: each recomputed layer's forward again (full
// recompute: its products P and attention A; selective: A alone), over three forwards of every layer and the head.
double recompute_share(const Config& cfg);

// Each virtual stage's work on one micro-batch in Megatron's FLOPs (TransformerLM::model_flops's terms, per layer:
// the projections' products P, the attention's score and context products A), split as a split backward runs it:
// forward P + A, input gradient P + 2A, weight gradient P (the attention's products have no weights); the LM head's
// C V products on the last virtual stage (P only). `stage_layers`: the layers of each virtual stage, in order.
std::vector<pipeline::Costs> pipeline_stage_costs(const Config& cfg, const std::vector<int64_t>& stage_layers);
// The bubble of `lists` (every stage's) simulated with those costs: what plan and the end-of-run line stretch the
// compute by. Throws std::logic_error when the lists fail their simulation.
double priced_bubble(const Config& cfg, const pipeline::StageLists& lists, const pipeline::Shape& shape);

}  // namespace gf
