#!/usr/bin/env python3
"""RoPE frequencies as Hugging Face transformers computes them, in plain torch (no transformers).

A transcription of src/transformers/modeling_rope_utils.py, transformers 5.x (the `rope_parameters`
form: `standardize_rope_params` and the five `_compute_*_parameters`, whose text we read in the
search index's copy of the 5.x file; the commit could not be pinned there) plus the default RoPE that
5.x moved into each model's `compute_default_rope_parameters` (modeling_llama.py), checked line by
line against the 4.x text (huggingface/transformers commit ef46806472a64b0013ed413781e3afed82bfa047,
a 4.4x version before yarn's mscale and truncate, and the 4.5x yarn that has them) for the 4.x
`rope_scaling` form. Where the two differ we follow 5.x, and say so:

  * yarn: 5.x uses the `factor` written in the config; 4.x (before PR #40320) replaced it with
    max_position_embeddings / original_max_position_embeddings whenever the latter was in
    rope_scaling (issue #38224, fixed by PR #40320). The two agree when the config is consistent
    (DeepSeek: 40 = 163840 / 4096) and differ for Qwen's recipe (factor 4, original 32768,
    max_position_embeddings left at 32768 or 40960).
  * original_max_position_embeddings: 5.x takes a top-level `original_max_position_embeddings`
    (Phi-3) first for llama3, yarn and longrope, else the one in the rope dict, else
    max_position_embeddings; 4.x read longrope's from the top level only and yarn's from
    rope_scaling only. Phi-3's and DeepSeek's configs mean the same in both.
  * longrope: 5.x uses an explicit `factor` when one is given, 4.x overrode it by the ratio when a
    top-level original_max_position_embeddings was present (Phi-3 gives none, so both take 32).

Every float32 step is kept as torch does it, since these are what gridformer's C++ must match bit
for bit: `base ** t` casts base to float32 (Tensor.__rpow__), `c / t` is `t.reciprocal() * c`
(Tensor.__rtruediv__: two roundings), `t op python_number` rounds the number to float32 first.

Usable as a module (tools/make_rope_golden.py, model goldens):

  inv_freq, scaling = inv_freq_and_scaling(config_dict, head_dim, seq_len=None)
  cos, sin = cos_sin(inv_freq, scaling, positions)     # [len(positions), 2 * len(inv_freq)], float32

config_dict is a config.json object (4.x `rope_scaling` + `rope_theta`, or 5.x `rope_parameters`);
seq_len is the length HF's forward would see (dynamic and longrope depend on it; None = at init).
Run with /usr/bin/python3 (Debian's python3-torch).
"""
import copy
import math

import torch

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")


def standardize(config, default_theta=10000.0):
    """The rope parameter dict transformers 5.x builds from a config.json object
    (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict + standardize_rope_params, one global dict)."""
    # `rope_scaling or rope_parameters`: a non-null 4.x rope_scaling wins.
    params = copy.deepcopy(config.get("rope_scaling") or config.get("rope_parameters") or {})
    params.setdefault("rope_theta", config.get("rope_theta", default_theta))
    params.setdefault("rope_type", params.get("type", "default"))
    if config.get("partial_rotary_factor") is not None:
        params["partial_rotary_factor"] = config["partial_rotary_factor"]
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        if "original_max_position_embeddings" in config:  # Phi-3 keeps it outside the rope dict
            params["original_max_position_embeddings"] = config["original_max_position_embeddings"]
        else:
            params.setdefault("original_max_position_embeddings", config["max_position_embeddings"])
    if params["rope_type"] not in ROPE_TYPES:
        raise ValueError(f"rope_type {params['rope_type']!r}: not one of {ROPE_TYPES}")
    return params


def _dim(params, head_dim):
    return int(head_dim * params.get("partial_rotary_factor", 1.0))


def _compute_default_rope_parameters(params, max_position_embeddings, head_dim, seq_len=None):
    # 5.x: LlamaRotaryEmbedding.compute_default_rope_parameters (4.x: modeling_rope_utils.py), with
    # the partial rotary dim of the other functions.
    base = params["rope_theta"]
    dim = _dim(params, head_dim)
    attention_factor = 1.0  # Unused in this type of RoPE
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    return inv_freq, attention_factor


def _compute_linear_scaling_rope_parameters(params, max_position_embeddings, head_dim, seq_len=None):
    factor = params["factor"]
    base = params["rope_theta"]
    dim = _dim(params, head_dim)
    attention_factor = 1.0  # Unused in this type of RoPE
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    # NOTE: originally, scaling was applied to the position_ids; scaling inv_freq is equivalent.
    inv_freq /= factor
    return inv_freq, attention_factor


