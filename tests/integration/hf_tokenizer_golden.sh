#!/usr/bin/env bash
# The goldens of tests/data/hf_tokenizer (ids.txt, ids_with_specials.txt) are what
# tools/hf_tokenizer_reference.py computes today: each is regenerated from the committed
# tokenizer.json files and corpus.jsonl and compared byte for byte. Then Megatron's
# HuggingFaceTokenizer type through gridformer: `gridformer tokenize` gives each corpus line's ids
# with the post-processor's special tokens (ids_with_specials.txt, or ids.txt where the file adds none),
# and preprocess_data writes those ids plus eos_token_id per document.
#   bash tests/integration/hf_tokenizer_golden.sh BUILD_DIR SOURCE_DIR
# Skips (exit 77, ctest's SKIP_RETURN_CODE) when /usr/bin/python3 lacks the `regex` module (Debian: python3-regex).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_python regex
DATA="$SRC/tests/data/hf_tokenizer"
REF="$SRC/tools/hf_tokenizer_reference.py"

checked=0
for dir in "${DATA}"/*/; do
  name="$(basename "${dir}")"
  [[ -f "${dir}/tokenizer.json" ]] || continue
  for golden in ids.txt ids_with_specials.txt; do
    [[ -f "${dir}/${golden}" ]] || continue
    flags=()
    [[ "${golden}" == ids_with_specials.txt ]] && flags=(--add-special-tokens)
    "${PY}" "${REF}" "${dir}/tokenizer.json" "${flags[@]}" < "${DATA}/corpus.jsonl" > "${WORK}/${name}_${golden}"
    cmp -s "${WORK}/${name}_${golden}" "${dir}/${golden}" \
      || { diff "${dir}/${golden}" "${WORK}/${name}_${golden}" | head -20; fail "${name}/${golden} differs from what ${REF#"${SRC}/"} computes"; }
    checked=$((checked + 1))
  done
done
[[ "${checked}" -gt 0 ]] || fail "no goldens found in ${DATA}"
echo "${checked} hf_tokenizer goldens match tools/hf_tokenizer_reference.py"

# `tokenize` reads one text a line: the corpus's texts without a line break (their line numbers kept).
"${PY}" -c "
import json, sys
with open(sys.argv[2], 'w', encoding='utf-8') as out, open(sys.argv[3], 'w') as nums:
    for i, line in enumerate(open(sys.argv[1], encoding='utf-8')):
        t = json.loads(line)['text']
        if '\n' not in t and '\r' not in t and '\x0b' not in t and '\x0c' not in t:
            out.write(t + '\n')
            nums.write(str(i + 1) + '\n')
" "${DATA}/corpus.jsonl" "${WORK}/lines.txt" "${WORK}/lines.nums"
for name in gpt2 llama3 qwen2; do
  dir="${DATA}/${name}"
  golden="${dir}/ids_with_specials.txt"; [[ -f "${golden}" ]] || golden="${dir}/ids.txt"
  "$BIN" tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "${dir}" < "${WORK}/lines.txt" > "${WORK}/${name}.ids" \
    || fail "gridformer tokenize HuggingFaceTokenizer ${name}"
  awk 'NR == FNR { keep[$1] = 1; next } FNR in keep' "${WORK}/lines.nums" "${golden}" > "${WORK}/${name}.want"
  cmp "${WORK}/${name}.ids" "${WORK}/${name}.want" || fail "${name}: tokenize differs from ${golden#"${SRC}/"}"
  echo "${name}: gridformer tokenize = ${golden#"${DATA}/"} on $(wc -l < "${WORK}/lines.nums") one-line texts"
  preprocess "${WORK}/${name}" --input "${DATA}/corpus.jsonl" --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model "${dir}/tokenizer.json" --append-eod --dump-ids "${WORK}/${name}.dump"
  cat "${WORK}/${name}.err"  # its notes, as before
  "${PY}" - "${WORK}/${name}.dump" "${golden}" "${dir}/tokenizer.json" <<'PY'
import json, sys
dump, golden, tj = sys.argv[1:]
got = [json.loads(l)["ids"] for l in open(dump)]
want = [[int(x) for x in l.split()] for l in open(golden)]
cfg = json.load(open(tj.replace("tokenizer.json", "tokenizer_config.json"))) if __import__("os").path.exists(tj.replace("tokenizer.json", "tokenizer_config.json")) else {}
eos = cfg.get("eos_token")
eos = eos["content"] if isinstance(eos, dict) else eos
t = json.load(open(tj))
names = {a["content"]: a["id"] for a in t.get("added_tokens", [])}
if eos is None:
    eos = [n for n in ("<|endoftext|>", "<|end_of_text|>", "</s>") if n in names][0]
eod = names.get(eos, t["model"]["vocab"].get(eos))
assert len(got) == len(want), (len(got), len(want))
for i, (g, w) in enumerate(zip(got, want)):
    assert g == (w + [eod] if w else []), f"document {i + 1}: {g} != {w} + [{eod}]"
print(f"{tj.split('/')[-2]}: preprocess_data = the golden ids + eod {eod} for {len(got)} documents")
PY
done
echo "PASS"
