#!/usr/bin/env bash
# The command line as a user meets it: help, version, one-line errors with exit status 2, the CSV
# interface, determinism across runs and thread counts, the llama2.c export's exact size.
set -u
micro=${MICRO_BIN:?}
root=${MICRO_SOURCE_ROOT:?}
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fails=$((fails + 1)); echo "FAIL $1"; }

# expect STATUS NEEDLE LABEL -- CMD...: exit status and a stderr line containing NEEDLE (one line).
expect() {
    local want=$1 needle=$2 label=$3
    shift 4
    "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        bad "$label: exit $got, wanted $want ($(head -c 300 "$tmp/err"))"
    elif [ -n "$needle" ] && ! grep -q -- "$needle" "$tmp/err"; then
        bad "$label: stderr lacks '$needle': $(head -c 300 "$tmp/err")"
    else
        ok "$label"
    fi
}

expect 2 "usage" "no command" -- "$micro"
expect 2 "unknown command 'bogus'" "unknown command" -- "$micro" bogus
expect 0 "" "--help" -- "$micro" --help
expect 0 "" "--version" -- "$micro" --version
for cmd in eval generate bench train export; do
    expect 0 "" "$cmd --help" -- "$micro" "$cmd" --help
    expect 2 "unknown option '--bogus'" "$cmd unknown option" -- "$micro" "$cmd" --bogus
done
"$micro" --help | grep -q "fp32" && ok "help lists codecs" || bad "help lists codecs"

printf 'abc\xff\xfedef' >"$tmp/bad.txt"
: >"$tmp/empty.txt"
head -c 3000 /dev/zero | tr '\0' 'a' >"$tmp/long.txt"
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
expect 2 "needs a value" "missing value" -- "$micro" eval --text
expect 2 "out of range" "threads 0" -- "$micro" eval --threads 0
expect 2 "needs --prompt" "generate without prompt" -- "$micro" generate
expect 2 "needs --llama2c" "export without file" -- "$micro" export

if [ -f models/micro.bin ]; then
    expect 2 "context of 2048" "text beyond the context" -- "$micro" eval --text "$tmp/long.txt"
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

    "$micro" export --llama2c "$tmp/micro.l2c" && [ "$(stat -c %s "$tmp/micro.l2c")" -eq 7543580 ] &&
        ok "llama2.c export is 7,543,580 bytes" || bad "llama2.c export size"

    g1=$("$micro" generate --prompt "The KV cache" -n 40)
    g2=$("$micro" generate --prompt "The KV cache" -n 40 --threads 2)
    [ "$g1" = "$g2" ] && [ ${#g1} -gt 12 ] && ok "greedy generation deterministic" || bad "greedy generation: '$g1' vs '$g2'"
    "$micro" generate --prompt "缓存" -n 60 --temp 0.8 --seed 3 >"$tmp/zh.out"
    iconv -f UTF-8 -t UTF-8 "$tmp/zh.out" >/dev/null 2>&1 && ok "sampled Chinese is valid UTF-8" ||
        bad "sampled Chinese is not valid UTF-8"
else
    echo "skip model-dependent checks: models/micro.bin is absent"
fi

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
