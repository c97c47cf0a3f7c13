// Megatron arguments into our YAML (runner/config/megatron_args.h), the training sections: precision and
// loss scaling, recompute, the learning-rate schedule counted in samples as Megatron counts it, the
// optimizer, the data, checkpoints and logging, the LAMBADA task, and the environment.
#include <cmath>

#include "runner/config/megatron_args_job.h"

namespace gf::megatron_args {
namespace {

std::string show(double v) { return num(v).Scalar(); }

// A count of steps that must be whole: `v` within rounding of an integer.
bool whole(double v) { return std::fabs(v - std::round(v)) <= 1e-9 * std::max(1.0, std::fabs(v)); }

}  // namespace

// ---- precision: the compute dtype and the loss scale ----

void translate_precision(Job& j) {
  const Args& a = j.a;
  if (j.fp16 && j.bf16) j.error("--fp16", "with --bf16: Megatron asserts one of them");
  if (a.flag("--reuse-fp32-param") && !j.bf16) j.error("--reuse-fp32-param", "needs --bf16 (MindSpeed asserts it)");
  j.model_config()["compute_dtype"] = j.fp16 ? "float16" : j.bf16 ? "bfloat16" : "float32";
  const char* const dynamic[] = {"--initial-loss-scale", "--min-loss-scale", "--loss-scale-window", "--hysteresis"};
  if (a.has("--loss-scale") && (j.fp16 || j.bf16)) {
    const double s = a.f("--loss-scale");
    if (!(s > 0)) j.error(j.given("--loss-scale"), "must be > 0");
    j.runner_wrapper["scale_sense"] = num(s);
    j.differ("a fixed --loss-scale: Megatron skips a step whose gradients overflow; gridformer skips only under a dynamic "
             "scale and stops the run at a non-finite step");
    for (const char* k : dynamic)
      if (a.has(k)) j.note(j.given(k), "read by the dynamic loss scale only, which --loss-scale replaces");
  } else if (j.fp16) {
    const double window = a.f("--loss-scale-window");
    if (!(window >= 1) || !whole(window)) j.error(j.given("--loss-scale-window"), "must be a whole number of steps >= 1");
    if (a.f("--min-loss-scale") != 1.0)
      j.error(j.given("--min-loss-scale"), "gridformer's dynamic loss scale stops at 1 (Megatron's default); other floors are "
              "not built");
    YAML::Node s = j.runner_wrapper["scale_sense"];
    s["type"] = "DynamicLossScaleUpdateCell";
    s["loss_scale_value"] = num(a.f("--initial-loss-scale"));
    s["scale_factor"] = num(2.0);  // Megatron's DynamicGradScaler: growth 2, backoff 0.5
    s["scale_window"] = static_cast<int64_t>(std::llround(window));
    if (const int64_t h = a.i("--hysteresis"); h != 1 && j.training)
      j.differ("--hysteresis " + str(h) + ": Megatron lowers the loss scale once " + str(h) + " overflows have come since it "
               "last grew (every overflowing step is skipped either way); gridformer lowers it at every overflow (hysteresis 1)");
    if (j.training)
      j.differ("a step skipped for an fp16 overflow: Megatron's learning-rate schedule does not advance on it; gridformer's "
               "counts it (the rate of step k is the schedule's k-th)");
  } else {
    if (a.has("--loss-scale")) j.note(j.given("--loss-scale"), "no effect without --fp16 or --bf16 (Megatron scales no fp32 loss)");
    for (const char* k : dynamic)
      if (a.has(k)) j.note(j.given(k), "read by --fp16's dynamic loss scale only");
  }
  if (j.fp16 || j.bf16)
    j.differ(std::string(j.fp16 ? "--fp16" : "--bf16") + ": Megatron holds the model's weights and activations in " +
             (j.fp16 ? "fp16" : "bf16") + " (norms and softmax computed in fp32, fp32 master weights in the optimizer); "
             "gridformer keeps fp32 weights and residual stream and rounds the matrix products' operands (and the kept MLP "
             "and attention activations) to it, as PyTorch's autocast does: the roundings differ");
}

// ---- recompute ----

void translate_recompute(Job& j) {
  const Args& a = j.a;
  std::string gran = a.s("--recompute-granularity"), method = a.s("--recompute-method");
  if (a.flag("--checkpoint-activations")) {  // 285068c: full and uniform (core_r0.6.0 exits on it)
    gran = "full";
    method = "uniform";
  }
  if (a.flag("--recompute-activations")) gran = "selective";
  const int64_t n = a.i("--recompute-num-layers");
  YAML::Node r = j.recompute_config;
  if (gran.empty()) {
    if (a.has("--recompute-method")) j.note(j.given("--recompute-method"), "no effect without --recompute-granularity");
    if (a.has("--recompute-num-layers"))
      j.note(j.given("--recompute-num-layers"), "no effect without --recompute-granularity (MindSpeed's "
             "--recompute-activation-function reads it as the layers it leaves to full recompute)");
    return;
  }
  if (gran == "selective") {
    if (!method.empty()) j.error(j.given("--recompute-method"), "with selective granularity: Megatron asserts it is not given");
    r["select_recompute"] = true;
    j.note("--recompute-granularity selective", "Megatron recomputes the attention core; select_recompute also recomputes "
           "the MLP activation (memory and time only: the numbers are the same)");
    return;
  }
  if (method.empty()) {
    j.error("--recompute-granularity full", "needs --recompute-method uniform or block (Megatron: invalid activation "
            "recompute method)");
    return;
  }
  if (n < 1) j.error(j.given("--recompute-num-layers"), "must be >= 1");
  r["recompute"] = true;
  const int64_t per_chunk = j.layers / std::max<int64_t>(1, j.pp * j.chunks);
  if (method == "uniform") {
    if (n > 1)
      j.note(j.given("--recompute-num-layers"), "uniform recompute of chunks of " + str(n) + " layers recomputes every "
             "layer, as recompute_config.recompute does layer by layer (memory only)");
  } else if (j.pp * j.chunks == 1) {
    if (n < j.layers) r["recompute_num_layers"] = n;
  } else if (n < per_chunk) {
    j.differ("--recompute-method block --recompute-num-layers " + str(n) + " under pipeline parallelism: Megatron recomputes "
             "the first " + str(n) + " layers of each model chunk; gridformer's recompute_num_layers counts from the model's "
             "first layer, so every layer is recomputed here (memory and time differ, not the numbers)");
  }
}

// ---- the learning-rate schedule (counted in samples, as Megatron counts it), steps and the optimizer ----

void translate_schedule(Job& j) {
  const Args& a = j.a;
  YAML::Node o = j.optimizer;
  if (a.s("--optimizer") == "sgd") j.error("--optimizer sgd", "SGD is not built (AdamW is)");
  o["type"] = "AdamWeightDecay";  // Megatron's Adam: apex FusedAdam in AdamW mode, bias-corrected
  o["beta1"] = num(a.f("--adam-beta1"));
  o["beta2"] = num(a.f("--adam-beta2"));
  o["eps"] = num(a.f("--adam-eps"));
  o["weight_decay"] = num(a.f("--weight-decay"));
  if (a.s("--weight-decay-incr-style") != "constant")
    j.error(j.given("--weight-decay-incr-style"), "a weight decay that changes over training is not built");
  const double clip = a.f("--clip-grad");
  j.runner_wrapper["use_clip_grad"] = clip > 0;
  if (clip > 0) j.runner_wrapper["max_grad_norm"] = num(clip);
  if (!j.training) {
    for (const char* k : {"--train-iters", "--train-samples", "--lr", "--min-lr", "--lr-decay-style", "--lr-decay-iters",
                          "--lr-decay-samples", "--lr-warmup-fraction", "--lr-warmup-iters", "--lr-warmup-samples"})
      if (a.has(k)) j.note(j.given(k), "read by training only; this job evaluates");
    return;
  }
  const bool by_iters = a.has("--train-iters"), by_samples = a.has("--train-samples");
  if (by_iters == by_samples) {
    j.error("--train-iters", by_iters ? "with --train-samples: Megatron asserts one of them"
                                      : "Megatron's training needs --train-iters or --train-samples");
    return;
  }
  const int64_t G = j.global;
  const bool fraction = a.has("--lr-warmup-fraction");
  int64_t steps = 0;
  double decay = 0, warmup = 0;  // in steps (global batches)
  std::string warmup_arg = fraction ? j.given("--lr-warmup-fraction") : "", decay_arg;
  if (by_iters) {
    steps = a.i("--train-iters");
    if (a.has("--lr-decay-samples")) j.error("--lr-decay-samples", "with --train-iters: Megatron expects --lr-decay-iters");
    if (a.i("--lr-warmup-samples") != 0) j.error("--lr-warmup-samples", "with --train-iters: Megatron expects --lr-warmup-iters");
    if (fraction && a.i("--lr-warmup-iters") != 0) j.error("--lr-warmup-iters", "with --lr-warmup-fraction: Megatron takes one");
    decay_arg = a.has("--lr-decay-iters") ? j.given("--lr-decay-iters") : j.given("--train-iters");
    decay = static_cast<double>(a.has("--lr-decay-iters") ? a.i("--lr-decay-iters") : steps);
    warmup = fraction ? a.f("--lr-warmup-fraction") * decay : static_cast<double>(a.i("--lr-warmup-iters"));
    if (!fraction) warmup_arg = j.given("--lr-warmup-iters");
  } else {
    const int64_t samples = a.i("--train-samples");
    steps = samples / G;  // Megatron's update_train_iters (no batch ramp-up)
    if (a.has("--lr-decay-iters")) j.error("--lr-decay-iters", "with --train-samples: Megatron expects --lr-decay-samples");
    if (a.i("--lr-warmup-iters") != 0) j.error("--lr-warmup-iters", "with --train-samples: Megatron expects --lr-warmup-samples");
    if (fraction && a.i("--lr-warmup-samples") != 0) j.error("--lr-warmup-samples", "with --lr-warmup-fraction: Megatron takes one");
    decay_arg = a.has("--lr-decay-samples") ? j.given("--lr-decay-samples") : j.given("--train-samples");
    const int64_t ds = a.has("--lr-decay-samples") ? a.i("--lr-decay-samples") : samples;
    if (ds % G != 0)
      j.error(decay_arg, "a decay over " + str(ds) + " samples is " + show(static_cast<double>(ds) / G) + " global batches of " +
              str(G) + ": not a whole number of steps (gridformer's schedule changes at step boundaries)");
    decay = static_cast<double>(ds / G);
    const double ws = fraction ? a.f("--lr-warmup-fraction") * static_cast<double>(ds) : static_cast<double>(a.i("--lr-warmup-samples"));
    warmup = ws / static_cast<double>(G);
    if (!fraction) warmup_arg = j.given("--lr-warmup-samples");
  }
  if (steps < 1) j.error(by_iters ? j.given("--train-iters") : j.given("--train-samples"), "fewer than one step of " + str(G) + " samples");
  if (!whole(warmup)) {
    j.error(warmup_arg, "a warmup of " + show(warmup) + " steps (global batches of " + str(G) + ") is not a whole number of "
            "steps: gridformer's schedule changes at step boundaries");
    return;
  }
  const int64_t W = std::llround(warmup), Dn = static_cast<int64_t>(decay);
  if (Dn < 1 || W < 0 || W >= Dn) {
    j.error(decay_arg, "Megatron asserts 0 <= warmup (" + str(W) + ") < decay (" + str(Dn) + ") steps");
    return;
  }
  const auto lr = a.opt_float("--lr");
  const double min_lr = a.f("--min-lr");
  if (!lr) j.error("--lr", "required for training (Megatron's optimizer takes it)");
  else if (!(min_lr >= 0 && min_lr <= *lr)) j.error(j.given("--min-lr"), "Megatron asserts 0 <= min-lr <= lr");
  if (a.f("--lr-warmup-init") != 0) j.error(j.given("--lr-warmup-init"), "gridformer's warmup starts from 0");
  const std::string style = a.s("--lr-decay-style");
  if (style == "inverse-square-root") j.error("--lr-decay-style inverse-square-root", "not built (constant, linear, cosine are)");
  if (!lr) return;
  // Megatron sets the rate of iteration k (from 1) before its update from the samples consumed before it,
  // (k - 1) x G: warmup lr (k-1)/W up to k = W + 1, then the decay at ratio (k - 1 - W) / (D - W).
  // lr_schedule.from_steps_done gives step k the schedule's rate for k - 1 steps: with W and D as they are,
  // the warm-up (its first update at rate 0), the peak at step W + 1, the decay and its end are Megatron's.
  YAML::Node s = j.lr_schedule;
  s["type"] = style == "constant" ? "constant" : style == "cosine" ? "cosine" : "polynomial";
  s["learning_rate"] = num(*lr);
  s["lr_end"] = num(min_lr);
  s["warmup_steps"] = W;
  s["total_steps"] = Dn;
  s["from_steps_done"] = true;
  if (style == "linear") s["power"] = num(1.0);
  j.runner_config["train_steps"] = steps;
}

// ---- data and evaluation ----

void translate_data(Job& j) {
  const Args& a = j.a;
  YAML::Node dl = j.train_dataset["data_loader"];
  const std::vector<std::string>& path = a.list("--data-path");
  if (a.flag("--mock-data")) {
    dl["type"] = "RandomTokens";
    if (!path.empty()) j.note("--data-path", "not read with --mock-data (Megatron's mock dataset)");
  } else if (!path.empty()) {
    dl["type"] = "MegatronDataset";
    if (path.size() == 1) {
      dl["data_path"] = path.front();
    } else if (path.size() % 2 != 0) {
      j.error("--data-path", "expects one prefix, or weight prefix pairs (" + str(static_cast<int64_t>(path.size())) + " words)");
    } else {
      for (size_t k = 0; k < path.size(); k += 2) {
        double w = 0;
        if (!parse_float(path[k], w) || !(w >= 0)) j.error("--data-path", "'" + path[k] + "' is not a weight (weight prefix pairs)");
        dl["data_path"].push_back(num(w));
        dl["data_path"].push_back(path[k + 1]);
      }
    }
  } else if (j.training) {
    j.error("--data-path", "required for training (or --mock-data for synthetic tokens)");
  }
  // Megatron core's parse_and_normalize_split: the numbers of the string, padded to three.
  const std::string split = a.s("--split");
  std::string joined;
  for (size_t k = 0; k < split.size();) {  // the runs of [.0-9] (Megatron's re.findall(r"[.0-9]+", split))
    const auto in_number = [&](size_t i) { return split[i] == '.' || (split[i] >= '0' && split[i] <= '9'); };
    if (!in_number(k)) {
      ++k;
      continue;
    }
    size_t e = k;
    while (e < split.size() && in_number(e)) ++e;
    const std::string number = split.substr(k, e - k);
    k = e;
    double v = 0;
    if (!parse_float(number, v)) j.error(j.given("--split"), "'" + number + "' is not a number");
    j.split.push_back(v);
    joined += (joined.empty() ? "" : ",") + number;
  }
  while (j.split.size() < 3) {
    j.split.push_back(0.0);
    joined += joined.empty() ? "0" : ",0";
  }
  if (j.split.size() > 3 || !(j.split[0] + j.split[1] + j.split[2] > 0))
    j.error("--split " + split, "expects up to three proportions (train, validation, test) with a positive sum");
  if (a.flag("--mock-data") || !path.empty()) {
    dl["split"] = joined;
    dl["shuffle"] = true;
    dl["seed"] = a.i("--seed");  // Megatron's datasets shuffle with --seed
    for (auto [arg, key] : {std::pair{"--reset-position-ids", "reset_position_ids"},
                            {"--reset-attention-mask", "reset_attention_mask"}, {"--eod-mask-loss", "eod_mask_loss"}})
      if (a.flag(arg)) dl[key] = true;
    if (a.flag("--eod-mask-loss") && j.training)
      j.differ("--eod-mask-loss: Megatron averages the loss over each micro-batch's unmasked tokens, then over the "
               "micro-batches and data-parallel ranks; gridformer divides the global batch's loss by all its unmasked "
               "tokens (Megatron's later --calculate-per-token-loss): the two differ when the batches mask unequally");
  }
  const std::string impl = a.s("--data-impl");
  if (impl == "lazy" || impl == "cached")
    j.error(j.given("--data-impl"), "the older indexed format (TNTIDX) is not read; convert the data to mmap (MMIDIDX)");
  else if (a.has("--data-impl"))
    j.note(j.given("--data-impl"), impl == "mmap" ? "the indexed dataset is always read memory-mapped (MMIDIDX) here"
                                                  : "the .idx must be the mmap format (MMIDIDX), the one read here");
  if (const std::string t = a.s("--dataloader-type"); t == "cyclic" || t == "external")
    j.error(j.given("--dataloader-type"), "not built: samples are read once per epoch in the shuffled order (single)");
  const int64_t iters = a.i("--eval-iters"), interval = a.i("--eval-interval");
  if (iters < 0) j.error(j.given("--eval-iters"), "must be >= 0");
  if (j.task) return;  // translate_task
  if (!j.training) {      // --skip-train: run_mode eval over eval_iters batches of the validation split
    j.eval_dataset["eval_iters"] = std::max<int64_t>(1, iters);
    return;
  }
  const bool eval = j.split.size() == 3 && j.split[1] > 0 && iters > 0;
  j.top["do_eval"] = eval;
  if (!eval) return;
  j.top["eval_step_interval"] = interval > 0 ? interval : -1;  // 0: at the end only
  j.eval_dataset["eval_iters"] = iters;
  j.differ("the validation loss: Megatron evaluates --eval-iters global batches of its shuffled validation split; "
           "gridformer reads that split's samples in order, so the batches (and the loss) differ");
  if (j.split[2] > 0)
    j.differ("the test split: Megatron also reports the loss on it after training; gridformer evaluates the validation "
             "split only");
}

// ---- checkpoints, logging, exits ----

void translate_output(Job& j) {
  const Args& a = j.a;
  const int64_t every = a.i("--log-interval");
  if (every < 1) j.error(j.given("--log-interval"), "must be >= 1");
  YAML::Node monitor;
  monitor["type"] = "MFLossMonitor";
  monitor["per_print_times"] = every;
  j.callbacks.push_back(monitor);
  const std::string save = a.s("--save"), load = a.s("--load");
  if (!save.empty()) {
    if (!a.has("--save-interval") || a.i("--save-interval") < 1)
      j.error("--save", "needs --save-interval N >= 1 (Megatron asserts it)");
    YAML::Node ck;
    ck["type"] = "CheckpointMonitor";
    ck["directory"] = save;
    ck["save_checkpoint_steps"] = a.i("--save-interval");
    ck["keep_checkpoint_max"] = 0;  // Megatron keeps every checkpoint
    ck["megatron_format"] = true;   // and Megatron's own layout beside ours, for Megatron-LM to resume from
    ck["megatron_transformer_impl"] = a.s("--transformer-impl");  // core's layout as this job's Megatron builds it
    ck["megatron_moe_grouped_gemm"] = a.flag("--moe-grouped-gemm");
    ck["megatron_use_mcore_models"] = a.flag("--use-mcore-models");
    // DistributedDataParallel's buckets (core_r0.6.0): one, or under --overlap-grad-reduce max(40000000, 1000000 x dp)
    // elements, which the distributed optimizer's distrib_optim.pt is cut in.
    ck["megatron_ddp_bucket_size"] = a.flag("--overlap-grad-reduce") ? std::max<int64_t>(40000000, 1000000 * j.dp) : 0;
    j.callbacks.push_back(ck);
  } else if (a.has("--save-interval")) {
    j.note(j.given("--save-interval"), "no effect without --save");
  }
  const bool finetune = a.flag("--finetune");
  if (!load.empty()) {
    if (j.training && load == save && !finetune) {
      j.top["resume_training"] = true;  // from --save's directory when it has a checkpoint, else from scratch
    } else {
      j.top["load_checkpoint"] = load;
      j.top["resume_training"] = j.training && !finetune;
      j.differ("--load " + load + " names a directory that must exist: gridformer refuses a load_checkpoint that does not, "
               "where Megatron starts from random weights unless --exit-on-missing-checkpoint");
    }
    j.differ("--load: a Megatron-LM checkpoint (iter_*/mp_rank_*/model_optim_rng.pt) resumes with its weights, Adam "
             "moments (the distributed optimizer's from distrib_optim.pt, or mid-2023's from each data-parallel rank's "
             "optim.pt), iteration, consumed samples, loss scale and "
             "schedule (--finetune takes its weights alone)");
  }
  if (a.flag("--no-load-optim")) {
    if (j.training && !finetune && !load.empty())
      j.error("--no-load-optim", "a resume restores the weights, the step and the optimizer state together; model and "
              "step without the optimizer is not built (--finetune loads the weights alone, from step 1)");
    else
      j.note("--no-load-optim", j.training ? "nothing of the optimizer is loaded here anyway" : "evaluation has no optimizer");
  }
  if (finetune && load.empty()) j.note("--finetune", "no effect without --load");
  if (const auto n = a.opt_int("--exit-interval"); n && *n > 0) j.runner_config["exit_interval"] = *n;
  if (const auto m = a.opt_int("--exit-duration-in-mins"); m && *m > 0)
    j.runner_config["exit_duration_in_mins"] = num(static_cast<double>(*m));
  if (a.has("--tensorboard-dir")) j.top["tensorboard_dir"] = a.s("--tensorboard-dir");
  if (a.flag("--profile")) {
    // Megatron profiles iterations [start, end) counted from 0: steps start + 1 to end counted from 1.
    const int64_t start = a.i("--profile-step-start"), end = a.i("--profile-step-end");
    if (start < 0 || end <= start) j.error(j.given("--profile-step-end"), "must be above --profile-step-start");
    j.top["profile"] = true;
    j.top["profile_start_step"] = start + 1;
    j.top["profile_stop_step"] = end;
  }
  j.trainer["model_name"] = j.llama ? "megatron_llama" : "megatron_gpt";
}

// ---- tasks/main.py: LAMBADA ----

void translate_task(Job& j) {
  const Args& a = j.a;
  if (!j.task) {
    for (const char* k : {"--valid-data", "--strict-lambada"})
      if (a.has(k)) j.note(k, "read by tasks/main.py's tasks only (no --task)");
    return;
  }
  if (a.s("--task") != "LAMBADA") {
    j.error(j.given("--task"), "tasks other than LAMBADA are not translated (gridformer evaluates LAMBADA: `gridformer "
            "train --lambada_data`)");
    return;
  }
  const std::vector<std::string>& data = a.list("--valid-data");
  if (data.empty()) {
    j.error("--task LAMBADA", "needs --valid-data FILE (the LAMBADA passages, JSON lines)");
    return;
  }
  if (data.size() > 1) j.note("--valid-data", "LAMBADA reads the first file only (" + data.front() + ")");
  j.t.cli_options = {"--lambada_data", data.front()};
  if (a.flag("--strict-lambada")) j.t.cli_options.push_back("--strict_lambada");
  if (j.pp > 1)
    j.error("--task LAMBADA", "with pipeline parallel " + str(j.pp) + ": gridformer's LAMBADA runs the whole model on each "
            "rank (pipeline_stage 1)");
  if (a.list("--data-path").empty() && !a.flag("--mock-data")) {
    // run_mode eval reports loss and perplexity over eval_iters batches before LAMBADA; the task has no such data.
    j.train_dataset["data_loader"]["type"] = "RandomTokens";
    j.runner_config["train_steps"] = 1;
    j.eval_dataset["eval_iters"] = 1;
    j.note("--task LAMBADA", "gridformer's run_mode eval reports a loss and perplexity before LAMBADA's accuracy; without "
           "--data-path it is one batch of synthetic tokens (RandomTokens), a number that means nothing");
  } else {
    j.eval_dataset["eval_iters"] = std::max<int64_t>(1, a.i("--eval-iters"));
  }
}

// ---- the environment ----

void translate_environment(Job& j, const std::map<std::string, std::string>& env) {
  for (const auto& [k, v] : env) {
    const std::string kv = k + "=" + v;
    if (k == "CUDA_DEVICE_MAX_CONNECTIONS")
      j.note(kv, "the hardware work queues CUDA gives a process (Megatron requires 1 for sequence parallelism and its "
                 "asynchronous tensor-parallel all-reduce, so communication is ordered before computation); no effect on a CPU");
    else if (k == "WORLD_SIZE" && v != std::to_string(j.world))
      j.error(kv, "disagrees with the world size given, " + std::to_string(j.world));
    else if (k == "WORLD_SIZE")
      j.note(kv, "the world size given");
    else if (k == "RANK" || k == "LOCAL_RANK" || k == "MASTER_ADDR" || k == "MASTER_PORT")
      j.note(kv, "set for torch.distributed's launcher; mpirun gives every rank its place");
    else
      j.note(kv, "not read by Megatron's arguments; ignored");
  }
}

}  // namespace gf::megatron_args
