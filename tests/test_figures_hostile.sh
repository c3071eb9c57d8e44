#!/usr/bin/env bash
# A hostile-input probe's second pass: no path is ever code (gnuplot gets it as data), every figure
# is written as safely as a CSV (a FIFO, device or folder in its place is refused, a symbolic link
# written through), the grid parser survives any command line, bad options are refused before any
# work, a text is read only as far as its cut, and a signal leaves no temporary and no helper.
. "$(dirname "$0")/lib.sh"
make_model=${MICRO_MAKE_MODEL:?}

if ! command -v gnuplot >/dev/null; then
    # The figures are what this test is about: without gnuplot it cannot check them, and says so.
    bad "gnuplot is not installed (scripts/test installs it): the figure checks cannot run"
    finish
    exit 1
fi
"$make_model" "$tmp/tiny.bin" 16 1 2 2 16 64 || bad "make_model tiny"
work="$tmp/work"
mkdir "$work"
export TMPDIR="$tmp/tmpdir"
mkdir "$TMPDIR"
# Whatever a path smuggled in would run here or in the folders it names: PWNED must never appear.
pwned() { [ -n "$(find "$tmp" "$root" -maxdepth 3 -name 'PWNED*' 2>/dev/null)" ]; }
leftovers() { find "$1" "$TMPDIR" -mindepth 1 \( -name '*.tmp-*' -o -name 'micro-figure-*' \) 2>/dev/null; }
plate_small=(--en data/plates/en.txt:20 --zh data/plates/zh.txt:5 --serve-length 64 --serve-fp16 2)
# The plates under other names: the plate keys its rows by role, so its figures find them still.
cp data/plates/en.txt "$tmp/english.txt" && cp data/plates/zh.txt "$tmp/chinese.txt"
plate_named=(--en "$tmp/english.txt:20" --zh "$tmp/chinese.txt:5" --serve-length 64 --serve-fp16 2)

# --- 1. a path is never code: every path option of every command that draws ----------------------
names=($'nl\n!touch PWNED #' "ap'!touch PWNED" 'dq"!touch PWNED' 'sub$(touch PWNED)' 'bq`touch PWNED`' 'semi;touch PWNED;')
# plate (the slowest to run) with every name at once, which begins with the first as reported, and
# its texts in files not called en.* and zh.*.
every=$(printf '%s' "${names[@]}")
shown=$(printf '%q' "$every")
(cd "$work" && "$micro" plate --model "$root/models/micro.bin" "${plate_named[@]}" --out "$tmp/$every") \
    >"$tmp/out" 2>&1
st=$?
[ $st -eq 0 ] && [ -s "$tmp/$every/plate.svg" ] && [ -s "$tmp/$every/plate.png" ] && [ -s "$tmp/$every/serve.png" ] &&
    [ -s "$tmp/$every/frontier.svg" ] && ok "plate --out $shown --en english.txt --zh chinese.txt: drawn" ||
    bad "plate --out $shown --en english.txt: exit $st, $(tail -2 "$tmp/out")"
grep -q '^reference,fp32,en,' "$tmp/$every/plate.csv" && grep -q '^reference,fp32,zh,' "$tmp/$every/plate.csv" &&
    ok "plate.csv keys the texts by role (en, zh), not by file name" || bad "plate.csv: $(grep '^reference' "$tmp/$every/plate.csv")"
# attention and inspect draw as plate does, with the first name and with every one; each name alone
# is a text and a figure folder that micro figure refuses (no model run).
for name in "${names[@]}" "$every"; do
    shown=$(printf '%q' "$name")
    dir="$tmp/$name"
    cp data/plates/en.txt "$tmp/$name.txt"
    mkdir -p "$dir"
    if [ "$name" = "${names[0]}" ] || [ "$name" = "$every" ]; then
        (cd "$work" && "$micro" attention --model "$root/models/micro.bin" --cache int:bits=2 --text "$tmp/$name.txt:40" \
            --out "$dir") >"$tmp/out" 2>&1
        st=$?
        [ $st -eq 0 ] && [ -s "$dir/attention.svg" ] && [ -s "$dir/attention.png" ] &&
            ok "attention --out and --text $shown: drawn" || bad "attention $shown: exit $st, $(tail -2 "$tmp/out")"
        (cd "$work" && "$micro" inspect --model "$root/models/micro.bin" --plot --text "$tmp/$name.txt:30" --out "$dir") \
            >"$tmp/out" 2>&1
        st=$?
        [ $st -eq 0 ] && [ -s "$dir/channels.svg" ] && [ -s "$dir/channels.png" ] &&
            ok "inspect --plot --out and --text $shown: drawn" || bad "inspect --plot $shown: exit $st, $(tail -2 "$tmp/out")"
    fi
    cp "$tmp/$name.txt" "$tmp/$name.csv" # not a CSV: refused with micro's line, its name echoed safely
    expect 2 "not micro sweep's or plate's CSV" "figure --csv $shown (not a CSV)" -- "$micro" figure --csv "$tmp/$name.csv" --out "$dir/again"
    pwned && bad "a path ran a command: $shown" || ok "nothing run for $shown"
    [ -z "$(leftovers "$dir")" ] && ok "no temporaries for $shown" || bad "left behind for $shown: $(leftovers "$dir")"
    rm -f "$tmp"/PWNED* "$root"/PWNED* "$work"/PWNED*
