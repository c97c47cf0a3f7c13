#!/usr/bin/env bash
# Our ring collectives against MPI's (parallel.collectives: ring | mpi) on 2, 4 and 8 ranks of this machine
# (mpirun --oversubscribe: more ranks than cores share them): per call, the time (build/bin/bench_collectives, the
# slowest rank's microseconds, median over its rounds, then the median over RUNS runs, ring and mpi interleaved) and
# the bytes each rank sends (Open MPI's pml monitoring, which sees both our rings' point-to-point messages and the
# messages MPI's collective algorithms send: runs of C and of 0 calls, (bytes(C) - bytes(0)) / C per rank; the rings'
# count is checked against the communicator's own). Prints the table side by side, with the CPU (lscpu) and the load.
#   bash bench/collectives_ring_vs_mpi.sh [BUILD_DIR] [RUNS]
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(realpath "${1:-$SRC/build}")"; RUNS=${2:-3}
BENCH="$BUILD/bin/bench_collectives"
[ -x "$BENCH" ] || { echo "collectives_ring_vs_mpi: no $BENCH (build it)" >&2; exit 2; }
CASES=allreduce_4096,allreduce_262144,allreduce_4194304,started_allreduce_262144,reduce_scatter_262144,allgather_262144
RANKS=(2 4 8)
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
MPI=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# Time: RUNS runs, each np and mode in turn.
for run in $(seq 1 "$RUNS"); do
  for np in "${RANKS[@]}"; do
    for mode in ring mpi; do
      "${MPI[@]}" -np "$np" "$BENCH" --collectives "$mode" --cases "$CASES" --rounds 5 --min-time 0.3 \
        > "$WORK/time_${np}_${mode}_$run.json"
      echo "run $run: $np ranks, $mode: $(cat "$WORK/time_${np}_${mode}_$run.json")" >&2
    done
  done
done
# Bytes: the pml monitoring's per-rank totals after 0 and after 4 calls of one case (every rank, every peer).
for np in "${RANKS[@]}"; do
  for mode in ring mpi; do
    for c in none ${CASES//,/ }; do
      calls=4 case=$c
      [ "$c" = none ] && calls=0 case=allreduce_4096
      "${MPI[@]}" -np "$np" --mca pml_monitoring_enable 1 --mca pml_monitoring_enable_output 3 \
        --mca pml_monitoring_filename "$WORK/mon_${np}_${mode}_$c" \
        "$BENCH" --collectives "$mode" --cases "$case" --rounds 1 --calls "$calls" > "$WORK/mon_${np}_${mode}_$c.json"
    done
  done
done

cpu=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
cores=$(env -u OMP_NUM_THREADS nproc)
ompi=$(ompi_info 2>/dev/null | sed -n 's/^ *Open MPI: //p' | head -1)
/usr/bin/python3 - "$WORK" "$RUNS" "$CASES" "${RANKS[*]}" <<'PY'
import json, statistics, sys
work, runs, cases, ranks = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), [int(x) for x in sys.argv[4].split()]
def sent(np, mode, c):  # bytes each rank sent to the others (pml monitoring: user and collective-internal messages)
    out = []
    for r in range(np):
        total = 0
        for line in open(f"{work}/mon_{np}_{mode}_{c}.{r}.prof"):
            f = line.split("\t")
            if f[0] in ("E", "I") and len(f) > 3:
                total += int(f[3].split()[0])
        out.append(total)
    return out
def per_call(np, mode, c):
    return [(g - z) / 4 for g, z in zip(sent(np, mode, c), sent(np, mode, "none"))]
floats = {"allreduce_4096": 4096, "allreduce_4194304": 4194304}
label = {"allreduce_4096": "all-reduce 16 KiB", "allreduce_262144": "all-reduce 1 MiB", "allreduce_4194304": "all-reduce 16 MiB",
         "started_allreduce_262144": "started all-reduce 1 MiB", "reduce_scatter_262144": "reduce-scatter 1 MiB",
         "allgather_262144": "all-gather 1 MiB"}
print(f"| {'call':<26} | ranks | ring us | mpi us | mpi/ring | ring KiB/rank | mpi KiB/rank | mpi/ring |")
print(f"|{'-' * 28}|------:|--------:|-------:|---------:|--------------:|-------------:|---------:|")
uneven = []
for c in cases:
    for np in ranks:
        t = {m: statistics.median(json.load(open(f"{work}/time_{np}_{m}_{k}.json"))["us_per_call"][c] for k in range(1, runs + 1))
             for m in ("ring", "mpi")}
        b = {m: per_call(np, m, c) for m in ("ring", "mpi")}
        # The rings' bytes as the communicator counts them (the largest over ranks) and as the ring's arithmetic has them.
        own = json.load(open(f"{work}/mon_{np}_ring_{c}.json"))["bytes_sent_per_call"][c]
        n = floats.get(c, 262144) * 4
        analytic = (1 if c.startswith(("reduce_scatter", "allgather")) else 2) * (np - 1) / np * n
        assert abs(max(b["ring"]) - own) <= 64 and abs(own - analytic) <= 4 * np, (c, np, b["ring"], own, analytic)
        if max(b["mpi"]) - min(b["mpi"]) > 64:
            uneven.append(f"  mpi {label[c]} on {np} ranks: KiB per rank {[round(x / 1024, 1) for x in b['mpi']]}")
        rb, mb = statistics.mean(b["ring"]), statistics.mean(b["mpi"])
        print(f"| {label[c]:<26} | {np:>5} | {t['ring']:>7.1f} | {t['mpi']:>6.1f} | {t['mpi'] / t['ring']:>8.2f} | "
              f"{rb / 1024:>13.1f} | {mb / 1024:>12.1f} | {mb / rb:>8.2f} |")
print()
print("KiB/rank: bytes sent to other ranks per call, mean over ranks (Open MPI's pml monitoring; the rings' equal the")
print("communicator's own count and 2(p-1)/p x the buffer for an all-reduce, (p-1)/p for reduce-scatter and all-gather)")
if uneven:
    print("MPI's algorithms that send unevenly:")
    print("\n".join(uneven))
PY
echo "cpu: $cpu (lscpu), $cores cores; Open MPI $ompi (vader shared memory); OMP_NUM_THREADS=1, ranks not bound (--oversubscribe --bind-to none)"
echo "time: the slowest rank's us per call, median of 5 rounds of ~0.3 s or 3 calls, then median of $RUNS runs; runs interleave ring and mpi"
echo "load average at the start: $load0; at the end: $(cut -d' ' -f1-3 /proc/loadavg); $started to $(date -u +%Y-%m-%dT%H:%M:%SZ); commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null)"
