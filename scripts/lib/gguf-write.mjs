// Synthetic GGUF models for the checks against llama.cpp (scripts/gguf-check.mjs, tokenizer-check.mjs):
// GGUF v3 as ggml's docs/gguf.md defines it, each architecture's tensors under llama.cpp's names and
// shapes, seeded random weights written directly in any of the weight types micro reads (a
// quantised type's blocks are random bytes with scales in a sensible range: no quantiser is
// involved, so what both engines read is exactly the file's numbers).

// ggml's type ids and block sizes (elements, bytes).
export const TYPES = {
  F32: [0, 1, 4], F16: [1, 1, 2], Q4_0: [2, 32, 18], Q4_1: [3, 32, 20], Q5_0: [6, 32, 22], Q5_1: [7, 32, 24],
  Q8_0: [8, 32, 34], Q4_K: [12, 256, 144], Q5_K: [13, 256, 176], Q6_K: [14, 256, 210], BF16: [30, 1, 2],
};

// xorshift64: the same file on every run for a seed.
export function rng(seed) {
  let s = BigInt(seed) * 0x9e3779b97f4a7c15n & 0xffffffffffffffffn || 1n;
  return () => {
    s ^= (s << 13n) & 0xffffffffffffffffn; s ^= s >> 7n; s ^= (s << 17n) & 0xffffffffffffffffn;
    return Number(s & 0xffffffn) / 0x1000000;
  };
}

// An fp16 of exponent field e (value 2^(e-15)·(1 + m/1024)), mantissa random, sign as given.
const half = (next, e, negative = false) => (negative ? 0x8000 : 0) | (Math.max(1, Math.min(30, e)) << 10) | Math.floor(next() * 1024);

// n numbers of type `type` (n a multiple of its block), scale about `scale`, as the file's bytes.
export function randomTensor(type, n, scale, next) {
  const [, block, bytes] = TYPES[type];
  if (n % block) throw new Error(`${type}: ${n} numbers are not whole blocks of ${block}`);
  const out = Buffer.alloc((n / block) * bytes);
  const e = Math.max(1, Math.min(30, 15 + Math.round(Math.log2(scale)))); // fp16 exponent near scale
  const bytesRandom = (at, k) => { for (let i = 0; i < k; i++) out[at + i] = Math.floor(next() * 256); };
  for (let b = 0, at = 0; b < n / block; b++, at += bytes) {
    switch (type) {
      case "F32": out.writeFloatLE((next() * 2 - 1) * scale, at); break;
      case "F16": out.writeUInt16LE(half(next, e - 1, next() < 0.5), at); break;
      case "BF16": out.writeUInt16LE((next() < 0.5 ? 0x8000 : 0) | ((127 + e - 16) << 7) | Math.floor(next() * 128), at); break;
      case "Q8_0": out.writeUInt16LE(half(next, e - 7), at); bytesRandom(at + 2, 32); break; // d·(−128..127)
      case "Q4_0": out.writeUInt16LE(half(next, e - 3), at); bytesRandom(at + 2, 16); break; // d·(−8..7)
      case "Q4_1": out.writeUInt16LE(half(next, e - 3), at); out.writeUInt16LE(half(next, e, true), at + 2); bytesRandom(at + 4, 16); break;
      case "Q5_0": out.writeUInt16LE(half(next, e - 4), at); bytesRandom(at + 2, 20); break;
      case "Q5_1": out.writeUInt16LE(half(next, e - 4), at); out.writeUInt16LE(half(next, e, true), at + 2); bytesRandom(at + 4, 20); break;
      // K-quants: d and dmin, then 6-bit scales and minimums (up to 63) and the codes.
      case "Q4_K": out.writeUInt16LE(half(next, e - 9), at); out.writeUInt16LE(half(next, e - 6), at + 2); bytesRandom(at + 4, 140); break;
      case "Q5_K": out.writeUInt16LE(half(next, e - 10), at); out.writeUInt16LE(half(next, e - 6), at + 2); bytesRandom(at + 4, 172); break;
      case "Q6_K": bytesRandom(at, 208); out.writeUInt16LE(half(next, e - 12), at + 208); break; // int8 scales · (−32..31)
      default: throw new Error(`unknown type ${type}`);
    }
  }
  return out;
}

