#!/usr/bin/env bash
# The rank_table tool against hccl_tools.py's and merge_hccl.py's output: the expected files are
# written here by Python the way those scripts build them (dict in their field order, every value
# a string, json.dump(indent=4), file name hccl_{N}p_{logical ids joined}_{server_ip}.json) and
# must match byte for byte and field for field. Then the ranges, --visible_devices, merge, check,
# and the errors.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
TOOL="$BUILD/bin/rank_table"

# expected DIR DEVICE_NUM SERVER_IP [VISIBLE]: what hccl_tools.py would write (without hccn_tool,
# device_ip = the server's address, as the tool does on a CPU host).
expected() {
  "$PY" - "$@" <<'PY'
import json, os, re, sys
out, device_num, server_id = sys.argv[1:4]
first, last = map(int, re.match(r"^\[(\d+),(\d+)[\]\)]$", device_num).groups())
device_num_list = list(range(first, last))
visible = sys.argv[4].split(",") if len(sys.argv) > 4 else [str(i) for i in range(last)]
table = {"version": "1.0", "server_count": "1", "server_list": []}
devices = []
for rank_id, instance_id in enumerate(device_num_list):
    devices.append({"device_id": visible[instance_id], "device_ip": server_id, "rank_id": str(rank_id)})
table["server_list"].append({"server_id": server_id, "device": devices, "host_nic_ip": "reserve"})
table["status"] = "completed"
os.makedirs(out, exist_ok=True)
name = os.path.join(out, "hccl_{}p_{}_{}.json".format(len(device_num_list), "".join(map(str, device_num_list)), server_id))
with open(name, "w") as f:
    json.dump(table, f, indent=4)
print(os.path.basename(name))
PY
}

# same_json A B: identical bytes, and identical as ordered key/value pairs (a clearer message).
same_json() {
  "$PY" - "$1" "$2" <<'PY' || fail "$1 differs from $2"
import json, sys
a, b = (json.load(open(p), object_pairs_hook=list) for p in sys.argv[1:3])
assert a == b, f"fields differ:\n{a}\n{b}"
PY
  cmp -s "$1" "$2" || fail "$1 and $2 hold the same fields but differ in bytes"
}

# 1. [0,8) on 10.1.2.3, and [0,8] (the same range, as in hccl_tools).
name=$(expected want "[0,8)" 10.1.2.3)
[ "$name" = "hccl_8p_01234567_10.1.2.3.json" ] || fail "hccl_tools' name should be hccl_8p_01234567_10.1.2.3.json, got $name"
"$TOOL" --device_num "[0,8)" --server_ip 10.1.2.3 --output_dir got > out1.txt || fail "rank_table [0,8)"
[ -f "got/$name" ] || fail "rank_table did not write got/$name: $(ls got)"
grep -q "wrote got/$name: 8 rank(s)" out1.txt || fail "no 'wrote' line: $(cat out1.txt)"
same_json "got/$name" "want/$name"
rm -rf got
"$TOOL" --device_num "[0,8]" --server_ip 10.1.2.3 --output_dir got > /dev/null || fail "rank_table [0,8]"
same_json "got/$name" "want/$name"

# 2. Other ranges: devices 8..15 (rank ids 0..7), and 12 wide.
for range in "[8,16)" "[0,12)" "[3,4)"; do
  name=$(expected want "$range" 10.1.2.3)
  "$TOOL" --device_num "$range" --server_ip 10.1.2.3 --output_dir got > /dev/null || fail "rank_table $range"
  same_json "got/$name" "want/$name"
done
[ -f got/hccl_8p_89101112131415_10.1.2.3.json ] || fail "[8,16) file name"

# 3. --visible_devices: logical devices [0,4) are devices 4,5,6,7; the name keeps the logical ids.
name=$(expected want "[0,4)" 10.1.2.3 "4,5,6,7")
[ "$name" = "hccl_4p_0123_10.1.2.3.json" ] || fail "visible-devices name: $name"
"$TOOL" --device_num "[0,4)" --visible_devices "4,5,6,7" --server_ip 10.1.2.3 --output_dir got > /dev/null \
  || fail "rank_table --visible_devices"
same_json "got/$name" "want/$name"

