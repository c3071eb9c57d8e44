// micro against llama.cpp itself: scores both plates through llama.cpp's own decoder (the prebuilt
// llama.cpp inside node-llama-cpp 3.21.1, CPU only) for every KV cache type llama.cpp offers, runs
// `micro eval` on the same tokens and cache, and prints one table. Exit status 1 on any failure.
// Run through scripts/interop, which installs node-llama-cpp in a temporary folder and exports the GGUF.
//
// usage: node interop.mjs --gguf FILE --micro BIN --root DIR [--model FILE] [--name NAME] [--only TYPE,...]
// --model is the micro model the GGUF was exported from (default: micro eval's, models/micro.bin);
// --name labels the table (default micro).
//
// What llama.cpp does on the CPU (ggml-cpu), and the settings that follow from it:
// - Without flash attention, K·Q and (softmax)·V are ordinary matrix products in the cache's type:
//   an F32 cache is exact fp32 arithmetic, as micro's fp32 cache. With flash attention llama.cpp
//   casts an F32 cache to F16, so f32 runs with flash attention OFF.
// - An F16 cache rounds the query to f16 for K·Q either way (F16's vec_dot_type is F16). Without
//   flash attention the softmax weights are rounded to f16 for the product with V; with it, V is
//   accumulated in an f16 vector. micro's `fp16:qround=f16` (K and V) rounds the query and the
//   weights as the first does; the second's f16 sums it does not have. Both paths run against
//   that one micro cache, and they disagree with each other: an f16 rounding of a query number or a weight
//   falls to the other side when either engine's fp32 sum differs in its last bit, so the two f16
//   losses move by up to a few 1e-5 nats (measured in docs/gguf.md). An f16 row therefore passes
//   when micro is within 1e-5 of llama.cpp plus the distance between llama.cpp's own two f16
//   paths on that plate, measured in the same run.
// - A quantised V cache needs flash attention, so every quantised type runs with it ON. Then the
//   query is rounded to K's vec_dot_type (q8_0 for q4_0/q5_0/q8_0/iq4_nl, q8_1 for q4_1/q5_1) and V is
//   dequantised to f32 and accumulated in f32. micro reproduces the query rounding with
//   `qround=q8` on the K codec when it has that option (detected below); without it micro keeps
//   the query in fp32 and the comparison measures that difference too.
// - The iq4_nl cache is written with quantize_row_iq4_nl_ref (no scale search).
// - Since April 2026 (its PR #21038) llama.cpp rotates a quantised cache by a Hadamard transform
//   when heads have 64 numbers or more, unless LLAMA_ATTN_ROT_DISABLE=1: scripts/interop sets it,
//   so that each row is the cache its type names (micro's heads of 32 are not rotated either way).
// - Latent attention (a deepseek2 GGUF): llama.cpp runs it absorbed, one cached row per token (the
//   latent, then the RoPE key) that is both K and V; micro caches the latent under --k and the RoPE
//   key under --v, so `--k S --v S` is the same cache. Only f32 and f16 exist on both sides: a block
//   type needs the row (micro-mla: 64 + 16 = 80) to be a multiple of 32 in llama.cpp ("K cache type
//   q8_0 with block size 32 does not divide n_embd_head_k=80") and the 16-number RoPE key to be one
//   in micro, so the quantised types are left out for such a model, and the table says so.
import {execFileSync} from "node:child_process";
import {readFileSync} from "node:fs";
import path from "node:path";
import {getLlama, GgmlType} from "node-llama-cpp";

// One row per llama.cpp cache type: its ggml type, whether flash attention is on, and the micro K/V
// specs that mean the same cache. `kq` (`vq`) is the K (V) spec with llama.cpp's rounding of the
// query (the weights), used when micro has it.
const CACHES = [
    {type: "f32", ggml: GgmlType.F32, flash: false, k: "fp32", v: "fp32"},
    {type: "f16", ggml: GgmlType.F16, flash: false, k: "fp16", kq: "fp16:qround=f16", v: "fp16", vq: "fp16:qround=f16"},
    {type: "f16", ggml: GgmlType.F16, flash: true, k: "fp16", kq: "fp16:qround=f16", v: "fp16", vq: "fp16:qround=f16"},
    {type: "q8_0", ggml: GgmlType.Q8_0, flash: true, k: "q8_0", kq: "q8_0:qround=q8", v: "q8_0"},
    {type: "q4_0", ggml: GgmlType.Q4_0, flash: true, k: "q4_0", kq: "q4_0:qround=q8", v: "q4_0"},
    {type: "q4_1", ggml: GgmlType.Q4_1, flash: true, k: "q4_1", kq: "q4_1:qround=q8", v: "q4_1"},
    {type: "q5_0", ggml: GgmlType.Q5_0, flash: true, k: "q5_0", kq: "q5_0:qround=q8", v: "q5_0"},
    {type: "q5_1", ggml: GgmlType.Q5_1, flash: true, k: "q5_1", kq: "q5_1:qround=q8", v: "q5_1"},
    {type: "iq4_nl", ggml: GgmlType.IQ4_NL, flash: true, k: "iq4_nl", kq: "iq4_nl:qround=q8", v: "iq4_nl"},
];
// The plates as `micro eval` cuts them by default (src/text.c): the first N UTF-8 characters.
const PLATES = [
    {name: "en", file: "data/plates/en.txt", chars: 1500},
    {name: "zh", file: "data/plates/zh.txt", chars: 500},
];
const LOSS_TOLERANCE = 1e-5;  // f32 and f16: loss against loss, nats/token (f16: plus its band, above)
const DELTA_TOLERANCE = 2e-3; // quantised: increase over the engine's own f32 against ours
const BOS = 1;

