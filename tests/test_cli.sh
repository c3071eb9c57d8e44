#!/usr/bin/env bash
# The command line as a user meets it: help, version, one-line errors with exit status 2, the CSV
# interface, determinism across runs and thread counts, the llama2.c and GGUF exports' exact sizes.
. "$(dirname "$0")/lib.sh"

expect 2 "usage" "no command" -- "$micro"
expect 2 "unknown command 'bogus'" "unknown command" -- "$micro" bogus
expect 0 "" "--help" -- "$micro" --help
expect 0 "" "--version" -- "$micro" --version
for cmd in plate eval sweep attention generate bench serve-bench train calibrate export capacity inspect; do
    expect 0 "" "$cmd --help" -- "$micro" "$cmd" --help
    expect 2 "unknown option '--bogus'" "$cmd unknown option" -- "$micro" "$cmd" --bogus
done
"$micro" --help | grep -q "fp32" && ok "help lists codecs" || bad "help lists codecs"
"$micro" --help | grep -q "calibrate" && ok "help lists calibrate" || bad "help lists calibrate"

# micro calibrate: the corpus may be absent (a fresh clone): the error names scripts/corpus.
expect 2 "scripts/corpus" "calibrate without a corpus" -- "$micro" calibrate --corpus "$tmp/no-corpus" --out "$tmp/c.kvq"
[ ! -e "$tmp/c.kvq" ] && ok "calibrate without a corpus writes nothing" || bad "calibrate without a corpus wrote a file"
expect 2 "out of range" "calibrate --sequences 0" -- "$micro" calibrate --sequences 0
expect 2 "exceeds the model's context" "calibrate --length beyond the context" -- "$micro" calibrate --length 4096 --out "$tmp/c.kvq"
expect 2 "is a directory" "calibrate --out a folder" -- "$micro" calibrate --out "$tmp"
cp models/micro.bin "$tmp/m.bin"
expect 2 "names the same file as --model" "calibrate --out over the model" -- "$micro" calibrate --model "$tmp/m.bin" --out "$tmp/m.bin"
cmp -s models/micro.bin "$tmp/m.bin" && ok "calibrate left the model alone" || bad "calibrate changed the model"
if [ -f data/corpus/en.train.txt ]; then
    # A small calibration, on 1 and 2 threads: the same bytes; the file holds the model's checksum.
    for t in 1 2; do
        expect 0 "" "calibrate on $t threads" -- "$micro" calibrate --sequences 2 --length 64 --threads $t --out "$tmp/c$t.kvq"
    done
    cmp -s "$tmp/c1.kvq" "$tmp/c2.kvq" && ok "calibrate: 1 and 2 threads give the same file" || bad "calibrate: threads change the file"
    grep -q '"sequences": 2' "$tmp/c1.kvq.json" && ok "calibrate writes its provenance" || bad "calibrate provenance"
else
    echo "skip calibrate runs: no data/corpus (bash scripts/corpus)"
fi