done
(cd "$work" && "$micro" figure --csv "$tmp/$every/plate.csv" --out "$tmp/$every/again") >"$tmp/out" 2>&1 &&
    [ -s "$tmp/$every/again/frontier.png" ] && [ -s "$tmp/$every/again/plate.png" ] &&
    ok "figure --csv and --out with every character: drawn" || bad "figure with every character: $(tail -2 "$tmp/out")"
pwned && bad "micro figure ran a command" || ok "micro figure: nothing run"

# --- 2. figures refuse what is not a regular file, and write through a symbolic link ----------------
# The plate's three figures through micro figure on the plate's CSV above (no model run), then
# attention's and inspect's. A FIFO, a device or a folder at one figure's name is refused before
# anything is drawn; symbolic links at every name of a command are written through in one run.
base="$tmp/$every"
mknod "$tmp/devnull" c 1 3 2>/dev/null || mkfifo "$tmp/devnull" # a private device node where allowed
refuses() { # DIR FILE CMD...: each kind at DIR/FILE in turn, refused in one line and left as it was
    local d=$1 f=$2
    shift 2
    for kind in fifo device folder; do
        rm -rf "${d:?}"
        mkdir -p "$d"
        case $kind in
            fifo) mkfifo "$d/$f" ;;
            device) cp -a "$tmp/devnull" "$d/$f" ;;
            folder) mkdir "$d/$f" ;;
        esac
        timeout 120 "$@" >"$tmp/out" 2>"$tmp/err"
        local st=$? same=0
        case $kind in
            fifo) [ -p "$d/$f" ] && same=1 ;;
            device) { [ -c "$d/$f" ] || [ -p "$d/$f" ]; } && same=1 ;;
            folder) [ -d "$d/$f" ] && same=1 ;;
        esac
        [ $st -eq 2 ] && [ $same = 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^micro: " "$tmp/err" &&
            [ "$(ls -A "$d")" = "$f" ] && ok "$f a $kind: refused in one line, left as it was, nothing else written" ||
            bad "$f a $kind: exit $st, $(cat "$tmp/err"), in the folder: $(ls -A "$d")"
        [ -z "$(leftovers "$d")" ] || bad "$f a $kind: left $(leftovers "$d")"
    done
}
links() { # DIR CMD... with FILE... after --: every FILE a symbolic link, all written through in one run
    local d=$1 files=() cmd=()
    shift
    while [ "$1" != -- ]; do cmd+=("$1"); shift; done
    shift
    files=("$@")
    rm -rf "${d:?}"
    mkdir -p "$d"
    for f in "${files[@]}"; do echo old >"$tmp/linked.$f" && ln -s "$tmp/linked.$f" "$d/$f"; done
    timeout 120 "${cmd[@]}" >"$tmp/out" 2>"$tmp/err"
    local st=$?
    for f in "${files[@]}"; do
        [ $st -eq 0 ] && [ -L "$d/$f" ] && [ "$(readlink "$d/$f")" = "$tmp/linked.$f" ] &&
            [ "$(head -c 3 "$tmp/linked.$f")" != old ] && [ -s "$tmp/linked.$f" ] &&
            ok "$f a symbolic link: written through it, the link kept" || bad "$f a symbolic link: exit $st, $(cat "$tmp/err")"
    done
    [ -z "$(leftovers "$d")" ] || bad "symbolic links: left $(leftovers "$d")"
}
for f in plate.svg plate.png serve.svg serve.png frontier.svg frontier.png; do
    refuses "$tmp/fig" "$f" "$micro" figure --csv "$base/plate.csv" --out "$tmp/fig"
