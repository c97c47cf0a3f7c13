#!/usr/bin/env bash
# parallel.collectives: mpi (MPI's own non-blocking collectives instead of our rings) trains the same
# 20 steps of a Llama (grouped-query heads, RoPE) as one rank under dp2, mp2 + sequence parallel,
# dp2 x mp2 + SP + ZeRO, pp2 and dp4 x mp2 (8 ranks): losses within 1e-5 relative and gathered weights
# as compare_runs.py holds them; the same layouts with the rings beside them; under mpi the rings send no byte in
# any data- or tensor-parallel group (resources.json), with the rings they do. A value other than ring or mpi is
# refused naming the key.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
GLOBAL_BATCH=8
random_llama llama.yaml
# coll_train NAME COLLECTIVES DP MP [extra key=value ...]: lib.sh's train / mpi_train, weights saved
coll_train() {
  local name=$1 coll=$2 dp=$3 mp=$4; shift 4
  local np=$((dp * mp))
  for a in "$@"; do case "$a" in parallel_config.pipeline_stage=2) np=$((np * 2));; esac; done
  local sets=(--save-weights "$name/weights.safetensors" --set parallel.collectives="$coll"
              --set parallel_config.data_parallel="$dp" --set parallel_config.model_parallel="$mp"
              --set runner_config.batch_size=$((GLOBAL_BATCH / dp)))
  for a in "$@"; do sets+=(--set "$a"); done
  if ((np == 1)); then train "$name" llama.yaml "${sets[@]}"
  else mpi_train "$np" "$name" llama.yaml "${sets[@]}"
  fi
}
coll_train one ring 1 1
for c in mpi ring; do
  coll_train "dp2_$c" $c 2 1
  coll_train "mp2_sp_$c" $c 1 2 parallel_config.use_seq_parallel=True
  coll_train "dp2_mp2_sp_zero_$c" $c 2 2 parallel_config.use_seq_parallel=True parallel.enable_parallel_optimizer=True
done
coll_train pp2_mpi mpi 1 1 parallel_config.pipeline_stage=2 parallel_config.micro_batch_num=2 runner_config.batch_size=4
coll_train dp4_mp2_mpi mpi 4 2
coll_train dp4_mp2_ring ring 4 2
"$PY" "$SRC/tests/integration/compare_runs.py" one dp2_mpi mp2_sp_mpi dp2_mp2_sp_zero_mpi pp2_mpi dp4_mp2_mpi \
  dp2_ring mp2_sp_ring dp2_mp2_sp_zero_ring dp4_mp2_ring
# The setting reached the communicators: the bytes our rings send (resources.json, each rank's data- and
# tensor-parallel groups) are 0 under mpi, where MPI's own collectives move them, and > 0 with the rings.
"$PY" - dp2 mp2_sp dp2_mp2_sp_zero dp4_mp2 <<'PY'
import json, sys
for layout in sys.argv[1:]:
    sent = {}
    for c in ("mpi", "ring"):
        ranks = json.load(open(f"{layout}_{c}/resources.json"))["ranks"]
        sent[c] = [r["dp_bytes_sent"] + r["tp_bytes_sent"] for r in ranks]
    assert all(b == 0 for b in sent["mpi"]), f"{layout}_mpi: our rings sent {sent['mpi']} bytes under collectives: mpi"
    assert all(b > 0 for b in sent["ring"]), f"{layout}_ring: the rings sent {sent['ring']} bytes"
    print(f"{layout}: data- and tensor-parallel bytes sent by the rings: mpi 0 on every rank, ring {min(sent['ring']):.0f}+")
PY

refused 2 "parallel.collectives=nccl: expects ring" bad "$BIN" train --config llama.yaml --set parallel.collectives=nccl \
  --set output_dir=bad
echo "PASS"
