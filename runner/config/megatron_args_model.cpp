// Megatron arguments into our YAML (runner/config/megatron_args.h), the model sections: GPT2Config
// (LayerNorm, GELU) or LlamaConfig (RMSNorm, SwiGLU) with Megatron's defaults (the FFN width, dropout,
// positions), Ascend's attention band, the interleaved pipeline's chunks, and Megatron core's MoE.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "runner/config/megatron_args_job.h"

namespace gf::megatron_args {

// ---- the model: GPT2Config (LayerNorm, GELU) or LlamaConfig (RMSNorm, SwiGLU) ----

namespace {

struct Shape {
  int64_t hidden = 0, heads = 0, max_pos = 0, ffn = 0;
  double eps = 1e-5, theta = 10000.0, std = 0.02, att_drop = 0.1, hid_drop = 0.1;
  std::string pos = "learned_absolute";
  bool bias = true, untie = false, gqa = false, qkv_bias = false;
};

// The attention band of Ascend's flash attention (MindSpeed's --pre-tockens/--next-tockens).
void attention_band(Job& j, YAML::Node mc) {
  const Args& a = j.a;
  const bool flash = a.flag("--use-flash-attn");
  if (flash) mc["use_flash_attention"] = true;
  const int64_t pre = a.i("--pre-tockens"), next = a.i("--next-tockens");
  if (pre < 0) j.error(j.given("--pre-tockens"), "a band that excludes the token itself is not built (>= 0)");
  if (next < 0) j.error(j.given("--next-tockens"), "a band that ends before the token itself is not built (>= 0)");
  if (!flash) {
    for (const char* k : {"--pre-tockens", "--next-tockens"})
      if (a.has(k)) j.note(j.given(k), "read by the flash-attention kernel only: without --use-flash-attn attention is "
                                       "causal over the whole prefix");
    return;
  }
  // Each token sees itself and `pre` tokens before it; the causal mask GPT passes hides the later ones
  // whatever next-tockens says. A band as long as the sequence is the whole prefix.
  if (pre >= 0 && pre + 1 < j.seq) mc["pre_tokens"] = pre;
  if (next > 0) j.note(j.given("--next-tockens"), "GPT's causal mask hides the later tokens anyway: attention stays causal");
}

// Which GELU Megatron's MLP computes: its fused bias-GELU kernel (bias_gelu_impl, on unless
// --no-bias-gelu-fusion, and off without linear biases) is the tanh approximation; unfused, the legacy
// model's --openai-gelu is tanh too (Megatron core's MLP ignores it); otherwise F.gelu, erf.
std::string gelu_of(Job& j, const Shape& m) {
  const Args& a = j.a;
  const bool fused = m.bias && !a.flag("--no-bias-gelu-fusion"), mcore = a.flag("--use-mcore-models");
  if (a.flag("--no-bias-gelu-fusion") && !m.bias)
    j.note("--no-bias-gelu-fusion", "no effect with --disable-bias-linear (there is no bias to fuse: the GELU is erf)");
  if (a.flag("--openai-gelu") && (fused || mcore))
    j.note("--openai-gelu", fused ? "the fused bias-GELU is the tanh approximation already"
                                  : "Megatron core's MLP does not read it (its GELU is F.gelu, erf)");
  return fused || (a.flag("--openai-gelu") && !mcore) ? "gelu_new" : "gelu";
}

void emit_gpt2(Job& j, const Shape& m) {
  if (m.gqa) j.error("--group-query-attention", "with LayerNorm and GELU (GPT2Config), which has no key/value head count; "
                     "grouped-query attention is LlamaConfig's (--normalization RMSNorm --swiglu)");
  if (m.untie) j.error("--untie-embeddings-and-output-weights", "with LayerNorm and GELU: GPT2Config ties the LM head to the "
                       "token embedding (an untied head is LlamaConfig's: --normalization RMSNorm --swiglu)");
  if (m.qkv_bias && !m.bias) j.error("--add-qkv-bias", "with --disable-bias-linear: GPT2Config's linear layers have biases "
                                     "everywhere or nowhere; q/k/v biases alone are LlamaConfig's qkv_has_bias");
  else if (m.qkv_bias) j.note("--add-qkv-bias", "the q/k/v projections have biases already (no --disable-bias-linear)");
  if (m.ffn % m.hidden != 0) {
    j.error(j.given("--ffn-hidden-size"), "GPT2Config's MLP is hidden_size x expand_ratio wide (an integer ratio); " +
            str(m.ffn) + " is not a multiple of " + str(m.hidden));
    return;
  }
  YAML::Node mc = j.model_config();
  mc["type"] = "GPT2Config";
  mc["seq_length"] = j.seq;
  mc["vocab_size"] = j.vocab;
  mc["hidden_size"] = m.hidden;
  mc["num_layers"] = j.layers;
  mc["num_heads"] = m.heads;
  mc["expand_ratio"] = m.ffn / m.hidden;
  mc["hidden_act"] = gelu_of(j, m);
  mc["hidden_dropout_rate"] = num(m.hid_drop);
  mc["attention_dropout_rate"] = num(m.att_drop);
  mc["max_position_embeddings"] = m.max_pos;
  mc["initializer_range"] = num(m.std);
  mc["layernorm_epsilon"] = num(m.eps);
  mc["position_embedding_type"] = m.pos;
  if (m.pos == "rope") mc["rope_theta"] = num(m.theta);
  mc["add_bias_linear"] = m.bias;
  if (j.eod != 50256) mc["eos_token_id"] = j.eod;
  j.model["arch"]["type"] = "GPT2LMHeadModel";
}

void emit_llama(Job& j, const Shape& m) {
  const Args& a = j.a;
  if (m.pos != "rope")
    j.error("--normalization RMSNorm --swiglu", "with " + m.pos + " positions: LlamaConfig's positions are RoPE's "
            "(--position-embedding-type rope)");
  if (m.bias)
    j.error("--normalization RMSNorm --swiglu", "with biases in the linear layers (no --disable-bias-linear): LlamaConfig's "
            "linear layers have none (--disable-bias-linear --add-qkv-bias gives q, k, v biases)");
  if (m.att_drop != 0 || m.hid_drop != 0)
    j.error("--normalization RMSNorm --swiglu", "with dropout (attention " + num(m.att_drop).Scalar() + ", hidden " +
            num(m.hid_drop).Scalar() + "; Megatron's defaults are 0.1): LlamaConfig trains without dropout; give "
            "--attention-dropout 0 --hidden-dropout 0");
  if (a.flag("--openai-gelu")) j.note("--openai-gelu", "SwiGLU's gate is SiLU: --swiglu replaces the GELU it picks");
  const int64_t groups = m.gqa ? a.i("--num-query-groups") : m.heads;
  if (groups < 1 || m.heads % groups != 0)
    j.error(j.given("--num-query-groups"), "must divide --num-attention-heads " + str(m.heads) +
            " (each key/value head serves an equal group of query heads)");
  else if (groups % j.tp != 0)
    j.error(j.given("--num-query-groups"), "not divisible by tensor parallel " + str(j.tp) + " (Megatron refuses)");
  if (!m.gqa && a.has("--num-query-groups")) j.note(j.given("--num-query-groups"), "no effect without --group-query-attention");
  YAML::Node mc = j.model_config();
  mc["type"] = "LlamaConfig";
  mc["seq_length"] = j.seq;
  mc["vocab_size"] = j.vocab;
  mc["hidden_size"] = m.hidden;
  mc["num_layers"] = j.layers;
  mc["num_heads"] = m.heads;
  mc["n_kv_heads"] = groups;
  mc["intermediate_size"] = m.ffn;
  mc["max_position_embedding"] = m.max_pos;
  mc["rms_norm_eps"] = num(m.eps);
  mc["theta"] = num(m.theta);
  mc["qkv_has_bias"] = m.qkv_bias;
  mc["tie_word_embeddings"] = !m.untie;
  mc["initializer_range"] = num(m.std);
  mc["eos_token_id"] = j.eod;
  j.model["arch"]["type"] = "LlamaForCausalLM";
  if (j.training)
    j.differ("initialisation of a LlamaConfig: Megatron draws the attention output and MLP down projections with std / "
             "sqrt(2 x layers); gridformer's Llama draws every weight with initializer_range (Hugging Face's init)");
}

// An argument required by Megatron's validate_args, or one of two spellings of it.
std::optional<int64_t> required(Job& j, const char* name, const char* alias = nullptr) {
  const Args& a = j.a;
  if (alias != nullptr && a.has(name) && a.has(alias)) {
    j.error(alias, std::string("give ") + name + " or " + alias + ", not both (Megatron asserts it)");
    return std::nullopt;
  }
  const char* from = alias != nullptr && !a.has(name) && a.has(alias) ? alias : name;
  const auto v = a.opt_int(from);
  if (!v) j.error(name, "required (Megatron asserts it is given)");
  else if (*v < 1) j.error(j.given(from), "must be > 0");
  return v && *v >= 1 ? v : std::nullopt;
}

}  // namespace

void translate_model(Job& j) {
  const Args& a = j.a;
  const auto layers = required(j, "--num-layers", "--encoder-num-layers");
  const auto hidden = required(j, "--hidden-size"), heads = required(j, "--num-attention-heads");
  const auto max_pos = required(j, "--max-position-embeddings"), seq = required(j, "--seq-length", "--encoder-seq-length");
  if (!layers || !hidden || !heads || !max_pos || !seq) return;
  j.layers = *layers;
  j.seq = *seq;
  Shape m;
  m.hidden = *hidden;
  m.heads = *heads;
  m.max_pos = *max_pos;
  if (m.hidden % m.heads != 0) {
    j.error(j.given("--hidden-size"), "not divisible by --num-attention-heads " + str(m.heads) + " (Megatron asserts it)");
    return;
  }
  if (a.has("--kv-channels") && a.i("--kv-channels") != m.hidden / m.heads)
    j.error(j.given("--kv-channels"), "heads of another width than hidden / heads (" + str(m.hidden / m.heads) + ") are not built");
  if (j.seq > m.max_pos)
    j.error(j.given("--seq-length"), "longer than --max-position-embeddings " + str(m.max_pos) + " (Megatron asserts it)");

  const bool rms = a.s("--normalization") == "RMSNorm", swiglu = a.flag("--swiglu");
  if (rms != swiglu) {
    j.error(rms ? "--normalization RMSNorm" : "--swiglu",
            rms ? "without --swiglu (RMSNorm with a GELU MLP): our model types are GPT2Config (LayerNorm, GELU) and "
                  "LlamaConfig (RMSNorm, SwiGLU)"
                : "with --normalization LayerNorm (a SwiGLU MLP with LayerNorm): our model types are GPT2Config (LayerNorm, "
                  "GELU) and LlamaConfig (RMSNorm, SwiGLU)");
    return;
  }
  j.llama = rms;
  if (a.has("--norm-epsilon") && a.has("--layernorm-epsilon") && a.f("--norm-epsilon") != a.f("--layernorm-epsilon"))
    j.error("--layernorm-epsilon", "and --norm-epsilon disagree; give one");
  m.eps = a.has("--layernorm-epsilon") ? a.f("--layernorm-epsilon") : a.f("--norm-epsilon");

  m.pos = a.s("--position-embedding-type");
  if (a.flag("--use-rotary-position-embeddings")) m.pos = "rope";
  if (m.pos == "alibi") j.error("--position-embedding-type alibi", "ALiBi is not built (learned_absolute and rope are)");
  if (a.flag("--no-position-embedding") && m.pos != "rope")
    j.error("--no-position-embedding", "Megatron accepts it with --position-embedding-type rope only");
  else if (a.flag("--no-position-embedding"))
    j.note("--no-position-embedding", "RoPE has no position table anyway");
  if (a.f("--rotary-percent") != 1.0)
    j.error(j.given("--rotary-percent"), "RoPE on part of a head is not built (1.0: the whole head)");
  if (m.pos != "rope" && a.has("--rotary-base")) j.error(j.given("--rotary-base"), "needs --position-embedding-type rope");
  if (m.pos != "rope" && a.flag("--use-fused-rotary-pos-emb"))
    j.error("--use-fused-rotary-pos-emb", "needs --position-embedding-type rope (MindSpeed asserts it)");
  m.theta = a.f("--rotary-base");
  if (!(m.theta > 0)) j.error(j.given("--rotary-base"), "must be > 0");
  if (a.flag("--use-fused-rmsnorm") && !rms) j.error("--use-fused-rmsnorm", "needs --normalization RMSNorm (MindSpeed asserts it)");
  if (a.flag("--use-fused-swiglu") && !swiglu) j.error("--use-fused-swiglu", "needs --swiglu (MindSpeed asserts it)");

  // Megatron's FFN width: 4h, or for SwiGLU int(4h x 2/3 / 64) x 64 (core_r0.6.0's validate_args).
  m.ffn = a.has("--ffn-hidden-size") ? a.i("--ffn-hidden-size")
                                     : swiglu ? static_cast<int64_t>(static_cast<double>(4 * m.hidden * 2) / 3.0 / 64.0) * 64
                                              : 4 * m.hidden;
  if (m.ffn < 1) {
    j.error(j.given("--ffn-hidden-size"), "must be > 0");
    return;
  }
  m.att_drop = a.f("--attention-dropout");
  m.hid_drop = a.f("--hidden-dropout");
  for (auto [k, v] : {std::pair{"--attention-dropout", m.att_drop}, {"--hidden-dropout", m.hid_drop}})
    if (!(v >= 0 && v < 1)) j.error(j.given(k), "must be in [0, 1)");
  m.std = a.f("--init-method-std");
  m.bias = !a.flag("--disable-bias-linear");
  m.untie = a.flag("--untie-embeddings-and-output-weights");
  m.gqa = a.flag("--group-query-attention");
  m.qkv_bias = a.flag("--add-qkv-bias");
  if (j.llama) emit_llama(j, m);
  else emit_gpt2(j, m);
  attention_band(j, j.model_config());
  if (a.has("--num-layers-per-virtual-pipeline-stage")) {
    const int64_t n = a.i("--num-layers-per-virtual-pipeline-stage");
    const std::string arg = j.given("--num-layers-per-virtual-pipeline-stage");
    if (j.pp < 2) j.error(arg, "needs pipeline parallelism (Megatron: > 2 stages; MindSpeed: >= 2)");
    else if (n < 1 || j.layers % j.pp != 0 || (j.layers / j.pp) % n != 0)
      j.error(arg, "the " + str(j.layers) + " layers must split into " + str(j.pp) + " stages of whole chunks of it (Megatron asserts it)");
    else if ((j.chunks = j.layers / j.pp / n) > 1) {
      if (j.gas % j.pp != 0)
        j.error(arg, "the interleaved schedule needs the micro-batches (" + str(j.gas) + ") to be a multiple of the " +
                str(j.pp) + " stages (Megatron refuses)");
      j.parallel["pipeline_config"]["pipeline_interleave"] = true;
      j.model_config()["pp_interleave_num"] = j.chunks;
    }
  }
  if (j.training)
    j.differ("initial weights: the same distributions as Megatron's, drawn by gridformer's generator from the seed and each "
             "parameter's name (the same under every layout), not by torch's; the first losses differ by that draw");
}

// ---- experts: Megatron core's MoE (core_r0.6.0): dropless, top-k over a softmax of the chosen logits ----

void translate_experts(Job& j) {
  const Args& a = j.a;
  j.experts = a.has("--num-experts");
  if (!j.experts) {
    for (const char* k : {"--moe-router-topk", "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-token-dispatcher-type",
                          "--moe-router-load-balancing-type", "--moe-model-type"})
      if (a.has(k)) j.note(j.given(k), "no effect without --num-experts");
    if (j.ep > 1) j.error(j.given("--expert-model-parallel-size"), "needs --num-experts (Megatron asserts it)");
    return;
  }
  const int64_t n = a.i("--num-experts"), k = a.i("--moe-router-topk");
  const std::string arg = j.given("--num-experts");
  if (n < 2) j.error(arg, "a single expert is gridformer's dense model (moe_config.expert_num 1); give 2 or more");
  if (!a.flag("--use-mcore-models"))
    j.error(arg, "without --use-mcore-models: the legacy SwitchMLP (top-1, a router with a bias), which is not built; "
            "Megatron core's MoE needs --use-mcore-models (MindSpeed's megatron_moe refuses to run without it)");
  if (a.s("--moe-model-type") != "megatron_moe")
    j.error(j.given("--moe-model-type"), "DeepSpeed-style MoE (capacity, random token selection) is not translated");
  if (k < 1 || k > n) j.error(j.given("--moe-router-topk"), "must be between 1 and --num-experts " + str(n));
  if (j.ep > 1 && n % j.ep != 0)
    j.error(j.given("--expert-model-parallel-size"), "--num-experts " + str(n) + " is not divisible by it (Megatron asserts it)");
  if (j.tp > 1 && !a.flag("--sequence-parallel"))
    j.error(arg, "with tensor parallel " + str(j.tp) + " needs --sequence-parallel (Megatron core_r0.6.0 asserts it)");
  const std::string balance = a.s("--moe-router-load-balancing-type");
  if (balance == "sinkhorn") j.error(j.given("--moe-router-load-balancing-type"), "S-BASE's Sinkhorn routing is not built");
  const double aux = balance == "none" ? 0.0 : a.f("--moe-aux-loss-coeff");
  if (balance == "none" && a.has("--moe-aux-loss-coeff"))
    j.note(j.given("--moe-aux-loss-coeff"), "no effect with --moe-router-load-balancing-type none");
  YAML::Node e = j.moe_config;
  e["expert_num"] = n;
  e["num_experts_chosen"] = k;
  e["capacity_factor"] = num(-1.0);  // dropless: core_r0.6.0 has no capacity
  e["aux_loss_factor"] = num(aux);
  e["z_loss_factor"] = num(a.opt_float("--moe-z-loss-coeff").value_or(0.0));
  e["norm_topk_prob"] = true;  // a softmax over the k chosen logits
  e["token_dispatcher"] = a.s("--moe-token-dispatcher-type");
  e["moe_layer_freq"] = 1;  // every layer
  if (aux > 0)
    j.differ("the load-balancing loss (--moe-aux-loss-coeff " + num(aux).Scalar() + "): Megatron core_r0.6.0 balances over "
             "all the tokens a rank routes in a micro-batch; gridformer balances each sequence (Megatron's later "
             "seq_aux_loss) and averages");
}


}  // namespace gf::megatron_args
