# The integration scripts' shared harness. A script starts with
#     source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
# and holds only what its case says. ctest runs each script as `bash SCRIPT BUILD_DIR SOURCE_DIR`.
# Its Python checks share lib.py, beside this file (Megatron's indexed dataset read and written):
#     PYTHONPATH="$SRC/tests/integration" "$PY" - ... <<'EOF'   with   import lib
#
# After sourcing:
#   BUILD SRC         the build and source directories (absolute)
#   BIN PRE PY        build/bin/gridformer, build/bin/preprocess_data, /usr/bin/python3 (Debian's, with torch)
#   VOCAB MERGES      the GPT-2 BPE files scripts/setup.sh fetched; CORPUS the default corpus's prefix
#   WORK              a fresh directory, the working directory, removed when the script exits (kept with KEEP_WORK=1);
#                     KILL_AT_EXIT=1 kills what is left of the script's runs first (kill_ours); AT_EXIT=FUNCTION runs
#                     the script's own clean-up before that (daemons it started; its failures are ignored)
#   the MPI environment (root allowed, no single-copy mechanism, one OpenMP thread a rank)
#
# Functions:
#   fail MSG...                 prints "FAIL: MSG" and exits 1
#   skip REASON                 prints "SKIP: REASON" and exits 77 (ctest's SKIP_RETURN_CODE: shown as skipped, not passed)
#   ok MSG...                   prints "ok: MSG"
#   need_vocab | need_corpus    skip unless scripts/setup.sh's GPT-2 files / default corpus are there
#   need_python MODULE...       skip unless /usr/bin/python3 imports every MODULE
#   tiny_config FAMILY FILE [--set K=V ...]  writes a tiny resolved config over the default corpus: gpt2 | llama | mixtral
#   random_llama FILE [FIELD=VALUE ...]  writes a tiny Llama on random tokens (vocabulary 101, 2 layers of 64, grouped-query
#                               heads, RoPE; 20 steps of AdamW, cosine lr, clipping; every step logged), no batch size: the
#                               layout tests' model. FIELD=VALUE changes one field of it: the run's fields (random_gpt2's),
#                               and arch (LlamaForCausalLM) vocab (101) seq (16) hidden (64) layers (2) heads (4) kv
#                               (n_kv_heads 2) ffn (intermediate_size 48) theta (1000000.0) eps (rms_norm_eps 1.0e-5) model
#                               (more of model_config, YAML:
#                               "use_flash_attention: True"). An empty VALUE leaves an optional key out (the default's).
#   random_gpt2 FILE [FIELD=VALUE ...]   the same run on a tiny GPT-2 (vocabulary 101, 2 layers of 32, 4 heads, dropout 0.1).
#                               The run's fields, with their defaults (empty: the key left out): seed (11) out (output_dir;
#                               none) steps (20) batch (none) clip (max_grad_norm 0.5) lr (cosine from 0.003) lr_end
#                               (0.0003) warmup (2; empty: no lr_schedule) optimizer (AdamW, betas 0.9 and 0.95, decay 0.1)
#                               data_seed (5) samples (160: RandomTokens) print (per_print_times 1; empty: no callbacks)
#                               ckpt (a CheckpointMonitor's fields, YAML: "prefix: tiny, save_checkpoint_steps: 10"; none)
#                               callbacks (the whole list, YAML, in place of print and ckpt) top (more top-level YAML lines:
#                               "moe_config: {...}"); the model's: vocab (101) seq (16) hidden (32) layers (2) heads (4)
#                               model (the rest of model_config, YAML; "hidden_dropout_rate: 0.1, attention_dropout_rate:
#                               0.1"). Later fields win; an unknown one fails.
#   bare_gpt2 FILE [FIELD=VALUE ...] random_gpt2 with only what a config must say: 2 steps of batch 2 over RandomTokens
#                               seed 5 of 16 samples, a GPT-2 of 1 layer, everything else the defaults (no seed, lr
#                               schedule, optimizer, callbacks or dropout keys); then the caller's fields
#   cli_gpt2 FILE [FIELD=VALUE ...]  random_gpt2's fields set for the command-line tests' model: seed 7, output_dir ./out,
#                               batch 4, clipping at 1.0, AdamWeightDecay (betas 0.9 and 0.95, decay 0.01), RandomTokens
#                               seed 3, a GPT-2 of vocabulary 64, rows of 32, 2 layers of 64, gelu_new, dropout 0.1; then
#                               the caller's fields
#   golden_gpt2 FILE [FIELD=VALUE ...]  bare_gpt2 with the model of tests/golden/hf_tiny_*: a GPT-2 of vocabulary 300, rows of
#                               16 (32 positions), 2 layers of 32, 2 heads, gelu_new, no dropout; RandomTokens seed 3, every
#                               step logged; then the caller's fields
#   lambada_gpt2 FILE STEPS LR HIDDEN LAYERS HEADS POSITIONS [CALLBACK...]  a GPT-2 of GPT-2's vocabulary and 32-token
#                               rows trained on the LAMBADA passages (WORK/lambada_text_document, made by the caller's
#                               `preprocess lambada ...`), seed 5, cosine from LR, so that it gets some right; its
#                               callbacks MFLossMonitor every 50 steps and each CALLBACK ("{type: CheckpointMonitor, ...}")
#   lambada_count METRICS       the last LAMBADA line of a metrics.jsonl as CORRECT/ITEMS
#   run NAME CMD...             runs CMD with its output in NAME.log; its status in $STATUS (never exits)
#   train NAME CONFIG ARGS...   `gridformer train --config CONFIG --set output_dir=NAME ARGS...`, must exit 0
#   mpi_train NP NAME CONFIG ARGS...   the same under mpirun -np NP --oversubscribe
#   train_on NP NAME CONFIG ARGS...      train (NP 1) or mpi_train NP
#   layout_train NP NAME CONFIG ARGS...  train_on, the gathered weights saved in NAME/weights.safetensors
#   preprocess NAME ARGS...     `preprocess_data --output-prefix NAME ARGS...` (lib's $PRE), its stdout in NAME.out and
#                               stderr in NAME.err, must exit 0
#   refused STATUS PATTERN NAME CMD...  CMD must exit STATUS and print PATTERN (fixed string); nothing trained
#   mpi_refused NP NAME PATTERN CONFIG ARGS...  `gridformer train --config CONFIG --set output_dir=NAME ARGS...` on NP ranks
#                               (mpirun) is refused as refused 2 holds it, without even a NAME/metrics.jsonl; prints the
#                               message's line
#   losses DIR                  the step losses of DIR/metrics.jsonl, "step loss" per line
#   same_losses A B [REL]       the losses of A and B agree step for step (bitwise, or within REL relative)
#   ranks_of OUT                the pids of the gridformer processes training into output_dir OUT (from their command
#                               lines: other tests' processes may come and go meanwhile; one that ends is skipped; never fails);
#                               a relative OUT only of processes running in the caller's directory (tests/integration/ranks_of.sh)
#   wait_step OUT N [TRIES]     waits until OUT/metrics.jsonl logs N steps, polling every 50 ms, at most TRIES (600) times
#   kill_ours                   SIGCONT and SIGKILL to every process whose command line names $WORK/ (a script's runs
#                               into absolute output_dirs); KILL_AT_EXIT=1 has the exit do it
#   logged DIR N                DIR/metrics.jsonl logs exactly N steps
#   close_losses REL REF RUN... each RUN's losses agree with REF's step for step within REL relative; prints the worst
#   same_bits REF RUN...        each RUN's losses (as same_losses) and weights.safetensors (cmp) are REF's, bit for bit
#   same_after K REF RUN...     each RUN (resumed after step K) logs REF's steps after K (REF logs every step from 1), loss
#                               and loss scale bit for bit, and none else, and its weights.safetensors is REF's (cmp)
#   close_after K REL REF RUN...  each RUN (resumed after step K) logs REF's steps after K (REF logs every step from 1) and
#                               none else, each loss within REL relative of REF's; prints the worst
#   ours                        the processes ("PID COMMAND LINE" a line) whose command line names $WORK/ or matches the
#                               extended regex OURS_ALSO (where set: a launch test's addresses), but for this shell and the
#                               pids in the array OURS_BUT (daemons the script keeps, its sshd listeners)
#   nothing_left WHAT [AFTER]   AFTER seconds on (0.3), ours lists nothing; else fails naming what is left
#   wait_exit PID SECONDS       waits for the background job PID (so never in $(...)), its status in $STATUS; fails if it
#                               still runs after SECONDS
#   free_port                   a TCP port of 127.0.0.1 that nothing listens on now
#   test_net NS VETH            the launch tests' private network: NET (10.X.Y, from this shell's pid), MARK (a regex of its
#                               addresses, also OURS_ALSO), IP_A IP_B ($NET.1, $NET.2), namespace names NS_A NS_B
#                               (gf_NS_PID_a, _b) and veth names VA VB (gfVETHPIDa, b); makes nothing
#   ssh_nodes SKIP HOST_A HOST_B [SSHD_LINE...]  two "servers" on this host: namespaces NS_A and NS_B joined by the veth
#                               pair VA-VB with IP_A and IP_B (/24), each with its own host name (on_node NS HOST CMD...: CMD
#                               there, the cwd kept) and its own sshd (keys made in WORK/ssh, its pid added to OURS_BUT, more
#                               sshd_config lines SSHD_LINE); `ssh -F $WORK/ssh/config` reaches either as this user. Where a
#                               tool is missing or namespaces, host names or sshd cannot be made: SKIP REASON (the caller's
#                               function, which ends with lib's skip)
#   drop_namespaces             for AT_EXIT: SIGKILL to ours, OURS_BUT and this test's sshds; NS_A and NS_B deleted
set -euo pipefail