printf 'abc\xff\xfedef' >"$tmp/bad.txt"
: >"$tmp/empty.txt"
mkdir "$tmp/dir"
head -c 200 /dev/urandom >"$tmp/bad.bin"
expect 2 "cannot open" "missing text" -- "$micro" eval --text "$tmp/nope.txt"
expect 2 "invalid UTF-8 at byte offset 3" "invalid UTF-8" -- "$micro" eval --text "$tmp/bad.txt"
expect 2 "empty text" "empty text" -- "$micro" eval --text "$tmp/empty.txt"
expect 2 "positive integer" "CHARS 0" -- "$micro" eval --text data/plates/en.txt:0
expect 2 "positive integer" "CHARS negative" -- "$micro" eval --text data/plates/en.txt:-5
expect 2 "bad magic" "corrupt model" -- "$micro" eval --model "$tmp/bad.bin"
expect 2 "is a directory" "model is a directory" -- "$micro" eval --model "$tmp/dir"
expect 2 "unknown cache codec 'bogus'" "unknown codec" -- "$micro" eval --cache bogus
expect 2 "elem=e9m9: expected e2m1" "mx bad element" -- "$micro" eval --cache mx:elem=e9m9
expect 2 "preset=k9v4: expected" "turboquant unknown preset" -- "$micro" eval --cache turboquant:preset=k9v4
expect 2 "scale2=tensor: expected token, calib or none" "nvfp4 bad scale2" -- "$micro" eval --k nvfp4:scale2=tensor
expect 2 "needs a value" "missing value" -- "$micro" eval --text
expect 2 "out of range" "threads 0" -- "$micro" eval --threads 0
expect 2 "needs --prompt" "generate without prompt" -- "$micro" generate
expect 2 "needs --llama2c" "export without file" -- "$micro" export
expect 2 "one of them" "export to both formats at once" -- "$micro" export --llama2c "$tmp/a" --gguf "$tmp/b"
expect 2 "empty path" "export --gguf to an empty path" -- "$micro" export --gguf ""
expect 2 "is a directory" "export --gguf over a directory" -- "$micro" export --gguf "$tmp"
expect 2 "utilisation" "capacity util 0" -- "$micro" capacity --util 0
expect 2 "utilisation" "capacity util above 1" -- "$micro" capacity --util 1.2
expect 2 "leave no room" "capacity weights above memory" -- "$micro" capacity --weights-gb 90
expect 2 "context 0 must be positive" "capacity context 0" -- "$micro" capacity --context 0
expect 2 "unknown preset" "capacity unknown preset" -- "$micro" capacity --preset gpt5
expect 2 "out of range" "serve-bench block 0" -- "$micro" serve-bench --block 0
expect 2 "each --k needs its --v" "serve-bench --k without --v" -- "$micro" serve-bench --k fp16
expect 2 "not fixed or chat" "serve-bench unknown workload" -- "$micro" serve-bench --workload bursty
expect 2 "--csv and --json" "serve-bench csv and json" -- "$micro" serve-bench --csv --json
"$micro" capacity --csv >"$tmp/cap.csv"
head -1 "$tmp/cap.csv" | grep -q '^model,cache,bits,bytes_per_token,conversations' && ok "capacity csv header" || bad "capacity csv header"
awk -F, '$3 == 16 && $5 == 52 {a=1} $3 == 8 && $5 == 104 {b=1} $3 == 4 && $5 == 208 {c=1} END {exit !(a && b && c)}' "$tmp/cap.csv" &&
    ok "capacity: 52 / 104 / 208 at 16 / 8 / 4 bits" || bad "capacity figures: $(cat "$tmp/cap.csv")"

