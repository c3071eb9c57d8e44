#!/usr/bin/env bash
# A hostile user's defects on the command line, each with its class: hangs (threads above the
# cores, bench lists), leaks and late checks on option errors (run under the ASan build, a leak turns
# exit 2 into 1), lost or unclear messages, and exit status 2 for every bad argument of every command.
. "$(dirname "$0")/lib.sh"
make_model=${MICRO_MAKE_MODEL:?}

# Small models of shapes micro.bin lacks, written by the loader's own writer.
"$make_model" "$tmp/tiny.bin" 16 1 2 2 16 64 || bad "make_model tiny"
"$make_model" "$tmp/hd2.bin" 4 1 2 2 8 64 || bad "make_model head_dim 2"

# A text beyond the context (64 here) is evaluated in windows of the context, each from BOS: 300
# bytes are 5 windows (305 tokens with their BOS); 189 bytes are three equal windows of 63, whose
# loss is one window's.
head -c 300 /dev/zero | tr '\0' 'a' >"$tmp/a300.txt"
head -c 189 /dev/zero | tr '\0' 'a' >"$tmp/a189.txt"
head -c 63 /dev/zero | tr '\0' 'a' >"$tmp/a63.txt"
expect 2 "longer than the model's context" "eval --window beyond the context" -- "$micro" eval --model "$tmp/tiny.bin" --text "$tmp/a300.txt" --window 65
"$micro" eval --model "$tmp/tiny.bin" --text "$tmp/a300.txt" --csv | sed -n 2p | cut -d, -f4 | grep -qx 305 &&
    ok "a text beyond the context: 5 windows, 305 tokens" || bad "long text in windows"
w3=$("$micro" eval --model "$tmp/tiny.bin" --text "$tmp/a189.txt" --cache int:bits=3 --csv | sed -n 2p | sed -E 's/"[^"]*"/s/g' | cut -d, -f4,5,6)
w1=$("$micro" eval --model "$tmp/tiny.bin" --text "$tmp/a63.txt" --cache int:bits=3 --csv | sed -n 2p | sed -E 's/"[^"]*"/s/g' | cut -d, -f5,6)
[ "${w3#*,}" = "$w1" ] && [ "${w3%%,*}" = 192 ] && ok "three equal windows: one window's loss ($w1)" || bad "windows: '$w3' vs '$w1'"
# A file in the corpus's form: documents each after a 0x01, each decoded from its own BOS (an empty
# one skipped): 8 + 12 + 2 tokens; a 0x01 anywhere but at offset 0 of a plain text is still refused.
printf '\001abc def\001hello there\001\001x' >"$tmp/docs.txt"
"$micro" eval --model "$tmp/tiny.bin" --text "$tmp/docs.txt" --csv | sed -n 2p | cut -d, -f4 | grep -qx 22 &&
    ok "documents: each from its own BOS, 22 tokens" || bad "documents"
# --score second-half[:N]: chunks of N tokens, the rest left out (300 bytes + BOS: 9 chunks of 32,
# 288 tokens run); every bad form refused in one line before any work.
"$micro" eval --model "$tmp/tiny.bin" --text "$tmp/a300.txt" --score second-half:32 --csv | sed -n 2p | cut -d, -f4 | grep -qx 288 &&
    ok "--score second-half:32: 9 chunks, 288 tokens" || bad "--score second-half:32"
expect 2 "takes windows or second-half" "--score bogus" -- "$micro" eval --model "$tmp/tiny.bin" --score bogus
expect 2 "from 4 to 1048576" "--score second-half:3" -- "$micro" eval --model "$tmp/tiny.bin" --score second-half:3
expect 2 "from 4 to 1048576" "--score second-half:" -- "$micro" eval --model "$tmp/tiny.bin" --score second-half:
expect 2 "from 4 to 1048576" "--score second-half:1e3" -- "$micro" eval --model "$tmp/tiny.bin" --score second-half:1e3
expect 2 "not both" "--score second-half with --window" -- "$micro" eval --model "$tmp/tiny.bin" --score second-half --window 32
expect 2 "longer than the model's context of 64" "--score second-half beyond the context" -- "$micro" eval --model "$tmp/tiny.bin" --score second-half
expect 2 "fewer than one chunk of 64" "--score second-half: a text shorter than a chunk" -- "$micro" eval --model "$tmp/tiny.bin" --text "$tmp/a63.txt:40" --score second-half:64
printf 'abc\001def' >"$tmp/bos.txt"
expect 2 "byte 0x01 (the BOS token) at offset 3" "a BOS inside a plain text" -- "$micro" eval --model "$tmp/tiny.bin" --text "$tmp/bos.txt"

