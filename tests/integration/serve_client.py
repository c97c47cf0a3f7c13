"""The client side of tests/integration/serve.sh: requests to `gridformer serve` (Python's standard library only)
and the checks on what comes back. Each subcommand exits 1 with the reason when a check fails.

  wait URL LOG                        until GET /health answers (the server's log printed if it exits first)
  greedy URL PROMPTS IDS VOCAB MERGES N
                                      each line of PROMPTS completed greedily (temperature 0, max_tokens N): the text is
                                      predict's continuation (IDS: its --ids_out) as the reference GPT-2 decoder
                                      (tools/gpt2_encoder_reference.py) decodes it, and usage counts its tokens
  chat URL IDS VOCAB MERGES N         a chat turn, streamed and not: the deltas join into the whole answer, which is
                                      predict's continuation of the ChatML rendering (IDS)
  concurrent URL N [exact|answered]   N requests at once (greedy, and sampled with a seed), then one at a time,
                                      twice: all answered, and alone each answered the same both times. exact (a
                                      --batch-invariant server): each answer among N equals the one alone; answered
                                      (the default server, whose batched logits may differ from a row's alone in
                                      their last bits, runner/infer/serve_engine.h): not compared
  errors URL CONTEXT                  malformed, mistyped, oversized and unknown requests answered 400 / 404 / 413
                                      with a reason, and the server still answering
  harness URL SAMPLES VOCAB MERGES    lm-evaluation-harness's local-completions payload (echo, logprobs 1, max_tokens
                                      1, token-id prompts from its _encode_pair) for every request of `eval`'s
                                      samples file, read as its parse_logprobs reads it: the loglikelihoods within
                                      1e-5 relative of eval's and the same greedy flags
  busy URL PID N                      N long requests at once at a server of one slot and a queue of one: one runs, one
                                      waits, the others get 429; then SIGTERM to PID while the two are in flight: both
                                      finish whole, a new request gets 503 or no connection
"""
import http.client
import json
import os
import signal
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def request(url, method, path, body=None, raw=None, timeout=120):
    """(status, parsed JSON or text) of one request."""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    c.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read().decode("utf-8", "replace")
    c.close()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text


def post(url, path, body, want=200):
    status, out = request(url, "POST", path, body)
    if want is not None and status != want:
        fail(f"POST {path} {json.dumps(body)[:200]}: status {status}, expected {want}: {out}")
    return out


def sse(url, path, body, first_event=None):
    """The data events of a streamed response, as JSON (the last one, [DONE], as the string); first_event (a
    threading.Event) is set when the first one has come."""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        fail(f"stream {path}: status {r.status}: {r.read()[:300]}")
    if not r.getheader("Content-Type", "").startswith("text/event-stream"):
        fail(f"stream {path}: Content-Type {r.getheader('Content-Type')}")
    events, blocks, line = [], [], b""
    while True:  # event by event, as they come
        chunk = r.readline()
        if not chunk:
            break
        if chunk in (b"\n", b"\r\n"):
            blocks.append(line.decode())
            line = b""
            if first_event is not None:
                first_event.set()
        else:
            line += chunk
    for block in blocks:
        block = block.strip("\n")
        if not block.strip():
            continue
        if not block.startswith("data: "):
            fail(f"stream {path}: an event that is not `data: ...`: {block[:100]!r}")
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    c.close()
    if not events or events[-1] != "[DONE]":
        fail(f"stream {path}: it does not end with data: [DONE]")
    return events[:-1]


def encoder(vocab, merges):
    from gpt2_encoder_reference import Encoder
    return Encoder.from_files(vocab, merges)


def predicted(ids_file, enc, eos=50256):
    out = []
    for line in open(ids_file):
        j = json.loads(line)
        gen = [t for t in j["generated"] if t != eos]
        out.append((j["prompt"], enc.decode(gen), len(gen)))
    return out


def cmd_wait(url, log):
    for _ in range(600):
        try:
            status, _ = request(url, "GET", "/health", timeout=2)
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    print(open(log).read()[-3000:])
    fail("the server did not answer /health within 60 s")