BUILD="$(cd "${1:?usage: SCRIPT BUILD_DIR SOURCE_DIR}" && pwd)"
SRC="$(cd "${2:?usage: SCRIPT BUILD_DIR SOURCE_DIR}" && pwd)"
BIN="$BUILD/bin/gridformer"
PRE="$BUILD/bin/preprocess_data"
PY=/usr/bin/python3
VOCAB="$SRC/data/gpt2/gpt2-vocab.json"
MERGES="$SRC/data/gpt2/gpt2-merges.txt"
CORPUS="$SRC/data/fortunes/fortunes_text_document"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
# Open MPI 4.1 tries UCX first in every rank's MPI_Init, which costs about 0.2 s of each start here, and UCX cannot be
# selected on these machines (no transport it takes), so every run falls back to ob1 anyway; naming ob1 saves the
# probe and runs the suite over the same point-to-point layer on every machine.
export OMPI_MCA_pml=ob1
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gf_it.XXXXXX")"
# Each script's Open MPI session directories in its own work directory, not in /tmp/ompi.HOST.UID beside every other
# test's: a process ending removes that shared directory when it holds nothing else, and a start creating its own
# directory under it at that instant fails in MPI_Init ("orte_session_dir failed"; seen once in a suite run).
export OMPI_MCA_orte_tmpdir_base="$WORK/ompi"
KILL_AT_EXIT="" AT_EXIT="" OURS_ALSO="" OURS_BUT=()
trap '[ -z "$AT_EXIT" ] || "$AT_EXIT" || true; [ -z "$KILL_AT_EXIT" ] || kill_ours; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
cd "$WORK"
STATUS=0

fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
ok() { echo "ok: $*"; }

need_vocab() { [[ -s "$VOCAB" && -s "$MERGES" ]] || skip "$VOCAB missing (scripts/setup.sh fetches it)"; }
need_corpus() { [[ -s "$CORPUS.idx" ]] || skip "$CORPUS.idx missing (scripts/setup.sh makes it)"; }
need_python() {
  local m
  for m in "$@"; do "$PY" -c "import $m" 2>/dev/null || skip "$PY cannot import $m (scripts/setup.sh installs it)"; done
}

# tiny_config FAMILY FILE [--set K=V ...]: the shipped tiny config of FAMILY resolved by `gridformer config`
# (defaults filled in) into FILE, shrunk to seconds a run: seq_length 32, 2 layers, 2 samples a rank, 4 steps,
# warm-up 1 step, a log line every step, the default corpus and the GPT-2 BPE files by their absolute paths;
# then the caller's --set.
tiny_config() {
  local family=$1 file=$2 src
  shift 2
  case "$family" in
    gpt2) src="$SRC/configs/gpt2/run_gpt2_tiny.yaml" ;;
    llama) src="$SRC/configs/llama/run_llama_tiny.yaml" ;;
    mixtral) src="$SRC/configs/moe/run_mixtral_tiny.yaml" ;;
    *) fail "tiny_config: unknown family $family (gpt2, llama, mixtral)" ;;
  esac
  "$BIN" config --config "$src" --set model.model_config.seq_length=32 --set model.model_config.num_layers=2 \
    --set runner_config.batch_size=2 --set runner_config.train_steps=4 --set lr_schedule.warmup_steps=1 \
    --set callbacks.0.per_print_times=1 --set train_dataset.data_loader.data_path="$CORPUS" --set output_dir=./output \
    --set processor.tokenizer.vocab_file="$VOCAB" --set processor.tokenizer.merge_file="$MERGES" \
    "$@" > "$file" 2> "$file.err" || { cat "$file.err"; fail "tiny_config $family: gridformer config failed"; }
}

