// Hugging Face's RoPE variants (transformers' src/transformers/modeling_rope_utils.py): the config
// keys (`rope_scaling` in transformers 4.x config.json, `rope_parameters` in 5.x) and the inverse
// frequencies each `_compute_*_parameters` gives, transcribed step by step in float32 where HF
// computes in float32 (torch tensors) and in double where HF computes in Python floats.
//
// Transcribed from transformers 5.x (the rope_parameters form, read in the search index's copy of
// modeling_rope_utils.py; its commit could not be pinned), checked against the 4.x text (commit
// ef46806472a64b0013ed413781e3afed82bfa047, a 4.4x before yarn's mscale and truncate, and the 4.5x
// yarn with them) for the 4.x form. tools/hf_rope_reference.py is the same transcription in torch,
// tests/golden/rope/rope_cases.json what it gives. Where 4.x and 5.x differ we follow 5.x:
//   * yarn uses the config's `factor`; 4.x (before PR #40320) replaced it by max_position_embeddings /
//     original_max_position_embeddings whenever the latter was given (HF issue #38224).
//     The same for DeepSeek (40 = 163840 / 4096); not for Qwen's recipe (factor 4, original 32768 with
//     max_position_embeddings 32768 or 40960), where 4.x ran a factor of 1 or 1.25.
//   * a top-level `original_max_position_embeddings` (Phi-3) comes first for llama3, yarn and longrope
//     (5.x's standardize_rope_params), else the rope dict's, else max_position_embeddings.
//
// dynamic ("dynamic NTK"): HF recomputes the frequencies in each forward from that forward's length,
// max(position_ids) + 1, once it exceeds max_position_embeddings (and goes back below it). gridformer
// fixes them at one seq_len: the run's seq_length for training, the KV cache capacity for generation,
// so a forward shorter than that uses the frequencies of the longest one (HF would use those of its
// own length; the same whenever seq_len <= max_position_embeddings, where dynamic is the default RoPE).
// longrope: HF switches to long_factor in a forward whose length exceeds
// original_max_position_embeddings; gridformer decides once, by seq_len, in the same way.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/ops/rope.h"

namespace gf::ops {

// One global RoPE configuration, with HF's defaults (None in HF is the "unset" value here).
struct RopeScaling {
  // "default", "linear", "dynamic", "yarn", "llama3", "longrope".
  std::string rope_type = "default";
  // The context extension. Required (>= 1) by linear, dynamic, yarn and llama3; longrope's is optional:
  // 0 = unset, then max_position_embeddings / original_max_position_embeddings, as HF does.
  double factor = 0.0;
  // The pretraining context: 0 = unset, then the model's max_position_embeddings. Used by yarn (the
  // correction range), llama3 (required: the wavelengths that are scaled) and longrope (the length
  // past which long_factor applies, and the default attention factor).
  int64_t original_max_position_embeddings = 0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3 (required in the config)
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn's ramp bounds, in rotations
  // yarn: with both set (non-zero), attention_factor = get_mscale(factor, mscale) /
  // get_mscale(factor, mscale_all_dim) (DeepSeek); otherwise 0.1 ln(factor) + 1.
  double mscale = 0.0, mscale_all_dim = 0.0;
  std::optional<double> attention_factor;  // yarn, longrope: overrides the derived cos/sin factor
  bool truncate = true;                    // yarn: floor/ceil the correction range (gpt-oss sets false)
  std::vector<double> short_factor, long_factor;  // longrope: rotary_dim / 2 per-frequency divisors
  // The fraction of each head that rotates: rotary_dim = int(head_dim * partial_rotary_factor).
  double partial_rotary_factor = 1.0;

  bool operator==(const RopeScaling&) const = default;
  // One line for logs, e.g. "yarn factor 40 original_max_position_embeddings 4096 mscale 0.707 ...".
  std::string describe() const;
};

struct RopeConfig {
  double theta = 10000.0;  // rope_theta, RoPE's base
  RopeScaling scaling;
  bool operator==(const RopeConfig&) const = default;
};

// Reads a Hugging Face config.json object: transformers 4.x `rope_scaling` (a map with `rope_type`
// or the older `type`; null or absent = default) beside a top-level `rope_theta`, or transformers
// 5.x `rope_parameters` (rope_type, rope_theta and the variant's keys in one map); a non-null
// rope_scaling wins as in 5.x, and where both are given they must agree. `partial_rotary_factor` at
// the top level or inside the map; `original_max_position_embeddings` at the top level (Phi-3) or
// inside. default_theta: the model's when the config gives no rope_theta (Llama: 10000).
// Throws std::invalid_argument naming the key and what is accepted: an unknown rope type, a factor
// below 1, a missing required key, a value of the wrong type, longrope factors of the wrong length
// (checked when head_dim or hidden_size / num_attention_heads is in the config), rope_parameters per
// layer type (not run here). Keys that no variant reads are ignored, as HF ignores them (with a warning).
RopeConfig read_rope_config(const nlohmann::json& config, double default_theta);
// The same, the scaling only.
RopeScaling read_rope_scaling(const nlohmann::json& config);

// Back to transformers 4.x form: the `rope_scaling` map (null for the default), with the variant's
// required keys and the optional ones that differ from their default; original_max_position_embeddings
// inside the map when set. partial_rotary_factor is not part of it (a top-level key in 4.x).
nlohmann::json rope_scaling_json(const RopeScaling& s);
// Writes rope_theta, rope_scaling (as above) and, when not 1, partial_rotary_factor into a config.json
// object; for longrope also the top-level original_max_position_embeddings that 4.x reads.
// read_rope_config of the result gives rc back.
void write_rope_config(nlohmann::json& config, const RopeConfig& rc);

// inv_freq and attention scaling of variant s, as HF's `_compute_<type>_parameters(config, device,
// seq_len)` with rope_theta theta, head_dim, max_position_embeddings. seq_len: the longest sequence
// the table serves (see dynamic and longrope above; the others ignore it). Throws
// std::invalid_argument for what HF could not run (an odd or empty rotary_dim, longrope factors of
// the wrong length, a required factor unset).
RopeFrequencies rope_frequencies(int64_t head_dim, double theta, const RopeScaling& s, int64_t max_position_embeddings,
                                 int64_t seq_len);

}  // namespace gf::ops
