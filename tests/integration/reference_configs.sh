#!/usr/bin/env bash
# The reference configs (configs/reference/*.yaml: GPT-2 124M/355M/774M/1.5B, MindFormers' GPT-2
# 13B and 52B, Llama 2 7B/13B/70B, Mixtral 8x7B, DeepSeek-V2-Lite; docs/reference_configs.md) resolve and
# plan on the rank count their layout asks for, nothing trained (and MindSpeed's GPT MoE test shape,
# configs/moe/pretrain_mindspeed_gpt_moe.yaml, plans on its 8). For each of the table's:
#   - `gridformer config --config F --ranks N` succeeds, with no warning but the ones the file's
#     header names, and half the ranks are refused (status 2) naming the layout's product; the Llama
#     and Mixtral files are refused (status 2) over the default corpus, whose ids their vocabulary lacks;
#   - `gridformer plan --config F --ranks N` succeeds and shows the layout (data/model/expert
#     parallel, micro batch, recompute, pipeline stages and micro-batches, gradient accumulation,
#     the ZeRO-1 shard), the model's shape, and a parameter count equal to the one computed here
#     from the published shape, which rounded to 3 significant figures is the published size;
#   - every per-rank line's total is parameters + gradients + optimizer state + weight copy +
#     activations, the largest of them is the plan's "largest rank", and on a data-parallel-only
#     layout the parameters are 4 bytes (float32 masters) per parameter.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
REF="$SRC/configs/reference"

# Parameter counts from the published shapes (exact, in bash's 64-bit integers).
# GPT-2: token and learned position embeddings, pre-LayerNorm blocks with biases, the LM head tied to
# the token embedding. Per layer: ln_1 2d + c_attn (d x 3d + 3d) + attn.c_proj (d x d + d) + ln_2 2d
# + mlp.c_fc (d x 4d + 4d) + mlp.c_proj (4d x d + d) = 12d^2 + 13d; then ln_f 2d:
#   N = V*d + P*d + L*(12*d^2 + 13*d) + 2*d          (V vocabulary, P position rows, d hidden, L layers)
gpt2_params() { local V=$1 P=$2 d=$3 L=$4; echo $(( V*d + P*d + L*(12*d*d + 13*d) + 2*d )); }
# Llama 2 / Mixtral: no biases, RMSNorm weights only, RoPE (no position table), an untied LM head.
# Per layer: q and o d x d each, k and v d x (KV*d/H) each (KV key/value heads of d/H), two RMSNorms
# 2d, and the SwiGLU (gate, up, down: 3*d*F) once for a dense Llama or E times plus the router
# (d x E) for Mixtral; then the final RMSNorm d and the embedding and head V*d each:
#   N = 2*V*d + L*(2*d*d + 2*d*(KV*d/H) + 3*d*F*E + R + 2*d) + d     (dense: E=1, R=0; MoE: R=d*E)
llama_params() {
  local V=$1 d=$2 L=$3 H=$4 KV=$5 F=$6 E=$7 R=$8
  echo $(( 2*V*d + L*(2*d*d + 2*d*(KV*d/H) + 3*d*F*E + R + 2*d) + d ))
}
# Published sizes, 3 significant figures: GPT-2 124M, 355M, 774M, 1.56B (OpenAI's "1.5B"); MindFormers'
# GPT-2 13B 12.9B and 52B 52.0B; Llama 2 7B 6.74B, 13B 13.0B, 70B 69.0B; Mixtral 8x7B 46.7B.

