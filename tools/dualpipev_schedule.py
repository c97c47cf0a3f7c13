#!/usr/bin/env python3
"""DualPipe-V's order (DeepSeek's DualPipe, https://github.com/deepseek-ai/DualPipe, in its V form) as a schedule file
in torch.distributed.pipelining's CSV (compute_only) form, which gridformer runs with
parallel.pipeline_config.pipeline_schedule_file (docs/distributed.md, "Schedules from a file").

    python3 tools/dualpipev_schedule.py --stages P --micro-batches M [-o FILE]

A transcription of PyTorch's ScheduleDualPipeV._calculate_single_rank_operations
(torch/distributed/pipelining/schedules.py, pytorch/pytorch main of 2025), step by step: rank r holds torch's
stages r and 2P - 1 - r (its "v" style); the counters are per (stage, pass); a full backward (B) counts as both
an input and a weight pass; an input pass (I) queues its weight pass (W), which a later "W if pending" takes,
oldest first; an overlapped forward + full backward is written as torch writes it, "(F;B)OVERLAP_F_B", which
gridformer runs as the forward, then the backward. M must be at least 2P (torch's own check).
"""
import argparse
import sys


def rank_actions(p, m, rank):
    actions = []
    counters = {}   # (stage, kind) -> next micro-batch
    queue = []      # (stage, micro-batch) of input passes whose weight pass is owed
    s0, s1 = rank, 2 * p - 1 - rank

    def full_backward_counts(stage):
        counters[(stage, "I")] = counters.get((stage, "I"), 0) + 1
        counters[(stage, "W")] = counters.get((stage, "W"), 0) + 1

    def cell(stage, kind, mb):
        return f"{stage}{kind}{mb}"

    def add(stage, kind):
        key = (stage, "I") if kind == "B" else (stage, kind)
        mb = counters.get(key, 0)
        actions.append(cell(stage, kind, mb))
        if kind == "B":
            full_backward_counts(stage)
        else:
            if kind == "I":
                queue.append((stage, mb))
            counters[key] = mb + 1

    def overlap(fwd_stage, bwd_stage):
        f = counters.get((fwd_stage, "F"), 0)
        b = counters.get((bwd_stage, "I"), 0)
        actions.append(f"({cell(fwd_stage, 'F', f)};{cell(bwd_stage, 'B', b)})OVERLAP_F_B")
        counters[(fwd_stage, "F")] = f + 1
        full_backward_counts(bwd_stage)

    def weight_if_pending():
        if not queue:
            return
        stage, mb = queue.pop(0)
        actions.append(cell(stage, "W", mb))
        counters[(stage, "W")] = counters.get((stage, "W"), 0) + 1

    for _ in range((p - rank - 1) * 2):          # step 1: F0
        add(s0, "F")
    for _ in range(rank + 1):                    # step 2: F0 F1
        add(s0, "F")
        add(s1, "F")
    for _ in range(p - rank - 1):                # step 3: I1 W1 F1
        add(s1, "I")
        weight_if_pending()
        add(s1, "F")
    for i in range(m - p * 2 + rank + 1):        # step 4: F0 B1 - F1 B0, overlapped
        if i == 0 and rank == p - 1:
            add(s0, "F")
            add(s1, "B")
        else:
            overlap(s0, s1)
        overlap(s1, s0)
    for _ in range(p - rank - 1):                # step 5: B1 - F1 B0
        add(s1, "B")
        overlap(s1, s0)
    step_6 = rank + 1                            # step 6: B1 B0, the second half zero-bubble
    zb = False
    for i in range(step_6):
        if i == step_6 // 2 and rank % 2 == 1:
            zb = True
        add(s1, "I" if zb else "B")
        if i == step_6 // 2 and rank % 2 == 0:
            zb = True
        add(s0, "I" if zb else "B")
    for _ in range(p - rank - 1):                # step 7: W0 B0
        weight_if_pending()
        add(s0, "I" if zb else "B")
    for _ in range(rank + 1):                    # step 8: W0
        weight_if_pending()
    return actions


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", type=int, required=True)
    ap.add_argument("--micro-batches", type=int, required=True)
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    if a.stages < 1 or a.micro_batches < 2 * a.stages:
        sys.exit(f"DualPipe-V needs at least 2 x stages micro-batches ({2 * a.stages}); got {a.micro_batches}")
    text = (f"# DualPipe-V, {a.stages} stages x 2 chunks in a V, {a.micro_batches} micro-batches: PyTorch's "
            f"ScheduleDualPipeV order\n# (tools/dualpipev_schedule.py --stages {a.stages} --micro-batches "
            f"{a.micro_batches})\n")
    text += "".join(",".join(rank_actions(a.stages, a.micro_batches, r)) + "\n" for r in range(a.stages))
    if a.output:
        open(a.output, "w").write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