done
links "$tmp/fig" "$micro" figure --csv "$base/plate.csv" --out "$tmp/fig" -- \
    plate.svg plate.png serve.svg serve.png frontier.svg frontier.png
attention=("$micro" attention --cache int:bits=2 --text data/plates/en.txt:20 --out "$tmp/att")
inspect=("$micro" inspect --plot --text data/plates/en.txt:20 --out "$tmp/ch")
for f in attention.svg attention.png; do refuses "$tmp/att" "$f" "${attention[@]}"; done
links "$tmp/att" "${attention[@]}" -- attention.svg attention.png
for f in channels.svg channels.png; do refuses "$tmp/ch" "$f" "${inspect[@]}"; done
links "$tmp/ch" "${inspect[@]}" -- channels.svg channels.png
# plate checks every file it will write before any work.
rm -rf "$tmp/pl" && mkdir "$tmp/pl" && mkfifo "$tmp/pl/frontier.svg"
expect 2 "frontier.svg: not a regular file" "plate: a FIFO at frontier.svg, refused before any work" -- \
    "$micro" plate "${plate_small[@]}" --out "$tmp/pl"
[ ! -s "$tmp/out" ] && [ ! -e "$tmp/pl/plate.csv" ] && ok "plate wrote nothing" || bad "plate wrote: $(ls "$tmp/pl")"