def _compute_dynamic_ntk_parameters(params, max_position_embeddings, head_dim, seq_len=None):
    base = params["rope_theta"]
    dim = _dim(params, head_dim)
    factor = params["factor"]
    attention_factor = 1.0  # Unused in this type of RoPE
    # seq_len: default to max_position_embeddings, e.g. at init time
    if seq_len is None:
        seq_len = max_position_embeddings
    else:
        seq_len = max(seq_len, max_position_embeddings)
    # Python doubles up to here; the base is rounded to float32 by `base ** tensor`.
    base = base * ((factor * seq_len / max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    return inv_freq, attention_factor


def _compute_yarn_parameters(params, max_position_embeddings, head_dim, seq_len=None):
    base = params["rope_theta"]
    dim = _dim(params, head_dim)
    factor = params["factor"]
    attention_factor = params.get("attention_factor")
    mscale = params.get("mscale")
    mscale_all_dim = params.get("mscale_all_dim")
    original_max_position_embeddings = params["original_max_position_embeddings"]
    # NOTE: DeepSeek-V3 (and others) give original_max_position_embeddings; without a factor the ratio is used.
    if factor is None:
        factor = max_position_embeddings / original_max_position_embeddings

    def get_mscale(scale, mscale=1):
        if scale <= 1:
            return 1.0
        return 0.1 * mscale * math.log(scale) + 1.0

    # Sets the attention factor as suggested in the paper
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)

    # beta_fast/beta_slow: as suggested in the paper, default to 32/1 (correspondingly)
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1

    def find_correction_dim(num_rotations, dim, base, max_position_embeddings):
        """Inverse dimension formula to find the dimension based on the number of rotations"""
        return (dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    def find_correction_range(low_rot, high_rot, dim, base, max_position_embeddings, truncate):
        """Find dimension range bounds based on rotations"""
        low = find_correction_dim(low_rot, dim, base, max_position_embeddings)
        high = find_correction_dim(high_rot, dim, base, max_position_embeddings)
        if truncate:
            low = math.floor(low)
            high = math.ceil(high)
        return max(low, 0), min(high, dim - 1)

    def linear_ramp_factor(min, max, dim):
        if min == max:
            max += 0.001  # Prevent singularity
        linear_func = (torch.arange(dim, dtype=torch.float32) - min) / (max - min)
        ramp_func = torch.clamp(linear_func, 0, 1)
        return ramp_func

    # "interpolation" = apply the scaling factor, "extrapolation" = leave the frequency as it is.
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)

    truncate = params.get("truncate", True)
    low, high = find_correction_range(beta_fast, beta_slow, dim, base, original_max_position_embeddings, truncate)

    # Get n-dimensional rotational scaling corrected for extrapolation
    inv_freq_extrapolation_factor = 1 - linear_ramp_factor(low, high, dim // 2).to(dtype=torch.float)
    inv_freq = (
        inv_freq_interpolation * (1 - inv_freq_extrapolation_factor)
        + inv_freq_extrapolation * inv_freq_extrapolation_factor
    )
    return inv_freq, attention_factor


def _compute_longrope_parameters(params, max_position_embeddings, head_dim, seq_len=None):
    base = params["rope_theta"]
    dim = _dim(params, head_dim)
    long_factor = params["long_factor"]
    short_factor = params["short_factor"]
    factor = params.get("factor")
    attention_factor = params.get("attention_factor")
    original_max_position_embeddings = params["original_max_position_embeddings"]
    # NOTE: Phi3 gives max_position_embeddings and original_max_position_embeddings; their ratio is the factor.
    if factor is None:
        factor = max_position_embeddings / original_max_position_embeddings

    # Sets the attention factor as suggested in the paper
    if attention_factor is None:
        if factor <= 1.0:
            attention_factor = 1.0
        else:
            attention_factor = math.sqrt(1 + math.log(factor) / math.log(original_max_position_embeddings))

    # Compute the inverse frequencies -- scaled based on the target sequence length
    if seq_len and seq_len > original_max_position_embeddings:
        ext_factors = torch.tensor(long_factor, dtype=torch.float32)
    else:
        ext_factors = torch.tensor(short_factor, dtype=torch.float32)
    inv_freq_shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    inv_freq = 1.0 / (ext_factors * base**inv_freq_shape)
    return inv_freq, attention_factor


def _compute_llama3_parameters(params, max_position_embeddings, head_dim, seq_len=None):
    # Gets the default RoPE parameters
    base = params["rope_theta"]
    dim = _dim(params, head_dim)
    attention_factor = 1.0  # Unused in this type of RoPE
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))

    factor = params["factor"]  # `8` in the original implementation
    low_freq_factor = params["low_freq_factor"]  # `1` in the original implementation
    high_freq_factor = params["high_freq_factor"]  # `4` in the original implementation
    old_context_len = params["original_max_position_embeddings"]  # `8192` in the original implementation

    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor

    wavelen = 2 * math.pi / inv_freq
    # wavelen < high_freq_wavelen: do nothing
    # wavelen > low_freq_wavelen: divide by factor
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    # otherwise: interpolate between the two, using a smooth factor
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    return inv_freq_llama, attention_factor


ROPE_INIT_FUNCTIONS = {
    "default": _compute_default_rope_parameters,
    "linear": _compute_linear_scaling_rope_parameters,
    "dynamic": _compute_dynamic_ntk_parameters,
    "yarn": _compute_yarn_parameters,
    "longrope": _compute_longrope_parameters,
    "llama3": _compute_llama3_parameters,
}


def inv_freq_and_scaling(config, head_dim, seq_len=None, default_theta=10000.0):
    """(inv_freq float32 [rotary_dim / 2], attention_scaling) for a config.json object.

    seq_len None is what HF's rotary embedding computes at init; dynamic and longrope then
    recompute in the forward for max(position_ids) + 1 (dynamic once past max_position_embeddings,
    longrope once past original_max_position_embeddings), which is passing that seq_len here."""
    params = standardize(config, default_theta)
    fn = ROPE_INIT_FUNCTIONS[params["rope_type"]]
    inv_freq, scaling = fn(params, config["max_position_embeddings"], head_dim, seq_len)
    return inv_freq.float(), float(scaling)


def rotary_dim(config, head_dim):
    return _dim(standardize(config), head_dim)


def cos_sin(inv_freq, scaling, positions):
    """cos, sin [len(positions), 2 * len(inv_freq)] in float32, as LlamaRotaryEmbedding.forward:
    freqs = inv_freq @ position (a product of two float32 numbers), emb = cat(freqs, freqs),
    cos = emb.cos() * attention_scaling (the scaling rounded to float32 by the tensor op)."""
    position_ids = torch.as_tensor(positions, dtype=torch.int64)[None, :]
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * scaling
    sin = emb.sin() * scaling
    return cos[0], sin[0]
