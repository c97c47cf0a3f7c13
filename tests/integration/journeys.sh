#!/usr/bin/env bash
# A newcomer's day, as README.md and docs/ tell it, on the shipped tiny configs (shrunk by lib.sh's tiny_config):
#  1. own data: a JSON Lines file through preprocess_data, trained on; a prefix without the `_text_document`
#     preprocess_data appends is refused before any step, naming the prefix that exists;
#  2. supervised fine-tuning data from Stanford Alpaca and ShareGPT files written both as JSON arrays (as Stanford
#     and MindFormers' converters write them) and as JSON Lines: the same .bin/.idx bytes either way; on the shipped
#     tiny Llama the document resets change step 1's loss, at the end-of-document id the log names (GPT-2's
#     50256); with LlamaConfig's default eos 2 they change nothing and the run says so;
#  3. fine-tune, save, predict: a run that saves, a run_mode finetune run from its checkpoint, and predict from the
#     fine-tuned checkpoint;
#  4. an unwritable checkpoint directory is refused before step 1 (status 2), nothing trained;
#  5. 4 ranks through scripts/run_distribute.sh with a generated rank table: a missing data path stops before any
#     rank starts, with the error rank 0 would report; with the data, the job ends by printing its last loss.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab
need_corpus
command -v mpirun > /dev/null || fail "mpirun missing (openmpi-bin)"

# 0. The binary says what it is, and each subcommand's help ends with an example (the environment paragraph is the
# top-level help's alone).
"$BIN" --version | grep -qE "^gridformer [0-9a-f]+(-dirty)?$|^gridformer unknown$" || fail "--version: $("$BIN" --version)"
"$BIN" train --help | tail -3 | grep -qF "example: gridformer train --config" || fail "train --help has no example"
! "$BIN" train --help | grep -q "^Environment:" || fail "train --help repeats the environment paragraph"
"$BIN" --help | grep -q "^Environment:" || fail "the top-level help lost the environment paragraph"

# 1. Own data.
head -300 "$SRC/data/fortunes/fortunes.jsonl" > mine.jsonl
run pre_mine "$PRE" --input mine.jsonl --output-prefix mydata --vocab-file "$VOCAB" --merge-file "$MERGES" --append-eod
((STATUS == 0)) || { cat pre_mine.log; fail "preprocess_data on mine.jsonl: status $STATUS"; }
tiny_config gpt2 gpt2.yaml
train own gpt2.yaml --set train_dataset.data_loader.data_path="$WORK/mydata_text_document"
grep -qF "data: MegatronDataset $WORK/mydata_text_document" own.log || fail "own data: the log does not name mydata"
[ "$(losses own | wc -l)" -ge 4 ] || fail "own data: fewer than 4 logged steps"
ok "own data: $(losses own | tail -1)"
# run_mode eval on it: the validation split (50 of 1000 parts) holds a few samples, each scored once, and no step trains.
run eval_own "$BIN" train --config gpt2.yaml --set output_dir=eval_own --set run_mode=eval \
  --set train_dataset.data_loader.data_path="$WORK/mydata_text_document"
((STATUS == 0)) || { tail -20 eval_own.log; fail "run_mode eval on own data: status $STATUS"; }
grep -qE "eval: [0-9]+ batches of the validation data's [0-9]+ samples \(each once\), not eval_iters 10" eval_own.log ||
  fail "eval: the small validation split was not read once: $(grep 'eval' eval_own.log | head -3)"
grep -qF "no step is trained" eval_own.log && ! grep -qE "training [0-9]+ steps|step:\[" eval_own.log ||
  fail "run_mode eval says it trains: $(grep -E 'training|step:' eval_own.log | head -2)"
ok "run_mode eval: $(grep -o 'eval: loss.*' eval_own.log)"
refused 2 "there is mydata_text_document.idx" own_prefix "$BIN" train --config gpt2.yaml \
  --set output_dir=own_prefix --set train_dataset.data_loader.data_path=mydata

# 2. SFT data, arrays and lines.
"$PY" - <<'EOF'
import json, random
random.seed(5)
words = "the a model data train answer question river blue seven quick fox jumps over lazy dog".split()
text = lambda n: " ".join(random.choice(words) for _ in range(n))
alpaca = [{"instruction": text(4).capitalize() + "?", "input": text(3) if i % 2 else "", "output": text(random.randint(3, 12)) + "."}
          for i in range(60)]