def cmd_greedy(url, prompts, ids_file, vocab, merges, n):
    enc, n = encoder(vocab, merges), int(n)
    want = predicted(ids_file, enc)
    lines = [l.rstrip("\n") for l in open(prompts) if l.strip()]
    if len(lines) != len(want):
        fail(f"{len(lines)} prompts, predict wrote {len(want)}")
    models = request(url, "GET", "/v1/models")[1]
    name = models["data"][0]["id"]
    for text, (prompt_ids, cont, ntok) in zip(lines, want):
        out = post(url, "/v1/completions", {"model": name, "prompt": text, "max_tokens": n, "temperature": 0})
        got = out["choices"][0]["text"]
        if got != cont:
            fail(f"prompt {text!r}: served {got!r}, predict {cont!r}")
        u = out["usage"]
        if (u["prompt_tokens"], u["completion_tokens"]) != (len(prompt_ids), ntok):
            fail(f"prompt {text!r}: usage {u}, predict {len(prompt_ids)} + {ntok} tokens")
        want_reason = "length" if ntok == n else "stop"
        if out["choices"][0]["finish_reason"] != want_reason:
            fail(f"prompt {text!r}: finish_reason {out['choices'][0]['finish_reason']}, expected {want_reason}")
    # The same prompts in one request (a list) come back in order.
    out = post(url, "/v1/completions", {"prompt": lines, "max_tokens": n, "temperature": 0})
    if [c["text"] for c in sorted(out["choices"], key=lambda c: c["index"])] != [w[1] for w in want]:
        fail("a list of prompts in one request is not answered as the prompts one by one")
    # Token ids as the prompt.
    out = post(url, "/v1/completions", {"prompt": want[0][0], "max_tokens": n, "temperature": 0})
    if out["choices"][0]["text"] != want[0][1]:
        fail("a prompt of token ids is not answered as its text")
    print(f"ok: {len(lines)} greedy completions equal predict's, one by one, as one list and as token ids")


