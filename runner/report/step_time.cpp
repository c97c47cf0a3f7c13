#include "runner/report/step_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include <stdexcept>

#include "core/optim/adamw.h"
#include "models/registry.h"
#include "runner/config/config.h"
#include "runner/report/machine_probe.h"
#include "runner/report/network_link.h"
#include "runner/report/step_comm.h"

namespace gf {

StepTime model_step_time(const StepTimeInputs& in, const MachineProbe* probe) {
  StepTime t;
  if (probe == nullptr) {
    t.not_modelled = "no machine probe of this CPU (build/bin/machine_probe writes it; scripts/setup.sh runs it)";
    return t;
  }
  if (probe->cores_share < kQuietCoresShare) {
    t.not_modelled = fmt::format("the machine probe measured a busy machine ({:.2f} of the cores): run "
                                 "build/bin/machine_probe --if-stale", probe->cores_share);
    return t;
  }
  const double gflops = in.bf16 ? probe->gflops_bf16
                        : probe->fp32_backend == "onednn" ? probe->gflops_onednn
                        : probe->fp32_backend == "eigen"  ? probe->gflops_eigen
                                                          : probe->gflops_blas;
  if (gflops <= 0 || probe->triad_gbs <= 0 || probe->threads <= 0) {
    t.not_modelled = "the machine probe has no GEMM rate or triad bandwidth for this (a version-1 file: run it again)";
    return t;
  }
  // The rank's share of the machine: its threads of the probe's (a rank with fewer threads has fewer cores), and no
  // more than the cores over the ranks that share them.
  const double share = std::min({1.0, static_cast<double>(in.threads) / probe->threads,
                                 1.0 / std::max(1, in.ranks_per_host)});
  const double rate = gflops * 1e9 * share, triad = probe->triad_gbs * 1e9 * share;
  t.compute = in.flops * (1.0 + in.recompute) / rate;
  // AdamW: weights, gradients and both moments read; weights and both moments written.
  t.optimizer = in.shard_floats * (3 * 4.0 + 4 * in.moment_bytes) / triad;
  // Within a host a message is a copy through memory, written once and read once: half the machine's triad. (Priced at
  // the rank's share of it instead, GPT-2 124M's search on 2 ranks chose mp2, which measured 15% slower than its dp2
  // choice: bench/plan_search.py, 2026-12-05.)
  const double link = in.link_gbs > 0 ? in.link_gbs * 1e9 : probe->triad_gbs * 1e9 / 2;
  t.communication = in.sent_bytes / link + (in.cross_bytes > 0 ? in.cross_bytes / (in.cross_gbs * 1e9) : 0.0) +
                    (in.messages * in.latency_us + in.cross_messages * in.cross_latency_us) * 1e-6;
  const double bubble = std::clamp(in.bubble, 0.0, 0.99);
  t.seconds = (t.compute + t.optimizer) / (1.0 - bubble) + t.communication;
  t.basis = fmt::format("products at {:.0f} GFLOP/s ({} {} x {}/{} threads), AdamW at the {:.1f} GB/s triad x the same "
                        "share, messages at {:.1f} GB/s{}{}",
                        gflops * share, in.bf16 ? "bf16" : "fp32", in.bf16 ? "oneDNN" : probe->fp32_backend, in.threads,
                        probe->threads, probe->triad_gbs, link / 1e9,
                        std::string(in.link_gbs > 0 ? " (given)" : " (half the triad: within a host)") +
                            (in.cross_bytes > 0 ? fmt::format(", {:.3g} GB/s between hosts ({})", in.cross_gbs, in.cross_source) : "") +
                            (in.latency_us > 0 ? fmt::format(", {:.3g} us a message ({:.0f} a step; {})", in.latency_us,
                                                             in.messages, in.latency_source)
                                               : fmt::format(", no latency a message ({})", in.latency_source)) +
                            (in.cross_messages > 0 ? fmt::format(", {:.3g} us a message between hosts ({:.0f} a step)",
                                                                 in.cross_latency_us, in.cross_messages)
                                                   : std::string()),
                        bubble > 0 ? fmt::format(", bubble {:.1f}%", 100 * bubble) : std::string());
  return t;
}

StepTimeInputs step_time_inputs(const Config& cfg, double flops, double shard_floats, const StepComm& sent, double bubble,
                                int threads, int ranks_per_host) {
  StepTimeInputs in;
  in.flops = flops;
  in.recompute = recompute_share(cfg);
  in.bf16 = cfg.compute_dtype == ComputeDtype::kBFloat16;
  in.moment_bytes = static_cast<double>(moment_element_bytes(cfg.adamw.moment_dtype));
  in.shard_floats = shard_floats;
  in.sent_bytes = sent.tensor + sent.data + sent.pipeline + sent.embedding + sent.context + sent.expert_data + sent.expert;
  in.bubble = bubble;
  in.threads = threads;
  in.ranks_per_host = ranks_per_host;
  in.messages = sent.messages;
  std::string why;
  if (const std::optional<NetworkLink> l = host_network_link(ranks_per_host, &why)) {
    in.latency_us = l->latency_us;
    in.latency_source = fmt::format("probe --network within this host, {} ranks: {}{}", l->world_ranks, l->path,
                                    why.empty() ? "" : "; " + why);
  } else {
    in.latency_source = why;
  }
  return in;
}

namespace {

// A layer's multiply-adds per token (TransformerLM::model_flops's terms): its projections' products P, and its
// attention's score and context products A; and the head's C V.
struct LayerTerms {
  TransformerSpec s;
  double head = 0;
  explicit LayerTerms(const Config& cfg) : s(find_model(cfg.model.arch, cfg.model.type).spec(cfg.model)) {
    head = static_cast<double>(s.hidden) * static_cast<double>(s.vocab);
  }
  std::pair<double, double> operator()(int64_t layer) const {
    const double C = static_cast<double>(s.hidden), D = static_cast<double>(s.head_dim()),
                 H = static_cast<double>(s.heads), Hkv = static_cast<double>(s.kv_heads), F = static_cast<double>(s.ffn),
                 T = static_cast<double>(s.seq);
    const double m = gated_mlp(s.mlp) ? 3.0 : 2.0;
    const double k = static_cast<double>(s.moe.topk), E = static_cast<double>(s.moe.experts);
    const double Fe = s.moe.ffn > 0 ? static_cast<double>(s.moe.ffn) : F, Fs = static_cast<double>(s.moe.shared_ffn);
    const double mlp = s.moe.is_moe(layer) ? k * m * C * Fe + C * E + m * C * Fs : m * C * F;
    return {C * (H + 2 * Hkv) * D + C * H * D + mlp, 2 * T * H * D};
  }
};

}  // namespace

double recompute_share(const Config& cfg) {
  const ModelLayout L = model_layout(cfg);
  if (L.recompute == RecomputePolicy::kNone) return 0.0;
  const LayerTerms terms(cfg);
  double extra = 0, all = terms.head;
  for (int64_t l = 0; l < terms.s.layers; ++l) {
    const auto [P, A] = terms(l);
    all += P + A;
    if (L.recomputes(l)) extra += L.recompute == RecomputePolicy::kFull ? P + A : A;
  }
  return extra / (3 * all);
}

std::vector<pipeline::Costs> pipeline_stage_costs(const Config& cfg, const std::vector<int64_t>& stage_layers) {
  const LayerTerms terms(cfg);
  const double tokens = static_cast<double>(cfg.batch_size) * static_cast<double>(terms.s.seq);  // a micro-batch's
  std::vector<pipeline::Costs> out;
  int64_t layer = 0;
  for (size_t v = 0; v < stage_layers.size(); ++v) {
    double P = 0, A = 0;  // multiply-adds per token
    for (int64_t i = 0; i < stage_layers[v]; ++i, ++layer) {
      const auto [p, a] = terms(layer);
      P += p;
      A += a;
    }
    if (v + 1 == stage_layers.size()) P += terms.head;
    const double f = 2 * tokens;  // FLOPs per multiply-add, over the micro-batch's tokens
    out.push_back({f * (P + A), f * (P + 2 * A), f * P});
  }
  return out;
}

double priced_bubble(const Config& cfg, const pipeline::StageLists& lists, const pipeline::Shape& shape) {
  std::vector<int64_t> layers = cfg.parallel.stage_layers;
  const int64_t n = static_cast<int64_t>(shape.stages) * shape.chunks;
  if (static_cast<int64_t>(layers.size()) != n) {  // an even split (a config read from YAML carries its own)
    layers.clear();
    for (int64_t i = 0; i < n; ++i) layers.push_back(cfg.model.num_layers / n + (i < cfg.model.num_layers % n ? 1 : 0));
  }
  const pipeline::Simulation sim = pipeline::simulate(lists, shape, pipeline_stage_costs(cfg, layers));
  if (!sim.ok) throw std::logic_error("the pipeline's lists fail their simulation: " + sim.error);
  return sim.bubble_fraction;
}

}  // namespace gf
