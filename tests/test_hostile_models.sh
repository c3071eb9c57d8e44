#!/usr/bin/env bash
# The third hostile-input pass, models: shapes that no buffer may be indexed by, memory and time sized
# by the work and not by a context a file declares, the project's own siblings through every panel,
# and the small defects around them (outputs that are inputs, the environment echoed, JSON of any
# file name, exit statuses, hints). Run under ASan + UBSan by scripts/test (the `sanitized` suite).
. "$(dirname "$0")/lib.sh"
make_model=${MICRO_MAKE_MODEL:?}
text=data/plates/en.txt:40

# peak_kb CMD...: runs CMD (output to $tmp/out, $tmp/err) and prints its peak resident memory in KB.
peak_kb() {
    python3 -c 'import resource, subprocess, sys
with open(sys.argv[1], "w") as o, open(sys.argv[2], "w") as e:
    subprocess.run(sys.argv[3:], stdout=o, stderr=e, timeout=300)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$tmp/out" "$tmp/err" "$@"
}

# --- widths: one limit (MICRO_MAX_WIDTH, 1024) where they enter ---------------------------------
# A model file of head_dim 1026 overflowed the fp32 cache's stack scratch (SIGSEGV); the loader now
# refuses it, and the trainer refuses to make one. (micro.bin's version-2 header, which its checksum
# does not cover, with head_dim 1026 and dim 6 x 1026.)
cp models/micro.bin "$tmp/hd.bin"
printf '\x0c\x18\x00\x00' | dd of="$tmp/hd.bin" bs=1 seek=12 conv=notrunc 2>/dev/null
printf '\x02\x04\x00\x00' | dd of="$tmp/hd.bin" bs=1 seek=28 conv=notrunc 2>/dev/null
expect 2 "head_dim = 1026 is out of range (2..1024)" "a head_dim-1026 model refused by the loader" -- \
    "$micro" eval --model "$tmp/hd.bin" --text "$text"
C=$tmp/corpus
mkdir -p "$C"
for f in en.train en.val zh.train zh.val; do { printf '\001'; head -c 3000 data/plates/en.txt; } >"$C/$f.txt"; done
B=(--corpus "$C" --layers 1 --hidden 64 --context 128 --seq 64 --batch 1 --eval-every 0 --val-windows 1 --threads 1 --steps 1)
expect 2 "head_dim = 1040 is out of range" "train --dim 1040 --heads 1 refused" -- "$micro" train "${B[@]}" --dim 1040 --heads 1 --out "$tmp/t.bin"
expect 2 "latent_dim = 2000 is out of range" "train --latent-dim 2000 refused" -- "$micro" train "${B[@]}" --dim 64 --heads 2 --latent-dim 2000 --out "$tmp/t.bin"
expect 2 "rope_dim = 1030 is out of range" "train --rope-dim 1030 refused" -- "$micro" train "${B[@]}" --dim 64 --heads 2 --latent-dim 64 --rope-dim 1030 --out "$tmp/t.bin"
[ ! -e "$tmp/t.bin" ] && ok "no model written by a refused train" || bad "a refused train wrote $tmp/t.bin"

# inspect read 32 numbers a token where the latent slot holds 64 (heap overflow, double free): it
# now reads a latent model's RoPE key before and after RoPE and its latent.
expect 0 "" "inspect on the shipped latent model" -- "$micro" inspect --model models/micro-mla.bin --text "$text" --csv
[ "$(grep -c ',latent,' "$tmp/out")" -eq 4 ] && [ "$(grep -c ',rope_key_pre_rope,' "$tmp/out")" -eq 4 ] &&
    ok "inspect: a latent and a RoPE key row for each of 4 layers" || bad "inspect latent rows: $(head -5 "$tmp/out")"
expect 0 "" "inspect --rot on the latent model (each stream's own width)" -- \
    "$micro" inspect --model models/micro-mla.bin --text "$text" --rot hadamard
expect 2 "--plot draws keys and values per head" "inspect --plot refused for a latent model before any work" -- \
    "$micro" inspect --model models/micro-mla.bin --text "$text" --plot --out "$tmp/plot"

# --- memory and time sized by the work -------------------------------------------------------
# micro.bin with a context of 2^20 in its header: generate -n 4 took 8.1 GB.
cp models/micro.bin "$tmp/ctx20.bin"
printf '\x00\x00\x10\x00' | dd of="$tmp/ctx20.bin" bs=1 seek=40 conv=notrunc 2>/dev/null
kb=$(peak_kb "$micro" generate --model "$tmp/ctx20.bin" -n 4 --prompt "The cache")
[ "$kb" -lt 400000 ] && grep -q "^The cache" "$tmp/out" && ok "generate on a declared context of 2^20: ${kb} KB" ||
    bad "generate on a context of 2^20: ${kb} KB, $(head -c 200 "$tmp/err")"
# A 108 KB model of context 2^17 took 4.2 GB to generate 4 bytes.
"$make_model" "$tmp/long.bin" 2 1024 1 1 1 131072 || bad "make_model context 2^17"
kb=$(peak_kb "$micro" generate --model "$tmp/long.bin" -n 4 --prompt "hi")
[ "$kb" -lt 400000 ] && ok "generate on a 2^17 context: ${kb} KB" || bad "generate on a 2^17 context: ${kb} KB"