def cmd_chat(url, ids_file, vocab, merges, n):
    enc, n = encoder(vocab, merges), int(n)
    (prompt_ids, cont, _), = predicted(ids_file, enc)
    body = {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": n, "temperature": 0}
    whole = post(url, "/v1/chat/completions", body)
    msg = whole["choices"][0]["message"]
    if msg["role"] != "assistant" or msg["content"] != cont:
        fail(f"chat: {msg}, predict of the ChatML rendering: {cont!r}")
    if whole["usage"]["prompt_tokens"] != len(prompt_ids):
        fail(f"chat: {whole['usage']['prompt_tokens']} prompt tokens, the rendering has {len(prompt_ids)}")
    events = sse(url, "/v1/chat/completions", dict(body, stream=True))
    if events[0]["choices"][0]["delta"].get("role") != "assistant":
        fail(f"chat stream: the first event is not the assistant's role: {events[0]}")
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    reasons = [e["choices"][0]["finish_reason"] for e in events]
    if text != cont:
        fail(f"chat stream: {text!r}, the whole answer {cont!r}")
    if reasons[-1] != whole["choices"][0]["finish_reason"] or any(reasons[:-1]):
        fail(f"chat stream: finish reasons {reasons}")
    if any(e["object"] != "chat.completion.chunk" for e in events):
        fail("chat stream: an event that is not a chat.completion.chunk")
    print(f"ok: chat (ChatML) equals predict's continuation of the rendering; streamed in {len(events)} events, the same")


def concurrent_bodies(n):
    words = "the cat a dog sat on mat while it rained and we all went home to sleep".split()
    bodies = []
    for i in range(n):
        prompt = " ".join(words[: 1 + i % len(words)]) + f" number {i}"
        b = {"prompt": prompt, "max_tokens": 6 + i % 9}
        if i % 4 == 3:
            b.update(temperature=0.8, top_p=0.9, seed=100 + i)
        else:
            b.update(temperature=0)
        bodies.append(b)
    return bodies


def cmd_concurrent(url, n, mode="exact"):
    if mode not in ("exact", "answered"):
        fail(f"concurrent: mode {mode!r} is not exact or answered")
    bodies = concurrent_bodies(int(n))
    results = [None] * len(bodies)

    def one(i):
        results[i] = request(url, "POST", "/v1/completions", bodies[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    together = time.time() - t0
    for i, (status, out) in enumerate(results):
        if status != 200:
            fail(f"concurrent request {i}: status {status}: {out}")
    for i, (status, out) in enumerate(results):
        if not out["choices"][0]["text"] or out["usage"]["completion_tokens"] > bodies[i]["max_tokens"]:
            fail(f"concurrent request {i}: {out}")
    t0 = time.time()
    alone = [post(url, "/v1/completions", b) for b in bodies]
    alone_time = time.time() - t0
    again = [post(url, "/v1/completions", b) for b in bodies]
    for i, (b, a, a2) in enumerate(zip(bodies, alone, again)):
        if a["choices"][0]["text"] != a2["choices"][0]["text"]:
            fail(f"request {i} {b} alone twice: {a['choices'][0]['text']!r}, then {a2['choices'][0]['text']!r}")
    if mode == "exact":
        for i, (b, (_, out), a) in enumerate(zip(bodies, results, alone)):
            if out["choices"][0]["text"] != a["choices"][0]["text"]:
                fail(f"request {i} {b}: {out['choices'][0]['text']!r} among {len(bodies)}, {a['choices'][0]['text']!r} alone")
    print(f"ok: {len(bodies)} concurrent requests ({sum('seed' in b for b in bodies)} sampled with a seed) all answered, "
          f"alone the same twice" + (", and each among them as alone" if mode == "exact" else "") +
          f" ({together:.2f} s together, {alone_time:.2f} s one by one)")


def cmd_errors(url, context):
    context = int(context)
    cases = [
        ("not JSON", dict(raw=b"{not json"), 400, "not a JSON object"),
        ("a JSON list", dict(raw=b"[1, 2]"), 400, "not a JSON object"),
        ("max_tokens a string", dict(body={"prompt": "a", "max_tokens": "8"}), 400, "max_tokens must be an integer"),
        ("temperature past 2", dict(body={"prompt": "a", "temperature": 3}), 400, "temperature must be in [0, 2]"),
        ("an unknown key", dict(body={"prompt": "a", "best_of_all": 1}), 400, "unrecognised request argument: best_of_all"),
        ("no prompt", dict(body={"max_tokens": 3}), 400, "prompt is required"),
        ("an empty prompt", dict(body={"prompt": ""}), 400, "a prompt is empty"),
        ("a token past the vocabulary", dict(body={"prompt": [1, 999999]}), 400, "outside the vocabulary"),
        ("a prompt over the context", dict(body={"prompt": "word " * (context + 10), "max_tokens": 1}), 400,
         f"maximum context length is {context} tokens"),
        ("max_tokens over the context", dict(body={"prompt": "a", "max_tokens": context}), 400,
         f"maximum context length is {context} tokens"),
        ("n of 2", dict(body={"prompt": "a", "n": 2}), 400, "n other than 1 is not built"),
        ("stream with logprobs", dict(body={"prompt": "a", "stream": True, "logprobs": 1}), 400, "not built"),
        ("chat without messages", dict(body={"messages": []}, path="/v1/chat/completions"), 400, "messages must be"),
        ("chat with an image part", dict(body={"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
                                         path="/v1/chat/completions"), 400, "content part"),
        ("another model's name", dict(body={"prompt": "a", "model": "gpt-4"}), 404, "does not exist"),
        ("an unknown endpoint", dict(body={"prompt": "a"}, path="/v1/embeddings"), 404, "no such endpoint"),
        ("a body over 16 MiB", dict(raw=b"{\"prompt\": \"" + b"a" * (17 << 20) + b"\"}"), 413, "over 16 MiB"),
    ]
    for name, kw, want, reason in cases:
        status, out = request(url, "POST", kw.get("path", "/v1/completions"), kw.get("body"), kw.get("raw"))
        if status != want:
            fail(f"{name}: status {status}, expected {want}: {str(out)[:300]}")
        msg = out.get("error", {}).get("message", "") if isinstance(out, dict) else ""
        if reason not in msg:
            fail(f"{name}: the error does not say '{reason}': {str(out)[:300]}")
        post(url, "/v1/completions", {"prompt": "still there?", "max_tokens": 2})
    print(f"ok: {len(cases)} bad requests answered with their status and reason, each followed by one served")


def encode_pair(enc, context, continuation):
    """lm-evaluation-harness's TemplateLM._encode_pair: trailing spaces of the context go to the continuation; the
    continuation's tokens are those of the whole after the context's."""
    n = len(context) - len(context.rstrip())
    if n:
        continuation, context = context[-n:] + continuation, context[:-n]
    whole, ctx = enc.encode(context + continuation), enc.encode(context)
    return ctx, whole[len(ctx):]


def cmd_harness(url, samples, vocab, merges):
    enc = encoder(vocab, merges)
    worst, n = 0.0, 0
    for line in open(samples):
        doc = json.loads(line)
        pairs = [encode_pair(enc, c, x) for c, x in doc["arguments"]]
        # lm_eval/models/openai_completions.py LocalCompletionsAPI._create_payload(generate=False)
        out = post(url, "/v1/completions", {"prompt": [c + x for c, x in pairs], "temperature": 0, "max_tokens": 1,
                                            "logprobs": 1, "seed": 1234, "echo": True})
        for choice, (ctx, cont), resp in zip(sorted(out["choices"], key=lambda c: c["index"]), pairs, doc["resps"]):
            # ... .parse_logprobs
            lp = choice["logprobs"]
            ctxlen = len(ctx)
            if len(lp["token_logprobs"]) != ctxlen + len(cont) + 1:
                fail(f"doc {doc['doc_id']}: {len(lp['token_logprobs'])} token logprobs for {ctxlen} + {len(cont)} + 1 tokens")
            logprobs = sum(lp["token_logprobs"][ctxlen:-1])
            is_greedy = all(tok == max(top.values())
                            for tok, top in zip(lp["token_logprobs"][ctxlen:-1], lp["top_logprobs"][ctxlen:-1]))
            ll, greedy = resp
            rel = abs(logprobs - ll) / max(1.0, abs(ll))
            worst = max(worst, rel)
            if rel > 1e-5:
                fail(f"doc {doc['doc_id']}: served loglikelihood {logprobs}, eval's {ll}")
            if is_greedy != greedy:
                fail(f"doc {doc['doc_id']}: served greedy {is_greedy}, eval's {greedy}")
            n += 1
    print(f"ok: {n} loglikelihoods through lm-evaluation-harness's local-completions payload equal eval's "
          f"(worst {worst:.1e} relative) with the same greedy flags")


def cmd_busy(url, pid, n):
    pid, n = int(pid), int(n)
    body = {"prompt": "The", "max_tokens": 300, "temperature": 0}
    results = {}

    running, answered = threading.Event(), threading.Semaphore(0)

    def one(i):
        if i == 0:  # streamed: its first event proves it is running
            results[i] = sse(url, "/v1/completions", dict(body, stream=True), running)
        else:
            results[i] = request(url, "POST", "/v1/completions", body)
            answered.release()

    first = threading.Thread(target=one, args=(0,))
    first.start()
    if not running.wait(60):
        fail("busy: the streamed request sent no event within 60 s")
    rest = [threading.Thread(target=one, args=(i,)) for i in range(1, n)]
    for t in rest:
        t.start()
    for _ in range(n - 2):  # the refused ones answer at once; the one left is then waiting in the queue
        if not answered.acquire(timeout=60):
            fail("busy: the requests beyond the queue were not answered within 60 s")
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.1)
    try:
        late = request(url, "POST", "/v1/completions", body, timeout=10)[0]
    except OSError:
        late = "no connection"
    first.join()
    for t in rest:
        t.join()
    statuses = sorted(results[i][0] for i in range(1, n))
    if statuses.count(429) != n - 2 or statuses.count(200) != 1:
        fail(f"busy: statuses {statuses}: expected one 200 (the waiting one) and {n - 2} 429")
    busy = [results[i][1] for i in range(1, n) if results[i][0] == 429][0]
    if "busy" not in busy["error"]["message"]:
        fail(f"busy: the 429 does not say why: {busy}")
    done = [results[i][1] for i in range(1, n) if results[i][0] == 200][0]
    if done["usage"]["completion_tokens"] != 300 or done["choices"][0]["finish_reason"] != "length":
        fail(f"busy: the waiting request was cut short by SIGTERM: {done['usage']}")
    streamed = "".join(e["choices"][0]["text"] for e in results[0])
    if streamed != done["choices"][0]["text"] or results[0][-1]["choices"][0]["finish_reason"] != "length":
        fail("busy: the streamed request in flight at SIGTERM did not finish whole")
    if late not in (503, "no connection"):
        fail(f"busy: a request after SIGTERM got {late}, expected 503 or no connection")
    print(f"ok: one slot, a queue of one: {n - 2} of {n} concurrent requests got 429; SIGTERM with two in flight: "
          f"both finished (300 tokens each), a request after it got {late}")


if __name__ == "__main__":
    cmds = {"wait": cmd_wait, "greedy": cmd_greedy, "chat": cmd_chat, "concurrent": cmd_concurrent,
            "errors": cmd_errors, "harness": cmd_harness, "busy": cmd_busy}
    cmds[sys.argv[1]](*sys.argv[2:])