# --- hangs -----------------------------------------------------------------------------------
# Threads above the cores: the pool runs on the online cores, so the result is the same and quick.
if [ -f models/micro.bin ]; then
    "$micro" eval --csv --text data/plates/en.txt:20 --threads 1 >"$tmp/t1.csv"
    start=$(date +%s)
    timeout 120 "$micro" eval --csv --text data/plates/en.txt:20 --threads 256 >"$tmp/t256.csv"
    took=$(($(date +%s) - start))
    cmp -s "$tmp/t1.csv" "$tmp/t256.csv" && [ "$took" -lt 30 ] && ok "eval --threads 256: same result in ${took}s" ||
        bad "eval --threads 256: ${took}s, $(cat "$tmp/t256.csv")"
fi
"$micro" eval --help | grep -q "online cores" && ok "eval --help says threads are capped" || bad "eval --help on threads"
# Lists past the 8th item are kept (they were dropped), and a head_dim-2 model benches to the end.
bench=(bench --model "$tmp/tiny.bin" --repeat 1 --threads 1)
timeout 300 "$micro" "${bench[@]}" --positions 2,3,4,5,6,7,8,9,10 >"$tmp/bench.out" 2>&1
[ "$(awk '$2 == 1 && $1 ~ /^[0-9]+$/ {n++} END {print n + 0}' "$tmp/bench.out")" -eq 9 ] &&
    grep -q "whole decode" "$tmp/bench.out" && ok "bench: nine positions, nine rows" || bad "bench nine positions: $(tail -5 "$tmp/bench.out")"
# The attention and whole-decode figures stay within what was asked (they were always at 2048).
grep -q "attention per decode step at 10 positions" "$tmp/bench.out" && ok "bench: attention at the longest position asked" ||
    bad "bench attention length: $(tail -4 "$tmp/bench.out")"
timeout 300 "$micro" bench --model "$tmp/hd2.bin" --repeat 1 --positions 16,32 --cache int:bits=2 >"$tmp/hd2.out" 2>&1 &&
    grep -q "whole decode" "$tmp/hd2.out" && ok "bench: head_dim 2, int:bits=2 finishes" || bad "bench head_dim 2: $(tail -3 "$tmp/hd2.out")"
# Not given, --positions is not blamed: the defaults are cut to the model's context of 64.
expect 0 "" "bench: defaults fit a short context" -- "$micro" "${bench[@]}"
grep -q "^ *64 " "$tmp/out" && ok "bench: default positions cut to the context" || bad "bench defaults: $(cat "$tmp/out")"

# --- option errors: before any work, one line, nothing leaked --------------------------------------
for v in 0 5000 '' 1,x 2,,3 3, 99999999999999999999; do
    expect 2 "--positions" "bench --positions '$v'" -- "$micro" "${bench[@]}" --positions "$v"
    [ ! -s "$tmp/out" ] || bad "bench --positions '$v' printed before failing"