# file | ranks | params | published | dp mp pp ep | batch seq | micro-batches (pipeline) or
# accumulation steps | recompute | ZeRO | layers hidden heads kv_heads ffn vocab | allowed warnings
SDROP="\`moe_config.enable_sdrop: True\`"
TOPKV2="\`moe_config.routing_policy: TopkRouterV2\` with \`capacity_factor: 1.1\`"
check() {
  local f=$1 n=$2 params=$3 published=$4 dp=$5 mp=$6 pp=$7 ep=$8 batch=$9 seq=${10} mb=${11} gas=${12}
  local recompute=${13} zero=${14} layers=${15} hidden=${16} heads=${17} kv=${18} ffn=${19} vocab=${20}
  shift 20
  local cfg="$REF/$f"
  [ -f "$cfg" ] || fail "$f: no such file"
  [ $((dp * mp * pp)) -eq "$n" ] || fail "$f: the table's layout is not $n ranks"

  # config: resolves on its ranks, warnings only (and only the expected ones); half of them refused.
  # From the source directory, as the README runs them: their data_path (the default corpus) is relative to it,
  # and config --ranks checks the data as train opens it.
  # The Llama and Mixtral files (vocabulary 32000) are refused over the default corpus, whose GPT-2 ids reach 50256
  # (docs/reference_configs.md); their layout is checked over synthetic tokens.
  local data=()
  if [ "$vocab" -ne 50257 ]; then
    local corpus_status=0
    (cd "$SRC" && "$BIN" config --config "$cfg" --ranks "$n") > /dev/null 2> err.txt || corpus_status=$?
    [ "$corpus_status" -eq 2 ] || fail "$f: config --ranks $n over the default corpus: status $corpus_status, expected 2"
    grep -qF "outside the model's vocabulary [0, $vocab)" err.txt || fail "$f: no token id refusal: $(cat err.txt)"
    data=(--set train_dataset.data_loader.type=RandomTokens --set runner_config.train_steps=1)
  fi
  (cd "$SRC" && "$BIN" config --config "$cfg" "${data[@]}" --ranks "$n") > out.yaml 2> err.txt || fail "$f: config --ranks $n: status $?: $(cat err.txt)"
  grep -q "^model:" out.yaml || fail "$f: no resolved config printed"
  local unexpected
  unexpected=$(grep -v "^warning: " err.txt || true)
  [ -z "$unexpected" ] || fail "$f: config printed more than warnings: $unexpected"
  local allowed=("$@") line ok a
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    ok=0
    for a in "${allowed[@]}"; do [[ "$line" == "warning: $a"* ]] && ok=1; done
    [ "$ok" -eq 1 ] || fail "$f: an unexpected warning: $line"
  done < err.txt
  for a in "${allowed[@]}"; do grep -qF -- "warning: $a" err.txt || fail "$f: the expected warning '$a' is missing"; done
  local half=$((n / 2)) status=0
  "$BIN" config --config "$cfg" --ranks "$half" > /dev/null 2> err.txt || status=$?
  [ "$status" -eq 2 ] || fail "$f: config --ranks $half: status $status, expected 2"
  grep -qF "= $n, but $half rank(s) are running" err.txt || fail "$f: the refusal on $half ranks: $(grep -v '^warning' err.txt)"

  # plan: the layout, the shape and the count.
  "$BIN" plan --config "$cfg" --ranks "$n" > plan.txt 2> err.txt || fail "$f: plan --ranks $n: status $?: $(grep -v '^warning' err.txt)"
  local head1 want
  head1=$(head -1 plan.txt)
  want="on $n rank(s): data_parallel=$dp model_parallel=$mp"
  [ "$ep" -gt 1 ] && want+=" expert_parallel=$ep"
  want+="; micro batch $batch x $seq tokens per rank, float16"
  [ "$recompute" = full ] && want+=", full recompute"
  [[ "$head1" == *"$want" ]] || fail "$f: the plan's layout line is '$head1', expected '...$want'"
  if [ "$pp" -gt 1 ]; then
    grep -qE "^pipeline: $pp stages, layers per stage \[[0-9, ]+\], schedule 1f1b, $mb micro-batches per step" plan.txt \
      || fail "$f: no pipeline line for $pp stages and $mb micro-batches: $(sed -n 2p plan.txt)"
    local stages sum=0 k
    stages=$(sed -n 's/^pipeline: .*layers per stage \[\([0-9, ]*\)\].*/\1/p' plan.txt | tr -d ' ' | tr ',' ' ')
    for k in $stages; do sum=$((sum + k)); done
    [ "$sum" -eq "$layers" ] || fail "$f: the stages hold $sum layers, not $layers"
  else
    ! grep -q "^pipeline:" plan.txt || fail "$f: a pipeline line without pipeline_stage > 1"
  fi
  if [ "$gas" -gt 1 ]; then
    grep -q "^gradient accumulation: $gas micro-batches of $batch per step per data-parallel rank" plan.txt \
      || fail "$f: no gradient accumulation of $gas: $(sed -n 2p plan.txt)"
  fi
  local shape="parameters: $params in the model ($layers layers, hidden $hidden, $heads heads / $kv key-value heads, FFN $ffn, vocabulary $vocab)"
  grep -qxF "$shape" plan.txt || fail "$f: expected '$shape', the plan has: $(grep '^parameters:' plan.txt)"
  awk -v n="$params" -v p="$published" 'BEGIN {
    half = 0.5 * 10 ^ (int(log(p) / log(10) + 1e-9) - 2);   # half a unit of the 3rd significant figure
    exit !(n - p <= half && p - n <= half) }' || fail "$f: $params parameters do not round to $published"

  # per-rank lines: the layout's ZeRO shard, and totals that add up.
  # A line per tensor-parallel rank and stage; ranks whose lines would be the same are one ("ranks 0-7").
  local ranks_lines covered
  ranks_lines=$(grep -cE "tensor-parallel ranks? [0-9]+(-[0-9]+)?.*; total " plan.txt || true)
  covered=$(sed -nE 's/.*tensor-parallel ranks? ([0-9]+)(-([0-9]+))?.*; total .*/\1 \3/p' plan.txt |
            awk '{ n += ($2 == "" ? 1 : $2 - $1 + 1) } END { print n + 0 }')
  [ "$covered" -eq $((mp * pp)) ] || fail "$f: the per-rank lines cover $covered ranks, expected $((mp * pp)) (every tensor-parallel rank of every stage)"
  if [ "$zero" = zero ]; then
    [ "$(grep -c "a 1/$dp ZeRO-1 shard" plan.txt)" -eq "$ranks_lines" ] || fail "$f: not every rank holds a 1/$dp ZeRO-1 shard"
  else
    ! grep -q "ZeRO" plan.txt || fail "$f: a ZeRO shard without enable_parallel_optimizer"
  fi
  awk -v count="$params" -v dp_only=$(( mp == 1 && pp == 1 && ep == 1 )) -v f="$f" '
    function bytes(v, u) { return v * (u == "B" ? 1 : u == "KiB" ? 2^10 : u == "MiB" ? 2^20 : u == "GiB" ? 2^30 : 2^40) }
    function field(key,   m, a) {
      if (!match($0, key " [0-9.]+ [KMGT]?i?B")) { print "FAIL: " f ": no " key " in: " $0; bad = 1; return 0 }
      split(substr($0, RSTART + length(key) + 1, RLENGTH - length(key) - 1), a, " ")
      tol += bytes(0.05, a[2])                                  # printed to one decimal of its unit
      return bytes(a[1], a[2])
    }
    /tensor-parallel ranks? [0-9]+.*; total / {
      tol = 0
      p = field("parameters"); g = field("gradients"); o = field("optimizer state"); w = field("weight copy")
      a = field("activations"); t = field("total")
      if (p + g + o + w + a - t > tol || t - (p + g + o + w + a) > tol) { print "FAIL: " f ": the total is not the sum: " $0; bad = 1 }
      if (g != p) { print "FAIL: " f ": gradients differ from parameters: " $0; bad = 1 }
      if (dp_only && (p - 4 * count > 0.002 * 4 * count + bytes(0.05, "GiB") || 4 * count - p > bytes(0.05, "GiB"))) {
        print "FAIL: " f ": parameters are not 4 bytes each of " count ": " $0; bad = 1 }
      if (t > largest) largest = t
    }
    /^largest rank: / { split($3 " " $4, L, " "); printed = bytes(L[1], L[2]) }
    END {
      if (!bad && (printed - largest > bytes(0.05, "GiB") || largest - printed > bytes(0.05, "GiB"))) {
        printf "FAIL: %s: largest rank %.2f GiB, the largest line %.2f GiB\n", f, printed / 2^30, largest / 2^30; bad = 1 }
      exit bad
    }' plan.txt || fail "$f: the per-rank memory lines"
  [ "$ep" -le 1 ] || grep -q "^MoE: $layers of $layers layers, 8 experts, top-2, .*expert_parallel=$ep: $((8 / ep)) experts per rank" plan.txt \
    || fail "$f: no MoE line for expert_parallel $ep: $(grep '^MoE' plan.txt)"
  echo "ok: $f on $n ranks: $params parameters ($published), $(grep '^largest rank' plan.txt | cut -d'(' -f1)"
}