# The fields of random_gpt2 and random_llama (see the top), set in the caller's locals by random_fields; the caller's
# $fields names those it has.
random_fields() {
  local _field _name  # names no field has: printf -v sets the caller's variable
  for _field in "$@"; do
    _name=${_field%%=*}
    [[ "$_field" == *=* && " $fields " == *" $_name "* ]] \
      || fail "random model: unknown field '$_field'"
    printf -v "$_name" '%s' "${_field#*=}"
  done
}
# random_yaml ARCH MODEL_CONFIG: the run of random_gpt2 / random_llama, from the caller's fields, with that model
random_yaml() {
  [ -z "$seed" ] || echo "seed: $seed"
  [ -z "$out" ] || echo "output_dir: $out"
  echo "runner_config: {train_steps: $steps${batch:+, batch_size: $batch}}"
  [ -z "$clip" ] || echo "runner_wrapper: {use_clip_grad: True, max_grad_norm: $clip}"
  [ -z "$warmup" ] || echo "lr_schedule: {type: cosine, learning_rate: $lr${lr_end:+, lr_end: $lr_end}, warmup_steps: $warmup}"
  [ -z "$optimizer" ] || echo "optimizer: $optimizer"
  echo "train_dataset: {data_loader: {type: RandomTokens, seed: $data_seed${samples:+, num_samples: $samples}}}"
  if [ -n "$callbacks" ]; then echo "callbacks: $callbacks"
  elif [ -z "$print" ]; then :
  elif [ -z "$ckpt" ]; then echo "callbacks: [{type: MFLossMonitor, per_print_times: $print}]"
  else printf '%s\n' "callbacks:" "  - {type: MFLossMonitor, per_print_times: $print}" "  - {type: CheckpointMonitor, $ckpt}"
  fi
  [ -z "$top" ] || printf '%s\n' "$top"
  printf '%s\n' "model:" "  arch: {type: $1}" "  model_config: {$2}"
}
RUN_FIELDS="seed out steps batch clip lr lr_end warmup optimizer data_seed samples print ckpt callbacks top"
RANDOM_RUN='local seed=11 out="" steps=20 batch="" clip=0.5 lr=0.003 lr_end=0.0003 warmup=2 data_seed=5 samples=160 print=1 ckpt=""
  local callbacks="" top="" optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}"'

random_llama() {
  local file=$1; shift
  eval "$RANDOM_RUN"
  local arch=LlamaForCausalLM vocab=101 seq=16 hidden=64 layers=2 heads=4 kv=2 ffn=48 theta=1000000.0 eps=1.0e-5 model=""
  local fields="$RUN_FIELDS arch vocab seq hidden layers heads kv ffn theta eps model"
  random_fields "$@"
  local shape="vocab_size: $vocab, seq_length: $seq, hidden_size: $hidden, num_layers: $layers, num_heads: $heads"
  random_yaml "$arch" "type: LlamaConfig, $shape, n_kv_heads: $kv, intermediate_size: $ffn${theta:+, theta: $theta}${eps:+, rms_norm_eps: $eps}${model:+, $model}" > "$file"
}

random_gpt2() {
  local file=$1; shift
  eval "$RANDOM_RUN"
  local vocab=101 seq=16 hidden=32 layers=2 heads=4 model="hidden_dropout_rate: 0.1, attention_dropout_rate: 0.1"
  local fields="$RUN_FIELDS vocab seq hidden layers heads model"
  random_fields "$@"
  local shape="vocab_size: $vocab, seq_length: $seq, hidden_size: $hidden, num_layers: $layers, num_heads: $heads"
  random_yaml GPT2LMHeadModel "type: GPT2Config, $shape${model:+, $model}" > "$file"
}

bare_gpt2() {
  local file=$1; shift
  random_gpt2 "$file" seed= clip= warmup= optimizer= print= model= steps=2 batch=2 samples=16 layers=1 "$@"
}

cli_gpt2() {
  local file=$1; shift
  random_gpt2 "$file" seed=7 out=./out batch=4 clip=1.0 optimizer="{type: AdamWeightDecay, beta1: 0.9, beta2: 0.95, weight_decay: 0.01}" \
    data_seed=3 vocab=64 seq=32 hidden=64 model="hidden_act: gelu_new, hidden_dropout_rate: 0.1, attention_dropout_rate: 0.1" "$@"
}

golden_gpt2() {
  local file=$1; shift
  bare_gpt2 "$file" data_seed=3 print=1 vocab=300 layers=2 heads=2 \
    model="max_position_embeddings: 32, hidden_act: gelu_new, hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0" "$@"
}

run() {
  local name=$1; shift
  set +e; "$@" > "$name.log" 2>&1; STATUS=$?; set -e
}

train() {
  local name=$1 cfg=$2; shift 2
  run "$name" "$BIN" train --config "$cfg" --set output_dir="$name" "$@"
  ((STATUS == 0)) || { tail -30 "$name.log"; fail "$name: train exited with status $STATUS"; }
}