done
expect 2 "--threads: 0 is out of range (1..256)" "bench --threads 0" -- "$micro" bench --threads 0
expect 2 "more than 64 values" "bench: long lists refused clearly" -- "$micro" bench --positions "$(seq -s, 2 70)"
expect 2 "out of range (1..8)" "bench checks the spec before any work" -- "$micro" bench --cache int:bits=9
[ ! -s "$tmp/out" ] || bad "bench --cache int:bits=9 printed before failing"
expect 2 "unknown cache codec" "bench checks the spec's form before loading" -- "$micro" bench --model "$tmp/nope.bin" --cache bogus
# Specs are checked against the loaded model's shape, not micro's head_dim 32.
"$make_model" "$tmp/hd48.bin" 96 1 2 2 16 64 || bad "make_model head_dim 48"
expect 0 "" "kivi group 48 fits a head_dim-48 model" -- "$micro" eval --model "$tmp/hd48.bin" --cache kivi:group=48,residual=48 --text data/plates/en.txt:20
expect 2 "got head_dim 48" "q4_0 refused for a head_dim-48 model, before any work" -- "$micro" eval --model "$tmp/hd48.bin" --cache q4_0 --text data/plates/en.txt:20
[ ! -s "$tmp/out" ] || bad "eval --cache q4_0 on head_dim 48 printed before failing"
# Grouped-query and latent attention: shapes refused in one line, specs checked per stream.
expect 2 "does not divide n_heads 6" "train: key/value heads not dividing the heads" -- "$micro" train --kv-heads 4
expect 2 "--rope-dim is for latent attention" "train: a RoPE key without a latent" -- "$micro" train --rope-dim 16
"$make_model" "$tmp/mla.bin" 64 1 2 1 32 64 1 48 16 || bad "make_model latent attention"
expect 0 "" "a latent model through eval" -- "$micro" eval --model "$tmp/mla.bin" --cache int:bits=4 --text data/plates/en.txt:20
expect 2 "the latent (48 numbers" "q4_0 refused for a latent of 48, naming it" -- "$micro" eval --model "$tmp/mla.bin" --cache q4_0 --text data/plates/en.txt:20
"$make_model" "$tmp/mla64.bin" 64 1 2 1 32 64 1 64 16 || bad "make_model latent 64"
expect 2 "the RoPE key (16 numbers, its spec is --v)" "q4_0 refused for the RoPE key, naming --v" -- "$micro" eval --model "$tmp/mla64.bin" --cache q4_0 --text data/plates/en.txt:20
expect 0 "" "q4_0 on the latent, the RoPE key in fp16" -- "$micro" eval --model "$tmp/mla64.bin" --cache q4_0 --v fp16 --text data/plates/en.txt:20
expect 2 "latent attention caches a latent that has no RoPE" "prerope refused under latent attention" -- "$micro" eval --model "$tmp/mla64.bin" --cache int:bits=4,prerope --text data/plates/en.txt:20
expect 2 "beyond the model's context of 64" "bench --positions beyond the context" -- "$micro" "${bench[@]}" --positions 65
expect 2 "cannot open" "bench: missing model" -- "$micro" bench --model "$tmp/nope.bin"

# --- capacity ----------------------------------------------------------------------------------
expect 2 "beyond the" "capacity: unmeasurable shape refused" -- "$micro" capacity --scheme int:bits=1 --kv-heads 100000 \
    --head-dim 100000 --context 1
grep -qP 'micro: \t|micro: $' "$tmp/err" && bad "capacity: uninitialised message" || ok "capacity: message initialised"
expect 2 "--bits: empty list" "capacity --bits ''" -- "$micro" capacity --bits ""
expect 2 "--bits" "capacity --bits 4,,2" -- "$micro" capacity --bits 4,,2
expect 2 "--bits" "capacity --bits nan" -- "$micro" capacity --bits nan
expect 2 "too many conversations" "capacity --bits 1e-300" -- "$micro" capacity --bits 1e-300
expect 0 "" "capacity --bits beside --scheme" -- "$micro" capacity --bits 4 --scheme int:bits=4 --csv
[ "$(grep -c '4-bit\|int:bits=4' "$tmp/out")" -eq 2 ] && ok "capacity: --bits and --scheme rows both shown" ||
    bad "capacity --bits and --scheme: $(cat "$tmp/out")"
expect 2 "given twice" "capacity --preset twice" -- "$micro" capacity --preset micro --preset llama3-8b
expect 2 "not a finite number" "capacity --util inf" -- "$micro" capacity --util inf

# --- messages ----------------------------------------------------------------------------------
# 3,000 bytes of path in components the kernel accepts: the reason comes after it in the message.
long=$tmp$(for i in $(seq 30); do printf '/%s' "$(printf 'd%.0s' {1..99})"; done)/model.bin
expect 2 "cannot open: No such file" "long model path keeps the reason" -- "$micro" eval --model "$long"
expect 2 "cannot open: No such file" "long text path keeps the reason" -- "$micro" eval --text "$long"
expect 2 "'99999999999999999999' is out of range (1..256)" "huge number: out of range" -- "$micro" eval --threads 99999999999999999999
expect 2 "'é'" "multibyte character printed whole" -- "$micro" eval --cache 'int:bits=4é'
expect 2 '\\xFF' "invalid byte escaped" -- "$micro" eval --cache $'int:bits=4\xff'
expect 2 "more than 8 options" "nine spec options" -- "$micro" eval --cache int:a,b,c,d,e,f,g,h,i
expect 2 "int: unknown option" "eight spec options reach the codec" -- "$micro" eval --cache int:bits=4,a,b,c,d,e,f,g
expect 2 "bits=99999999999999999999 is out of range" "huge spec value: out of range" -- "$micro" eval --cache int:bits=99999999999999999999
expect 2 '\\x0A' "a newline in a value stays on one line" -- "$micro" eval --cache $'fp\n32'
# Values and paths echoed in a message are shortened, so the reason after them is kept (a fuzzer
# found the workload's cut off at 512 bytes), and a command name's newline is escaped. ($long is
# the 3,000-byte path above, made here.)
value=$(printf 'w%.0s' {1..600})
expect 2 "is not fixed or chat" "long --workload keeps the reason" -- "$micro" serve-bench --workload "$value"
expect 2 "every '{' needs a '}'" "long open grid keeps the reason" -- "$micro" sweep --grid "int:bits={$value"
expect 2 "the only preset is 'all'" "long --preset keeps the reason" -- "$micro" sweep --preset "$value"
mkdir -p "$long" "$tmp/small-corpus" && echo x >"$long/file" && : >"$long/ckpt"
expect 2 "not a folder" "long --out that is a file keeps the reason" -- "$micro" plate --out "$long/file"
for f in en.train en.val zh.train zh.val; do # the checkpoint is read after the corpus (a clone has none)
    { printf '\001'; head -c 4000 data/plates/en.txt | iconv -c -f utf-8 -t utf-8; } >"$tmp/small-corpus/$f.txt"