function parseArgs(argv) {
    const a = {};
    for (let i = 0; i < argv.length; i += 2) {
        const key = argv[i].replace(/^--/, "");
        if (!["gguf", "micro", "root", "model", "name", "only"].includes(key) || i + 1 >= argv.length) {
            console.error(`interop.mjs: bad argument ${argv[i]}`);
            process.exit(2);
        }
        a[key] = argv[i + 1];
    }
    if (!a.gguf || !a.micro || !a.root) {
        console.error("usage: node interop.mjs --gguf FILE --micro BIN --root DIR [--model FILE] [--name NAME] [--only TYPE,...]");
        process.exit(2);
    }
    return a;
}

// BOS, then the bytes of the first `chars` UTF-8 characters: a character starts at every byte that
// is not a continuation byte (10xxxxxx). Same tokens as micro's text_load.
function plateTokens(root, plate) {
    const bytes = readFileSync(path.join(root, plate.file));
    let seen = 0, end = 0;
    for (; end < bytes.length; end++) {
        if ((bytes[end] & 0xc0) !== 0x80) {
            if (seen === plate.chars) break;
            seen++;
        }
    }
    return [BOS, ...bytes.subarray(0, end)];
}

// Mean NLL (nats) of every next token, from llama.cpp's per-position probabilities. Sampling
// options left at their defaults mean temperature 0: the greedy sampler, which keeps all 256
// candidates, so the probabilities are the plain softmax of the logits.
async function llamaLoss(model, cache, tokens) {
    const context = await model.createContext({
        contextSize: 2048,
        batchSize: 512,
        flashAttention: cache.flash,
        // One thread: ggml's workers spin while they wait, and on a shared 2-core machine more
        // threads than free cores made a plate take 20 s instead of 1 s. Results do not depend on it.
        threads: 1,
        experimentalKvCacheKeyType: cache.ggml,
        experimentalKvCacheValueType: cache.ggml,
    });
    try {
        const sequence = context.getSequence();
        const input = tokens.map((t, i) => (i + 1 < tokens.length ? [t, {generateNext: {probabilities: true}}] : t));
        const out = await sequence.controlledEvaluate(input);
        let sum = 0;
        for (let i = 0; i + 1 < tokens.length; i++) {
            const p = out[i]?.next?.probabilities;
            if (!p || p.size !== 256) throw new Error(`position ${i}: no full probability list from llama.cpp`);
            const q = p.get(tokens[i + 1]);
            if (!(q > 0)) throw new Error(`position ${i}: probability ${q} for the next byte`);
            sum -= Math.log(q);
        }
        return sum / (tokens.length - 1);
    } finally {
        await context.dispose();
    }
}

function microEval(args, k, v, texts) {
    const csv = execFileSync(args.micro,
        ["eval", "--csv", ...(args.model ? ["--model", args.model] : []), "--k", k, "--v", v, "--threads", "1",
            ...texts.flatMap(t => ["--text", t])],
        {cwd: args.root, encoding: "utf8"});
    const [head, ...rows] = csv.trim().split("\n");
    const cols = head.split(",");
    const result = {};
    for (const row of rows) {
        // specs may be quoted (they can hold commas): the plate name and the numbers never are.
        const first = row.split(",")[0];
        const tail = row.split(",").slice(-(cols.length - cols.indexOf("tokens")));
        result[first] = {tokens: Number(tail[0]), loss: Number(tail[1])};
    }
    return result;
}

function microHasQround(args) {
    try {
        execFileSync(args.micro, ["eval", "--k", "q4_0:qround=q8", "--text", "data/plates/en.txt:1"],
            {cwd: args.root, stdio: "ignore"});
        return true;
    } catch {
        return false;
    }
}