start=$(date +%s.%N)
#     file                       ranks params                                    published dp mp pp ep batch seq  mb gas recompute zero   L  hidden heads kv ffn   vocab
check run_gpt2_124m.yaml         8   "$(gpt2_params 50257 1024 768 12)"          124e6     8  1  1  1  4     1024 1  1   none      none   12 768    12    12 3072  50257
check run_gpt2_355m.yaml         8   "$(gpt2_params 50257 1024 1024 24)"         355e6     8  1  1  1  4     1024 1  1   none      none   24 1024   16    16 4096  50257
check run_gpt2_774m.yaml         8   "$(gpt2_params 50257 1024 1280 36)"         774e6     8  1  1  1  8     1024 1  1   full      zero   36 1280   20    20 5120  50257
check run_gpt2_1_5b.yaml         8   "$(gpt2_params 50257 1024 1600 48)"         1.56e9    8  1  1  1  8     1024 1  1   full      zero   48 1600   25    25 6400  50257
# MindFormers' 13B sizes its position table by seq_length (2048).
check run_gpt2_13b.yaml          32  "$(gpt2_params 50257 2048 5120 40)"         12.9e9    4  8  1  1  2     2048 1  1   full      zero   40 5120   40    40 20480 50257
check run_gpt2_52b.yaml          128 "$(gpt2_params 50257 1024 8192 64)"         52.0e9    8  1  16 1  2     1024 64 1   full      zero   64 8192   32    32 32768 50257
check pretrain_llama2_7b.yaml    8   "$(llama_params 32000 4096 32 32 32 11008 1 0)"   6.74e9  8 1 1 1  1     4096 1  8   none      zero   32 4096   32    32 11008 32000
check pretrain_llama2_13b.yaml   8   "$(llama_params 32000 5120 40 40 40 13824 1 0)"   13.0e9  8 1 1 1  2     4096 1  1   full      zero   40 5120   40    40 13824 32000
check pretrain_llama2_70b.yaml   64  "$(llama_params 32000 8192 80 64 8 28672 1 0)"    69.0e9  2 4 8 1  1     4096 128 1  none      zero   80 8192   64    8  28672 32000
check pretrain_mixtral_8x7b.yaml 16  "$(llama_params 32000 4096 32 32 8 14336 8 $((4096*8)))" 46.7e9 8 1 2 8 1 4096 16 1 full  zero   32 4096   32    8  14336 32000 \
  "$SDROP" "$TOPKV2"

