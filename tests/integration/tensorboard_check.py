"""Decodes a TensorBoard event file independently of gridformer and checks it against metrics.jsonl.

    tensorboard_check.py PB_DIR EVENT_FILE METRICS_JSONL RUN [--partial]

PB_DIR holds the Python modules protoc made from TensorBoard's published event.proto and
summary.proto (tests/data/tensorboard_proto/, compiled by tests/integration/tensorboard.sh). The
TFRecord framing is read here, not through any TensorFlow or TensorBoard code: every record's
length and data are checked against their masked CRC-32C, computed by the CRC below (the
Castagnoli polynomial, checked against RFC 3720's vectors first).

RUN (1, 2, ...) selects the lines of metrics.jsonl after the RUN-th run_start line, up to the next
one. Every scalar those lines hold must be in the file at its step, as the float32 nearest the JSON
value, bit for bit; the file must hold nothing else. --partial: the run was killed, so its last line
may be missing from the file (it is written to metrics.jsonl first), but no other.

The tags are those README "TensorBoard" documents (Megatron-LM's names where it has one), written
out again here so that the check does not share runner/report/tensorboard.cpp's table.
"""
import json
import math
import struct
import sys

# ---- CRC-32C (reflected 0x82F63B78), table-driven -----------------------------------------------
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# RFC 3720 B.4: 32 bytes of zeros, of 0xff, ascending, descending; and the usual check value.
assert crc32c(bytes(32)) == 0x8A9136AA
assert crc32c(b"\xff" * 32) == 0x62A8AB43
assert crc32c(bytes(range(32))) == 0x46DD794E
assert crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C
assert crc32c(b"123456789") == 0xE3069283


def records(path):
    """The data of each TFRecord in the file; every CRC checked, no trailing bytes."""
    out = []
    with open(path, "rb") as f:
        blob = f.read()
    pos = 0
    while pos < len(blob):
        assert len(blob) - pos >= 12, f"{path}: {len(blob) - pos} trailing bytes at {pos}, not a record header"
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        assert length_crc == masked(header), f"{path}: record at {pos}: length CRC {length_crc:#x} != {masked(header):#x}"
        end = pos + 12 + length + 4
        assert end <= len(blob), f"{path}: record at {pos} of {length} bytes runs past the end"
        data = blob[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:end])
        assert data_crc == masked(data), f"{path}: record at {pos}: data CRC {data_crc:#x} != {masked(data):#x}"
        out.append(data)
        pos = end
    return out


def f32(x):
    """The float32 nearest x, as its 4 bytes."""
    try:
        return struct.pack("<f", x)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, x))


# ---- What each metrics.jsonl line should give ---------------------------------------------------
STEP_TAGS = {  # step line key -> tag (and a divisor)
    "loss": ("lm loss", 1), "lr": ("learning-rate", 1), "grad_norm": ("grad-norm", 1),
    "loss_scale": ("loss-scale", 1), "step_ms": ("iteration-time", 1000.0),
    "tokens_per_s": ("tokens-per-second", 1), "samples_per_s": ("samples-per-second", 1),
    "tflops": ("throughput", 1), "mfu": ("mfu", 1),
    "aux_loss": ("load_balancing_loss", 1), "z_loss": ("z_loss", 1), "objective": ("objective", 1),
    "bubble": ("pipeline-bubble", 1), "bubble_max": ("pipeline-bubble-max", 1),
    "bubble_analytic": ("pipeline-bubble-analytic", 1),
    "eval_loss": ("lm loss validation", 1), "ppl": ("lm loss validation ppl", 1),
    "consumed_samples": ("consumed-samples", 1),
}
MOE_TAGS = {"aux_loss": "load_balancing_loss", "z_loss": "z_loss", "tokens_max": "tokens_per_expert_max",
            "tokens_mean": "tokens_per_expert_mean", "dropped": "dropped_tokens"}
# Keys of the lines that are not scalars of their own (the step itself, counts of the interval) or
# not numbers.
NOT_SCALARS = {"step", "epoch", "interval_steps", "skipped", "startup", "moe", "peak_rss_bytes", "spike",
               "nonfinite", "rank_loss_sum"}
# A checkpoint's line (event: checkpoint): its costs, under tags of their own.
CHECKPOINT_TAGS = {"snapshot_s": "checkpoint/snapshot-seconds", "write_s": "checkpoint/write-seconds",
                   "bytes": "checkpoint/bytes"}
