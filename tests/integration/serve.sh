#!/usr/bin/env bash
# `gridformer serve` (the Finetune issue's OpenAI-style server) on a loopback port, driven by serve_client.py:
#  * greedy completions equal `gridformer predict`'s continuations of the same prompts (one by one, as one list of
#    prompts, as token ids), usage and finish_reason included; /v1/models names the model;
#  * a chat turn (--chat-template chatml) equals predict's continuation of the ChatML rendering, streamed (server-sent
#    events) and not;
#  * 32 concurrent requests (a quarter sampled with a seed) are all answered, and sent alone twice answered the same;
#    on a --batch-invariant server each answer among the 32 is bitwise the one alone (its log says the mode), and
#    --batch-invariant with bfloat16 compute is refused by name;
#  * malformed, mistyped, oversized and unknown requests get 400 / 404 / 413 with the reason, the server serving on;
#  * echo + logprobs through lm-evaluation-harness's local-completions payload equal `eval`'s loglikelihoods;
#  * a server of one slot and a queue of one answers 429 beyond them; SIGTERM with two requests in flight: both
#    finish whole, a later one gets 503, and it exits 0.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_vocab
need_corpus
need_python regex
CLIENT="$SRC/tests/integration/serve_client.py"
SERVERS=()
trap 'for p in "${SERVERS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT

# serve NAME ARGS...: starts a server on a free port; its URL in $URL, its pid in $PID
serve() {
  local name=$1; shift
  "$BIN" serve --port 0 "$@" > "$name.log" 2>&1 &
  PID=$!
  SERVERS+=("$PID")
  local i
  for i in $(seq 1 600); do
    URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$name.log" | head -1 || true)
    [ -n "$URL" ] && break
    kill -0 "$PID" 2>/dev/null || { cat "$name.log"; fail "$name: the server exited at start-up"; }
    sleep 0.1
  done
  [ -n "$URL" ] || { cat "$name.log"; fail "$name: no 'http://127.0.0.1:PORT' in its log"; }
  "$PY" "$CLIENT" wait "$URL" "$name.log"
}

tiny_config gpt2 gpt2.yaml --set model.model_config.max_position_embeddings=64
train gpt2 gpt2.yaml
N=12
printf '%s\n' "The" "A fool and his money are soon" "Q: What is the difference between" "You will" > prompts.txt
run predict "$BIN" predict --config gpt2.yaml --set output_dir=gpt2 --load_checkpoint gpt2 --predict_file prompts.txt \
  --max_new_tokens $N --ids_out predict.jsonl
((STATUS == 0)) || { cat predict.log; fail "predict failed"; }
CHAT=$'<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n'  # ChatML, as its Jinja template renders it
run predict_chat "$BIN" predict --config gpt2.yaml --set output_dir=gpt2 --load_checkpoint gpt2 --predict_data "$CHAT" \
  --max_new_tokens $N --ids_out predict_chat.jsonl
((STATUS == 0)) || { cat predict_chat.log; fail "predict (chat) failed"; }
# eval reads seq_length as the harness's max_length (its requests truncated to it): the served context's 64 here.
run eval "$BIN" eval --config gpt2.yaml --set output_dir=gpt2 --set model.model_config.seq_length=64 --load_checkpoint gpt2 --tasks arc_easy \
  --data "$SRC/tests/data/harness" --output ev/results.json
((STATUS == 0)) || { cat eval.log; fail "eval failed"; }

serve main --config gpt2.yaml --set output_dir=gpt2 --load_checkpoint gpt2 --chat-template chatml
"$PY" "$CLIENT" greedy "$URL" prompts.txt predict.jsonl "$VOCAB" "$MERGES" $N || fail "greedy completions"
"$PY" "$CLIENT" chat "$URL" predict_chat.jsonl "$VOCAB" "$MERGES" $N || fail "chat"
"$PY" "$CLIENT" concurrent "$URL" 32 answered || fail "concurrent requests"
"$PY" "$CLIENT" errors "$URL" 64 || fail "bad requests"
"$PY" "$CLIENT" harness "$URL" ev/samples_arc_easy.jsonl "$VOCAB" "$MERGES" || fail "loglikelihoods"
kill -TERM "$PID"
wait "$PID" || fail "the server exited with status $? on SIGTERM"
grep -q "serve: stopped after" main.log || { tail main.log; fail "no 'stopped' line after SIGTERM"; }

# Batch-invariant: each of the 32 answered among the others exactly as alone (the default server's batched rows may
# round differently from a row alone: OpenBLAS's kernels by the call's row count, core/math/gemm.h).
serve inv --config gpt2.yaml --set output_dir=gpt2 --load_checkpoint gpt2 --batch-invariant
grep -q "; batch-invariant)" inv.log || { head -5 inv.log; fail "the batch-invariant server's log does not say so"; }
"$PY" "$CLIENT" concurrent "$URL" 32 exact || fail "concurrent requests, batch-invariant"
kill -TERM "$PID"
wait "$PID" || fail "the batch-invariant server exited with status $? on SIGTERM"
refused 2 "batch-invariant generation computes in float32" inv_bf16 "$BIN" serve --config gpt2.yaml --set output_dir=gpt2 \
  --load_checkpoint gpt2 --batch-invariant --port 0 --set model.model_config.compute_dtype=bfloat16

# A slower model (the seed's weights, 4 layers of 256) behind one slot and a queue of one.
tiny_config gpt2 big.yaml --set model.model_config.num_layers=4
serve busy --config big.yaml --set output_dir=big --slots 1 --max-queue 1
"$PY" "$CLIENT" busy "$URL" "$PID" 6 || fail "queue and SIGTERM"
status=0; wait "$PID" || status=$?
((status == 0)) || { tail busy.log; fail "the server exited with status $status after SIGTERM"; }
ok "serve: SIGTERM drained the requests in flight and exited 0"
