#!/usr/bin/env node
// Throughput of the JavaScript GPT-2 tokenizers on the same text as bench_tokenizer.cpp,
// so the figures can be put side by side (see bench/TOKENIZER.md).
//
//   npm install --prefix /tmp/gf-node --no-save --no-audit --no-fund \
//       gpt-3-encoder@1.1.4 js-tiktoken@1.0.21
//   node bench/bench_tokenizer_reference.js [--runs N] [TEXT_FILE...]
//
// Node modules are loaded from $GF_NODE_MODULES (default /tmp/gf-node/node_modules). The
// default text is the Debian `fortunes` files (/usr/share/games/fortunes/*, without
// .dat/.u8) concatenated in name order, as in the C++ benchmark. Each run of
// gpt-3-encoder reloads the module so that its word cache starts empty ("cold"); js-tiktoken
// keeps no word cache. Prints the median of N runs (default 5) in MB/s (10^6 bytes).
// The text is encoded in chunks of about 10 kB cut after a newline: gpt-3-encoder grows its
// result with Array.concat, which is quadratic in the length of one call's input (a single
// 2.5 MB call did not finish in 5 minutes).
'use strict';

const fs = require('fs');
const path = require('path');

const modulesDir = process.env.GF_NODE_MODULES || '/tmp/gf-node/node_modules';
const fortunesDir = '/usr/share/games/fortunes';

function parseArgs(argv) {
  const opt = { runs: 5, files: [] };
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--runs') opt.runs = Math.max(1, parseInt(argv[++i], 10));
    else opt.files.push(argv[i]);
  }
  if (opt.files.length === 0 && fs.existsSync(fortunesDir)) {
    opt.files = fs.readdirSync(fortunesDir)
      .filter((name) => !name.includes('.'))
      .map((name) => path.join(fortunesDir, name))
      .filter((file) => fs.lstatSync(file).isFile())
      .sort();
  }
  return opt;
}

function chunksOf(text, size) {
  const chunks = [];
  for (let start = 0; start < text.length;) {
    let end = text.indexOf('\n', start + size);
    end = end < 0 ? text.length : end + 1;
    chunks.push(text.slice(start, end));
    start = end;
  }
  return chunks;
}

function encodeChunks(encode, chunks) {
  let tokens = 0;
  for (const chunk of chunks) tokens += encode(chunk).length;
  return tokens;
}

function median(values) {
  const v = [...values].sort((a, b) => a - b);
  const n = v.length;
  return n % 2 ? v[(n - 1) / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

function measure(label, runs, bytes, encodeOnce) {
  const seconds = [];
  let tokens = 0;
  for (let run = 0; run < runs; ++run) {
    const encode = encodeOnce();
    const start = process.hrtime.bigint();
    tokens = encode();
    seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
  }
  const s = median(seconds);
  console.log(`${label.padEnd(38)} ${(bytes / s / 1e6).toFixed(2).padStart(8)} MB/s  ` +
              `${(tokens / s).toFixed(0).padStart(10)} tokens/s  (median of ${runs}, ${s.toFixed(3)} s)`);
}

function freshGpt3Encoder() {
  const dir = path.join(modulesDir, 'gpt-3-encoder');
  for (const key of Object.keys(require.cache)) {
    if (key.startsWith(dir)) delete require.cache[key];
  }
  return require(dir);
}

function main() {
  const opt = parseArgs(process.argv.slice(2));
  if (opt.files.length === 0) throw new Error('no text: pass files or install `fortunes`');
  // Read as bytes and decode once, as the C++ benchmark reads bytes.
  const buffer = Buffer.concat(opt.files.map((file) => fs.readFileSync(file)));
  const text = buffer.toString('utf8');
  const chunks = chunksOf(text, 10000);
  console.log(`text: ${buffer.length} bytes from ${opt.files.length} file(s), ` +
              `${chunks.length} chunks of about 10 kB`);

  measure('gpt-3-encoder, cold word cache:', opt.runs, buffer.length, () => {
    const gpt3 = freshGpt3Encoder();
    return () => encodeChunks(gpt3.encode, chunks);
  });
  const gpt3 = freshGpt3Encoder();
  encodeChunks(gpt3.encode, chunks);
  measure('gpt-3-encoder, warm word cache:', opt.runs, buffer.length,
          () => () => encodeChunks(gpt3.encode, chunks));
  const { getEncoding } = require(path.join(modulesDir, 'js-tiktoken'));
  const tiktoken = getEncoding('gpt2');
  measure('js-tiktoken gpt2:', opt.runs, buffer.length,
          () => () => encodeChunks((chunk) => tiktoken.encode(chunk, [], []), chunks));
}

main();
