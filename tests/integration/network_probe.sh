#!/usr/bin/env bash
# `gridformer probe --network` (the Plan issue's network probe) and `plan --hosts H --network-probe FILE`:
#  (a) on 2 ranks the probe writes its table (8 B to --max-bytes, a factor of 4 apart, each one-way time positive),
#      its latency (the smallest message's time) and bandwidth (the largest's bytes over its time less the latency),
#      both recomputed here from the table; both ranks are on this host, which the file says;
#  (b) plan refuses that file for --hosts (a link within a host is not one between hosts), naming why;
#  (c) the same figures as a probe between two hosts plan as --network-gbs of the same value does, word for word but
#      the source it names, and the search on 2 hosts says the probe is its source;
#  (d) refused with status 2: one rank, no --network, --network-probe without --hosts, a file that is not a probe's,
#      a bandwidth that is not a positive number.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"

run probe mpirun -np 2 --oversubscribe "$BIN" probe --network --out net.json --max-bytes 2097152 --rounds 10
((STATUS == 0)) || { cat probe.log; fail "probe --network on 2 ranks: status $STATUS"; }
grep -q "on one host: a link within the host, not between hosts" probe.log || fail "the probe does not say both ranks were on one host"
"$PY" - net.json <<'PY' || fail "the probe's file"
import json, socket, sys
j = json.load(open(sys.argv[1]))
assert j["probe"] == "network" and j["ranks"] == [0, 1] and j["same_host"] is True, j
assert j["hosts"] == [socket.gethostname()] * 2, j["hosts"]
sizes = [s["bytes"] for s in j["sizes"]]
assert sizes == [8 * 4 ** k for k in range(len(sizes))] and sizes[-1] <= 2097152 < sizes[-1] * 4, sizes
assert all(s["one_way_us"] > 0 for s in j["sizes"])
lat = j["sizes"][0]["one_way_us"]
assert j["latency_us"] == lat, (j["latency_us"], lat)
big = j["sizes"][-1]
want = big["bytes"] / ((big["one_way_us"] - lat) * 1e-6) / 1e9
assert abs(j["bandwidth_gbs"] - want) <= 1e-9 * want, (j["bandwidth_gbs"], want)
print(f"ok: latency {lat:.2f} us, bandwidth {j['bandwidth_gbs']:.3f} GB/s over {len(sizes)} sizes (this host)")
PY

random_gpt2 g.yaml steps=2 batch=2
refused 2 "its two ranks ran on one host, so it measured a link within a host" same_host \
  "$BIN" plan --config g.yaml --ranks 4 --hosts 2 --network-probe net.json --set parallel_config.data_parallel=4

# (c): the file as a probe between two hosts would write it.
"$PY" - net.json two.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["same_host"], j["hosts"][1] = False, j["hosts"][1] + "-other"
json.dump(j, open(sys.argv[2], "w"))
print(repr(j["bandwidth_gbs"]))
PY
GBS=$("$PY" -c 'import json, sys; print(repr(json.load(open(sys.argv[1]))["bandwidth_gbs"]))' two.json)
LAT=$("$PY" -c 'import json, sys; print(repr(json.load(open(sys.argv[1]))["latency_us"]))' two.json)
LAYOUT=(--set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2)
run by_probe "$BIN" plan --config g.yaml --ranks 4 --hosts 2 --network-probe two.json "${LAYOUT[@]}"
((STATUS == 0)) || { cat by_probe.log; fail "plan --network-probe"; }
run by_gbs "$BIN" plan --config g.yaml --ranks 4 --hosts 2 --network-gbs "$GBS" --network-latency-us "$LAT" "${LAYOUT[@]}"
((STATUS == 0)) || { cat by_gbs.log; fail "plan --network-gbs"; }
grep -q "GB/s between hosts (probe --network: two.json)" by_probe.log || fail "plan does not name the probe as its source"
grep -q "GB/s between hosts (given)" by_gbs.log || fail "plan does not say the bandwidth was given"
diff <(sed 's/(probe --network: two.json)/(given)/' by_probe.log) by_gbs.log > probe_vs_gbs.diff ||
  { cat probe_vs_gbs.diff; fail "plan with the probe's file differs from plan with --network-gbs of its figure"; }
grep -q "us a message between hosts" by_probe.log || fail "plan does not price a message between hosts at the probe's latency"
ok "plan --network-probe prices as --network-gbs $GBS --network-latency-us $LAT does"
run search "$BIN" plan --config g.yaml --search --ranks 4 --hosts 2 --network-probe two.json --top 2
((STATUS == 0)) || { cat search.log; fail "plan --search --network-probe"; }
grep -q "GB/s between them, probe --network: two.json)" search.log || fail "the search does not name the probe"

# (d)
refused 2 "probe --network measures the link between two ranks" one_rank "$BIN" probe --network
refused 2 "say what to probe: --network" no_kind "$BIN" probe
refused 2 "give --hosts H (H > 1) too" no_hosts "$BIN" plan --config g.yaml --ranks 4 --network-probe two.json
echo '{"probe": "memory"}' > other.json
refused 2 "not a probe --network file" not_probe "$BIN" plan --config g.yaml --ranks 4 --hosts 2 --network-probe other.json
"$PY" -c 'import json; j = json.load(open("two.json")); j["bandwidth_gbs"] = -1; json.dump(j, open("neg.json", "w"))'
refused 2 '"bandwidth_gbs" is not a positive number' negative "$BIN" plan --config g.yaml --ranks 4 --hosts 2 --network-probe neg.json