# pretrain NAME NP ARGS...: gridformer pretrain_gpt ARGS in directory NAME (its ./output) on NP ranks; must exit 0.
pretrain() {
  local name=$1 np=$2; shift 2
  mkdir -p "$name"
  if ((np == 1)); then run "$name" bash -c 'cd "$0" && exec "$@"' "$name" "$BIN" pretrain_gpt "$@"
  else run "$name" bash -c 'cd "$0" && exec "$@"' "$name" mpirun -np "$np" --oversubscribe "$BIN" pretrain_gpt "$@"
  fi
  ((STATUS == 0)) || { tail -30 "$name.log"; fail "$name: pretrain_gpt exited with status $STATUS"; }
}
# resumed NAME STEP SAMPLES: NAME's log says it resumed a Megatron checkpoint after STEP, SAMPLES consumed.
resumed() {
  grep -qE "resumed from .*iter_0*$2 \(Megatron-LM checkpoint.*Adam's moments at step [0-9]+.*\): step $2 \($3 samples consumed\)" "$1.log" ||
    { grep -i resum "$1.log"; fail "$1: no resume from the Megatron checkpoint's iteration $2 with $3 samples"; }
}

mpi_train() {
  local np=$1 name=$2 cfg=$3; shift 3
  run "$name" mpirun -np "$np" --oversubscribe "$BIN" train --config "$cfg" --set output_dir="$name" "$@"
  ((STATUS == 0)) || { tail -30 "$name.log"; fail "$name: $np ranks exited with status $STATUS"; }
}

train_on() {
  local np=$1 name=$2 cfg=$3; shift 3
  mkdir -p "$(dirname "$name")"
  if ((np == 1)); then train "$name" "$cfg" "$@"
  else mpi_train "$np" "$name" "$cfg" "$@"
  fi
}

layout_train() {
  local np=$1 name=$2 cfg=$3; shift 3
  train_on "$np" "$name" "$cfg" --save-weights "$name/weights.safetensors" "$@"
}

# lora_on_base CFG: a LoRA config's run over a trained base, in ./base, ./on_base (CFG's checkpoint monitor: prefix
# lora, saving at step 10), ./merged (convert --merge-lora) and ./peft (the PEFT directory of on_base's checkpoint);
# generation of the same prompts with the adapters (unmerged) must give the merged model's tokens, not the base's.
lora_on_base() {
  local cfg=$1
  train base "$cfg" --set output_dir=base --set model.model_config.pet_config=null --set runner_config.train_steps=3 \
    --set 'callbacks=[{type: CheckpointMonitor, prefix: base, save_checkpoint_steps: 3}]'
  local base_ck lora_ck  # (epoch E of the step's name: base-E_3, lora-E_10, whatever the data's size)
  base_ck=$(ls -d base/checkpoint/base-*_3) || fail "$cfg: the base run saved no step-3 checkpoint"
  train on_base "$cfg" --set output_dir=on_base --set load_checkpoint="$base_ck"
  lora_ck=$(ls -d on_base/checkpoint/lora-*_10) || fail "$cfg: the LoRA run saved no step-10 checkpoint"
  run merge "$BIN" convert --from "$lora_ck" --merge-lora --to merged
  ((STATUS == 0)) || { cat merge.log; fail "convert --merge-lora of $cfg's adapters"; }
  local name ck
  for name in gen_lora gen_merged gen_base; do
    case $name in
      gen_lora) ck=("$lora_ck") ;;
      gen_merged) ck=(merged --set model.model_config.pet_config=null) ;;
      gen_base) ck=("$base_ck" --set model.model_config.pet_config=null) ;;
    esac
    run "$name" "$BIN" predict --config "$cfg" --load_checkpoint "${ck[@]:0:1}" --predict_ids "5 17 30 42" \
      --max_new_tokens 12 --ids_out "$name.jsonl" "${ck[@]:1}"
    ((STATUS == 0)) || { tail -20 "$name.log"; fail "$name: predict failed"; }
  done
  cmp gen_lora.jsonl gen_merged.jsonl || fail "$cfg: the adapters' tokens are not the merged model's"
  ! cmp -s gen_lora.jsonl gen_base.jsonl || fail "$cfg: the adapters changed no generated token"
  run peft "$BIN" convert --from on_base/checkpoint --to peft
  ((STATUS == 0)) || { cat peft.log; fail "convert of $cfg's LoRA checkpoint to PEFT's directory"; }
}

# ptrain MODEL NAME DP MP PP MICRO [--set ...]: layout_train of MODEL.yaml into MODEL/NAME on DP x MP x PP ranks, with
# batch_size GLOBAL_BATCH / (DP x MICRO) (the caller sets GLOBAL_BATCH) and, with a pipeline, micro_batch_num MICRO:
# the same global batch under every layout (pipeline_equivalence.sh, pipeline_zbv.sh).
ptrain() {
  local model=$1 name=$2 dp=$3 mp=$4 pp=$5 micro=$6; shift 6
  local args=(--set parallel_config.data_parallel="$dp" --set parallel_config.model_parallel="$mp"
              --set parallel_config.pipeline_stage="$pp" --set runner_config.batch_size=$((GLOBAL_BATCH / dp / micro)) "$@")
  if [ "$pp" -gt 1 ]; then args+=(--set parallel_config.micro_batch_num="$micro"); fi
  layout_train $((dp * mp * pp)) "$model/$name" "$model.yaml" "${args[@]}"
}

