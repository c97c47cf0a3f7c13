#!/usr/bin/env bash
# `gridformer plan --search` on a tiny GPT-2 for 2 ranks: every layout it ranks is the plan of its own keys (plan --set
# ... --json gives the same modelled time and largest rank), is taken by `config --ranks 2` (train's checks), keeps the
# global batch, and comes in order of modelled time; the four shapes of 2 ranks (dp2, mp2, pp2, cp2) are all found; a
# model whose heads mp2 cannot split gets no mp2 layout; under a memory bound below every layout without recompute,
# each layout it keeps fits and recomputes; a bound nothing fits is refused (status 2); one worker process gives the
# same answer as several.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
# A probe of this CPU with fixed figures, so that the modelled times do not depend on how busy the machine was when
# scripts/setup.sh probed it (a busy probe gives no modelled time at all).
CPU="$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)"
"$PY" - "$CPU" <<'PY'
import json, sys
json.dump({"tool": "machine_probe", "version": 2, "cpu": sys.argv[1] or "unknown CPU", "date": "2026-12-03T00:00:00Z",
           "threads": 2, "cores_share": 1.0, "fp32_backend": "blas", "gflops": {"blas": 100.0, "eigen": 90.0, "bf16": 300.0},
           "peak_tflops": {"float32": 0.2, "bfloat16": 0.6},
           "limits": {"fp32_fma_tflops": 0.2, "fp32_fma_isa": "avx512f", "bf16_tflops": 0.6, "bf16_isa": "amx_bf16",
                      "triad_gbs": 10.0}}, open("probe.json", "w"))
PY
export GF_MACHINE_PROBE="$WORK/probe.json"
# The link within this host, beside the machine probe, as scripts/setup.sh's probe --network writes it: 2 us a message.
echo '{"probe": "network", "same_host": true, "latency_us": 2.0, "bandwidth_gbs": 4.0}' > network_probe_host.json
random_gpt2 g.yaml batch=4 layers=4 seq=32
random_gpt2 h3.yaml batch=4 layers=4 seq=32 heads=3 hidden=48
"$BIN" plan --config g.yaml --search --ranks 2 --json --top 1000 > all.json
GF_SEARCH_WORKERS=1 "$BIN" plan --config g.yaml --search --ranks 2 --json --top 1000 > one.json 2> one.err
cmp -s all.json one.json || fail "one worker process and several disagree"
ok "one worker process and several give the same search"
"$BIN" plan --config h3.yaml --search --ranks 2 --json --top 1000 > h3.json
"$PY" - "$BIN" <<'PY'
import json, subprocess, sys
bin_ = sys.argv[1]
s = json.load(open("all.json"))
ranked = s["ranked"]
assert len(ranked) >= 10, f"only {len(ranked)} layouts ranked"
times = [float(f"{c['step_seconds_modelled']['total']:.4g}") for c in ranked]
assert times == sorted(times), f"not in order of modelled time: {times}"
G = s["global_batch"]
assert G == 4, G
for c in ranked + s["unranked"]:
    k = c["sets"]
    micro = int(k["parallel_config.micro_batch_num"]) if int(k["parallel_config.pipeline_stage"]) > 1 \
        else int(k["runner_config.gradient_accumulation_steps"])
    got = int(k["runner_config.batch_size"]) * int(k["parallel_config.data_parallel"]) * micro
    assert got == G, f"{c['label']}: global batch {got}, not {G}"
    n = int(k["parallel_config.data_parallel"]) * int(k["parallel_config.model_parallel"]) * \
        int(k["parallel_config.pipeline_stage"]) * int(k["parallel_config.context_parallel"])
    assert n == 2, f"{c['label']}: {n} ranks"
for c in ranked:
    sets = [a for kv in c["sets"].items() for a in ("--set", f"{kv[0]}={kv[1]}")]
    p = subprocess.run([bin_, "config", "--config", "g.yaml", "--ranks", "2"] + sets, capture_output=True, text=True)
    assert p.returncode == 0, f"{c['label']}: config --ranks 2 says {p.returncode}: {p.stderr[-300:]}"
    p = subprocess.run([bin_, "plan", "--config", "g.yaml", "--ranks", "2", "--json"] + sets, capture_output=True,
                       text=True, check=True)
    plan = json.loads(p.stdout)
    assert plan["step_seconds_modelled"]["total"] == c["step_seconds_modelled"]["total"], (c["label"], plan)
    assert plan["largest_rank_bytes"] == c["largest_rank_bytes"], (c["label"], plan["largest_rank_bytes"])
