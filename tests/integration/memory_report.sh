#!/usr/bin/env bash
# The memory report: with the sharded optimizer (ZeRO-1) at data_parallel 4, every rank's AdamW
# state is at most 0.3x that of one rank (ideal 0.25x); sequence parallelism lowers the planned
# activation bytes per rank below tensor parallelism alone; every rank logs its parameter,
# gradient and optimizer-state bytes at start, and rank 0 logs peak RSS and bytes sent per group.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
bare_gpt2 m.yaml samples=64 vocab=1000 seq=64 hidden=64 layers=2
mpi_train 1 one m.yaml
mpi_train 4 zero4 m.yaml --set parallel_config.data_parallel=4 --set runner_config.batch_size=1 --set parallel.enable_parallel_optimizer=True
mpi_train 2 mp2 m.yaml --set parallel_config.model_parallel=2
mpi_train 2 mp2sp m.yaml --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
for r in 0 1 2 3; do
  grep -q "memory on rank $r: parameters .*, gradients .*, optimizer state .* (AdamW moments of a 1/4 shard, ZeRO-1)" \
    "zero4/log/rank_$r/gridformer.log" || fail "rank $r does not log its memory"
  grep -q "rank $r: peak RSS .* sent .* in the tensor group, .* in the data group" zero4/log/rank_0/gridformer.log \
    || fail "rank 0 does not report rank $r's peak RSS and bytes"
done
"$PY" - <<'PY' || fail "the resources"
import json
one = json.load(open("one/resources.json"))["ranks"]
zero = json.load(open("zero4/resources.json"))["ranks"]
base = one[0]["optimizer_state_bytes"]
assert len(zero) == 4
for r in zero:
    ratio = r["optimizer_state_bytes"] / base
    print(f"rank {r['rank']}: optimizer state {r['optimizer_state_bytes']:.0f} bytes = {ratio:.3f} x one rank's {base:.0f}; "
          f"peak RSS {r['peak_rss_bytes'] / 2**20:.1f} MiB; sent dp {r['dp_bytes_sent']:.0f} B")
    assert ratio <= 0.3, ratio
    assert r["dp_bytes_sent"] > 0
a = json.load(open("mp2/resources.json"))["ranks"][0]["planned_activation_bytes"]
b = json.load(open("mp2sp/resources.json"))["ranks"][0]["planned_activation_bytes"]
c = one[0]["planned_activation_bytes"]
print(f"planned activations per rank: one rank {c:.0f}, mp2 {a:.0f}, mp2+sp {b:.0f} ({b / a:.2f} x mp2)")
assert a < c and b < 0.85 * a, (c, a, b)
PY
echo PASS