chat = [{"conversations": [{"from": "human", "value": text(5)}, {"from": "gpt", "value": text(8)}]} for _ in range(30)]
json.dump(alpaca, open("alpaca.json", "w"), indent=4)  # Stanford's alpaca_data.json layout
json.dump(chat, open("chat.json", "w"))
for name, rows in (("alpaca.jsonl", alpaca), ("chat.jsonl", chat)):
    with open(name, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
EOF
for fmt in alpaca chat; do
  for ext in json jsonl; do
    run "pre_${fmt}_$ext" "$PRE" --input "$fmt.$ext" --output-prefix "${fmt}_$ext" --vocab-file "$VOCAB" --merge-file "$MERGES" --sft "$fmt"
    ((STATUS == 0)) || { cat "pre_${fmt}_$ext.log"; fail "preprocess_data --sft $fmt on $fmt.$ext: status $STATUS"; }
  done
  for f in _text_document.bin _text_document.idx _text_document_loss_mask.bin _text_document_loss_mask.idx; do
    cmp -s "${fmt}_json$f" "${fmt}_jsonl$f" || fail "--sft $fmt: ${fmt}_json$f differs from ${fmt}_jsonl$f (array against lines)"
  done
  ok "--sft $fmt: a JSON array and JSON Lines give the same files"
done
printf '[{"instruction": "a", "output": "b"}, 3]' > bad.json
refused 2 "bad.json element 2: element is not a JSON object" bad_sft "$PRE" --input bad.json --output-prefix bad \
  --vocab-file "$VOCAB" --merge-file "$MERGES" --sft alpaca

tiny_config llama llama.yaml
# Alpaca examples are 60-90 tokens: samples of 129 tokens hold a document boundary or two each.
SFT=(--set train_dataset.data_loader.data_path="$WORK/alpaca_json_text_document" --set runner_config.train_steps=1
     --set model.model_config.seq_length=128 --set runner_config.batch_size=4)
RESETS=(--set train_dataset.data_loader.reset_position_ids=True --set train_dataset.data_loader.reset_attention_mask=True)
train sft_plain llama.yaml "${SFT[@]}"
train sft_resets llama.yaml "${SFT[@]}" "${RESETS[@]}"
grep -qF "documents: reset_position_ids, reset_attention_mask at end-of-document id 50256 (from model_config.eos_token_id" \
  sft_resets.log || fail "the resets' run does not name the end-of-document id 50256: $(grep documents sft_resets.log)"
plain=$(losses sft_plain | head -1) resets=$(losses sft_resets | head -1)
[ "$plain" != "$resets" ] || fail "the resets change nothing on the tiny Llama: step 1 $plain both"
ok "the resets change step 1: $plain without, $resets with"
train sft_eos2 llama.yaml "${SFT[@]}" "${RESETS[@]}" --set model.model_config.eos_token_id=2
grep -qF "act at end-of-document id 2 (from model_config.eos_token_id (data_loader.eod_token_id unset)), which never occurs" \
  sft_eos2.log || fail "eos 2 over GPT-2 ids: no warning that the resets change nothing"
same_losses sft_plain sft_eos2
ok "LlamaConfig's eos 2 over GPT-2 ids: warned, and the loss is the run without resets"

# 3. Fine-tune, save, predict.
SAVE=(--set "callbacks=[{type: MFLossMonitor, per_print_times: 1}, {type: CheckpointMonitor, prefix: tiny, save_checkpoint_steps: 2}]")
train base llama.yaml "${SAVE[@]}" --set runner_config.train_steps=2
train tuned llama.yaml "${SAVE[@]}" "${SFT[@]}" --set runner_config.train_steps=2 --set run_mode=finetune \
  --set load_checkpoint="$WORK/base"
grep -qF "loaded weights from checkpoint" tuned.log || fail "finetune: no weights loaded from base: $(grep -i load tuned.log | head -3)"
[ -d tuned/checkpoint ] || fail "finetune: nothing saved under tuned/checkpoint"
run predicted "$BIN" predict --config llama.yaml --load_checkpoint "$WORK/tuned" \
  --predict_data "The quick fox" --max_decode_length 12
((STATUS == 0)) || { tail -20 predicted.log; fail "predict from the fine-tuned checkpoint: status $STATUS"; }
grep -q "The quick fox" predicted.log || fail "predict printed no text: $(tail -5 predicted.log)"
ok "fine-tuned from base, saved, predicted: $(grep -m1 "The quick fox" predicted.log | cut -c1-100)"

# 3b. "Train 2 steps, then resume for 2 more": the cosine's total would move from 2 to 4 (neither run's curve), so the
# resume is refused until the config says which schedule wins (Megatron's --use-checkpoint-opt_param-scheduler /
# --override-opt_param-scheduler); with the checkpoint's, steps 3-4 run its schedule (past its end: lr_end).
RESUME=(--set resume_training=True --set load_checkpoint="$WORK/base" --set runner_config.train_steps=4)
refused 2 "the learning-rate schedule differs from the checkpoint's (total 2 in the checkpoint, 4 in this run)" \
  resumed_refused "$BIN" train --config llama.yaml --set output_dir=resumed_refused "${SAVE[@]}" "${RESUME[@]}"
train resumed_ckpt llama.yaml "${SAVE[@]}" "${RESUME[@]}" --set lr_schedule.use_checkpoint_opt_param_scheduler=True
grep -qF "learning-rate schedule: the checkpoint's" resumed_ckpt.log || fail "use_checkpoint: not said"
"$PY" - resumed_ckpt/metrics.jsonl "$(sed -n 's/^  lr_end: *//p' llama.yaml)" <<'EOF2' || fail "the checkpoint's schedule did not run"
import json, sys
lrs = [json.loads(l)["lr"] for l in open(sys.argv[1]) if '"loss"' in l]
assert lrs and all(abs(x - float(sys.argv[2])) <= 1e-12 for x in lrs), (lrs, sys.argv[2])
EOF2
train resumed_override llama.yaml "${SAVE[@]}" "${RESUME[@]}" --set lr_schedule.override_opt_param_scheduler=True
grep -qF "training steps 3-4 (2 steps; resumed after step 2)" resumed_override.log || fail "the resumed run's header"
grep -qF "step 3 alone: start-up" resumed_override.log || fail "the resumed run's first line does not name step 3"
ok "resume with another schedule: refused, then the checkpoint's or this config's as asked"
grep -qF "lr_schedule warms up over 20 steps and the run trains 2" base.log && fail "base warned of a warm-up it does not have"
run warm "$BIN" train --config llama.yaml --set output_dir=warm --set lr_schedule.warmup_steps=20 --set runner_config.train_steps=1
grep -qF "lr_schedule warms up over 20 steps and the run trains 1: the learning rate never reaches its peak" warm.log ||
  fail "a warm-up longer than the run is not warned"

# 4. An output directory that cannot be written (a path under a regular file): refused before step 1.
touch afile
refused 2 "\`$WORK/afile/ckpt\` cannot be written" unwritable "$BIN" train --config gpt2.yaml \
  --set output_dir=unwritable \
  --set "callbacks=[{type: MFLossMonitor}, {type: CheckpointMonitor, directory: $WORK/afile/ckpt}]"

# 5. Four ranks through run_distribute.sh.
"$BUILD/bin/rank_table" --device_num "[0,4)" --server_ip 127.0.0.1 --output_dir tables > /dev/null
TABLE=tables/hccl_4p_0123_127.0.0.1.json
tiny_config gpt2 missing.yaml --set parallel_config.data_parallel=4 --set output_dir="$WORK/dist_missing" \
  --set train_dataset.data_loader.data_path="$WORK/missing_text_document"
export GRIDFORMER_BIN="$BIN" GF_PROBE=0
run dist_missing bash "$SRC/scripts/run_distribute.sh" "$TABLE" missing.yaml "[0,4)" train
((STATUS != 0)) || fail "run_distribute.sh ran a config whose data is missing"
grep -qF "no $WORK/missing_text_document.idx" dist_missing.log || { cat dist_missing.log; fail "the launcher did not name the missing data"; }
grep -qF "nothing started" dist_missing.log || fail "the launcher does not say that nothing started"
[ ! -e dist_missing/log/rank_0 ] || fail "a rank started although the data is missing"
ok "4 ranks, missing data: refused before any rank started"
tiny_config gpt2 dist.yaml --set parallel_config.data_parallel=4 --set output_dir="$WORK/dist"
run dist bash "$SRC/scripts/run_distribute.sh" "$TABLE" dist.yaml "[0,4)" train
((STATUS == 0)) || { tail -30 dist.log; fail "run_distribute.sh on 4 ranks: status $STATUS"; }
grep -qE "last logged step: step:\[ *[0-9]+/ *[0-9]+\], loss: [0-9.]+" dist.log || { tail -10 dist.log; fail "the launcher's end does not show the last loss"; }
ok "4 ranks through run_distribute.sh: $(grep -o 'last logged step.*' dist.log)"