# --- 3. micro's own words for the figure helper's failures; helpers die with micro ---------------------
mkdir "$tmp/fake"
cat >"$tmp/fake/gnuplot" <<'EOF'
#!/bin/sh
echo "line 7: gnuplot's own complaint" >&2
echo "raw helper output" >&2
exit 1
EOF
chmod +x "$tmp/fake/gnuplot"
PATH="$tmp/fake:$PATH" "$micro" figure --csv "$base/plate.csv" --out "$tmp/failed" >"$tmp/out" 2>"$tmp/err"
st=$?
[ $st -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^micro: cannot draw .*plate.svg: gnuplot failed: raw helper output" "$tmp/err" &&
    [ -z "$(ls -A "$tmp/failed")" ] && ok "a failing gnuplot: micro's one line, nothing written" ||
    bad "a failing gnuplot: exit $st, $(cat "$tmp/err"), $(ls -A "$tmp/failed")"
PATH= "$micro" inspect --plot --text data/plates/en.txt:20 --out "$tmp/nopath" >"$tmp/out" 2>"$tmp/err"
st=$?
[ $st -eq 0 ] && ! grep -q "env\|bash" "$tmp/err" && ok "PATH empty: inspect --plot draws, no helper's words" ||
    bad "PATH empty: exit $st, $(cat "$tmp/err")"

# A gnuplot that hangs: a signal to micro ends it too and leaves no temporary. Every signal is set
# to its default through a wrapper first: a background job of a script ignores SIGINT, a run under
# nohup ignores SIGHUP, and micro keeps an ignored signal ignored (as a user who ignores it asks).
cat >"$tmp/fake/gnuplot" <<EOF
#!/bin/sh
echo \$\$ >"$tmp/helper.pid"
exec sleep 120
EOF
chmod +x "$tmp/fake/gnuplot"
for sig in TERM HUP INT; do
    rm -rf "$tmp/sig" "$tmp/helper.pid"
    PATH="$tmp/fake:$PATH" python3 -c 'import os, signal, sys
signal.signal(getattr(signal, "SIG" + sys.argv[1]), signal.SIG_DFL)
os.execv(sys.argv[2], sys.argv[2:])' $sig "$micro" figure --csv "$base/plate.csv" --out "$tmp/sig" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 100); do [ -s "$tmp/helper.pid" ] && break; sleep 0.1; done
    helper=$(cat "$tmp/helper.pid" 2>/dev/null)
    kill -$sig $pid
    wait $pid
    st=$?
    sleep 0.2
    if [ -n "$helper" ] && ! kill -0 "$helper" 2>/dev/null && [ $st -gt 128 ] && [ -z "$(leftovers "$tmp/sig")" ] &&
        [ -z "$(ls -A "$tmp/sig")" ]; then
        ok "SIG$sig while drawing: micro ($st) and its helper ended, nothing left"
    else
        bad "SIG$sig while drawing: exit $st, helper ${helper:-never started} $(kill -0 "$helper" 2>/dev/null && echo alive),"\
" left: $(leftovers "$tmp/sig") $(ls -A "$tmp/sig" 2>/dev/null)"
        [ -n "$helper" ] && kill "$helper" 2>/dev/null
    fi
done

# --- 3b. figure's CSV bounded: texts, families, rows, bars; memory by the columns it reads -----------
# Each refused in one line before gnuplot runs, nothing drawn; within the limits, drawn in moments.
eval_header=text,k_cache,v_cache,tokens,loss,delta,bits_per_element,cache_bytes,top1_agree,kl,delta_lo,delta_hi
# figure_bound LABEL NEEDLE CSV [WRAPPER...]: refused in one line, at once, the folder left empty.
figure_bound() {
    local start=$SECONDS
    rm -rf "$tmp/bound"
    expect 2 "$2" "figure --csv $1: refused" -- "${@:4}" "$micro" figure --csv "$3" --out "$tmp/bound"
    [ $((SECONDS - start)) -lt 10 ] || bad "figure --csv $1 took $((SECONDS - start)) s"
    [ -z "$(ls -A "$tmp/bound" 2>/dev/null)" ] && [ ! -s "$tmp/out" ] || bad "figure --csv $1 wrote: $(ls -A "$tmp/bound")"
}
{ echo "$eval_header"; for i in $(seq 300); do echo "t$i,f$i:a,f$i:a,10,1,0.1,4,1,1,0,0,0"; done; } >"$tmp/texts.csv"
figure_bound "300 texts" "300 texts, more than the 16" "$tmp/texts.csv"
{ echo "$eval_header"; for i in $(seq 65); do echo "t,f$i:a,f$i:a,10,1,0.$i,$((i % 16 + 1)),1,1,0,0,0"; done; } >"$tmp/fams.csv"
figure_bound "65 families" "65 families (k_cache/v_cache), more than the 64" "$tmp/fams.csv"
{ cat "$base/plate.csv"; for i in $(seq 200); do echo "arch,A$i fp32,en,fp32,fp32,20,1,0,32,100,1,0,,,,$((10 + i)),,,,,,,,A$i,64,0.0$i,0,0"; done; } >"$tmp/arch.csv"
figure_bound "plate's, 200 architectures" "architectures in panel (g), more than the 64" "$tmp/arch.csv"
{ cat "$base/plate.csv"; for i in $(seq 65); do echo "serve,S$i,,fp16,fp16,64,,,16,,,,,micro,$i,100.0,3.00,3.00,1000.0,100.0,10000,,,,,,,"; done; } >"$tmp/bars.csv"
figure_bound "plate's, 65 more serve rows" "serve rows, more than the 64 bars" "$tmp/bars.csv"
# A 64-column header and 8 MB of rows of x kept a pointer per column per row (2 GB): refused at the
# row limit, its peak memory the file and the columns read.
{ printf 'c%d,' $(seq 63); echo c64; yes x | head -c 8000000; } >"$tmp/wide.csv"
peak_of=(python3 -c 'import resource, subprocess, sys
status = subprocess.run(sys.argv[2:]).returncode
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(status)' "$tmp/peak") # runs a command, its peak memory (kB) to $tmp/peak
figure_bound "64 columns, 4,000,000 rows of x" "more than 100000 rows" "$tmp/wide.csv" "${peak_of[@]}"
peak=$(cat "$tmp/peak" 2>/dev/null)
[ "${peak:-999999999}" -lt 300000 ] && ok "figure --csv of 8 MB in 64 columns: peak $((peak / 1024)) MB" ||
    bad "figure --csv of 8 MB in 64 columns: peak ${peak:-?} kB"
rm -f "$tmp/wide.csv"
# 300 rows of 64 families (the limit) on 4 texts, drawn in moments (300 texts and families took 600 s).
{ echo "$eval_header"; for i in $(seq 0 299); do echo "t$((i % 4)),f$((i % 64)):a,f$((i % 64)):a,10,1,0.$((i % 97 + 1)),$((i % 15 + 1)).5,1,1,0,0,0"; done; } >"$tmp/full.csv"
start=$SECONDS
expect 0 "" "figure --csv with 64 families: drawn" -- "$micro" figure --csv "$tmp/full.csv" --out "$tmp/full"
[ -s "$tmp/full/frontier.png" ] && [ "$(grep -c '^frontier, t' "$tmp/out")" = 4 ] && [ $((SECONDS - start)) -lt 20 ] &&
    ok "300 rows, 64 families: 4 frontiers in $((SECONDS - start)) s" || bad "300 rows, 64 families: $(head -c 300 "$tmp/out")"

# --- 4. the grid parser: any command line, one line and exit 2, in moments --------------------------
grid_bomb() { # LABEL NEEDLE PATTERN
    local start=$SECONDS
    expect 2 "$2" "sweep --grid: $1" -- "$micro" sweep --model "$tmp/tiny.bin" --text data/plates/en.txt:10 --grid "$3"
    [ $((SECONDS - start)) -lt 20 ] || bad "sweep --grid $1 took $((SECONDS - start)) s"
    [ "$(wc -c <"$tmp/err")" -lt 600 ] || bad "sweep --grid $1: a message of $(wc -c <"$tmp/err") bytes"
}
grid_bomb "fp16{}{}... x 43,000 (one spec, a bad one for this model)" "" "$(printf 'fq16'; printf '{}%.0s' $(seq 43000))"
grid_bomb "{f}{f}... x 20,000" "codec name longer" "$(printf '{f}%.0s' $(seq 20000))"
grid_bomb "{a|b} x 13" "more than 4096 specs" "$(printf '{a|b}%.0s' $(seq 13))"
grid_bomb "400 alternatives, 110,000 commas" "bits" "int:bits={$(printf '9|%.0s' $(seq 399))9}$(head -c 110000 /dev/zero | tr '\0' ,)"
grid_bomb "an unclosed brace after 100,000 characters" "needs a '}'" "$(head -c 100000 /dev/zero | tr '\0' x){"

# --- 5. bounded by design: ranges, pools, blocks, texts ---------------------------------------------
expect 2 "go with --batch" "bench --block 7 without --batch" -- "$micro" bench --block 7
expect 2 "multiple of 16" "bench --batch --block 7: refused before any work" -- "$micro" bench --batch 2 --block 7
expect 2 "do not fit" "bench --batch --block 99999" -- "$micro" bench --batch 2 --block 99999
expect 2 "multiple of 16" "serve-bench --block 7" -- "$micro" serve-bench --block 7
expect 2 "more than this machine's memory" "serve-bench --pool-mb 1e7 (10 TB)" -- "$micro" serve-bench --pool-mb 1e7
expect 0 "" "serve-bench --pool-fp16 1 runs (in its documented range)" -- \
    "$micro" serve-bench --model "$tmp/tiny.bin" --pool-fp16 1 --conversations 2 --length 32 --csv
mkdir -p "$tmp/fifoplates/data/plates"
mkfifo "$tmp/fifoplates/data/plates/en.txt" "$tmp/fifoplates/data/plates/zh.txt"
expect 2 "not a regular file" "serve-bench: the plates a FIFO, refused at once" -- \
    env -C "$tmp/fifoplates" timeout 20 "$micro" serve-bench --model "$root/models/micro.bin"
for v in 2 5; do
    expect 2 "--serve-length" "plate --serve-length $v: refused when parsed" -- "$micro" plate --serve-length $v --no-files
done
start=$SECONDS
expect 2 "outside 6..2048" "plate --serve-length 5000: refused before any work" -- "$micro" plate --serve-length 5000 --no-files
[ ! -s "$tmp/out" ] && [ $((SECONDS - start)) -lt 10 ] || bad "plate --serve-length 5000 worked first"
expect 2 "context 2048" "calibrate --length 2049 names the context" -- "$micro" calibrate --length 2049 --out "$tmp/x.kvq"
expect 2 "cannot end in '/'" "export --gguf DIR/new.gguf/" -- "$micro" export --gguf "$tmp/new.gguf/"
expect 2 "queries 11..10" "attention --from 11 on an 11-token text" -- "$micro" attention --cache int:bits=2 --text data/plates/en.txt:10 --from 11
expect 2 "queries 400..10" "attention --from 400 without --to" -- "$micro" attention --cache int:bits=2 --text data/plates/en.txt:10 --from 400
# A 4 GiB sparse text: its cut is read alone; whole, it is refused at its stated cap.
if truncate -s 4G "$tmp/big.txt" 2>/dev/null; then
    start=$SECONDS
    expect 0 "" "eval --text BIG:10 reads 10 characters" -- "$micro" eval --model "$tmp/tiny.bin" --csv --text "$tmp/big.txt:10"
    [ $((SECONDS - start)) -lt 10 ] || bad "eval --text BIG:10 took $((SECONDS - start)) s"
    for cmd in "eval --csv" "sweep --grid fp16" "inspect" "attention --cache fp16"; do
        expect 2 "more than the 64 MiB a text may hold" "$cmd --text BIG: refused at the cap" -- \
            "$micro" $cmd --model "$tmp/tiny.bin" --text "$tmp/big.txt"
    done
    rm -f "$tmp/big.txt"
else
    bad "cannot make a sparse 4 GiB file in $tmp"
fi

finish
