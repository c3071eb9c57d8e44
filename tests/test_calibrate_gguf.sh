# micro calibrate on the model a user brings (docs/models.md): tiny synthetic GGUFs of each
# architecture (tests/make_gguf: llama3, qwen2, qwen3) in a byte-level BPE vocabulary of their own,
# calibrated from a text (--text) and from a corpus-form folder; the .kvq written beside the model
# loads, and eval --calib runs kvquant on it; the same bits on 1 and 2 threads; hostile --text inputs.
. "$(dirname "$0")/lib.sh"
make_gguf=${MICRO_MAKE_GGUF:?}

C=$tmp/corpus # a corpus in data/corpus's form: each document after a 0x01 byte
mkdir -p "$C"
{ printf '\001'; cat data/plates/en.txt; printf '\001'; cat docs/kvq-format.md; } >"$C/en.train.txt" # whole files: valid UTF-8
{ printf '\001'; cat data/plates/zh.txt; } >"$C/zh.train.txt"
{ printf '\001'; head -c 300 data/plates/en.txt; } >"$C/en.val.txt"
{ printf '\001'; head -c 300 data/plates/zh.txt; } >"$C/zh.val.txt"

for a in llama3 qwen2 qwen3; do
    "$make_gguf" "$tmp/$a.gguf" "$a" 1 400 || bad "make_gguf $a"
    expect 0 "" "calibrate --text on a $a GGUF of its own vocabulary" -- \
        "$micro" calibrate --model "$tmp/$a.gguf" --text data/plates/en.txt:1200 --sequences 2 --length 48 --threads 1
    [ -s "$tmp/$a.kvq" ] && grep -q '"vocabulary": "the model'"'"'s own"' "$tmp/$a.kvq.json" &&
        grep -q '"text": {"path": "data/plates/en.txt:1200"' "$tmp/$a.kvq.json" &&
        ok "$a: X.gguf -> X.kvq beside it, its record names the text and the vocabulary" ||
        bad "$a: no $a.kvq or record: $(ls "$tmp")"
    expect 0 "" "eval --calib kvquant on the $a GGUF" -- \
        "$micro" eval --model "$tmp/$a.gguf" --calib "$tmp/$a.kvq" --cache kvquant:bits=2 --text data/plates/en.txt:80 --csv
    grep -q '^en,"kvquant:bits=2' "$tmp/out" && ok "$a: eval's kvquant row" || bad "$a: eval printed $(cat "$tmp/out")"
    expect 0 "" "calibrate --text on 2 threads ($a)" -- \
        "$micro" calibrate --model "$tmp/$a.gguf" --text data/plates/en.txt:1200 --sequences 2 --length 48 --threads 2 \
        --out "$tmp/$a-2.kvq"
    cmp -s "$tmp/$a.kvq" "$tmp/$a-2.kvq" && ok "$a: 1 and 2 threads give the same file" || bad "$a: threads change the file"
done
expect 0 "" "calibrate a GGUF from the corpus, tokenised by its tokenizer" -- \
    "$micro" calibrate --model "$tmp/qwen2.gguf" --corpus "$C" --sequences 2 --length 48 --out "$tmp/q-corpus.kvq"
grep -q "the model's tokenizer" "$tmp/out" && grep -q '"corpus": {"sha256"' "$tmp/q-corpus.kvq.json" &&
    ok "the corpus's run says so, its record names the corpus" || bad "corpus run: $(head -1 "$tmp/out")"
expect 0 "" "eval finds the calibration beside the model (no --calib)" -- \
    "$micro" eval --model "$tmp/qwen3.gguf" --cache kvquant:bits=3 --text data/plates/en.txt:60 --csv

# A text the user names, as a hostile user names it: one line, exit 2, nothing written.
printf '' >"$tmp/empty.txt"
head -c 2000 /dev/urandom >"$tmp/garbage.bin"
printf 'Too short.' >"$tmp/short.txt"
expect 2 "No such file" "calibrate --text missing" -- \
    "$micro" calibrate --model "$tmp/qwen2.gguf" --text "$tmp/none.txt" --out "$tmp/x.kvq"
expect 2 "empty" "calibrate --text empty" -- "$micro" calibrate --model "$tmp/qwen2.gguf" --text "$tmp/empty.txt" --out "$tmp/x.kvq"
expect 2 "invalid UTF-8" "calibrate --text binary garbage" -- \
    "$micro" calibrate --model "$tmp/qwen2.gguf" --text "$tmp/garbage.bin" --out "$tmp/x.kvq"
expect 2 "fewer than one sequence of --length 48 needs (49)" "calibrate --text too short for one window (no BOS: 49)" -- \
    "$micro" calibrate --model "$tmp/qwen2.gguf" --text "$tmp/short.txt" --length 48 --out "$tmp/x.kvq"
expect 2 "needs (48)" "calibrate --text too short (a BOS first: 48)" -- \
    "$micro" calibrate --model "$tmp/llama3.gguf" --text "$tmp/short.txt" --length 48 --out "$tmp/x.kvq"
expect 2 "two sources of calibration text" "calibrate --text and --corpus" -- \
    "$micro" calibrate --model "$tmp/qwen2.gguf" --text data/plates/en.txt --corpus "$C" --out "$tmp/x.kvq"
expect 2 "names the same file as --text" "calibrate --out over the text" -- \
    "$micro" calibrate --model "$tmp/qwen2.gguf" --text "$tmp/short.txt" --out "$tmp/short.txt"
[ ! -e "$tmp/x.kvq" ] && [ "$(cat "$tmp/short.txt")" = "Too short." ] && ok "the refusals wrote nothing" ||
    bad "a refusal wrote a file"
# micro's own byte models take --text too: the bytes are the ids, BOS first.
expect 0 "" "calibrate micro.bin from --text" -- \
    "$micro" calibrate --text data/plates/en.txt:400 --sequences 1 --length 64 --out "$tmp/micro-text.kvq"
finish