if [ -f models/micro.bin ]; then
    # The CSV interface and determinism: same bytes on every run and thread count.
    "$micro" eval --csv --text data/plates/en.txt:300 --text data/plates/zh.txt:100 >"$tmp/a.csv" 2>&1
    "$micro" eval --csv --text data/plates/en.txt:300 --text data/plates/zh.txt:100 --threads 2 >"$tmp/b.csv" 2>&1
    head -1 "$tmp/a.csv" | grep -q '^text,k_cache,v_cache,tokens,loss,delta,bits_per_element,cache_bytes' &&
        ok "csv header" || bad "csv header: $(head -1 "$tmp/a.csv")"
    [ "$(wc -l <"$tmp/a.csv")" -eq 3 ] && ok "csv rows" || bad "csv rows: $(cat "$tmp/a.csv")"
    cmp -s "$tmp/a.csv" "$tmp/b.csv" && ok "eval identical on 1 and 2 threads" || bad "eval differs across threads"
    awk -F, 'NR == 2 && $1 == "en" && $4 == 301 && $6 == 0 && $8 == 301 * 4 * 2 * 192 * 4 && $9 == 1 && $10 == 0 { found = 1 }
             END { exit !found }' "$tmp/a.csv" && ok "fp32 row: 301 tokens, delta 0, exact bytes, top1_agree 1, kl 0" ||
        bad "fp32 row: $(sed -n 2p "$tmp/a.csv")"

    # The plate, on short cuts of the plates and run only twice, so that the sanitizer build stays
    # quick: once as a user runs it (panels on the terminal, CSV and JSON files), once on one thread.
    plate=(plate --en data/plates/en.txt:30 --zh data/plates/zh.txt:10 --serve-length 96 --serve-fp16 2)
    "$micro" "${plate[@]}" --html --out "$tmp/plate-out" >"$tmp/panels" 2>"$tmp/plate.err" || bad "plate failed: $(cat "$tmp/plate.err")"
    cp "$tmp/plate-out/plate.csv" "$tmp/plate.csv" 2>/dev/null || bad "plate wrote no plate.csv"
    "$micro" "${plate[@]}" --no-files --csv --threads 1 >"$tmp/plate1.csv"
    # Identical but for the measured panel's tokens/s (column 19), a timing.
    untimed() { sed -E 's/"[^"]*"/spec/g' "$1" | awk -F, -v OFS=, '$1 == "serve" { $19 = "t" } { print }'; }
    [ "$(untimed "$tmp/plate.csv")" = "$(untimed "$tmp/plate1.csv")" ] && ok "plate identical on 1 and 2 threads" ||
        bad "plate differs across threads"
    # Every scheme row on both texts, every number finite; the fp32 reference has top1 1 and kl 0.
    sed -E 's/"[^"]*"/spec/g' "$tmp/plate.csv" | awk -F, '
        NR == 1 { if ($0 !~ /^panel,label,text,k_cache,v_cache,tokens,loss,delta,bits_per_element,cache_bytes,top1_agree,kl/) bad = "header"; next }
        $1 == "loss" || $1 == "beyond" {
            rows[$1]++
            for (i = 6; i <= 12; i++) if ($i == "" || $i ~ /nan|inf/) bad = "non-finite " $0
        }
        $1 == "reference" && ($11 != 1 || $12 != 0) { bad = "reference " $0 }
        $1 == "capacity" { cap++ }
        $1 == "serve" { serve++; if ($15 < 1 || $19 <= 0) bad = "serve " $0 }
        $1 == "serve" && $2 == "int 4" { held4 = $15 } $1 == "serve" && $2 == "fp16" { held16 = $15 }
        END { if (rows["loss"] != 10 || rows["beyond"] < 26 || cap < 5 || serve < 8) bad = bad " counts"
              if (held4 < 3 * held16) bad = bad " int4 holds " held4 " against fp16 " held16
              if (bad) { print bad; exit 1 } }' &&
        ok "plate csv: every row, finite values, fp32 top1 1 and kl 0" || bad "plate csv: $(head -3 "$tmp/plate.csv")"
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert len(d["schemes"]) >= 18' <"$tmp/plate-out/plate.json" 2>/dev/null &&
        ok "plate json parses" || bad "plate json"
    grep -q "(c) what it buys" "$tmp/panels" && grep -q "(d) what it buys, measured on micro" "$tmp/panels" &&
        ok "plate panels" || bad "plate panels"
    # The page (plate --html): one file, its slots filled, nothing fetched from outside it, the run's
    # JSON embedded whole, a continuation per width and text, and the attention weights of every
    # width, layer and head (the browser check in CI, scripts/browser-check, renders it).
    python3 - "$tmp/plate-out/plate.html" "$tmp/plate-out/plate.json" <<'PY' && ok "plate --html: the page and its data" || bad "plate --html page"
