#!/usr/bin/env node
// The Rust crate `tokenizers` itself, through its npm Node.js binding (`npm install tokenizers@0.23`):
// the reference that core/data/hf_tokenizer.h is checked against on real tokenizer.json files
// (tests/integration/hf_tokenizer_real.sh, tools/make_hf_real_fixtures.py).
//
//   node tools/hf_tokenizer_rust.js TOKENIZER_JSON CORPUS_JSONL [--specials] [--decoded FILE] [--patch JSON]
//
// Reads one JSON object {"text": ...} per line of CORPUS_JSONL and prints, per line, the ids of
// Tokenizer::encode(text, add_special_tokens) space-separated (add_special_tokens only with
// --specials). --decoded FILE writes, per line, JSON.stringify(decode(ids, skip_special_tokens =
// false)). --patch JSON: an object whose top-level keys replace the file's before loading (a
// variant of a real file: another pre-tokenizer or decoder over the same vocabulary).
// The binding is found through NODE_PATH (e.g. NODE_PATH=/path/to/node_modules).
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const args = process.argv.slice(2);
  let specials = false;
  let decodedPath = null;
  let patch = null;
  const positional = [];
  for (let i = 0; i < args.length; ++i) {
    if (args[i] === '--specials') specials = true;
    else if (args[i] === '--decoded') decodedPath = args[++i];
    else if (args[i] === '--patch') patch = JSON.parse(args[++i]);
    else positional.push(args[i]);
  }
  if (positional.length !== 2) {
    process.stderr.write('usage: hf_tokenizer_rust.js TOKENIZER_JSON CORPUS_JSONL [--specials] [--decoded FILE] [--patch JSON]\n');
    process.exit(2);
  }
  let source = fs.readFileSync(positional[0], 'utf8');
  if (patch) source = JSON.stringify(Object.assign(JSON.parse(source), patch));
  const tokenizer = Tokenizer.fromString(source);
  const lines = fs.readFileSync(positional[1], 'utf8').split('\n').filter((l) => l.length > 0);
  const ids = [];
  const decoded = [];
  for (const line of lines) {
    const text = JSON.parse(line).text;
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: specials });
    const row = encoding.getIds();
    ids.push(row.join(' '));
    if (decodedPath) decoded.push(JSON.stringify(await tokenizer.decode(row, false)));
  }
  process.stdout.write(ids.map((l) => l + '\n').join(''));
  if (decodedPath) fs.writeFileSync(decodedPath, decoded.map((l) => l + '\n').join(''));
}

main().catch((e) => {
  process.stderr.write(`hf_tokenizer_rust.js: ${e.stack || e}\n`);
  process.exit(1);
});
