#!/usr/bin/env bash
# Bad input never crashes: each case below ends with one clear error line naming what to fix and the
# documented exit status (README "Exit status": 2 for a problem found before training), on one rank
# and under mpirun on two, with no `terminate called`, `Signal:`, `Aborted`, backtrace or MPI_ABORT
# banner, and with the message printed once (rank 0), not once per rank.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
bare_gpt2 ok.yaml out=./out
echo "not a directory" > a_file
printf 'MMIDIDX\0\0garbage' > corrupt.idx; : > corrupt.bin

# expect NP STATUS "text the message must hold" ARGS...  (NP 1: no mpirun)
expect() {
  local np=$1 want=$2 msg=$3; shift 3
  local cmd=("$BIN" "$@")
  if [ "$np" -gt 1 ]; then cmd=(mpirun -np "$np" --oversubscribe "${cmd[@]}"); fi
  run out timeout 120 "${cmd[@]}"; local status=$STATUS
  [ "$status" -ne 124 ] || fail "np $np, $*: hung"
  [ "$status" -eq "$want" ] || fail "np $np, $*: exit status $status, expected $want: $(cat out.log)"
  grep -qF -- "$msg" out.log || fail "np $np, $*: no '$msg' in: $(cat out.log)"
  for crash in "terminate called" "Signal:" "Aborted" "Backtrace" "backtrace" "MPI_ABORT" "core dumped" "what():"; do
    ! grep -qF -- "$crash" out.log || fail "np $np, $*: output shows '$crash': $(cat out.log)"
  done
  [ "$(grep -c '\[error\]\|^error:' out.log)" -eq 1 ] || fail "np $np, $*: expected exactly one error line: $(cat out.log)"
  ! grep -q "step:\[" out.log || fail "np $np, $*: training started"
  echo "ok: np $np, status $status: $(grep -m1 '\[error\]\|^error:' out.log | cut -c1-160)"
}

for np in 1 2; do
  dp="--set parallel_config.data_parallel=$np"
  expect $np 2 "output_dir \`a_file/run\`: cannot create" train --config ok.yaml $dp --set output_dir=a_file/run
  expect $np 2 "does_not_exist" train --config ok.yaml $dp --set train_dataset.data_loader.type=MegatronDataset \
    --set train_dataset.data_loader.data_path=does_not_exist
  expect $np 2 "corrupt.idx" train --config ok.yaml $dp --set train_dataset.data_loader.type=MegatronDataset \
    --set train_dataset.data_loader.data_path=corrupt
  expect $np 2 "model_parallel" train --config ok.yaml $dp --set parallel_config.model_parallel=3
  expect $np 2 "run_mode: predict" train --config ok.yaml $dp --set run_mode=predict
  expect $np 2 "runner_config.batch_size" train --config ok.yaml $dp --set runner_config.batch_size=banana
done
expect 1 2 "--config" train
expect 1 2 "no_such_flag" train --config ok.yaml --no_such_flag
expect 1 2 "nope.yaml" train --config nope.yaml
echo "PASS"
