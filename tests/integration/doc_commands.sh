#!/usr/bin/env bash
# The docs' commands run as written (docs/finetune.md, "Doc commands"): every fenced ```bash block of README.md
# and docs/*.md after a `<!-- runnable -->` comment (`<!-- runnable: exit N -->`: the block's last command exits
# N) runs, one file's blocks in order as one script, in a fresh directory linking the repository's build,
# configs, scripts, tools, tests and data files, with tiny sizes appended to gridformer train, predict and eval. A block
# that fails fails this test. First the harness's own check: a deliberately broken block must fail it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab
need_corpus
TINY=(--set model.model_config.seq_length=32 --set model.model_config.num_layers=2 --set runner_config.batch_size=2)

# extract MD OUT: OUT.N for each runnable block N, with its expected status in OUT.N.status.
extract() {
  "$PY" - "$1" "$2" <<'EOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
n = 0
for m in re.finditer(r"<!-- runnable(?::\s*exit\s+(\d+))?\s*-->\s*\n```bash\n(.*?)```", text, re.S):
    n += 1
    open(f"{sys.argv[2]}.{n}", "w").write(m.group(2))
    open(f"{sys.argv[2]}.{n}.status", "w").write(m.group(1) or "0")
print(n)
EOF
}

# A fresh directory: links to the tree, data/ its own (the runs write there), and build/bin/gridformer a
# wrapper that appends the tiny sizes to train and predict.
fresh() {
  local d=$1
  mkdir -p "$d/build/bin" "$d/data"
  for x in configs scripts tools tests; do ln -s "$SRC/$x" "$d/$x"; done
  for x in "$SRC"/data/*; do ln -s "$x" "$d/data/$(basename "$x")"; done
  for x in "$BUILD"/bin/*; do [ "$(basename "$x")" = gridformer ] || ln -s "$x" "$d/build/bin/$(basename "$x")"; done
  ln -s "$BUILD/machine_probe.json" "$d/build/machine_probe.json" 2> /dev/null || true
  cat > "$d/build/bin/gridformer" <<EOF
#!/usr/bin/env bash
case "\$1" in
  train) exec "$BIN" "\$@" ${TINY[*]} --set runner_config.train_steps=3 --set lr_schedule.warmup_steps=1 ;;
  predict|eval) exec "$BIN" "\$@" ${TINY[*]} ;;
  *) exec "$BIN" "\$@" ;;
esac
EOF
  chmod +x "$d/build/bin/gridformer"
}

# run_doc MD: its runnable blocks in a fresh directory; returns non-zero at the first block that does not exit
# as documented (its output shown).
run_doc() {
  local md=$1 name count i want got
  name=$(basename "$md" .md)
  count=$(extract "$md" "$WORK/$name.block")
  ((count > 0)) || return 0
  fresh "$WORK/$name.dir"
  for ((i = 1; i <= count; i++)); do
    want=$(cat "$WORK/$name.block.$i.status")
    set +e
    (cd "$WORK/$name.dir" && bash -e "$WORK/$name.block.$i") > "$WORK/$name.$i.log" 2>&1
    got=$?
    set -e
    if [ "$got" != "$want" ]; then
      tail -20 "$WORK/$name.$i.log"
      echo "$md: runnable block $i exited $got, documented $want:"
      sed 's/^/    /' "$WORK/$name.block.$i"
      return 1
    fi
  done
  ok "$md: $count runnable block(s) ran as documented"
}

# The harness fails a doc whose block fails, and one whose block exits otherwise than documented.
cat > broken.md <<'EOF'
<!-- runnable -->
```bash
build/bin/gridformer config --config configs/gpt2/run_gpt2_tiny.yaml > /dev/null
build/bin/gridformer train --config no_such.yaml
```
EOF
run_doc "$WORK/broken.md" > broken.out 2>&1 && fail "a block whose command fails passed"
grep -qF "runnable block 1 exited 2, documented 0" broken.out || fail "the broken block's failure: $(cat broken.out)"
sed 's/<!-- runnable -->/<!-- runnable: exit 2 -->/' broken.md > refused.md
run_doc "$WORK/refused.md" > refused.out 2>&1 || { cat refused.out; fail "a block documented to exit 2 did not pass"; }
sed 's/<!-- runnable -->/<!-- runnable: exit 3 -->/' broken.md > wrong.md
run_doc "$WORK/wrong.md" > wrong.out 2>&1 && fail "a block that exits 2 where 3 is documented passed"
ok "the harness fails a broken block and a wrong status"

docs=0
for md in "$SRC/README.md" "$SRC"/docs/*.md; do
  run_doc "$md" || fail "$md: a runnable block failed"
  grep -q "<!-- runnable" "$md" && docs=$((docs + 1))
done
((docs >= 2)) || fail "only $docs document(s) with runnable blocks"