preprocess() {
  local name=$1; shift
  [[ -x "$PRE" ]] || fail "$PRE not built"
  set +e; "$PRE" --output-prefix "$name" "$@" > "$name.out" 2> "$name.err"; STATUS=$?; set -e
  ((STATUS == 0)) || { tail -30 "$name.err"; fail "$name: preprocess_data exited with status $STATUS"; }
}

refused() {
  local want=$1 pattern=$2 name=$3; shift 3
  run "$name" "$@"
  ((STATUS == want)) || { tail -30 "$name.log"; fail "$name: status $STATUS, expected $want"; }
  grep -qF -- "$pattern" "$name.log" || { tail -30 "$name.log"; fail "$name: no '$pattern' in its output"; }
  ! grep -qs '"loss"' "$name/metrics.jsonl" || fail "$name: trained a step before refusing"
  ok "$name refused (status $want): $(grep -oF -- "$pattern" "$name.log" | head -1)"
}

mpi_refused() {
  local np=$1 name=$2 pattern=$3 cfg=$4; shift 4
  refused 2 "$pattern" "$name" mpirun -np "$np" --oversubscribe "$BIN" train --config "$cfg" --set output_dir="$name" "$@"
  [ ! -e "$name/metrics.jsonl" ] || fail "$name started training"
  echo "  $(grep -m1 -F -- "$pattern" "$name.log" | cut -c1-220)"
}

losses() {
  "$PY" - "$1/metrics.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r and "step" in r:
        print(r["step"], repr(r["loss"]))
EOF
}

same_losses() {
  local a=$1 b=$2 rel=${3:-0}
  "$PY" - "$a" "$b" "$rel" <(losses "$a") <(losses "$b") <<'EOF' || fail "losses of $a and $b differ"
import sys
a_name, b_name, rel = sys.argv[1], sys.argv[2], float(sys.argv[3])
a = [l.split() for l in open(sys.argv[4])]
b = [l.split() for l in open(sys.argv[5])]
assert a and len(a) == len(b), f"{a_name}: {len(a)} logged steps, {b_name}: {len(b)}"
for (sa, la), (sb, lb) in zip(a, b):
    assert sa == sb, f"steps {sa} and {sb}"
    x, y = float(la), float(lb)
    assert (x == y) if rel == 0 else abs(x - y) <= rel * abs(x), f"step {sa}: {a_name} {la}, {b_name} {lb}"
print(f"{len(a)} steps: {'bitwise' if rel == 0 else f'within {rel:g} relative'}")
EOF
}

logged() {
  local n; n=$(losses "$1" | wc -l)
  ((n == $2)) || fail "$1: $n logged steps, $2 expected"
}

close_losses() {
  local rel=$1 ref=$2 r; shift 2
  for r in "$@"; do
    "$PY" - "$ref" "$r" "$rel" <(losses "$ref") <(losses "$r") <<'EOF' || fail "$r: losses differ from $ref's by more than $rel relative"
import sys
ref_name, name, rel = sys.argv[1], sys.argv[2], float(sys.argv[3])
a = [l.split() for l in open(sys.argv[4])]
b = [l.split() for l in open(sys.argv[5])]
assert a and [s for s, _ in a] == [s for s, _ in b], f"{ref_name} logs steps {[s for s, _ in a]}, {name} {[s for s, _ in b]}"
worst = max(abs(float(x) - float(y)) / abs(float(x)) for (_, x), (_, y) in zip(a, b))
print(f"{name}: {len(b)} steps' losses within {worst:.1e} relative of {ref_name}")
assert worst <= rel, f"{name}: losses differ from {ref_name}'s by {worst:.2e} relative, more than {rel:g}"
EOF
  done
}

same_bits() {
  local ref=$1 r; shift
  for r in "$@"; do
    local out
    out=$(same_losses "$ref" "$r") || fail "$r: losses are not bitwise those of $ref ($out)"
    cmp "$ref/weights.safetensors" "$r/weights.safetensors" || fail "$r: weights are not bitwise those of $ref"
    echo "$r: losses and weights bitwise equal to $ref"
  done
}