import base64, json, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
assert len(page.encode()) < 2 << 20 and "{{" not in page, "size or slots"
assert not re.search(r'(src|href)\s*=\s*"(?!data:)', page), "a reference outside the page"
d = json.loads(re.search(r'<script type="application/json" id="run">(.*?)</script>', page, re.S).group(1))
assert d["plate"] == json.load(open(sys.argv[2])), "the embedded run differs from plate.json"
assert [b["text"] for b in d["break"]] == ["en", "zh"] and all(len(b["runs"]) == 5 and all(r["text"] for r in b["runs"]) for b in d["break"])
a = d["attention"]
rows, n = a["tokens"] - a["from"], len(a["widths"]) * a["layers"] * a["heads"]
assert len(a["widths"]) == 6 and len(base64.b64decode(a["weights"])) == n * rows * a["tokens"]
tops = base64.b64decode(a["top"])
assert len(tops) == n * rows and all(t <= a["from"] + i % rows for i, t in enumerate(tops)), "a most-attended key after its query"
PY
    expect 2 "drop --no-files" "plate --html --no-files" -- "$micro" plate --html --no-files

    # plate --long: without the corpus, one line naming scripts/corpus. (On a small corpus-form folder:
    # test_cli_bench.sh; windowing is eval's, test_cli_hostile.sh; the fast evaluator against the decode
    # loop is tests/test_eval_fast.c and bench --eval in test_cli_bench.sh.)
    expect 2 "scripts/corpus" "plate --long without a corpus" -- "$micro" plate --long --corpus "$tmp/no-corpus" --no-files
    expect 2 "not --json" "plate --long --json" -- "$micro" plate --long --json
    "$micro" export --llama2c "$tmp/micro.l2c" && [ "$(stat -c %s "$tmp/micro.l2c")" -eq 7543580 ] &&
        ok "llama2.c export is 7,543,580 bytes" || bad "llama2.c export size"
    # As llama2.c reads it: the 7-int header, then the weights exactly as our payload holds them, then
    # freq_cis_real[0] = cos(0) = 1 and freq_cis_imag[0] = 0.
    python3 - "$tmp/micro.l2c" models/micro.bin <<'PY' && ok "llama2.c export: header, weights, RoPE tables" || bad "llama2.c export contents"