CHECKPOINT_NOT_SCALARS = {"event", "step", "name", "async"}
# margin: the routing choice nearest a tie (null when there was no choice), for equivalence tests; no Megatron tag.
MOE_NOT_SCALARS = {"layer", "assignments", "tokens_per_expert", "margin"}


def expected(line):
    """{(tag, step): value} of one metrics.jsonl line."""
    step = line["step"]
    out = {}
    if line.get("event") == "checkpoint":
        for key, value in line.items():
            if key in CHECKPOINT_NOT_SCALARS:
                continue
            assert key in CHECKPOINT_TAGS, f"metrics.jsonl checkpoint key {key!r} has no TensorBoard tag"
            out[(CHECKPOINT_TAGS[key], step)] = value
        return out
    for key, value in line.items():
        if key in NOT_SCALARS:
            continue
        assert key in STEP_TAGS, f"metrics.jsonl key {key!r} has no TensorBoard tag in README's table"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            tag, div = STEP_TAGS[key]
            out[(tag, step)] = value / div
    for m in line.get("moe", []):
        layer = m["layer"]
        for key, value in m.items():
            if key in MOE_NOT_SCALARS:
                continue
            assert key in MOE_TAGS, f"metrics.jsonl moe key {key!r} has no TensorBoard tag"
            out[(f"moe/{MOE_TAGS[key]}_layer_{layer}", step)] = value
        if m["tokens_mean"] > 0:
            out[(f"moe/expert_load_max_over_mean_layer_{layer}", step)] = m["tokens_max"] / m["tokens_mean"]
    for rank, rss in enumerate(line.get("peak_rss_bytes", [])):
        out[(f"mem-peak-rss-bytes/rank_{rank}", step)] = rss
    return out


def run_lines(path, run):
    lines, seen = [], 0
    for text in open(path):
        row = json.loads(text)
        if row.get("event") == "run_start":
            seen += 1
            continue
        if seen == run:
            lines.append(row)
    assert seen >= run, f"{path} has {seen} run_start lines, not {run}"
    return lines


def main():
    pb_dir, event_path, metrics_path, run = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    partial = "--partial" in sys.argv[5:]
    sys.path.insert(0, pb_dir)
    from tensorboard.compat.proto import event_pb2  # compiled from the published .proto files

    recs = records(event_path)
    assert recs, f"{event_path} is empty"
    first = event_pb2.Event.FromString(recs[0])
    assert first.file_version == "brain.Event:2", f"first record's file_version {first.file_version!r}"
    assert first.WhichOneof("what") == "file_version" and first.wall_time > 1.6e9, first
    got = {}
    wall = first.wall_time
    for data in recs[1:]:
        e = event_pb2.Event.FromString(data)
        assert e.WhichOneof("what") == "summary", f"an event without a summary: {e}"
        assert e.wall_time >= wall, "wall_time goes back"
        wall = e.wall_time
        for v in e.summary.value:
            assert v.WhichOneof("value") == "simple_value", f"{v.tag}: not a simple_value"
            assert (v.tag, e.step) not in got, f"{v.tag} at step {e.step} twice"
            got[(v.tag, e.step)] = struct.pack("<f", v.simple_value)

    lines = run_lines(metrics_path, run)
    assert lines, f"run {run} of {metrics_path} has no step or evaluation lines"
    want_all = [expected(l) for l in lines]
    want = {}
    for i, w in enumerate(want_all):
        if partial and i == len(want_all) - 1 and not any(k in got for k in w):
            print(f"the last line (step {lines[-1]['step']}) did not reach the event file before the kill")
            continue
        want.update(w)
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing, f"{len(missing)} scalars of metrics.jsonl not in {event_path}: {missing[:10]}"
    assert not extra, f"{len(extra)} scalars in {event_path} that metrics.jsonl does not have: {extra[:10]}"
    wrong = [(k, want[k], struct.unpack('<f', got[k])[0]) for k in sorted(want) if got[k] != f32(want[k])]
    assert not wrong, f"{len(wrong)} values differ from float32(metrics.jsonl): {wrong[:10]}"
    tags = sorted({t for t, _ in want})
    steps = sorted({s for _, s in want})
    print(f"{event_path}: {len(recs)} records, CRCs good; {len(want)} scalars ({len(tags)} tags) at steps "
          f"{steps[0]}..{steps[-1]} equal to float32 of metrics.jsonl run {run}")
    print("tags: " + ", ".join(tags))


if __name__ == "__main__":
    main()