# DeepSeek-V2-Lite, planned on 8 ranks (its layout is a shape, not a published one; the table's checks assume one MoE
# shape and float16, so its own lines here). Per layer: two RMSNorms 2d; the query d x H(n+r) (no query latent), the
# key/value latent d x (c+r) and its RMSNorm c, its up-projection c x H(n+v), the output Hv x d; the first layer's
# SwiGLU 3dF; every other layer's router dE, E experts of 3df and the shared experts' 3dS; then the embedding and the
# untied head V*d each and the final RMSNorm d.
deepseek_params() {
  local V=$1 d=$2 L=$3 H=$4 n=$5 r=$6 v=$7 c=$8 F=$9 E=${10} f=${11} S=${12}
  echo $(( 2*V*d + d + L*(2*d + d*H*(n+r) + d*(c+r) + c + c*H*(n+v) + H*v*d) + 3*d*F + (L-1)*(d*E + E*3*d*f + 3*d*S) ))
}
f=pretrain_deepseek_v2_lite.yaml
params=$(deepseek_params 102400 2048 27 16 128 64 128 512 10944 64 1408 2816)
(cd "$SRC" && "$BIN" config --config "$REF/$f" --ranks 8) > out.yaml 2> err.txt || fail "$f: config --ranks 8: $(cat err.txt)"
status=0; "$BIN" config --config "$REF/$f" --ranks 4 > /dev/null 2> err.txt || status=$?
[ "$status" -eq 2 ] || fail "$f: config --ranks 4: status $status, expected 2"
t0=$(date +%s.%N)
(cd "$SRC" && "$BIN" plan --config "$REF/$f" --ranks 8) > plan.txt 2> err.txt || fail "$f: plan --ranks 8: $(cat err.txt)"
t1=$(date +%s.%N)
grep -qF "on 8 rank(s): data_parallel=8 model_parallel=1 expert_parallel=8; micro batch 1 x 4096 tokens per rank, bfloat16, full recompute" plan.txt \
  || fail "$f: the layout line: $(head -1 plan.txt)"