import struct, sys
l2c = open(sys.argv[1], "rb").read()
ours = open(sys.argv[2], "rb").read()
assert struct.unpack("<7i", l2c[:28]) == (192, 512, 4, 6, 6, 256, 2048)
n = 1820352 * 4
assert l2c[28:28 + n] == ours[68:68 + n]
table = 2048 * 16 * 4
real = struct.unpack("<2f", l2c[28 + n:28 + n + 8])
imag = struct.unpack("<f", l2c[28 + n + table:28 + n + table + 4])
assert real[0] == 1.0 and imag[0] == 0.0
PY

    # GGUF (checked in full by tests/test_export_gguf.c): a write that fails part-way (file size
    # limit) gives one line and exit 1, and leaves neither the file nor a temporary behind.
    "$micro" export --gguf "$tmp/micro.gguf" && [ "$(stat -c %s "$tmp/micro.gguf")" -eq 7290336 ] &&
        ok "GGUF export is 7,290,336 bytes" || bad "GGUF export size"
    mkdir "$tmp/xfsz"
    (trap '' XFSZ; ulimit -f 100; "$micro" export --gguf "$tmp/xfsz/m.gguf") 2>"$tmp/err"
    st=$?
    [ $st -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ -z "$(ls -A "$tmp/xfsz")" ] &&
        ok "GGUF export: failed write reported, nothing left" || bad "GGUF export failed write: exit $st, $(cat "$tmp/err"), $(ls "$tmp/xfsz")"

    # kvquant's calibration: beside the model by default; an explicit --calib that cannot be used is
    # refused at once, one line; a scheme that needs one and finds none says so.
    expect 2 "cannot open" "--calib missing" -- "$micro" eval --calib "$tmp/none.kvq" --text data/plates/en.txt:20
    expect 2 "bad magic" "--calib not a calibration" -- "$micro" eval --calib "$tmp/bad.bin" --text data/plates/en.txt:20
    cp models/micro.bin "$tmp/alone.bin"
    expect 2 "kvquant needs a calibration" "kvquant without a calibration" -- "$micro" eval --model "$tmp/alone.bin" --cache kvquant:bits=2 --text data/plates/en.txt:20
    "$micro" eval --cache kvquant:bits=3 --text data/plates/en.txt:100 --csv | grep -q "prerope,sink=1" &&
        ok "kvquant evaluates with the shipped calibration" || bad "kvquant with the shipped calibration"
    # nvfp4's calibrated second-level scale: the same file (version 2), the same one-line refusal.
    expect 2 "nvfp4:scale2=calib needs a calibration" "nvfp4 calib without a calibration" -- "$micro" eval --model "$tmp/alone.bin" --cache nvfp4:scale2=calib --text data/plates/en.txt:20
    expect 2 "unrotated" "nvfp4 calib under a rotation" -- "$micro" eval --cache nvfp4:scale2=calib,rot=hadamard --text data/plates/en.txt:20
    "$micro" eval --cache nvfp4:scale2=calib --text data/plates/en.txt:100 --csv | grep -q "^en,nvfp4:scale2=calib,nvfp4:scale2=calib,101,.*,4.5000," &&
        ok "nvfp4:scale2=calib evaluates with the shipped calibration (4.5 bits)" || bad "nvfp4:scale2=calib with the shipped calibration"

    # micro attention: bad requests are one line before any decoding.
    expect 2 "give the cache to compare" "attention without a cache" -- "$micro" attention
    expect 2 "the model has 4 layers" "attention --layer beyond the model" -- "$micro" attention --cache int:bits=2 --layer 9 --out "$tmp"
    expect 2 "is after --to" "attention --from after --to" -- "$micro" attention --cache int:bits=2 --from 9 --to 3
    expect 2 "at most 256 queries" "attention: too many queries" -- "$micro" attention --cache int:bits=2 --from 0 --to 290 --out "$tmp"

    # micro sweep: its rows are eval's rows.
    "$micro" sweep --grid "int:bits={3|4}{|,rot=hadamard}" --text data/plates/en.txt:80 >"$tmp/sweep.csv"
    for spec in int:bits=3 int:bits=4,rot=hadamard; do
        "$micro" eval --cache "$spec" --text data/plates/en.txt:80 --csv | sed -n 2p >"$tmp/one.csv"
        grep -qxF -f "$tmp/one.csv" "$tmp/sweep.csv" && ok "sweep row = eval row ($spec)" || bad "sweep row for $spec: $(cat "$tmp/one.csv")"
    done
    [ "$(wc -l <"$tmp/sweep.csv")" -eq 5 ] && ok "sweep: a grid of 2 x 2 is 4 rows" || bad "sweep rows: $(cat "$tmp/sweep.csv")"
    expect 2 "needs a '}'" "sweep: an open brace" -- "$micro" sweep --grid "int:{bits=2"
    expect 2 "--grid SPEC or --preset all" "sweep without a grid" -- "$micro" sweep
    expect 2 "unknown option 'bogus'" "sweep: a bad spec before any work" -- "$micro" sweep --grid "int:bits={2|3},bogus=1"

    # Every increase carries its 95% interval, around it.
    "$micro" eval --text data/plates/en.txt:150 --cache int:bits=3 --csv | sed -E 's/"[^"]*"/spec/g' |
        awk -F, 'NR == 1 { ok = $11 == "delta_lo" && $12 == "delta_hi" } NR == 2 { ok = ok && $11 <= $6 && $6 <= $12 && $11 < $12 } END { exit !ok }' &&
        ok "eval CSV: delta_lo <= delta <= delta_hi" || bad "eval CSV: the interval does not hold the increase"

    # Transforms that change nothing but rounding under the exact fp32 codec (kvtransform.h).
    for spec in "--cache fp32:rot=hadamard" "--cache fp32:rot=random:9" "--k fp32:prerope"; do
        "$micro" eval --text data/plates/en.txt:100 $spec --csv | awk -F, 'NR == 2 { d = $6 < 0 ? -$6 : $6; exit !(d <= 1e-5) }' &&
            ok "eval $spec: within 1e-5 nats of plain fp32" || bad "eval $spec: not within 1e-5 of plain fp32"
    done

    g1=$("$micro" generate --prompt "The KV cache" -n 40)
    g2=$("$micro" generate --prompt "The KV cache" -n 40 --threads 2)
    [ "$g1" = "$g2" ] && [ ${#g1} -gt 12 ] && ok "greedy generation deterministic" || bad "greedy generation: '$g1' vs '$g2'"
    "$micro" generate --prompt "缓存" -n 60 --temp 0.8 --seed 3 >"$tmp/zh.out"
    iconv -f UTF-8 -t UTF-8 "$tmp/zh.out" >/dev/null 2>&1 && ok "sampled Chinese is valid UTF-8" ||
        bad "sampled Chinese is not valid UTF-8"
else
    echo "skip model-dependent checks: models/micro.bin is absent"
fi

# micro tokenize: micro's byte vocabulary (its own file and its GGUF alike) gives BOS and the bytes.
expect 2 "tokenize needs --text" "tokenize without a text" -- "$micro" tokenize
"$micro" tokenize --text data/plates/en.txt:5 >"$tmp/tok.txt" && [ "$(tr '\n' ' ' <"$tmp/tok.txt")" = "1 87 104 101 110 32 " ] &&
    ok "tokenize: BOS and the bytes" || bad "tokenize bytes: $(cat "$tmp/tok.txt")"
"$micro" export --gguf "$tmp/m.gguf" && "$micro" tokenize --model "$tmp/m.gguf" --text data/plates/en.txt:5 | cmp -s - "$tmp/tok.txt" &&
    ok "tokenize: the exported GGUF's byte vocabulary, the same ids" || bad "tokenize on the GGUF"
"$micro" tokenize --text data/plates/en.txt:2 --csv | sed -n 2p | grep -qx '87,W' && ok "tokenize --csv: id,bytes" || bad "tokenize --csv"

# A GGUF model through inspect, attention and capacity: micro's own export gives micro's own output.
"$micro" inspect --model "$tmp/m.gguf" --text data/plates/en.txt:60 --csv >"$tmp/ins-gguf.csv" &&
    "$micro" inspect --text data/plates/en.txt:60 --csv | cmp -s - "$tmp/ins-gguf.csv" &&
    ok "inspect: the exported GGUF's channels are micro.bin's, byte for byte" || bad "inspect on the GGUF"
"$micro" attention --model "$tmp/m.gguf" --text data/plates/en.txt:40 --cache int:bits=2 --out "$tmp/att-g" | head -1 >"$tmp/att-gguf.txt" &&
    "$micro" attention --text data/plates/en.txt:40 --cache int:bits=2 --out "$tmp/att-b" | head -1 | cmp -s - "$tmp/att-gguf.txt" &&
    ok "attention: the exported GGUF's agreement is micro.bin's" || bad "attention on the GGUF: $(cat "$tmp/att-gguf.txt")"
"$micro" capacity --model "$tmp/m.gguf" --csv | cut -d, -f2-5 >"$tmp/cap-gguf.csv" &&
    "$micro" capacity --model models/micro.bin --csv | cut -d, -f2-5 | cmp -s - "$tmp/cap-gguf.csv" &&
    grep -q '^16-bit,16.0000,3072.0,' "$tmp/cap-gguf.csv" &&
    ok "capacity --model: the GGUF's bytes per token are micro.bin's (3,072 at 16 bits)" || bad "capacity --model: $(head -3 "$tmp/cap-gguf.csv")"
"$micro" generate --model "$tmp/m.gguf" --prompt "The " -n 24 >"$tmp/gen-gguf.txt" &&
    "$micro" generate --prompt "The " -n 24 | cmp -s - "$tmp/gen-gguf.txt" &&
    ok "generate: the exported GGUF continues as micro.bin does" || bad "generate on the GGUF: $(cat "$tmp/gen-gguf.txt")"
expect 2 "give one" "capacity with --preset and --model" -- "$micro" capacity --preset micro --model models/micro.bin
expect 2 "latent" "capacity --model of a latent model" -- "$micro" capacity --model models/micro-mla.bin

finish