// GGUF v3: key/value pairs [key, kind, value], then tensors [name, dims innermost first, type, bytes].
export function gguf(kvs, tensors) {
  const parts = [];
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); parts.push(b); };
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); parts.push(b); };
  const str = (s) => { const b = Buffer.from(s, "utf8"); u64(b.length); parts.push(b); };
  parts.push(Buffer.from("GGUF"));
  u32(3); u64(tensors.length); u64(kvs.length);
  for (const [key, kind, value] of kvs) {
    str(key);
    if (kind === "string") { u32(8); str(value); }
    else if (kind === "bool") { u32(7); parts.push(Buffer.from([value ? 1 : 0])); }
    else if (kind === "u32") { u32(4); u32(value); }
    else if (kind === "f32") { u32(6); const b = Buffer.alloc(4); b.writeFloatLE(value); parts.push(b); }
    else if (kind === "strings") { u32(9); u32(8); u64(value.length); for (const s of value) str(s); }
    else if (kind === "i32s") { u32(9); u32(5); u64(value.length); for (const v of value) { const b = Buffer.alloc(4); b.writeInt32LE(v); parts.push(b); } }
    else if (kind === "f32s") { u32(9); u32(6); u64(value.length); for (const v of value) { const b = Buffer.alloc(4); b.writeFloatLE(v); parts.push(b); } }
    else throw new Error(`unknown kind ${kind}`);
  }
  let offset = 0;
  for (const [name, dims, type, data] of tensors) {
    str(name); u32(dims.length); for (const d of dims) u64(d); u32(TYPES[type][0]); u64(offset);
    offset += Math.ceil(data.length / 32) * 32;
  }
  const pad = (b) => Buffer.concat([b, Buffer.alloc((32 - (b.length % 32)) % 32)]); // GGUF's alignment
  return Buffer.concat([pad(Buffer.concat(parts)), ...tensors.map(([, , , data]) => pad(data))]);
}

// micro's byte vocabulary as `micro export --gguf` writes it: 256 byte tokens, token b the byte b.
export function byteVocabulary() {
  const tokens = Array.from({length: 256}, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
  return {
    vocab: 256,
    kvs: [["tokenizer.ggml.model", "string", "llama"], ["tokenizer.ggml.tokens", "strings", tokens],
      ["tokenizer.ggml.scores", "f32s", new Array(256).fill(0)], ["tokenizer.ggml.token_type", "i32s", new Array(256).fill(6)],
      ["tokenizer.ggml.bos_token_id", "u32", 1], ["tokenizer.ggml.eos_token_id", "u32", 1],
      ["tokenizer.ggml.add_bos_token", "bool", true], ["tokenizer.ggml.add_space_prefix", "bool", false]],
  };
}

// A package's tokenizer.json as llama.cpp's converter writes a byte-level BPE vocabulary.
export function bpeVocabulary(json, pre, bos, addBos) {
  let n = 0;
  for (const id of Object.values(json.model.vocab)) n = Math.max(n, id + 1);
  for (const t of json.added_tokens) n = Math.max(n, t.id + 1);
  const tokens = new Array(n).fill(null), types = new Array(n).fill(1); // NORMAL
  for (const [text, id] of Object.entries(json.model.vocab)) tokens[id] = text;
  for (const t of json.added_tokens) { tokens[t.id] = t.content; types[t.id] = t.special ? 3 : 4; } // CONTROL, USER_DEFINED
  for (let i = 0; i < n; i++) if (tokens[i] === null) { tokens[i] = `[PAD${i}]`; types[i] = 5; } // UNUSED
  const merges = json.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m));
  return {
    vocab: n,
    kvs: [["tokenizer.ggml.model", "string", "gpt2"], ["tokenizer.ggml.pre", "string", pre],
      ["tokenizer.ggml.tokens", "strings", tokens], ["tokenizer.ggml.token_type", "i32s", types],
      ["tokenizer.ggml.merges", "strings", merges], ["tokenizer.ggml.bos_token_id", "u32", bos],
      ["tokenizer.ggml.add_bos_token", "bool", addBos]],
  };
}

// A SentencePiece vocabulary (Llama 2's) as llama.cpp's converter writes it from tokenizer.model (SentencePiece: tokens,
// scores, types). The package ships Hugging Face's tokenizer.json (a BPE with byte fallback and
// merges), not tokenizer.model, so the scores are derived: Hugging Face's converter lists the merges
// by the score of the piece each makes, highest first, and this file's merges make pieces of rising
// id (SentencePiece's BPE pieces, in the order it learned them, each scoring one less than the one
// before) except the runs of two or more "▁", whose merges come after all the others (the lowest
// scores, all equal: -1e9 here). So: <unk>, <s>, </s> and the byte tokens <0x00>..<0xFF>
// (ids 0-258) score 0; the runs of "▁" -1e9; every other piece -(id - 259). Both orders are checked
// here before the file is written. Types: 2 unknown, 3 control, 6 byte, 1 normal; BOS 1, EOS 2,
// unknown 0, add_bos_token true, and no add_space_prefix key (llama.cpp's default for SPM: a space first).
export function spmVocabulary(json, pkg) {
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
  return {
    vocab: n,
    kvs: [["tokenizer.ggml.model", "string", "llama"], ["tokenizer.ggml.tokens", "strings", tokens],
      ["tokenizer.ggml.scores", "f32s", scores], ["tokenizer.ggml.token_type", "i32s", types],
      ["tokenizer.ggml.bos_token_id", "u32", 1], ["tokenizer.ggml.eos_token_id", "u32", 2],
      ["tokenizer.ggml.unknown_token_id", "u32", 0], ["tokenizer.ggml.add_bos_token", "bool", true]],
  };
}