same_after() {
  local k=$1 ref=$2 r; shift 2
  for r in "$@"; do
    "$PY" - "$ref/metrics.jsonl" "$r/metrics.jsonl" "$k" <<'EOF' || fail "$r: losses are not bitwise those of $ref after step $k"
import json, sys
def steps(p):
    return [(r["step"], r["loss"], r.get("loss_scale")) for r in map(json.loads, open(p)) if "loss" in r and "step" in r]
ref, got, k = steps(sys.argv[1]), steps(sys.argv[2]), int(sys.argv[3])
assert [s for s, _, _ in ref] == list(range(1, len(ref) + 1)), f"the reference logs steps {[s for s, _, _ in ref]}, not every step from 1"
after = ref[k:]
assert after and [s for s, _, _ in got] == [s for s, _, _ in after], ([s for s, _, _ in got], [s for s, _, _ in after])
assert got == after, (got, after)  # JSON floats round-trip: equal values are equal bits
EOF
    cmp "$ref/weights.safetensors" "$r/weights.safetensors" || fail "$r: weights differ from $ref's"
    echo "$r: steps $((k + 1))-$(losses "$r" | tail -1 | cut -d' ' -f1) and final weights bitwise equal to $ref"
  done
}

ranks_of() {
  local p here
  here=$(pwd -P)
  for p in $(pgrep -x gridformer || true); do
    { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -q -- "output_dir=$1 " || continue
    # A relative OUT names this script's run only where the process runs in this directory: another test's run into
    # its own ./a (slurm.sh's sbatch job, say) has the same command line, and once took stop_checkpoint.sh's SIGTERM.
    [[ "$1" == /* ]] || [ "$(readlink "/proc/$p/cwd" 2>/dev/null)" = "$here" ] || continue
    echo "$p"
  done
  return 0
}

wait_step() {
  local n
  for _ in $(seq 1 "${3:-600}"); do
    n=$(grep -c '"loss"' "$1/metrics.jsonl" 2>/dev/null || true)
    [ "${n:-0}" -ge "$2" ] && return 0
    sleep 0.05
  done
  fail "$1 did not reach step $2"
}

kill_ours() {
  local p
  for p in $(pgrep -f -- "$WORK/" || true); do kill -CONT "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true; done
}

close_after() {
  local k=$1 rel=$2 ref=$3 r; shift 3
  for r in "$@"; do
    "$PY" - "$ref" "$r" "$k" "$rel" <<'EOF' || fail "$r: losses after step $k differ from $ref's by more than $rel relative"
import json, sys
ref_name, name, k, rel = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def steps(d):
    return [(r["step"], r["loss"]) for r in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in r and "step" in r]
ref, got = steps(ref_name), steps(name)
assert [s for s, _ in ref] == list(range(1, len(ref) + 1)), f"{ref_name} logs steps {[s for s, _ in ref]}, not every step from 1"
after = ref[k:]
assert after and [s for s, _ in got] == [s for s, _ in after], f"{name}: resumed steps {[s for s, _ in got]}"
worst = max(abs(y - x) / abs(x) for (_, x), (_, y) in zip(after, got))
assert worst <= rel, f"{name}: step losses differ from {ref_name}'s by {worst:.3g} relative"
print(f"{name}: steps {got[0][0]}-{got[-1][0]} within {worst:.2g} relative of {ref_name}")
EOF
  done
}

ours() {
  local p rest
  pgrep -af -- "$WORK/${OURS_ALSO:+|$OURS_ALSO}" | while read -r p rest; do
    [[ $p == "$$" || " ${OURS_BUT[*]} " == *" $p "* ]] || echo "$p $rest"
  done || true
}

nothing_left() {
  sleep "${2:-0.3}"
  local left; left=$(ours)
  [ -z "$left" ] || fail "$1: processes left running:"$'\n'"$left"
}

wait_exit() {
  local pid=$1 limit=$2 start=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    ((SECONDS - start < limit)) || fail "pid $pid did not exit within $limit s: $(ps -o args= -p "$pid" | cut -c1-200 || true)"
    sleep 0.1
  done
  set +e; wait "$pid"; STATUS=$?; set -e
}

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

test_net() {
  local x=$(($$ / 250 % 250 + 1)) y=$(($$ % 250 + 1))
  NET="10.$x.$y" MARK="10\\.$x\\.$y\\.[0-9]" IP_A="10.$x.$y.1" IP_B="10.$x.$y.2"
  NS_A="gf_$1_$$_a" NS_B="gf_$1_$$_b" VA="gf$2$$a" VB="gf$2$$b" OURS_ALSO="10\\.$x\\.$y\\.[0-9]"
}

on_node() { local ns=$1 name=$2; shift 2; ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" "$@"; }

ssh_nodes() {
  local skip_fn=$1 host_a=$2 host_b=$3 s ip ns name i; shift 3
  command -v ip >/dev/null || "$skip_fn" "no ip command (Debian: iproute2)"
  command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || "$skip_fn" "no ssh client (Debian: openssh-client)"
  [ -x /usr/sbin/sshd ] || "$skip_fn" "no /usr/sbin/sshd (Debian: apt-get install openssh-server; scripts/setup.sh installs it)"
  command -v unshare >/dev/null || "$skip_fn" "no unshare (util-linux)"
  ip netns add "$NS_A" 2>netns.err || "$skip_fn" "ip netns add is not permitted here ($(head -1 netns.err)); needs root or CAP_NET_ADMIN"
  ip netns add "$NS_B"
  unshare --uts true 2>uts.err || "$skip_fn" "unshare --uts is not permitted here ($(head -1 uts.err)): each server needs its own host name"
  ip link add "$VA" netns "$NS_A" type veth peer name "$VB" netns "$NS_B"
  for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
  ip -n "$NS_A" addr add "$IP_A/24" dev "$VA"; ip -n "$NS_A" link set "$VA" up
  ip -n "$NS_B" addr add "$IP_B/24" dev "$VB"; ip -n "$NS_B" link set "$VB" up
  mkdir -m 700 ssh
  ssh-keygen -q -t ed25519 -N '' -C gridformer-test -f ssh/client_key
  cp ssh/client_key.pub ssh/authorized_keys
  mkdir -p /run/sshd # sshd's privilege separation directory (Debian makes it at boot)
  for s in a b; do
    ip=$IP_A name=$host_a ns=$NS_A
    [ $s = b ] && { ip=$IP_B; name=$host_b; ns=$NS_B; }
    ssh-keygen -q -t ed25519 -N '' -f "ssh/host_key_$s"
    echo "$ip $(cut -d' ' -f1,2 "ssh/host_key_$s.pub")" >> ssh/known_hosts
    printf '%s\n' "ListenAddress $ip" "HostKey $WORK/ssh/host_key_$s" "AuthorizedKeysFile $WORK/ssh/authorized_keys" \
      "PermitRootLogin prohibit-password" "PubkeyAuthentication yes" "PasswordAuthentication no" \
      "KbdInteractiveAuthentication no" "UsePAM no" "StrictModes no" "PidFile $WORK/ssh/sshd_$s.pid" "$@" > "ssh/sshd_$s.conf"
    on_node "$ns" "$name" /usr/sbin/sshd -D -e -f "$WORK/ssh/sshd_$s.conf" > "ssh/sshd_$s.log" 2>&1 &
    disown $!
  done
  # mpirun's ssh (its plm_rsh_agent): this test's key and known hosts, no prompt, a connect timeout.
  printf '%s\n' "Host *" "  User $(id -un)" "  IdentityFile $WORK/ssh/client_key" "  IdentitiesOnly yes" \
    "  UserKnownHostsFile $WORK/ssh/known_hosts" "  GlobalKnownHostsFile /dev/null" "  StrictHostKeyChecking yes" \
    "  BatchMode yes" "  ConnectTimeout 5" "  LogLevel ERROR" > ssh/config
  for i in $(seq 1 50); do
    on_node "$NS_A" "$host_a" ssh -F "$WORK/ssh/config" "$IP_B" hostname > ssh/check.txt 2>&1 && break
    sleep 0.2
  done
  [ "$(cat ssh/check.txt)" = "$host_b" ] || { cat ssh/sshd_b.log; "$skip_fn" "sshd in a network namespace did not answer ssh: $(cat ssh/check.txt)"; }
  for s in a b; do
    for i in $(seq 1 50); do [ -s "ssh/sshd_$s.pid" ] && break; sleep 0.1; done
    OURS_BUT+=("$(cat "ssh/sshd_$s.pid")")
  done
}

drop_namespaces() {
  local p
  for p in $(ours | cut -d' ' -f1) "${OURS_BUT[@]}" $(pgrep -f -- "sshd -D -e -f $WORK/" || true); do kill -KILL "$p" 2>/dev/null || true; done
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
}

lambada_gpt2() {
  local file=$1 steps=$2 lr=$3 hidden=$4 layers=$5 heads=$6 positions=$7 cb
  shift 7
  local callbacks="{type: MFLossMonitor, per_print_times: 50}"
  for cb in "$@"; do callbacks+=", $cb"; done
  cat > "$file" <<YAML
seed: 5
runner_config: {train_steps: $steps, batch_size: 4}
lr_schedule: {type: cosine, learning_rate: $lr, lr_end: 0.001, warmup_steps: 5}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.0}
train_dataset: {data_loader: {type: MegatronDataset, data_path: $WORK/lambada_text_document, split: "100,0,0"}}
callbacks: [$callbacks]
processor: {tokenizer: {type: GPT2Tokenizer, vocab_file: $VOCAB, merge_file: $MERGES}}
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 50257, seq_length: 32, hidden_size: $hidden, num_layers: $layers, num_heads: $heads,
                 max_position_embeddings: $positions}
YAML
}

lambada_count() {
  "$PY" -c "
import json, sys
l = [json.loads(x) for x in open(sys.argv[1]) if 'lambada_correct' in x][-1]
print('%d/%d' % (l['lambada_correct'], l['lambada_items']))" "$1"
}
