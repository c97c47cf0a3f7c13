#!/usr/bin/env bash
# lib.sh's ranks_of, which the signal tests use to find their runs' ranks (stop_checkpoint.sh sends them SIGTERM,
# kill_resume.sh SIGKILL): a relative output_dir is the caller's run only where the process runs in the caller's
# directory. Before, stop_checkpoint.sh's `ranks_of a` also found slurm.sh's sbatch job, whose ranks train into
# their own ./a, and CI's run of the two side by side ended that job with SIGTERM (status 143).
# Stand-ins for ranks: bash started through a link named gridformer (pgrep -x sees the link's name), sleeping, with
# a training command line; one in this directory, one in another, one into an absolute output_dir.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
STAND_INS=()
# Their sleeps too (a sleep left running holds ctest's output pipe until it ends).
stop_stand_ins() { local p; for p in "${STAND_INS[@]}"; do pkill -KILL -P "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; }
AT_EXIT=stop_stand_ins
mkdir -p here_bin other/bin
ln -s "$(command -v bash)" here_bin/gridformer
ln -s "$(command -v bash)" other/bin/gridformer
here_bin/gridformer -c 'sleep 60; :' gridformer train --config x.yaml --set output_dir=a > /dev/null 2>&1 & STAND_INS+=($!); mine=$!
(cd other && exec bin/gridformer -c 'sleep 60; :' gridformer train --config x.yaml --set output_dir=a) > /dev/null 2>&1 & STAND_INS+=($!); theirs=$!
(cd other && exec bin/gridformer -c 'sleep 60; :' gridformer train --config x.yaml --set "output_dir=$WORK/abs") > /dev/null 2>&1 & STAND_INS+=($!); abs=$!
for _ in $(seq 1 50); do [ "$(pgrep -x gridformer | grep -cxE "$mine|$theirs|$abs")" -eq 3 ] && break; sleep 0.1; done
[ "$(pgrep -x gridformer | grep -cxE "$mine|$theirs|$abs")" -eq 3 ] || fail "the stand-ins are not seen as gridformer processes"

[ "$(ranks_of a)" = "$mine" ] || fail "ranks_of a here gave '$(ranks_of a | tr '\n' ' ')', not this directory's $mine alone"
[ "$(cd other && ranks_of a)" = "$theirs" ] || fail "ranks_of a in other/ gave '$(cd other && ranks_of a | tr '\n' ' ')', not $theirs alone"
[ "$(ranks_of "$WORK/abs")" = "$abs" ] || fail "ranks_of of an absolute output_dir gave '$(ranks_of "$WORK/abs" | tr '\n' ' ')', not $abs"
[ -z "$(ranks_of b)" ] || fail "ranks_of b found $(ranks_of b)"
ok "ranks_of: a relative output_dir is only this directory's run; an absolute one is found wherever it runs"
echo "ranks_of: all checks passed"