// A model of architecture `arch` (llama, qwen2, qwen3) in shape s = {dim, layers, heads, kv, hd,
// hidden, theta, eps}, with vocabulary v (above) and options o: types {embd, output, matrix} (F32
// unless given), output (a separate classifier), ropeFreqs (Llama 3's factors), seed.
export function model(arch, s, v, o = {}) {
  const next = rng(o.seed ?? 1);
  const t = o.types ?? {};
  const q = s.heads * s.hd, kv = s.kv * s.hd;
  const tensors = [];
  const add = (name, dims, type, scale) => tensors.push([name, dims, type, randomTensor(type, dims.reduce((a, b) => a * b), scale, next)]);
  const gains = (name, n) => { const a = new Float32Array(n); for (let i = 0; i < n; i++) a[i] = 0.8 + 0.4 * next(); tensors.push([name, [n], "F32", Buffer.from(a.buffer)]); };
  // Scales that keep the logits' spread near 1 and the residual from growing layer by layer: a
  // model whose distributions are far from one-hot, so that neither engine's rounding dominates.
  const e = 1.5 / Math.sqrt(s.dim), w = (fanIn) => 1 / Math.sqrt(fanIn);
  add("token_embd.weight", [s.dim, v.vocab], t.embd ?? "F32", e);
  for (let l = 0; l < s.layers; l++) {
    const m = t.matrix ?? "F32", p = `blk.${l}.`;
    gains(p + "attn_norm.weight", s.dim);
    add(p + "attn_q.weight", [s.dim, q], m, 3 * w(s.dim)); add(p + "attn_k.weight", [s.dim, kv], m, 3 * w(s.dim));
    add(p + "attn_v.weight", [s.dim, kv], m, w(s.dim)); add(p + "attn_output.weight", [q, s.dim], m, w(q));
    if (arch === "qwen2") { add(p + "attn_q.bias", [q], "F32", 0.5); add(p + "attn_k.bias", [kv], "F32", 0.5); add(p + "attn_v.bias", [kv], "F32", 0.5); }
    if (arch === "qwen3") { gains(p + "attn_q_norm.weight", s.hd); gains(p + "attn_k_norm.weight", s.hd); }
    gains(p + "ffn_norm.weight", s.dim);
    add(p + "ffn_gate.weight", [s.dim, s.hidden], m, w(s.dim)); add(p + "ffn_down.weight", [s.hidden, s.dim], m, w(s.hidden));
    add(p + "ffn_up.weight", [s.dim, s.hidden], m, w(s.dim));
  }
  gains("output_norm.weight", s.dim);
  if (o.output) add("output.weight", [s.dim, v.vocab], t.output ?? "F32", e);
  if (o.ropeFreqs) { // Llama 3's: 1 for the fast pairs, rising to 8 for the slowest
    const f = new Float32Array(s.hd / 2).map((_, i) => 1 + 7 * i / (s.hd / 2 - 1));
    tensors.push(["rope_freqs.weight", [s.hd / 2], "F32", Buffer.from(f.buffer)]);
  }
  const a = (key) => `${arch}.${key}`;
  return gguf([
    ["general.architecture", "string", arch], ["general.alignment", "u32", 32],
    [a("context_length"), "u32", 2048], [a("embedding_length"), "u32", s.dim], [a("block_count"), "u32", s.layers],
    [a("feed_forward_length"), "u32", s.hidden], [a("attention.head_count"), "u32", s.heads],
    [a("attention.head_count_kv"), "u32", s.kv], [a("attention.key_length"), "u32", s.hd],
    [a("attention.value_length"), "u32", s.hd], [a("rope.dimension_count"), "u32", s.hd],
    [a("rope.freq_base"), "f32", s.theta], [a("attention.layer_norm_rms_epsilon"), "f32", s.eps],
    [a("vocab_size"), "u32", v.vocab],
    ...v.kvs,
  ], tensors);
}