grep -qxF "parameters: $params in the model (27 layers, hidden 2048, 16 heads / 16 key-value heads, FFN 10944, vocabulary 102400)" plan.txt \
  || fail "$f: expected $params parameters: $(grep '^parameters' plan.txt)"
awk -v n="$params" 'BEGIN { exit !(n >= 15.65e9 && n < 15.75e9) }' || fail "$f: $params does not round to DeepSeek's 15.7B"
grep -q "^MoE: 26 of 27 layers, 64 experts, top-6, dropless; expert_parallel=8: 8 experts per rank" plan.txt \
  || fail "$f: the MoE line: $(grep '^MoE' plan.txt)"
grep -q "^largest rank: " plan.txt || fail "$f: no largest rank"
echo "ok: $f on 8 ranks: $params parameters (15.7B), $(grep '^largest rank' plan.txt | cut -d'(' -f1)($(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s)"

# MindSpeed's GPT MoE test shape (configs/moe/pretrain_mindspeed_gpt_moe.yaml: GPT layers with rotary positions and no
# linear biases, 4 experts of width 4d, top-2, in every layer, the head tied), planned on its 8 ranks: per layer two
# LayerNorms 4d, q|k|v and the output 4d^2, the router dE and E experts of 2dF; then the embedding V*d and the final
# LayerNorm 2d.
f="$SRC/configs/moe/pretrain_mindspeed_gpt_moe.yaml"
d=12288
params=$(( 50257*d + 2*d + 2*(4*d + 4*d*d + d*4 + 4*2*d*4*d) ))
"$BIN" plan --config "$f" --ranks 8 > plan.txt 2> err.txt || fail "MindSpeed MoE: plan --ranks 8: $(cat err.txt)"
grep -qxF "parameters: $params in the model (2 layers, hidden 12288, 96 heads / 96 key-value heads, FFN 49152, vocabulary 50257)" plan.txt \
  || fail "MindSpeed MoE: expected $params parameters: $(grep '^parameters' plan.txt)"
grep -q "^MoE: 2 of 2 layers, 4 experts, top-2, dropless; expert_parallel=2: 2 experts per rank" plan.txt \
  || fail "MindSpeed MoE: the MoE line: $(grep '^MoE' plan.txt)"
grep -qF "on 8 rank(s): data_parallel=4 model_parallel=2 expert_parallel=2; micro batch 1 x 8192 tokens per rank, bfloat16" plan.txt \
  || fail "MindSpeed MoE: the layout line: $(head -1 plan.txt)"
echo "ok: MindSpeed's GPT MoE shape on 8 ranks: $params parameters, $(grep '^largest rank' plan.txt | cut -d'(' -f1)"

# Every file in configs/reference/ is one of the above.
count=$(find "$REF" -name '*.yaml' | wc -l)
[ "$count" -eq 11 ] || fail "configs/reference holds $count files, the test checks 11: add the new one to the table"
echo "PASS ($(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s)"
