#!/usr/bin/env python3
"""Reference for `preprocess_data --sft chat` with a Hugging Face tokenizer (core/data/chat_template.h).

    chat_template_reference.py --tokenizer DIR --variant NAME --input CONV.jsonl --output OUT.jsonl
                               [--jinja-kwargs JSON] [--no-jinja]

For each conversation of CONV.jsonl (one JSON object a line, `messages` [{role, content,
reasoning_content?}] or ShareGPT `conversations` [{from, value}], as preprocess_data reads them) it
writes {"ids": [...], "mask": [...]} to OUT.jsonl, or {"error": MESSAGE} when the template refuses it:

  1. the text of transformers' apply_chat_template(messages, tokenize=False): a hand transcription of
     the template VARIANT into (text, trained) pieces (chatml, qwen2, qwen2.5, qwen3, llama3,
     llama3-always, llama3.1, gemma: Gemma 3's system folding, gemma1: Gemma 1/2's refusal). When
     jinja2 imports, DIR's REAL chat_template (tokenizer_config.json, or chat_template.jinja) is also
     rendered as transformers renders it (ImmutableSandboxedEnvironment with trim_blocks and
     lstrip_blocks, loopcontrols, raise_exception, tojson, strftime_now, the special tokens as
     variables, add_generation_prompt false; --jinja-kwargs adds variables, e.g. date_string) and must
     give the same text and the same refusals; --no-jinja skips it (for --chat-template overrides
     whose file template renders otherwise);
  2. its tokens: the Rust crate `tokenizers` itself (npm binding, found through NODE_PATH) encoding
     the whole text with add_special_tokens = false, as apply_chat_template(tokenize=True) does, and
     the tokens' character offsets;
  3. the mask: 1 for a token whose characters overlap a trained piece (an assistant turn's content,
     Qwen3's think block with it, and its end-of-turn token), as transformers'
     return_assistant_tokens_mask maps a span's characters to tokens; then the eos token of
     tokenizer_config.json (trained) unless the ids already end with it (Megatron's SFTDataset).
Prints to stderr how many conversations were checked against the real template.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime

QWEN2_SYSTEM = "You are a helpful assistant."
QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
PY_SPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


class Refused(Exception):
    pass


def chatml_turn(out, role, body, assistant):
    out += [("<|im_start|>", False), (role + "\n", False), (body, assistant), ("<|im_end|>", assistant), ("\n", False)]


def render(variant, msgs, bos):
    """apply_chat_template's text as (text, trained) pieces, transcribed from each real template."""
    out = []
    if variant in ("chatml", "qwen2", "qwen2.5"):
        system = {"chatml": "", "qwen2": QWEN2_SYSTEM, "qwen2.5": QWEN25_SYSTEM}[variant]
        if system and msgs[0]["role"] != "system":
            chatml_turn(out, "system", system, False)
        for m in msgs:
            chatml_turn(out, m["role"], m["content"], m["role"] == "assistant")
    elif variant == "qwen3":
        last_query = len(msgs) - 1
        for i in range(len(msgs) - 1, -1, -1):
            c = msgs[i]["content"]
            if msgs[i]["role"] == "user" and not (c.startswith("<tool_response>") and c.endswith("</tool_response>")):
                last_query = i
                break
        if msgs[0]["role"] == "system":
            chatml_turn(out, "system", msgs[0]["content"], False)
        for i, m in enumerate(msgs):
            if m["role"] == "user" or (m["role"] == "system" and i > 0):
                chatml_turn(out, m["role"], m["content"], False)
            elif m["role"] == "assistant":
                content, reasoning = m["content"], ""
                if isinstance(m.get("reasoning_content"), str):
                    reasoning = m["reasoning_content"]
                elif "</think>" in content:
                    reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
                    content = content.split("</think>")[-1].lstrip("\n")
                if i > last_query and (i == len(msgs) - 1 or reasoning):
                    content = "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" + content.lstrip("\n")
                chatml_turn(out, "assistant", content, True)
    elif variant in ("llama3", "llama3-always", "llama3.1"):
        out.append((bos, False))
        rest = msgs
        if variant == "llama3.1":
            system = msgs[0]["content"].strip(PY_SPACE) if msgs[0]["role"] == "system" else ""
            rest = msgs[1:] if msgs[0]["role"] == "system" else msgs
            out += [("<|start_header_id|>", False), ("system", False), ("<|end_header_id|>", False),
                    ("\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + system, False),
                    ("<|eot_id|>", False)]
        for m in rest:
            a = m["role"] == "assistant"
            out += [("<|start_header_id|>", False), (m["role"], False), ("<|end_header_id|>", False), ("\n\n", False),
                    (m["content"].strip(PY_SPACE), a), ("<|eot_id|>", a)]
        if variant == "llama3-always":
            out += [("<|start_header_id|>", False), ("assistant", False), ("<|end_header_id|>", False), ("\n\n", False)]
    elif variant in ("gemma", "gemma1"):
        out.append((bos, False))
        prefix, loop = "", msgs
        if msgs[0]["role"] == "system":
            if variant == "gemma1":
                raise Refused("System role not supported")
            prefix, loop = msgs[0]["content"] + "\n\n", msgs[1:]
        for i, m in enumerate(loop):
            if (m["role"] == "user") != (i % 2 == 0):
                raise Refused("Conversation roles must alternate user/assistant/user/assistant/...")
            a = m["role"] == "assistant"
            out += [("<start_of_turn>", False), (("model" if a else m["role"]) + "\n" + (prefix if i == 0 else ""), False),
                    (m["content"].strip(PY_SPACE), a), ("<end_of_turn>", a), ("\n", False)]
    else:
        raise SystemExit(f"unknown variant {variant}")
    return out


def jinja_render(template, msgs, specials, extra):
    """transformers' render_jinja_template (chat_template_utils.py) for one conversation."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template).render(messages=msgs, tools=None, documents=None, add_generation_prompt=False,
                                                **specials, **extra)
    except jinja2.exceptions.TemplateError as e:
        raise Refused(str(e))


def messages_of(doc):
    if "conversations" in doc:
        role = {"human": "user", "gpt": "assistant"}
        return [{"role": role.get(t["from"], t["from"]), "content": t["value"]} for t in doc["conversations"]]
    out = []
    for t in doc["messages"]:
        m = {"role": t["role"], "content": t["content"]}
        if t.get("reasoning_content") is not None:
            m["reasoning_content"] = t["reasoning_content"]
        out.append(m)
    return out


NODE = r"""
const fs = require('fs');
const { Tokenizer } = require('tokenizers');
(async () => {
  const tok = Tokenizer.fromFile(process.argv[1]);
  const rows = [];
  for (const line of fs.readFileSync(process.argv[2], 'utf8').split('\n')) {
    if (!line) continue;
    const e = await tok.encode(JSON.parse(line), null, { addSpecialTokens: false });
    rows.push(JSON.stringify({ ids: e.getIds(), offsets: e.getOffsets() }));
  }
  rows.push(JSON.stringify({ eos: tok.tokenToId(process.argv[3]) }));
  process.stdout.write(rows.join('\n') + '\n');
})().catch((e) => { process.stderr.write(String(e.stack || e) + '\n'); process.exit(1); });
"""


def token_string(value):
    return value.get("content") if isinstance(value, dict) else value


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="folder with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--variant", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--jinja-kwargs", default="{}")
    ap.add_argument("--no-jinja", action="store_true")
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.tokenizer, "tokenizer_config.json"), encoding="utf-8"))
    template = config.get("chat_template")
    jinja_file = os.path.join(args.tokenizer, "chat_template.jinja")
    if os.path.exists(jinja_file):
        template = open(jinja_file, encoding="utf-8").read()
    specials = {k: token_string(config[k]) for k in ("bos_token", "eos_token", "unk_token", "pad_token")
                if token_string(config.get(k)) is not None}
    try:
        import jinja2  # noqa: F401
        use_jinja = not args.no_jinja and template is not None
    except ImportError:
        use_jinja = False
    docs = [json.loads(line) for line in open(args.input, encoding="utf-8") if line.strip()]
    texts, spans, errors, jinja_checked = [], [], [], 0
    for n, doc in enumerate(docs, 1):
        msgs = messages_of(doc)
        try:
            pieces, error = render(args.variant, msgs, specials.get("bos_token")), None
        except Refused as e:
            pieces, error = None, str(e)
        if use_jinja:
            try:
                real, real_error = jinja_render(template, msgs, specials, json.loads(args.jinja_kwargs)), None
            except Refused as e:
                real, real_error = None, str(e)
            mine = "".join(p for p, _ in pieces) if pieces is not None else None
            if real != mine or real_error != error:
                raise SystemExit(f"conversation {n}: the transcription of {args.variant} differs from the real template:\n"
                                 f"  jinja: {real!r} {real_error!r}\n  hand:  {mine!r} {error!r}")
            jinja_checked += 1
        errors.append(error)
        text, trained, at = "", [], 0
        for piece, t in pieces or []:
            if t and piece:
                trained.append((at, at + len(piece)))
            text += piece
            at += len(piece)
        texts.append(text)
        spans.append(trained)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8", delete=False) as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    try:
        run = subprocess.run(["node", "-e", NODE, os.path.join(args.tokenizer, "tokenizer.json"), f.name,
                              specials["eos_token"]], capture_output=True, text=True, check=True)
    except subprocess.CalledProcessError as e:
        raise SystemExit("the Rust library failed: " + e.stderr)
    finally:
        os.unlink(f.name)
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    eos = rows.pop()["eos"]
    with open(args.output, "w", encoding="utf-8") as out:
        for row, trained, error in zip(rows, spans, errors):
            if error is not None:
                out.write(json.dumps({"error": error}) + "\n")
                continue
            ids = row["ids"]
            mask = [int(any(s < b and a < e for s, e in trained)) for a, b in row["offsets"]]
            if not ids or ids[-1] != eos:
                ids, mask = ids + [eos], mask + [1]
            out.write(json.dumps({"ids": ids, "mask": mask}) + "\n")
    print(f"{len(docs)} conversations ({args.variant}), {jinja_checked} of them rendered by the real template "
          f"with jinja2 too", file=sys.stderr)


if __name__ == "__main__":
    main()
