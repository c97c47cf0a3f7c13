// The table of Megatron-LM / MindSpeed arguments (runner/config/megatron_args.h): one entry per argument
// with its spellings, kind (mapped / noted / refused), value type, Megatron's default, its choices, and the
// YAML key(s) it feeds, the note, or the reason it is refused. Defaults and choices are arguments.py's
// (285068c and core_r0.6.0 agree unless the text says otherwise), MindSpeed's for its own options.
// runner/config/megatron_args.cpp reads the mapped ones section by section.
#include <algorithm>
#include <sstream>
#include <vector>

#include "runner/config/megatron_args.h"

namespace gf::megatron_args {
namespace {

constexpr Kind M = Kind::kMapped, N = Kind::kNoted, R = Kind::kRefused;
constexpr Type F = Type::kFlag, I = Type::kInt, D = Type::kFloat, S = Type::kString, L = Type::kList,
               LP = Type::kListPlus;

// Shared reasons.
const char* const kFusion =
    "a fused CUDA/NPU kernel switched off or on: the same function, computed here by our own CPU kernels";
const char* const kGpuMemory = "a GPU/NPU memory-management option: no effect on a CPU process's memory";
const char* const kOverlap =
    "overlaps a collective with computation on the accelerator: our gradient buckets always reduce in the "
    "background of backward, and the numbers do not depend on it";
const char* const kTiming = "Megatron's timers' log level and format; gridformer's step log has its own timings";
const char* const kTensorboard =
    "what Megatron writes to TensorBoard; gridformer writes every scalar of its step log there (tensorboard_dir)";
const char* const kLauncher = "set by the distributed launcher for torch.distributed; mpirun gives every rank its place";

// Every other argument the four files declare (megatron_args.h, other_arguments()): a spelling and its
// arity (`=` a value, `*` or `+` a list, nothing: a flag).
const char* const kOtherArguments =
    "--adaptive-cp-dynamic-attn-mask --adaptive-cp-manually-set-mask-list --adaptive-cp-only-reschedule "
    "--adaptive-cp-without-coarse --adaptive-recompute-device-size= --adaptive-recompute-device-swap "
    "--adaptive-recompute-profiling-step= --add-dense-bias --adlr-autoresume --adlr-autoresume-interval= "
    "--alibi-diagonal-opposite --alibi-fusion-attn-type= --attention-mask-on-cpu --attention-mask-type= "
    "--automated-pipeline --automated-pipeline-perf --bert-embedder-type= --bert-load= --bert-no-binary-head "
    "--biencoder-projection-dim= --biencoder-shared-query-context-model --block-data-path= --ckpt-step= "
    "--classes-fraction= --coc-fused-kernel --coc-mode= --coc-parallel-num= --cp-window-size= "
    "--data-per-class-fraction= --ddp-bucket-size= --decoder-num-layers= --dino-bottleneck-size= "
    "--dino-freeze-last-layer= --dino-head-hidden-size= --dino-local-crops-number= --dino-local-img-size= "
    "--dino-norm-last-layer --dino-teacher-temp= --dino-warmup-teacher-temp= "
    "--dino-warmup-teacher-temp-epochs= --disable-gloo-group --disable-tp-comm-bulk-dgrad "
    "--disable-tp-comm-bulk-wgrad --disable-tp-comm-overlap-ag --disable-tp-comm-overlap-rs "
    "--disable-tp-comm-split-ag --disable-tp-comm-split-rs --dist-train --ema-decay= --embedding-path= "
    "--enable-backward-overlap-ag-with-matmul --enable-hbmfault-repair --enable-high-availability "
    "--enable-one-logger --enable-optimizer-state-local-copy --enable-overlap-ag-with-matmul "
    "--enable-overlap-matmul-with-rs --enable-recompute-layers-per-pp-rank --enable-token-rearrange-opt "
    "--enable-worker-reboot --enable-zero3 --epochs= --eval-micro-batch-size= --evidence-data-path= "
    "--expert-interval= --faiss-match= --faiss-topk-retrievals= --faiss-use-gpu --fill-neg-inf "
    "--fp8-amax-compute-algo= --fp8-amax-history-len= --fp8-e4m3 --fp8-format= --fp8-hybrid --fp8-interval= "
    "--fp8-margin= --gemm-gradient-accumulation-fusion --hccl-ep-group-buffer-adaptive-factor= "
    "--hccl-group-buffer= --hccl-group-buffer-adaptive --hccl-slice-size= --head-lr-mult= --ict-head-size= "
    "--ict-load= --img-h= --img-w= --indexer-batch-size= --indexer-log-interval= "
    "--inference-batch-times-seqlen-threshold= --iter-per-epoch= --jit-compile --kv-lora-rank= --layerzero "
    "--layerzero-config= --log-progress --mask-factor= --mask-prob= --mask-type= --max-tokens-to-oom= "
    "--mbs-idx= --memory-fragmentation --moe-adaptive-recompute-activation "
    "--moe-adaptive-recompute-activation-scale= --moe-allgather-overlap-comm --moe-alltoall-overlap-comm "
    "--moe-dynamic-padding --moe-no-drop --moe-tp-extend-ep --moe-train-capacity-factor= --moe-use-sinkhorn "
    "--moe-zero-memory= --moe-zero-memory-num-layers= --multi-head-latent-attention --n-shared-experts= "
    "--nd1-dim1-size= --nd2-dim1-size= --no-check-for-nan-in-loss-and-grad "
    "--no-clone-scatter-output-in-embedding --no-data-sharding --no-fp8-wgrad --no-use-rts "
    "--noisy-gate-policy= --noop-layers= --npu-deterministic --num-channels= --num-classes= "
    "--num-layer-list= --one-logger-entity= --one-logger-project= --one-logger-run-name= --onnx-safe= "
    "--op-cal-tflops --optimization-level= --optimize-send-recv-comm --optimize-vpp-send-recv-comm "
    "--optimized-mbs-list= --optimized-mbs-mode --optimizer-selection= --output-bert-embeddings "
    "--param-and-grad-buffer-pad= --patch-dim= --pipe-experts-multi-data= --pipe-experts-multi-stream "
    "--pp-schedule-list= --pretrained-checkpoint= --profile-level= --profile-record-shapes "
    "--profile-save-path= --profile-with-cpu --profile-with-memory --profile-with-stack --q-lora-rank= "
    "--qa-data-dev= --qa-data-test= --qk-nope-head-dim= --qk-rope-head-dim= --query-in-block-prob= "
    "--recompute-in-advance --recompute-in-bubble --recompute-module-list= --recompute-norm-num-layers= "
    "--recompute-type= --retriever-report-topk-accuracies+ --retriever-score-scaling --retriever-seq-length= "
    "--retro-add-retriever --retro-attention-gate= --retro-cyclic-train-iters= "
    "--retro-encoder-attention-dropout= --retro-encoder-hidden-dropout= --retro-encoder-layers= "
    "--retro-no-verify-neighbor-count --retro-num-neighbors= --retro-num-retrieved-chunks= "
    "--retro-project-dir= --rope-scaling-beta-fast= --rope-scaling-beta-slow= --rope-scaling-factor= "
    "--rope-scaling-mscale= --rope-scaling-mscale-all-dim= --rope-scaling-original-max-position-embeddings= "
    "--rope-scaling-type= --sample-rate= --save-memory-ratio= --short-seq-prob= --skip-bias-add --smart-swap "
    "--sparse-mode= --spec* --square-alibi-mask --swap-models= --swap-modules= --swin-backbone-type= "
    "--titles-data-path= --tokenizer-name-or-path= --tokenizer-not-use-fast --tp-2d --tp-comm-overlap-cfg= "
    "--tp-x= --tp-y= --train-data+ --train-hard-neg= --train-with-neg --use-ascend-coc "
    "--use-ascend-mc2 --use-cp-send-recv-overlap --use-fused-moe-token-permute-and-unpermute "
    "--use-fused-ring-attention-update --use-fusion-attn-v2 --use-multiparameter-pipeline-model-parallel "
    "--use-nanopipe --use-nanopipe-swap --use-nd-matmul --use-one-sent-docs --use-pipe-experts --v-head-dim= "
    "--val-av-rank-hard-neg= --val-av-rank-other-neg= --variable-seq-lengths --vision-backbone-type= "
    "--vision-pretraining --vision-pretraining-type= --wandb-exp-name= --wandb-project= --wandb-save-dir= "
    "--yaml-cfg= ";

}  // namespace

const std::vector<Spec>& table() {
  static const std::vector<Spec> t = {
      // network size
      {"--num-layers", M, I, nullptr, nullptr, "model.model_config.num_layers"},
      {"--encoder-num-layers", M, I, nullptr, nullptr, "model.model_config.num_layers (when --num-layers is absent)"},
      {"--hidden-size", M, I, nullptr, nullptr, "model.model_config.hidden_size"},
      {"--ffn-hidden-size", M, I, nullptr, nullptr,
       "GPT-2: expand_ratio = ffn / hidden (4h by default); Llama: intermediate_size (SwiGLU's default: "
       "int(4h x 2/3 / 64) x 64)"},
      {"--num-attention-heads", M, I, nullptr, nullptr, "model.model_config.num_heads"},
      {"--kv-channels", M, I, nullptr, nullptr, "checked: must be hidden / heads (our heads are hidden / num_heads wide)"},
      {"--group-query-attention", M, F, nullptr, nullptr, "LlamaConfig n_kv_heads = --num-query-groups"},
      {"--num-query-groups", M, I, "1", nullptr, "LlamaConfig n_kv_heads (with --group-query-attention)"},
      {"--max-position-embeddings", M, I, nullptr, nullptr,
       "model.model_config.max_position_embeddings (LlamaConfig: max_position_embedding)"},
      {"--position-embedding-type", M, S, "learned_absolute", "learned_absolute|rope|alibi",
       "model.model_config.position_embedding_type (alibi, MindSpeed's, refused)"},
      {"--use-rotary-position-embeddings", M, F, nullptr, nullptr, "position_embedding_type: rope (Megatron's legacy flag)"},
      {"--no-position-embedding", M, F, nullptr, nullptr, "checked: Megatron accepts it with rope only"},
      {"--rotary-base", M, D, "10000", nullptr, "GPT-2: rope_theta; Llama: theta (MindSpeed's argument)"},
      {"--rotary-percent", M, D, "1.0", nullptr, "checked: 1.0 (RoPE on the whole head)"},
      {"--rotary-interleaved", R, F, nullptr, nullptr,
       "interleaved (GPT-J) RoPE pairs are not built: our RoPE rotates the two halves of a head, Megatron's default"},
      {"--rotary-seq-len-interpolation-factor", R, I, nullptr, nullptr,
       "RoPE position interpolation is not built (LlamaConfig's extend_method is refused likewise)"},
      {"--make-vocab-size-divisible-by", M, I, "128", nullptr,
       "checked: the vocabulary padding (ours: 128 x model_parallel, vocab split over tensor parallel)"},
      {"--normalization", M, S, "LayerNorm", "LayerNorm|RMSNorm", "the model type: LayerNorm: GPT2Config, RMSNorm: LlamaConfig"},
      {"--norm-epsilon", M, D, "1e-5", nullptr, "GPT-2: layernorm_epsilon; Llama: rms_norm_eps"},
      {"--layernorm-epsilon", M, D, "1e-5", nullptr, "layernorm_epsilon (285068c's name of --norm-epsilon)"},
      {"--apply-layernorm-1p", R, F, nullptr, nullptr, "zero-centred LayerNorm weights (1 + gamma) are not built"},
      {"--apply-residual-connection-post-layernorm", R, F, nullptr, nullptr,
       "BERT's residual ordering is not built: our blocks are pre-norm (the residual adds the block's input)"},
      {"--openai-gelu", M, F, nullptr, nullptr,
       "GPT-2 hidden_act gelu_new (the tanh approximation) in the legacy model; Megatron core's MLP does not read it"},
      {"--squared-relu", R, F, nullptr, nullptr, "a squared-ReLU MLP is not built (gelu, gelu_new, fast_gelu, SwiGLU)"},
      {"--swiglu", M, F, nullptr, nullptr, "the model type: SwiGLU with RMSNorm is LlamaConfig"},
      {"--untie-embeddings-and-output-weights", M, F, nullptr, nullptr,
       "Llama: tie_word_embeddings False (True without it); GPT-2 ties always: refused there"},
      {"--disable-bias-linear", M, F, nullptr, nullptr, "GPT-2: add_bias_linear False; Llama: required (it has none)"},
      {"--add-qkv-bias", M, F, nullptr, nullptr, "Llama: qkv_has_bias True; GPT-2 (biases everywhere or nowhere): refused"},
      {"--qk-layernorm", R, F, nullptr, nullptr, "LayerNorm on q and k is not built"},
      {"--num-experts", M, I, nullptr, nullptr, "moe_config.expert_num (Megatron core's MoE: with --use-mcore-models)"},
      // regularization
      {"--attention-dropout", M, D, "0.1", nullptr, "GPT-2: attention_dropout_rate; Llama: must be 0 (it has no dropout)"},
      {"--hidden-dropout", M, D, "0.1", nullptr, "GPT-2: hidden_dropout_rate; Llama: must be 0"},
      {"--weight-decay", M, D, "0.01", nullptr, "optimizer.weight_decay (2-D weights only, as Megatron's param groups)"},
      {"--weight-decay-incr-style", M, S, "constant", "constant|linear|cosine", "checked: constant (a changing weight decay is not built)"},
      {"--start-weight-decay", R, D, nullptr, nullptr, "a weight decay that changes over training is not built"},
      {"--end-weight-decay", R, D, nullptr, nullptr, "a weight decay that changes over training is not built"},
      {"--clip-grad", M, D, "1.0", nullptr, "runner_wrapper.use_clip_grad (> 0) and max_grad_norm"},
      {"--adam-beta1", M, D, "0.9", nullptr, "optimizer.beta1"},
      {"--adam-beta2", M, D, "0.999", nullptr, "optimizer.beta2"},
      {"--adam-eps", M, D, "1e-08", nullptr, "optimizer.eps"},
      {"--sgd-momentum", N, D, "0.9", nullptr, "read only by --optimizer sgd, which is refused"},
      // training
      {"--micro-batch-size", M, I, nullptr, nullptr, "runner_config.batch_size"},
      {"--batch-size", R, I, nullptr, nullptr, "Megatron refuses it too: use --micro-batch-size"},
      {"--global-batch-size", M, I, nullptr, nullptr,
       "runner_config.gradient_accumulation_steps (pipeline: parallel_config.micro_batch_num) = global / (micro x DP)"},
      {"--rampup-batch-size", R, L, nullptr, nullptr, "a global batch that grows during training is not built"},
      {"--recompute-activations", M, F, nullptr, nullptr, "recompute_config.select_recompute (Megatron's selective)"},
      {"--recompute-granularity", M, S, nullptr, "full|selective", "recompute_config.recompute (full) or select_recompute"},
      {"--recompute-method", M, S, nullptr, "uniform|block", "recompute_config.recompute_num_layers (block: N; uniform: all)"},
      {"--recompute-num-layers", M, I, "1", nullptr,
       "recompute_config.recompute_num_layers (with --recompute-method block; default None in core_r0.6.0)"},
      {"--checkpoint-activations", M, F, nullptr, nullptr, "285068c's full uniform recompute (core_r0.6.0 exits on it)"},
      {"--distribute-saved-activations", N, F, nullptr, nullptr,
       "splits the recompute checkpoints over the tensor-parallel group to save GPU memory; the numbers are the same"},
      {"--train-iters", M, I, nullptr, nullptr, "runner_config.train_steps; lr_schedule's steps"},
      {"--train-samples", M, I, nullptr, nullptr, "runner_config.train_steps = samples // global batch"},
      {"--log-interval", M, I, "100", nullptr, "callbacks MFLossMonitor per_print_times"},
      {"--exit-interval", M, I, nullptr, nullptr, "runner_config.exit_interval"},
      {"--exit-duration-in-mins", M, I, nullptr, nullptr, "runner_config.exit_duration_in_mins"},
      {"--exit-signal-handler", N, F, nullptr, nullptr,
       "gridformer always stops after the step on SIGTERM/SIGINT and saves a checkpoint (runner/train/stop_signals.h)"},
      {"--tensorboard-dir", M, S, nullptr, nullptr, "tensorboard_dir"},
      {"--no-masked-softmax-fusion", N, F, nullptr, nullptr, kFusion},
      {"--no-bias-gelu-fusion", M, F, nullptr, nullptr,
       "GPT-2 hidden_act gelu (erf): Megatron's fused bias-GELU, on by default with linear biases, is the tanh "
       "approximation (gelu_new)"},
      {"--no-bias-swiglu-fusion", N, F, nullptr, nullptr, kFusion},
      {"--no-bias-dropout-fusion", N, F, nullptr, nullptr, kFusion},
      {"--no-rope-fusion", N, F, nullptr, nullptr, kFusion},
      {"--use-flash-attn", M, F, nullptr, nullptr,
       "model.model_config.use_flash_attention True: our fused (FlashAttention-2 style) attention core, the same "
       "function as the unfused one within float rounding"},
      {"--optimizer", M, S, "adam", "adam|sgd", "optimizer.type AdamWeightDecay (Megatron's Adam is AdamW); sgd refused"},
      {"--dataloader-type", M, S, nullptr, "single|cyclic|external", "checked: single (one pass over the shuffled samples)"},
      {"--no-async-tensor-model-parallel-allreduce", N, F, nullptr, nullptr, kOverlap},
      {"--no-persist-layer-norm", N, F, nullptr, nullptr, kFusion},
      {"--sequence-parallel", M, F, nullptr, nullptr, "parallel_config.use_seq_parallel (Megatron drops it at TP 1)"},
      {"--no-gradient-accumulation-fusion", N, F, nullptr, nullptr,
       "a CUDA kernel that adds weight gradients into the fp32 gradient buffer; ours always accumulate in fp32"},
      {"--use-mcore-models", M, F, nullptr, nullptr,
       "CheckpointMonitor's megatron_use_mcore_models: --save writes GPT-2 in Megatron-core's layout (every other "
       "model is written in it anyway); core's GPTModel is the legacy one's model for the arguments translated here"},
      {"--transformer-impl", M, S, "transformer_engine", "local|transformer_engine",
       "CheckpointMonitor's megatron_transformer_impl: the norms' names in the Megatron-core layout --save writes "
       "(Transformer Engine's linear_qkv.layer_norm_weight, or local's input_layernorm); the same layers"},
      {"--manual-gc", N, F, nullptr, nullptr, "Python's garbage collector: there is none in a C++ process"},
      {"--manual-gc-interval", N, I, "0", nullptr, "Python's garbage collector: there is none in a C++ process"},
      {"--no-manual-gc-eval", N, F, nullptr, nullptr, "Python's garbage collector: there is none in a C++ process"},
      {"--empty-unused-memory-level", N, I, "0", "0|1|2", "torch.cuda.empty_cache(): no CUDA allocator here"},
      {"--use-cpu-initialization", N, F, nullptr, nullptr,
       "weights are always made on the host from the seed and each parameter's global name, the same under every "
       "layout (what this flag aims at on GPUs)"},
      {"--tp-comm-overlap", N, F, nullptr, nullptr, kOverlap},
      {"--profile", M, F, nullptr, nullptr, "profile True (a Chrome trace here instead of nsys)"},
      {"--profile-step-start", M, I, "10", nullptr, "profile_start_step = start + 1 (Megatron counts iterations from 0)"},
      {"--profile-step-end", M, I, "12", nullptr, "profile_stop_step = end (the last profiled step, counted from 1)"},
      {"--profile-ranks", N, LP, "0", nullptr, "every rank writes its own trace here"},
      // initialization
      {"--seed", M, I, "1234", nullptr, "seed and train_dataset.data_loader.seed (Megatron's dataset shuffles with it)"},
      {"--data-parallel-random-init", R, F, nullptr, nullptr,
       "every data-parallel replica starts from the same weights here (drawn from the seed and the parameter's name)"},
      {"--init-method-std", M, D, "0.02", nullptr,
       "model.model_config.initializer_range (GPT-2's output projections at std / sqrt(2 x layers), as Megatron's)"},
      {"--init-method-xavier-uniform", R, F, nullptr, nullptr, "Xavier-uniform initialisation is not built (normal only)"},
      // learning rate
      {"--lr", M, D, nullptr, nullptr, "lr_schedule.learning_rate"},
      {"--lr-decay-style", M, S, "linear", "constant|linear|cosine|inverse-square-root",
       "lr_schedule.type (linear: polynomial of power 1; inverse-square-root refused)"},
      {"--lr-decay-iters", M, I, nullptr, nullptr, "lr_schedule.total_steps (= iterations + 1, see the schedule's note)"},
      {"--lr-decay-samples", M, I, nullptr, nullptr, "lr_schedule.total_steps (whole global batches only)"},
      {"--lr-warmup-fraction", M, D, nullptr, nullptr, "lr_schedule.warmup_steps (fraction of the decay, whole steps only)"},
      {"--lr-warmup-iters", M, I, "0", nullptr, "lr_schedule.warmup_steps"},
      {"--lr-warmup-samples", M, I, "0", nullptr, "lr_schedule.warmup_steps (whole global batches only)"},
      {"--lr-warmup-init", M, D, "0.0", nullptr, "checked: 0 (our warmup starts from 0)"},
      {"--warmup", R, I, nullptr, nullptr, "Megatron refuses it too: use --lr-warmup-fraction"},
      {"--min-lr", M, D, "0.0", nullptr, "lr_schedule.lr_end"},
      {"--override-opt_param-scheduler", N, F, nullptr, nullptr,
       "a resumed run always takes its schedule from the config (the checkpoint holds the step, not the schedule)"},
      {"--use-checkpoint-opt_param-scheduler", R, F, nullptr, nullptr,
       "a checkpoint holds no schedule here: a resumed run takes it from the config"},
      {"--decoupled-lr", R, D, nullptr, nullptr, "a learning rate of its own for the embedding and LM head is not built"},
      {"--decoupled-min-lr", R, D, nullptr, nullptr, "a learning rate of its own for the embedding and LM head is not built"},
      // checkpointing
      {"--save", M, S, nullptr, nullptr, "callbacks CheckpointMonitor directory"},
      {"--save-interval", M, I, nullptr, nullptr, "callbacks CheckpointMonitor save_checkpoint_steps"},
      {"--no-save-optim", N, F, nullptr, nullptr, "our checkpoints always hold the optimizer state (more than asked; loads either way)"},
      {"--no-save-rng", N, F, nullptr, nullptr,
       "there is no RNG state to save: dropout masks are a function of the seed, the step and the element"},
      {"--load", M, S, nullptr, nullptr, "resume_training (from --save's directory) or load_checkpoint"},
      {"--no-load-optim", M, F, nullptr, nullptr, "checked: a resume restores the whole state here"},
      {"--no-load-rng", N, F, nullptr, nullptr,
       "there is no RNG state to load: dropout masks are a function of the seed, the step and the element"},
      {"--finetune", M, F, nullptr, nullptr, "load_checkpoint with resume_training False (weights only, from step 1)"},
      {"--no-initialization", N, F, nullptr, nullptr, "start-up time only: the loaded weights replace the initial ones"},
      {"--use-checkpoint-args", R, F, nullptr, nullptr,
       "the model's shape comes from these arguments: the translator does not read checkpoints"},
      {"--exit-on-missing-checkpoint", N, F, nullptr, nullptr, "our loader always refuses a load_checkpoint that does not exist"},
      {"--use-dist-ckpt", N, F, nullptr, nullptr,
       "the checkpoint format: ours is always sharded (each tensor's boxes) and loads under any layout"},
      {"--auto-detect-ckpt-format", N, F, nullptr, nullptr, "the checkpoint format: ours is recognised by its index"},
      {"--dist-ckpt-format", N, S, "torch_dist", "zarr|torch_dist", "the checkpoint format: ours is gridformer's own"},
      {"--ckpt-fully-parallel-save", N, F, nullptr, nullptr, "every rank writes its own shards here"},
      // mixed precision
      {"--fp16", M, F, nullptr, nullptr, "model.model_config.compute_dtype float16 (+ runner_wrapper.scale_sense)"},
      {"--bf16", M, F, nullptr, nullptr, "model.model_config.compute_dtype bfloat16"},
      {"--loss-scale", M, D, nullptr, nullptr, "runner_wrapper.scale_sense: the fixed scale"},
      {"--initial-loss-scale", M, D, "4294967296", nullptr, "scale_sense.loss_scale_value (--fp16's dynamic scale)"},
      {"--min-loss-scale", M, D, "1.0", nullptr, "checked: 1 (our dynamic scale's floor)"},
      {"--loss-scale-window", M, D, "1000", nullptr, "scale_sense.scale_window"},
      {"--hysteresis", M, I, "2", nullptr, "checked: ours lowers the scale at every overflow (hysteresis 1)"},
      {"--fp32-residual-connection", N, F, nullptr, nullptr, "the residual stream is always fp32 here"},
      {"--apply-query-key-layer-scaling", N, F, nullptr, nullptr,
       "scales QK^T by 1/layer and the softmax input back: the same softmax in exact arithmetic (an fp16 overflow guard); "
       "softmax is computed in fp32 here"},
      {"--no-query-key-layer-scaling", N, F, nullptr, nullptr,
       "285068c's switch for the fp16 overflow guard above: the same softmax; it is computed in fp32 here"},
      {"--attention-softmax-in-fp32", N, F, nullptr, nullptr, "the attention softmax is always computed in fp32 here"},
      {"--accumulate-allreduce-grads-in-fp32", N, F, nullptr, nullptr, "gradients are always accumulated and reduced in fp32 here"},
      {"--fp16-lm-cross-entropy", R, F, nullptr, nullptr, "the cross-entropy is computed in fp32 here; fp16 is not built"},
      // distributed
      {"--tensor-model-parallel-size", M, I, "1", nullptr, "parallel_config.model_parallel (Megatron: min(TP, world))"},
      {"--pipeline-model-parallel-size", M, I, "1", nullptr, "parallel_config.pipeline_stage (Megatron: min(PP, world / TP))"},
      {"--pipeline-model-parallel-split-rank", R, I, nullptr, nullptr, "an encoder-decoder split: GPT has none"},
      {"--model-parallel-size", R, I, nullptr, nullptr, "Megatron refuses it too: use --tensor-model-parallel-size"},
      {"--num-layers-per-virtual-pipeline-stage", M, I, nullptr, nullptr,
       "parallel.pipeline_config.pipeline_interleave and model_config.pp_interleave_num = layers / PP / N"},
      {"--no-overlap-p2p-communication", N, F, nullptr, nullptr, kOverlap},
      {"--distributed-backend", N, S, "nccl", "nccl|gloo",
       "ranks talk over MPI here (the collectives: parallel.collectives)"},
      {"--distributed-timeout-minutes", M, I, "10", nullptr, "parallel.hang_timeout (seconds)"},
      {"--overlap-grad-reduce", M, F, nullptr, nullptr,
       "CheckpointMonitor's megatron_ddp_bucket_size (max(40000000, 1000000 x dp) elements: the grad buckets of the "
       "distrib_optim.pt --save writes); the reduction's overlap itself: ours always reduce in the background of "
       "backward, and the numbers do not depend on it"},
      {"--no-delay-grad-reduce", N, F, nullptr, nullptr, kOverlap},
      {"--overlap-param-gather", N, F, nullptr, nullptr, kOverlap},
      {"--delay-param-gather", N, F, nullptr, nullptr, kOverlap},
      {"--no-scatter-gather-tensors-in-pipeline", N, F, nullptr, nullptr,
       "how GPU pipeline sends are split over the tensor-parallel group; the numbers are the same"},
      {"--use-ring-exchange-p2p", N, F, nullptr, nullptr, "a custom NCCL build's point-to-point exchange"},
      {"--local_rank --local-rank", N, I, nullptr, nullptr, kLauncher},
      {"--lazy-mpu-init", R, S, nullptr, nullptr, "an external DDP manager: the translator builds a whole job"},
      {"--standalone-embedding-stage", R, F, nullptr, nullptr, "a pipeline stage of the embedding alone is not built"},
      {"--use-distributed-optimizer", M, F, nullptr, nullptr,
       "parallel.enable_parallel_optimizer True (ZeRO-1 over the data-parallel group)"},
      {"--context-parallel-size", M, I, "1", nullptr, "parallel_config.context_parallel"},
      {"--nccl-communicator-config-path", N, S, nullptr, nullptr, "NCCL's thread-block settings; no NCCL here"},
      {"--DDP-impl", N, S, "local", "local|torch", "285068c's data-parallel wrapper; both average the same gradients"},
      {"--no-contiguous-buffers-in-local-ddp", N, F, nullptr, nullptr, "285068c's gradient buffer layout; ours is one arena"},
      // validation
      {"--eval-iters", M, I, "100", nullptr, "eval_dataset.eval_iters (0: do_eval False)"},
      {"--eval-interval", M, I, "1000", nullptr, "do_eval and eval_step_interval"},
      {"--skip-train", M, F, nullptr, nullptr, "run_mode: eval"},
      {"--test-mode", N, F, nullptr, nullptr, "Megatron's own real-time tests alongside the run"},
      // data
      {"--data-path", M, L, nullptr, nullptr,
       "train_dataset.data_loader.data_path (a prefix, or [weight, prefix, ...])"},
      {"--split", M, S, "969, 30, 1", nullptr, "train_dataset.data_loader.split"},
      {"--train-data-path", R, L, nullptr, nullptr,
       "separate train/valid/test prefixes are not translated: use --data-path with --split"},
      {"--valid-data-path", R, L, nullptr, nullptr,
       "separate train/valid/test prefixes are not translated: use --data-path with --split"},
      {"--test-data-path", R, L, nullptr, nullptr,
       "separate train/valid/test prefixes are not translated: use --data-path with --split"},
      {"--data-cache-path", N, S, nullptr, nullptr,
       "where Megatron caches its sample index; gridformer caches its own in index_cache/ beside the data (docs/data.md)"},
      {"--no-mmap-bin-files", N, F, nullptr, nullptr, "the .bin files are always memory-mapped here"},
      {"--mock-data", M, F, nullptr, nullptr, "train_dataset.data_loader.type RandomTokens (synthetic ids)"},
      {"--vocab-size", M, I, nullptr, nullptr, "model_config.vocab_size = N + 1 with --tokenizer-type NullTokenizer"},
      {"--vocab-file", M, S, nullptr, nullptr, "processor.tokenizer.vocab_file (predict and LAMBADA)"},
      {"--merge-file", M, S, nullptr, nullptr, "processor.tokenizer.merge_file (predict and LAMBADA)"},
      {"--vocab-extra-ids", M, I, "0", nullptr, "checked: 0 (T5's sentinel tokens)"},
      {"--seq-length", M, I, nullptr, nullptr, "model.model_config.seq_length"},
      {"--encoder-seq-length", M, I, nullptr, nullptr, "model.model_config.seq_length (when --seq-length is absent)"},
      {"--decoder-seq-length", R, I, nullptr, nullptr, "an encoder-decoder's decoder: GPT has none"},
      {"--num-workers", N, I, "2", nullptr,
       "PyTorch's data-loader worker processes: samples are read from the memory-mapped .bin in the training process"},
      {"--mmap-warmup", N, F, nullptr, nullptr, "pre-reads the mapped files; the operating system pages them in as read"},
      {"--tokenizer-type", M, S, "GPT2BPETokenizer",
       "BertWordPieceLowerCase|BertWordPieceCase|GPT2BPETokenizer|SentencePieceTokenizer|GPTSentencePieceTokenizer|"
       "Llama2Tokenizer|PretrainedFromHF|NullTokenizer",
       "the vocabulary size (GPT-2 BPE 50257; NullTokenizer --vocab-size + 1), processor.tokenizer.type "
       "(pretrain_gpt.py's default GPT2BPETokenizer)"},
      {"--tokenizer-model", M, S, nullptr, nullptr, "checked: its vocabulary size is in the file, which the translator does not read"},
      {"--data-impl", M, S, "infer", "lazy|cached|mmap|infer", "checked: mmap (or infer on an mmap index)"},
      {"--reset-position-ids", M, F, nullptr, nullptr, "train_dataset.data_loader.reset_position_ids"},
      {"--reset-attention-mask", M, F, nullptr, nullptr, "train_dataset.data_loader.reset_attention_mask"},
      {"--eod-mask-loss", M, F, nullptr, nullptr, "train_dataset.data_loader.eod_mask_loss"},
      {"--no-create-attention-mask-in-dataloader", N, F, nullptr, nullptr,
       "where the causal mask is made (data loader or model); attention is causal either way"},
      // logging
      {"--log-throughput", N, F, nullptr, nullptr, "every step log line reports tokens/s, samples/s, TFLOP/s and MFU already"},
      {"--log-params-norm", N, F, nullptr, nullptr, "a log column of Megatron's; the step log here has no parameter norm"},
      {"--log-num-zeros-in-grad", N, F, nullptr, nullptr, "a log column of Megatron's; the step log here has no zero count"},
      {"--timing-log-level", N, I, "0", "0|1|2", kTiming},
      {"--no-barrier-with-level-1-timing", N, F, nullptr, nullptr, kTiming},
      {"--timing-log-option", N, S, "minmax", "max|minmax|all", kTiming},
      {"--tensorboard-log-interval", N, I, "1", nullptr, kTensorboard},
      {"--tensorboard-queue-size", N, I, "1000", nullptr, kTensorboard},
      {"--log-timers-to-tensorboard", N, F, nullptr, nullptr, kTensorboard},
      {"--log-batch-size-to-tensorboard", N, F, nullptr, nullptr, kTensorboard},
      {"--no-log-learnig-rate-to-tensorboard", N, F, nullptr, nullptr, kTensorboard},
      {"--no-log-loss-scale-to-tensorboard", N, F, nullptr, nullptr, kTensorboard},
      {"--log-validation-ppl-to-tensorboard", N, F, nullptr, nullptr, kTensorboard},
      {"--log-memory-to-tensorboard", N, F, nullptr, nullptr, kTensorboard},
      {"--log-world-size-to-tensorboard", N, F, nullptr, nullptr, kTensorboard},
      // MoE (Megatron core_r0.6.0)
      {"--expert-model-parallel-size", M, I, "1", nullptr, "parallel_config.expert_parallel"},
      {"--moe-router-load-balancing-type", M, S, "aux_loss", "aux_loss|sinkhorn|none",
       "moe_config.aux_loss_factor (none: 0); sinkhorn refused"},
      {"--moe-router-topk", M, I, "2", nullptr, "moe_config.num_experts_chosen"},
      {"--moe-grouped-gemm", M, F, nullptr, nullptr,
       "CheckpointMonitor's megatron_moe_grouped_gemm: --save writes the experts as GroupedMLP's weight1 / weight2; "
       "one grouped GEMM kernel launch for a rank's experts (CUTLASS), the same products computed expert by expert here"},
      {"--moe-aux-loss-coeff", M, D, "0.0", nullptr, "moe_config.aux_loss_factor"},
      {"--moe-z-loss-coeff", M, D, nullptr, nullptr, "moe_config.z_loss_factor"},
      {"--moe-input-jitter-eps", R, D, nullptr, nullptr, "router input jitter is not built"},
      {"--moe-token-dropping", N, F, nullptr, nullptr,
       "Megatron core_r0.6.0 declares it 'currently unsupported': its MoE is dropless either way (capacity_factor -1)"},
      {"--moe-token-dispatcher-type", M, S, "allgather", "allgather|alltoall", "moe_config.token_dispatcher"},
      {"--moe-per-layer-logging", N, F, nullptr, nullptr, "each MoE layer's expert load is in metrics.jsonl here"},
      // MindSpeed (core_r0.6.0)
      {"--moe-model-type", M, S, "megatron_moe", "deepspeed_moe|megatron_moe", "checked: megatron_moe (Megatron core's MoE)"},
      {"--moe-permutation-async-comm", N, F, nullptr, nullptr,
       "overlaps the token permutation's all-gathers on the NPU; the same tokens reach the same experts"},
      {"--use-fused-rotary-pos-emb", N, F, nullptr, nullptr, kFusion},
      {"--use-fused-rmsnorm", N, F, nullptr, nullptr, kFusion},
      {"--use-fused-swiglu", N, F, nullptr, nullptr, kFusion},
      {"--reuse-fp32-param", N, F, nullptr, nullptr,
       "an NPU memory saving of the distributed optimizer (fp32 master weights sharing the bf16 copy's memory); the same update"},
      {"--swap-attention", N, F, nullptr, nullptr,
       "moves attention activations to host memory and back on the NPU; they stay in memory here (no recompute)"},
      {"--recompute-activation-function", N, F, nullptr, nullptr,
       "recomputing only the MLP's activation is not built: it is kept in memory (the numbers are the same; "
       "recompute_config.select_recompute would also recompute the attention core)"},
      {"--recompute-activation-function-num-layers", N, I, nullptr, nullptr,
       "the layers of --recompute-activation-function, which is not built (memory only)"},
      {"--recompute-norm", N, F, nullptr, nullptr, "recomputing only the norms is not built (memory only; the same numbers)"},
      {"--pre-tockens", M, I, "65536", nullptr,
       "model.model_config.pre_tokens (with --use-flash-attn: each token sees itself and N before it)"},
      {"--next-tockens", M, I, "0", nullptr, "checked: >= 0 (GPT's causal mask hides later tokens whatever it says)"},
      {"--shape-order", N, S, "SBH", "SBH|BSH|BSND",
       "the memory layout of the NPU flash-attention kernel's inputs (MindSpeed forces SBH); the same attention"},
      {"--context-parallel-algo", M, S, nullptr,
       "ulysses_cp_algo|megatron_cp_algo|hybrid_cp_algo|adaptive_cp_algo|hybrid_adaptive_cp_algo",
       "parallel_config.context_parallel_algo (absent: Megatron's ring, colossalai_cp; MindSpeed's own default is "
       "ulysses_cp_algo)"},
      {"--ulysses-degree-in-cp", M, I, nullptr, nullptr, "parallel_config.ulysses_degree_in_cp (hybrid_cp_algo)"},
      // tasks/main.py
      {"--task", M, S, nullptr, nullptr, "LAMBADA: run_mode eval and `gridformer train --lambada_data`; others refused"},
      {"--valid-data", M, L, nullptr, nullptr, "`gridformer train --lambada_data FILE` (the LAMBADA task's data)"},
      {"--strict-lambada", M, F, nullptr, nullptr, "`gridformer train --strict_lambada`"},
      {"--overlapping-eval", N, I, "32", nullptr, "read by the WIKITEXT103 task only"},
      {"--keep-last", N, F, nullptr, nullptr, "read by fine-tuning tasks only; LAMBADA evaluates every passage"},
  };
  return t;
}

// Megatron's other arguments, as tools/ would list them from the four files (an ast walk over their
// add_argument calls): spelling then arity.
const std::vector<std::string>& other_arguments() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    std::istringstream in(kOtherArguments);
    for (std::string w; in >> w;) v.push_back(w);
    return v;
  }();
  return names;
}

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace gf::megatron_args