# 4. Without --server_ip: this host's first non-loopback IPv4 address, in the name and the table.
mkdir -p cwd && (cd cwd && "$TOOL" --device_num "[0,2)" > ../out4.txt) || fail "rank_table without --server_ip"
f=$(ls cwd/hccl_2p_01_*.json 2>/dev/null | head -1)
[ -n "$f" ] || fail "no hccl_2p_01_<ip>.json in the current directory: $(cat out4.txt)"
ip=${f#cwd/hccl_2p_01_}; ip=${ip%.json}
[[ $ip =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] && [[ $ip != 127.* ]] || fail "default server_ip '$ip' is not a non-loopback IPv4"
"$TOOL" check "$f" | grep -q "^server 0 $ip devices 2 rank_ids 0,1 device_ids 0,1$" || fail "check output for $f"

# 5. merge: two 8-device servers -> merge_hccl.py's table (server_count summed, rank ids 0..15 in argument order).
expected in "[0,8)" 10.0.0.2 > /dev/null
expected in "[0,8)" 10.0.0.1 > /dev/null
"$PY" - in/hccl_8p_01234567_10.0.0.2.json in/hccl_8p_01234567_10.0.0.1.json <<'PY'
import json, sys
server_count, json_list = 0, []
for f_name in sys.argv[1:]:
    with open(f_name) as f:
        f_json = json.load(f)
        json_list.append(f_json)
        server_count += int(f_json["server_count"])
hccl_table = {"version": "1.0", "server_count": f"{server_count}", "server_list": []}
rank_id = 0
for j in json_list:
    for server in j["server_list"]:
        for device in server["device"]:
            device["rank_id"] = str(rank_id)
            rank_id += 1
    hccl_table["server_list"].extend(j["server_list"])
hccl_table["status"] = "completed"
with open("want_merged.json", "w") as f:
    json.dump(hccl_table, f, indent=4)
PY
"$TOOL" merge merged.json in/hccl_8p_01234567_10.0.0.2.json in/hccl_8p_01234567_10.0.0.1.json > out5.txt \
  || fail "rank_table merge"
grep -q "wrote merged.json: 16 rank(s) on 2 server(s)" out5.txt || fail "merge output: $(cat out5.txt)"
same_json merged.json want_merged.json
"$TOOL" check merged.json > check.txt || fail "check of the merged table"
grep -q "^server 0 10.0.0.2 devices 8 rank_ids 0,1,2,3,4,5,6,7 device_ids 0,1,2,3,4,5,6,7$" check.txt || fail "check: $(cat check.txt)"
grep -q "^server 1 10.0.0.1 devices 8 rank_ids 8,9,10,11,12,13,14,15 " check.txt || fail "check: $(cat check.txt)"
"$TOOL" check "$SRC/tests/data/rank_table_4x8.json" | head -1 | grep -q "32 rank(s) on 4 server(s)" || fail "check 4x8"

# 6. Errors name what to fix, with status 2.
refuses() {  # refuses "EXPECTED MESSAGE" ARGS...
  local want=$1; shift
  run err "$TOOL" "$@"
  [ "$STATUS" -eq 2 ] || fail "rank_table $*: status $STATUS, expected 2: $(cat err.log)"
  grep -qF -- "$want" err.log || fail "rank_table $*: expected '$want' in: $(cat err.log)"
}
refuses 'expected "[FIRST,END)"' --device_num "[0,8" --server_ip 1.2.3.4
refuses 'expected "[FIRST,END)"' --device_num "0-8" --server_ip 1.2.3.4
refuses "the range is empty" --device_num "[4,2)" --server_ip 1.2.3.4
refuses 'has only 3 entries' --device_num "[0,4)" --visible_devices "4,5,6" --server_ip 1.2.3.4
refuses 'is listed twice' --device_num "[0,2)" --visible_devices "4,4" --server_ip 1.2.3.4
refuses "is in table 1 and in table 2" merge m.json in/hccl_8p_01234567_10.0.0.1.json in/hccl_8p_01234567_10.0.0.1.json
sed 's/"rank_id": "3"/"rank_id": "x"/' in/hccl_8p_01234567_10.0.0.1.json > bad.json
refuses 'rank table bad.json: server_list[0].device[3].rank_id "x" is not a number' check bad.json
refuses 'rank table bad.json: server_list[0].device[3].rank_id "x" is not a number' merge m.json bad.json
refuses "cannot open" check missing.json
# Bad arguments too (CLI11's own statuses were 105-113): a missing input, an unknown option.
refuses "IN: File does not exist: missing.json" merge m.json missing.json
refuses "The following argument was not expected: --bogus" --bogus
echo "rank_table_cli: all checks passed"