done
expect 2 ": is empty" "long --resume keeps the reason" -- "$micro" train --corpus "$tmp/small-corpus" \
    --seq 64 --batch 1 --steps 1 --resume "$long/ckpt"
expect 2 "unknown command 'ab\\\\x0Acd'" "a newline in a command name is escaped" -- "$micro" $'ab\ncd'

# --- every command: exit 2 for bad arguments, checked before anything is loaded --------------------
for cmd in plate eval generate bench export inspect; do
    expect 2 "needs a value" "$cmd: missing value" -- "$micro" "$cmd" --model
done
expect 2 "--out needs a value" "train: missing value" -- "$micro" train --out
expect 2 "--preset needs a value" "capacity: missing value" -- "$micro" capacity --preset
expect 2 "--model: empty path" "eval --model ''" -- "$micro" eval --model ""
expect 2 "--model given twice" "eval: duplicated option" -- "$micro" eval --model a --model b
expect 2 "--temp: 'nan' is not a finite number" "generate --temp nan" -- "$micro" generate --prompt x --temp nan
expect 2 "--temp: 'inf' is not a finite number" "generate --temp inf" -- "$micro" generate --prompt x --temp inf
expect 2 "--seed: '-1' is not a non-negative integer" "generate --seed -1" -- "$micro" generate --prompt x --seed -1
expect 2 "unknown cache codec" "generate checks the spec first" -- "$micro" generate --prompt x --model "$tmp/nope.bin" --cache bogus
expect 2 "-n: '-5' is out of range" "generate -n -5" -- "$micro" generate --prompt x -n -5
expect 2 "--text: " "eval --text '' before loading" -- "$micro" eval --model "$tmp/nope.bin" --text ""
expect 2 "character count" "inspect --text x:0 before loading" -- "$micro" inspect --model "$tmp/nope.bin" --text x:0
expect 2 "--en: " "plate --en x:-1 before loading" -- "$micro" plate --model "$tmp/nope.bin" --en x:-1
expect 2 "--llama2c: empty path" "export --llama2c ''" -- "$micro" export --llama2c ""
for a in "--steps 0" "--steps x" "--lr nan" "--lr inf" "--seq 4096" "--dim 7" "--heads 5" "--seed -3" "--bogus" \
    "--steps" "--threads 0" "--batch 99999999999999999999" "--out" "--steps 1 --steps 2"; do
    # shellcheck disable=SC2086
    expect 2 "micro: " "train $a" -- "$micro" train --corpus "$tmp/nope" $a
done
expect 2 "--out: empty path" "train --out ''" -- "$micro" train --out ""
# Refused by the trainer after loading the corpus (exit 1) before: now when parsing.
expect 2 "tokens per step" "train --batch x --seq beyond the trainer" -- "$micro" train --corpus "$tmp/nope" --batch 4096 \
    --seq 65536 --context 65536
# Corpus files are inputs like the model: a FIFO would block forever.
mkdir "$tmp/fifo-corpus" && mkfifo "$tmp/fifo-corpus/en.train.txt"
expect 2 "is not a regular file" "train: corpus FIFO refused" -- "$micro" train --corpus "$tmp/fifo-corpus"
expect 2 "path too long" "train: corpus path too long" -- "$micro" train --corpus "$tmp/$(printf 'c%.0s' {1..4100})"

finish
