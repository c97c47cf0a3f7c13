// `gridformer convert`'s command line (the conversion itself: runner/cli/convert.cpp).
#include <CLI/CLI.hpp>

#include "runner/cli/convert.h"

namespace gf {

CLI::App* add_convert_command(CLI::App& app, ConvertOptions& o) {
  auto* convert = app.add_subcommand("convert", "weights between our checkpoints, Hugging Face safetensors (one file or "
                                                "shards with model.safetensors.index.json), one full .safetensors file, "
                                                "and Megatron-LM's checkpoint layout (out)");
  convert->add_option("--from", o.from, "one of our checkpoints (its directory, a run's checkpoint/ or output_dir), "
                                        "or Hugging Face weights (a .safetensors file, or a directory with "
                                        "model.safetensors or model.safetensors.index.json); a LoRA run's "
                                        "checkpoint is written as PEFT's adapter directory")->required();
  convert->add_option("--to", o.to, "a directory, or a .safetensors file for one full file")->required();
  convert->add_option("--format", o.format,
                      "hf | checkpoint | megatron (Megatron-LM's release/mp_rank_*/model_optim_rng.pt: megatron/model's GPT-2, "
                      "Megatron-core's layout for the others) "
                      "(default: the other kind than --from's)");
  convert->add_option("--tensor-model-parallel-size", o.megatron_tp, "--format megatron: tensor-parallel shards")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  convert->add_option("--pipeline-model-parallel-size", o.megatron_pp, "--format megatron: pipeline stages")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  convert->add_option("--expert-model-parallel-size", o.megatron_ep,
                      "--format megatron: expert-parallel shards (mp_rank_TT[_PPP]_EEE; Megatron-core's layout)")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  convert->add_flag("--use-mcore-models", o.megatron_core,
                    "--format megatron: GPT-2 in Megatron-core's layout too (other models always are)");
  convert->add_option("--transformer-impl", o.transformer_impl,
                      "--format megatron, Megatron-core's layout: transformer_engine (core_r0.6.0's default: the norms "
                      "as linear_qkv.layer_norm_weight, ...) or local (input_layernorm, pre_mlp_layernorm)")
      ->capture_default_str()->check(CLI::IsMember({"transformer_engine", "local"}));
  convert->add_flag("--moe-grouped-gemm", o.moe_grouped_gemm,
                    "--format megatron: experts as GroupedMLP's weight1 / weight2 (else local_experts.N)");
  convert->add_option("--max-shard-size", o.max_shard_size, "Hugging Face shards up to this size (default 5GB)");
  convert->add_option("--dtype", o.dtype, "Hugging Face and Megatron output dtype: float32 (default; --merge-lora: the "
                                          "base's), bfloat16, float16");
  convert->add_flag("--merge-lora", o.merge_lora,
                    "--from a LoRA checkpoint or PEFT adapter directory: write its base with W + (alpha/r) B A in every "
                    "adapted weight (docs/finetune.md#lora)");
  convert->add_option("--base", o.base, "--merge-lora's base model (default: the one the adapters name)");
  convert->add_flag("--overwrite", o.overwrite, "write into an existing non-empty --to (README: Converting weights)");
  return convert;
}

}  // namespace gf