# --- the project's own siblings through every panel ----------------------------------------------
# Panel (b)'s 1% outliers (64 numbers a token), kvquant (no calibration for them) and, on the latent
# model, q4_0 on the 16-number RoPE key: noted in the panel, found before any work.
short=(--en data/plates/en.txt:40 --zh data/plates/zh.txt:12 --serve-fp16 1 --serve-length 64 --no-files)
expect 0 "" "plate on the grouped-query sibling" -- "$micro" plate --model models/micro-gqa.bin "${short[@]}"
grep -q "not run on this model: int 4 + 1% outliers (int: outliers=1 keeps no entry" "$tmp/out" &&
    grep -q "not run on this model: kvquant 4 1% (kvquant needs a calibration" "$tmp/out" && grep -q "^(g) architecture" "$tmp/out" &&
    ok "plate on GQA: the schemes it cannot take noted, every panel printed" || bad "plate GQA: $(grep -c 'not run' "$tmp/out") notes"
expect 0 "" "plate --json on the latent sibling" -- "$micro" plate --model models/micro-mla.bin "${short[@]}" --json
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
skipped = {s["label"]: s["skipped"] for s in d["schemes"] if "skipped" in s}
assert "RoPE key (16 numbers" in skipped["q4_0"], skipped
assert [r["cache"] for r in d["serve"]["rows"] if "skipped" in r] == ["q4_0"]
assert [(m["arch"], m["model"]) for m in d["arch"]["architectures"]] == \
    [("MHA", "models/micro.bin"), ("GQA", "models/micro-gqa.bin"), ("MLA", "models/micro-mla.bin")]' "$tmp/out" &&
    ok "plate on MLA: q4_0 skipped in (b) and (d) with the reason, panel (g) keeps micro.bin as its first" ||
    bad "plate MLA json"
expect 0 "not run on this model: int:bits=4,outliers=1" "sweep --preset all on the latent sibling" -- \
    "$micro" sweep --model models/micro-mla.bin --preset all --text data/plates/en.txt:12
expect 2 "q4_0" "sweep --grid q4_0 on the latent model still refused" -- "$micro" sweep --model models/micro-mla.bin --grid q4_0 --text "$text"

# --- the small items ----------------------------------------------------------------------------
cp models/micro.bin "$tmp/m.bin"
expect 2 "names the same file as --model" "export --gguf over the model, spelled another way" -- \
    "$micro" export --gguf "$tmp/./m.bin" --model "$tmp/m.bin"
cmp -s models/micro.bin "$tmp/m.bin" && ok "the model kept" || bad "export replaced the model"
expect 2 "names the same file as --json" "train --out and --json one file, spelled two ways" -- \
    "$micro" train "${B[@]}" --out "$tmp/o.bin" --json "$tmp/./o.bin"
expect 2 "names the same file as the corpus" "train --checkpoint over the corpus" -- \
    "$micro" train "${B[@]}" --out "$tmp/o.bin" --checkpoint "$C/en.train.txt"
cmp -s <({ printf '\001'; head -c 3000 data/plates/en.txt; }) "$C/en.train.txt" && ok "the corpus kept" || bad "corpus replaced"
expect 2 "names the same file as --model" "calibrate --out over the model" -- \
    "$micro" calibrate --model "$tmp/m.bin" --out "$tmp/../$(basename "$tmp")/m.bin" --corpus "$C"
mkdir -p "$tmp/po"
head -c 300 data/plates/en.txt >"$tmp/po/plate.csv"
expect 2 "names the same file as --en" "plate --en a file its --out would replace" -- \
    "$micro" plate --en "$tmp/po/plate.csv" --out "$tmp/po/."
cmp -s <(head -c 300 data/plates/en.txt) "$tmp/po/plate.csv" && ok "the plate's text kept" || bad "plate replaced its text"
expect 2 "has no latent attention" "export --llama2c of a latent model: bad input" -- \
    "$micro" export --llama2c "$tmp/l.bin" --model models/micro-mla.bin
expect 2 "is not portable, avx2 or avx512" "MICRO_ISA refused on one line" -- env MICRO_ISA=$'a\nb\e[31m' "$micro" eval --text "$text"
grep -qF "'a\x0Ab\x1B[31m'" "$tmp/err" && ok "MICRO_ISA echoed escaped" || bad "MICRO_ISA echoed: $(cat -v "$tmp/err")"
for args in --help --version "eval --help"; do
    MICRO_ISA=bogus "$micro" $args >/dev/null 2>&1 && ok "MICRO_ISA=bogus: micro $args exits 0" || bad "MICRO_ISA=bogus micro $args"
done
bad_name="$tmp/bad$(printf '\xff\xfe')name.txt"
head -c 30 data/plates/en.txt >"$bad_name"
"$micro" sweep --grid int:bits=4 --text "$bad_name" --json >"$tmp/sweep.json" 2>"$tmp/err" &&
    python3 -c 'import json, sys; assert json.load(open(sys.argv[1], encoding="utf-8"))[0]["text"] == "bad\ufffd\ufffdname"' "$tmp/sweep.json" &&
    ok "sweep --json of a file name in no encoding: valid JSON, U+FFFD" || bad "sweep --json invalid UTF-8: $(head -c 200 "$tmp/sweep.json")"
expect 2 "this command takes no model or calibration" "capacity --scheme kvquant: a hint that leads somewhere" -- \
    "$micro" capacity --scheme kvquant:bits=4
expect 2 "micro calibrate takes multi-head and grouped-query models" "kvquant on a latent model: no calibrate hint" -- \
    "$micro" eval --model models/micro-mla.bin --cache kvquant:bits=4 --text "$text"

finish
