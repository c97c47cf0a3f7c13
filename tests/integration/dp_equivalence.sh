#!/usr/bin/env bash
# The same 10 steps (dropout on) on one rank with batch 4 and on two data-parallel ranks with
# batch 2 each under mpirun: the global batch holds the same samples, so the losses agree within
# 1e-5 relative at every step.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_gpt2 dp.yaml steps=10 samples=16
train one dp.yaml --set runner_config.batch_size=4
mpi_train 2 two dp.yaml --set runner_config.batch_size=2 --set parallel_config.data_parallel=2
for r in 0 1; do [ -s "two/log/rank_$r/gridformer.log" ] || fail "no log file for rank $r"; done
[ "$(losses one | wc -l)" -eq 10 ] || fail "one: $(losses one | wc -l) logged steps, 10 expected"
same_losses one two 1e-5
"$PY" -c "import sys; l = [float(x.split()[1]) for x in open(sys.argv[1])]; sys.exit(l[-1] >= l[0])" <(losses one) \
  || fail "one: the loss did not fall"
ok "dp_equivalence: 10 steps on 2 data-parallel ranks within 1e-5 of one rank"
