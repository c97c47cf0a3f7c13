#!/usr/bin/env bash
# preprocess_data with Megatron's BERT WordPiece tokenizer types (BertWordPieceLowerCase,
# BertWordPieceCase): the ids in the written .bin/.idx (read with Megatron's layout) are, document
# for document, what tools/bert_tokenization_reference.py computes, [EOS] (Megatron's eod)
# appended; the output does not depend on --workers; no --merge-file is needed.
#   bash tests/integration/preprocess_wordpiece.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
SRC="$(cd "$2" && pwd)"
TOOL="${BUILD}/bin/preprocess_data"
[[ -x "${TOOL}" ]] || TOOL="${BUILD}/preprocess_data"
[[ -x "${TOOL}" ]] || { echo "FAIL: preprocess_data not built in ${BUILD}"; exit 1; }
DATA="${SRC}/tests/data/wordpiece"
REF="${SRC}/tools/bert_tokenization_reference.py"
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT

# The golden corpus (every script and whitespace class) three times, then 500 generated documents.
for _ in 1 2 3; do cat "${DATA}/corpus.jsonl"; done > "${WORK}/in.jsonl"
python3 - "${WORK}/in.jsonl" <<'EOF'
import json, random, sys
random.seed(7)
words = ["Hello", "world", "caf\u00e9", "\u041f\u0440\u0438\u0432\u0435\u0442", "\u6211\u7231", "\u039f\u0394\u039f\u03a3",
         "unaffable", "zzz", "\u2603", "na\u00efve,", "\u00a0", "\t", "\u3000", "\u0928\u092e\u0938\u094d\u0924\u0947", "!?"]
with open(sys.argv[1], "a", encoding="utf-8") as f:
    for i in range(500):
        f.write(json.dumps({"id": i, "text": " ".join(random.choice(words) for _ in range(random.randint(0, 30)))}) + "\n")
EOF

check() {  # check TYPE REF_FLAG
  local type="$1" flag="$2"
  for w in 1 3; do
    "${TOOL}" --input "${WORK}/in.jsonl" --output-prefix "${WORK}/${type}_w${w}" --vocab-file "${DATA}/vocab.txt" \
      --tokenizer-type "${type}" --append-eod --workers "${w}" > "${WORK}/${type}_w${w}.out" 2> "${WORK}/${type}_w${w}.err" \
      || { echo "FAIL: preprocess_data ${type} --workers ${w}: $(cat "${WORK}/${type}_w${w}.err")"; exit 1; }
  done
  cmp "${WORK}/${type}_w1_text_document.bin" "${WORK}/${type}_w3_text_document.bin"
  cmp "${WORK}/${type}_w1_text_document.idx" "${WORK}/${type}_w3_text_document.idx"
  python3 "${REF}" --vocab "${DATA}/vocab.txt" "${flag}" --eod < "${WORK}/in.jsonl" > "${WORK}/${type}.ref"
  python3 - "${WORK}/${type}_w1_text_document" "${WORK}/${type}.ref" "${type}" <<'EOF'
import array, struct, sys
prefix, ref_path, name = sys.argv[1:]
idx = open(prefix + ".idx", "rb").read()
assert idx[:9] == b"MMIDIDX\x00\x00", "bad header"
(version,) = struct.unpack_from("<Q", idx, 9)
(code,) = struct.unpack_from("<B", idx, 17)
seq_count, doc_count = struct.unpack_from("<QQ", idx, 18)
assert version == 1 and code == 8, (version, code)  # 607 ids < 65500: uint16 (DType code 8), as Megatron picks
off = 34
lengths = struct.unpack_from(f"<{seq_count}i", idx, off); off += 4 * seq_count
pointers = struct.unpack_from(f"<{seq_count}q", idx, off); off += 8 * seq_count
doc_idx = struct.unpack_from(f"<{doc_count}q", idx, off); off += 8 * doc_count
assert off == len(idx), f"{len(idx) - off} trailing bytes in the .idx"
data = array.array("H")
data.frombytes(open(prefix + ".bin", "rb").read())
if sys.byteorder != "little":
    data.byteswap()
ref = [[int(t) for t in line.split()] for line in open(ref_path)]
assert doc_count == len(ref) + 1, (doc_count, len(ref))
tokens = 0
for d, want in enumerate(ref):
    got = []
    for s in range(doc_idx[d], doc_idx[d + 1]):
        got += data[pointers[s] // 2:pointers[s] // 2 + lengths[s]].tolist()
    assert got == want, f"{name}: document {d + 1}: {got} != reference {want}"
    tokens += len(got)
assert tokens == len(data), (tokens, len(data))
print(f"{name}: {len(ref)} documents, {tokens} tokens equal to the reference")
EOF
}
check BertWordPieceLowerCase --lower
check BertWordPieceCase --cased

# The two types differ (case is kept), [EOS] = 606 ends each non-empty document, and an unknown type
# is refused with the supported ones named.
if cmp -s "${WORK}/BertWordPieceLowerCase_w1_text_document.bin" "${WORK}/BertWordPieceCase_w1_text_document.bin"; then
  echo "FAIL: lower-case and cased outputs are equal"; exit 1
fi
if "${TOOL}" --input "${WORK}/in.jsonl" --output-prefix "${WORK}/bad" --vocab-file "${DATA}/vocab.txt" \
     --tokenizer-type BertWordPieceUpper > /dev/null 2> "${WORK}/bad.err"; then
  echo "FAIL: an unknown --tokenizer-type was accepted"; exit 1
fi
grep -q "supported: GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase" "${WORK}/bad.err" || { echo "FAIL: $(cat "${WORK}/bad.err")"; exit 1; }
echo "OK"