const args = parseArgs(process.argv.slice(2));
const only = args.only ? new Set(args.only.split(",")) : null;
for (const t of only ?? []) {
    if (!CACHES.some(c => c.type === t)) {
        console.error(`interop.mjs: --only: unknown cache type '${t}' (${CACHES.map(c => c.type).join(", ")})`);
        process.exit(2);
    }
}
const wanted = CACHES.filter(c => c.type === "f32" || !only || only.has(c.type));
const LATENT_CACHES = new Set(["f32", "f16"]); // see the head of this file
const name = args.name ?? "micro";
const qround = microHasQround(args);
const plates = PLATES.map(p => ({...p, tokens: plateTokens(args.root, p)}));
const texts = PLATES.map(p => `${p.file}:${p.chars}`);

// Any failure of llama.cpp or micro ends the run with one line (exit 1): a missing row is never a pass.
const results = [];
let arch = "?", caches = wanted, skipped = [];
try {
    const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
    const model = await llama.loadModel({modelPath: args.gguf, gpuLayers: 0});
    arch = model.fileInfo.metadata?.general?.architecture ?? "?";
    if (arch === "deepseek2") {
        caches = wanted.filter(c => LATENT_CACHES.has(c.type));
        skipped = wanted.filter(c => !LATENT_CACHES.has(c.type)).map(c => c.type);
    }

    for (const cache of caches) {
        const kSpec = qround && cache.kq ? cache.kq : cache.k;
        const vSpec = qround && cache.vq ? cache.vq : cache.v;
        const micro = microEval(args, kSpec, vSpec, texts);
        for (const plate of plates) {
            const m = micro[plate.name];
            if (!m || m.tokens !== plate.tokens.length)
                throw new Error(`${plate.name}: micro scored ${m?.tokens} tokens, this script ${plate.tokens.length}`);
            const loss = await llamaLoss(model, cache, plate.tokens);
            results.push({cache, plate: plate.name, spec: kSpec === vSpec ? kSpec : `${kSpec}|${vSpec}`, llama: loss,
                micro: m.loss});
        }
    }
    await model.dispose();
    await llama.dispose();
} catch (e) {
    console.error(`interop: ${name}: ${e.message.split("\n")[0]}`);
    process.exit(1);
}

const base = {}, f16 = {};
for (const r of results) if (r.cache.type === "f32") base[r.plate] = r;
for (const r of results) if (r.cache.type === "f16") (f16[r.plate] ??= []).push(r.llama);
const fmt = (x, d = 6) => (x >= 0 ? " " : "") + x.toFixed(d);
console.log(`model: ${name} (${args.model ?? "micro eval's default model"}), GGUF architecture ${arch}`);
console.log(`llama.cpp: node-llama-cpp 3.21.1 (CPU); micro's rounding as llama.cpp's: ${qround ? "qround=q8 (block types' K), qround=f16 (f16)" : "none (micro has no qround option)"}`);
if (skipped.length)
    console.log(`not compared under latent attention: ${skipped.join(", ")} (a block of 32 divides neither llama.cpp's ` +
        "cached row, latent + RoPE key, nor micro's RoPE key; see interop.mjs)");
console.log("cache    plate  flash  llama.cpp    micro  llama.cpp_inc  micro_inc   difference  tolerance  result  micro_spec (K|V)");
let failed = 0;
for (const r of results) {
    const quantised = r.cache.type !== "f32" && r.cache.type !== "f16";
    const llamaInc = r.llama - base[r.plate].llama, microInc = r.micro - base[r.plate].micro;
    // f32/f16: the losses themselves must agree; quantised: the increases over each engine's f32.
    const diff = quantised ? llamaInc - microInc : r.llama - r.micro;
    // f16: plus the distance between llama.cpp's two f16 paths (flash off and on) on this plate.
    const band = r.cache.type === "f16" ? Math.max(...f16[r.plate]) - Math.min(...f16[r.plate]) : 0;
    const tol = quantised ? DELTA_TOLERANCE : LOSS_TOLERANCE + band;
    const ok = Math.abs(diff) <= tol;
    if (!ok) failed++;
    console.log(`${r.cache.type.padEnd(8)} ${r.plate.padEnd(6)} ${(r.cache.flash ? "on" : "off").padEnd(5)} ` +
        `${r.llama.toFixed(6)} ${r.micro.toFixed(6)}  ${fmt(llamaInc)}     ${fmt(microInc)}  ${fmt(diff, 7)}  ` +
        `${(band ? tol.toExponential(1) : tol.toExponential(0)).padEnd(9)}  ${ok ? "pass" : "FAIL"}    ${r.spec}`);
}
console.log(failed ? `interop: ${name}: ${failed} of ${results.length} rows outside tolerance` : `interop: ${name}: all ${results.length} rows pass`);
process.exit(failed ? 1 : 0);