print(f"ok: {len(ranked)} ranked layouts, each its own plan's figures, taken by config --ranks 2, global batch {G}, in order")
shapes = {c["label"].split(";")[0].split(",")[0].split(" ")[0][:3] for c in s["best_per_shape"]}
assert shapes == {"dp2", "mp2", "pp2", "cp2"}, shapes
assert s["best_per_shape"][0] == ranked[0], "the best of the shapes is not the search's first"
print(f"ok: best of each shape: " + "; ".join(f"{c['label']} {c['step_seconds_modelled']['total']:.4g} s"
                                             for c in s["best_per_shape"]))
h = json.load(open("h3.json"))
assert h["refused"] > 0, "3 heads: nothing refused"
assert not [c for c in h["ranked"] + h["unranked"] if c["sets"]["parallel_config.model_parallel"] != "1"], \
    "3 heads: an mp2 layout was kept"
print(f"ok: 3 heads: {h['refused']} layouts refused, none at mp2 kept")
smallest = min(c["largest_rank_bytes"] for c in ranked + s["unranked"])
json.dump({"bound": int(smallest) - 1}, open("bound.json", "w"))
PY
bound=$("$PY" -c 'import json; print(json.load(open("bound.json"))["bound"])')
"$BIN" plan --config g.yaml --search --ranks 2 --json --top 1000 --memory-per-rank "${bound}B" > tight.json
"$PY" - "$bound" "$BIN" <<'PY'
import json, subprocess, sys
bound = int(sys.argv[1])
t = json.load(open("tight.json"))
kept = t["ranked"] + t["unranked"]
assert kept, "nothing fits with recompute either"
assert t["too_big"] > 0
full = []
for c in kept:
    assert c["largest_rank_bytes"] <= bound, (c["label"], c["largest_rank_bytes"], bound)
    modes = (c["sets"]["recompute_config.select_recompute"], c["sets"]["recompute_config.recompute"])
    assert modes in (("True", "False"), ("False", "True")), f"{c['label']} fits without recompute ({modes})"
    if modes[1] == "True":
        full.append(c)
assert full, "no layout needed full recompute under the bound (the retry's second step goes untested)"
# Selective recompute is tried first: a layout kept with full recompute does not fit with selective.
for c in full[:4]:
    sets = [a for k, v in c["sets"].items() for a in ("--set", f"{k}={v}")]
    sets += ["--set", "recompute_config.recompute=False", "--set", "recompute_config.select_recompute=True"]
    p = subprocess.run([sys.argv[2], "plan", "--config", "g.yaml", "--ranks", "2", "--json"] + sets, capture_output=True, text=True)
    assert p.returncode != 0 or json.loads(p.stdout)["largest_rank_bytes"] > bound, f"{c['label']}: selective recompute fits"
print(f"ok: under {bound} B a rank: {len(kept)} layouts fit, each with recompute ({len(kept) - len(full)} selective, "
      f"{len(full)} full, where selective does not fit); {t['too_big']} do not")
PY
refused 2 "error: no layout of 2 rank(s) fits --memory-per-rank 1KB" tiny "$BIN" plan --config g.yaml --search \
  --ranks 2 --memory-per-rank 1KB

# Hosts: on 2 hosts of 2 ranks, dp2 x mp2 keeps its tensor groups (ranks 0-1, 2-3) inside a host and its data groups
# (0 and 2, 1 and 3) across them; mp4's tensor group spans both. The bytes of the spanning groups are priced at the
# bandwidth given, the rest at half the probe's triad (10 GB/s here), and the search ranks with the same figures.
plan_json() { "$BIN" plan --config g.yaml --ranks 4 --json --hosts 2 --network-gbs 0.5 "$@"; }
plan_json --set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 > dpmp.json
plan_json --set parallel_config.model_parallel=4 > mp4.json
# dp4 with ZeRO-2 sharded over 2 (hybrid): the shard groups (0-1, 2-3) stay inside a host, the replica groups (0 and
# 2, 1 and 3) and the data group's own scalars span them.
plan_json --set parallel_config.data_parallel=4 --set parallel.zero_stage=2 --set parallel_config.hybrid_shard_degree=2 > hybrid.json
# More ranks than this host's cores: a message's latency is the probe's with as many ranks (network_probe_host_R.json,
# 100 us here), and each rank's share of the machine (its products', AdamW's) 1 / R.
CORES=$(getconf _NPROCESSORS_ONLN)
R=$((2 * CORES))
echo "{\"probe\": \"network\", \"same_host\": true, \"latency_us\": 100.0, \"bandwidth_gbs\": 4.0, \"world_ranks\": $R}" \
  > "network_probe_host_$R.json"
"$BIN" plan --config g.yaml --ranks "$R" --json --set parallel_config.data_parallel="$R" --set runner_config.batch_size=1 > over.json
"$BIN" plan --config g.yaml --ranks "$R" --set parallel_config.data_parallel="$R" --set runner_config.batch_size=1 > over.txt
OMP_NUM_THREADS=2 "$BIN" plan --config g.yaml --ranks 1 --json --set runner_config.batch_size="$R" > one_rank.json
grep -q "100 us a message (.* a step; probe --network within this host, $R ranks: .*network_probe_host_$R.json)" over.txt \
  || { grep "modelled step" over.txt; fail "$R ranks on $CORES cores: plan does not price a message at the probe of $R ranks"; }
"$PY" - "$R" <<'PY' || fail "$R ranks on $CORES cores: the messages are not priced at 100 us and 1 / $R of the machine"
import json, sys
R = int(sys.argv[1])
p = json.load(open("over.json"))
sent, m = p["sent_per_step"][0], p["step_seconds_modelled"]
total = sum(sent[k] for k in ("tensor", "data", "pipeline", "embedding", "context", "expert_data", "expert"))
want = total / 5e9 + sent["messages"] * 100e-6
assert abs(m["communication"] - want) <= 1e-12 * want, (m["communication"], want)
assert m["threads"] == 1, m
# Each of the R ranks runs 1/R of the step at 1/R of the machine: one rank with the whole machine takes as long.
one = json.load(open("one_rank.json"))["step_seconds_modelled"]
assert abs(m["compute"] - one["compute"]) <= 1e-9 * one["compute"], (m["compute"], one["compute"])
print(f"ok: {R} ranks on this host: {sent['messages']:.0f} messages at 100 us, each rank's products at 1/{R} of the machine")
PY
# Between the hosts as probe --network measured them: 0.5 GB/s and 50 us a message.
echo '{"probe": "network", "same_host": false, "latency_us": 50.0, "bandwidth_gbs": 0.5}' > between.json
"$BIN" plan --config g.yaml --ranks 4 --json --hosts 2 --network-probe between.json \
  --set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 > dpmp_probe.json
"$BIN" plan --config g.yaml --search --ranks 4 --hosts 2 --network-gbs 0.5 --json --top 1000 > hosts.json
refused 2 "needs the bandwidth between two hosts: --network-probe FILE" nogbs "$BIN" plan --config g.yaml --ranks 4 --hosts 2
refused 2 "do not split evenly over the hosts" uneven "$BIN" plan --config g.yaml --ranks 4 --hosts 3 --network-gbs 1
"$PY" - "$BIN" <<'PY'
import json, subprocess, sys
def check(name, spanning, cross_latency=0.0):
    p = json.load(open(name))
    sent = p["sent_per_step"][0]
    if name == "hybrid.json":
        sent = hy
    total = sum(sent[k] for k in ("tensor", "data", "pipeline", "embedding", "context", "expert_data", "expert"))
    cross = sum(sent[k] for k in spanning)
    assert p["cross_host_bytes_per_step"] == cross, (name, p["cross_host_bytes_per_step"], cross)
    # Each message at its link's latency: 2 us within a host (network_probe_host.json), cross_latency between them.
    msgs, cross_msgs = sent["messages"], p["cross_host_messages_per_step"]
    assert msgs > 0 and (cross_msgs > 0) == (cross > 0), (name, msgs, cross_msgs)
    # Within a host: half the probe's 10 GB/s triad.
    want = (total - cross) / 5e9 + cross / 0.5e9 + (msgs - cross_msgs) * 2e-6 + cross_msgs * cross_latency
    got = p["step_seconds_modelled"]["communication"]
    assert abs(got - want) <= 1e-12 * want, (name, got, want)
    print(f"ok: {name}: {cross:.0f} B a step between the hosts ({', '.join(spanning)}), messages {got:.6f} s as priced")
check("dpmp.json", ["data"])
check("mp4.json", ["tensor"])
hy = json.load(open("hybrid.json"))["sent_per_step"][0]
assert hy["data_shard"] > 0 and hy["data_replica"] > 0, hy
hy["data_rest"] = hy["data"] - hy["data_shard"]
check("hybrid.json", ["data_rest"])
check("dpmp_probe.json", ["data"], 50e-6)
h = json.load(open("hosts.json"))
assert h["ranked"], "nothing ranked on 2 hosts"
for c in h["ranked"][:8]:
    sets = [a for kv in c["sets"].items() for a in ("--set", f"{kv[0]}={kv[1]}")]
    plan = json.loads(subprocess.run([sys.argv[1], "plan", "--config", "g.yaml", "--ranks", "4", "--json", "--hosts", "2",
                                      "--network-gbs", "0.5"] + sets, capture_output=True, text=True, check=True).stdout)
    assert plan["step_seconds_modelled"]["total"] == c["step_seconds_modelled"]["total"], (c["label"], plan)
    assert plan["cross_host_bytes_per_step"] == c["cross_host_bytes_per_step"], c["label"]
print(f"ok: the 2-host search's first 8 layouts are their plans' figures; its first: {h['ranked'][0]['label']}")
PY
