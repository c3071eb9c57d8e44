#!/usr/bin/env bash
# The measuring commands as a user meets them: bench --eval's floor against its closed form, bench
# --batch's tables (every figure present, positive and consistent with the others as printed),
# plate --long on a small corpus, serve-bench's refusals and CSV. (Split from test_cli.sh so that the
# shell tests balance on two cores.)
. "$(dirname "$0")/lib.sh"

if [ -f models/micro.bin ]; then
    expect 2 "one of --batch and --eval" "bench --batch with --eval" -- "$micro" bench --eval --batch 4
    "$micro" bench --eval --positions 100 --repeat 1 --cache kivi:bits=2,group=16,residual=32 >"$tmp/be.txt" 2>&1
    [ "$(grep -Ec ' 0\.00e\+00 +[0-9.]+$' "$tmp/be.txt")" = 2 ] && ok "bench --eval: fast and decode losses equal (fp32, kivi)" ||
        bad "bench --eval: $(tail -2 "$tmp/be.txt")"
    # --no-decode: the fast evaluator alone, with its tokens/s.
    "$micro" bench --eval --no-decode --positions 100 --repeat 1 >"$tmp/bn.txt" 2>&1
    awk '/^fp32 \/ fp32/ { rows++; ok = $4 == "-" && $5 > 0 && $6 == "-" && $10 > 0 }
         END { exit !(rows == 1 && ok) }' "$tmp/bn.txt" &&
        ok "bench --eval --no-decode: the fast evaluator alone, its tokens/s" || bad "bench --eval --no-decode: $(grep -A1 '^cache' "$tmp/bn.txt")"
    expect 2 "--no-decode goes with --eval" "bench --no-decode without --eval" -- "$micro" bench --no-decode
    # Its arithmetic floor, against the closed form for the shipped model: 99 positions × 1,818,624
    # multiply-adds of weights (4 layers × (4·192² + 3·192·512) + 256·192) = 0.18 G, and
    # 4 · 6 · 2 · 32 · (1 + ... + 99) = 7.6 M of attention; and a positive peak.
    grep -q "scoring this window is 0.19 G multiply-adds (weights 0.18 G, attention 0.01 G)" "$tmp/be.txt" &&
        grep -Eq "one core here peaks at [1-9][0-9.]* G a second" "$tmp/be.txt" &&
        ok "bench --eval: the arithmetic's floor (closed form, a measured peak)" || bad "bench --eval floor: $(tail -6 "$tmp/be.txt")"
    # bench (decode): the target line's shares are the table's same-size roofline column at 1 thread,
    # and the mean-size figures beside them, one a position count, all positive; the longest decode's
    # eight buffer sizes (above the 7.3 MB of weights) each with a rate.
    "$micro" bench --positions 16,48 --repeat 1 --threads 1 >"$tmp/bd.txt" 2>&1
    awk '/^ +[0-9]+ +1 / { col[n++] = $7 } /^target: decode/ { for (i = 2; i <= NF; i++) if ($(i - 1) == "positions") { v = $i; gsub(/[%,]/, "", v); tgt[m++] = v } }
         /^against one buffer of the mean/ { for (i = 1; i <= NF; i++) if ($i ~ /%$/ && $i + 0 > 0) k++ }
         /^the same-size reads of the 48-position decode/ { for (i = 2; i < NF; i++) if ($i == "at" && $(i - 1) + 0 > 7 && $(i + 1) + 0 > 0) r++ }
         END { ok = n == 2 && m == 2 && k == 2 && r == 8; for (i = 0; i < n; i++) ok = ok && col[i] == tgt[i] "%" && tgt[i] > 0; exit !ok }' "$tmp/bd.txt" &&
        ok "bench: the decode target's shares are the table's, with the mean-size ones" ||
        bad "bench decode target: $(grep -E '^ +[0-9]+ +1 |^target|^against|^the same-size' "$tmp/bd.txt")"
    # bench --batch: the side-by-side table, the floor's and the pool read's, each a row for fp16 and one for the cache,
    # every figure a positive finite number. (Not how the figures compare: they are timings, and a
    # loaded machine can put a step below its floor; speed is measured by bench, not by a test.)
    "$micro" bench --batch 4 --steps 2 --repeat 2 --threads 1 --cache int:bits=4 >"$tmp/bb.txt" 2>&1
    awk '/ns\/head/ { floor = 1 }
         /^(fp16|int:bits=4) \// { rows++
             for (i = 4; i <= NF; i++) { v = $i; sub(/[x%]$/, "", v); if (v != "|" && v != "-" && !(v + 0 > 0)) bad = bad " " $0 } }
         END { if (rows != 6 || !floor || bad) { print rows, bad; exit 1 } }' "$tmp/bb.txt" >/dev/null &&
        ok "bench --batch: the three tables, positive figures" || bad "bench --batch: $(tail -8 "$tmp/bb.txt")"
    # The noise beside the best figures: the lowest of the 3 bandwidth readings (no higher than the
    # best) and the range of the 2 turns' ratios (low <= high).
    tr -s ' \n' ' ' <"$tmp/bb.txt" | grep -Eo 'measured here: [0-9.]+ GB/s .{0,80}the best of 3 readings .{0,40}the lowest [0-9.]+\)|just before it: [0-9.]+x to [0-9.]+x over 2 turns' |
        awk '/GB/ { best = $3; low = $NF; sub(/\)$/, "", low); best += 0; low += 0; b = best > 0 && low > 0 && low <= best }
             /turns/ { lo = $4; hi = $6; sub(/x$/, "", lo); sub(/x$/, "", hi); lo += 0; hi += 0; t = lo > 0 && lo <= hi }
             END { exit !(b && t) }' &&
        ok "bench --batch: the lowest bandwidth reading and the turns' range of ratios" ||
        bad "bench --batch noise: $(head -12 "$tmp/bb.txt")"
    # Both targets at once: fp16 at 80% of its roofline and the cache 0.8 × its bytes ratio r faster
    # ask the cache for 0.64 · r · (C + W) / (C16 + W) of its roofline (C: cache bytes, W: the
    # weights', which count in both rooflines and not in r), whatever the timings. (C + W) / bandwidth
    # is a row's roofline share times its step, so the first table gives the closed form (to ~1%:
    # the printed figures are rounded).
    awk '/^(fp16|int:bits=4) \// && !done[$1]++ { load[$1] = $5 * $7; if ($1 != "fp16") { r = $NF; sub(/x$/, "", r); r += 0 } }
         /^both targets at once/ { seen = 1 }
         seen && /% of its roofline/ { for (i = 1; i <= NF; i++) if ($i ~ /%$/) { v = $i; sub(/%$/, "", v); share = v + 0; break } }
         END { want = 64 * r * load["int:bits=4"] / load["fp16"]
               exit !(seen && r > 1 && share >= 64 && share > 0.97 * want && share < 1.03 * want) }' "$tmp/bb.txt" &&
        ok "bench --batch: both targets at once (the closed form of the first table)" ||
        bad "bench --batch both targets: $(grep -A3 '^both' "$tmp/bb.txt")"
    # The pool read alone: each row's GB/s is its MB over its ms (as rounded) and its share of the
    # stream that over the bandwidth reading. The line under the targets adds fp16's other work and its
    # read, gives their roofline share (fp16's roofline load, share × step in the first table, over
    # their sum) and the first table's step as a share of the sum. To ~2%: the figures are rounded;
    # the step's share to what its two rounded figures (ms to 2 decimals) and its own rounding allow.
    # The other work counts as at least the weights' read at the bandwidth (micro's 1,820,352 fp32
    # weights), as the floor's text says: on a loaded machine the bandwidth reading is low enough
    # for that read to be the longer.
    tr -s ' \n' ' ' <"$tmp/bb.txt" |
        grep -Eo 'measured here: [0-9.]+ GB/s|classifier: [0-9.]+ ms|add up to [0-9.]+ ms, [0-9.]+% of its roofline; its measured step, [0-9.]+ ms, is [0-9]+%' >"$tmp/bb_other.txt"
    awk 'function near(a, b) { return a > 0 && b > 0 && a < 1.02 * b + 0.011 && b < 1.02 * a + 0.011 }
         FNR == NR { if ($1 == "measured") bw = $3; else if ($1 == "classifier:") other = $2
                     else { x = $4; y = $6; sub(/%$/, "", y); step = $13; w = $16; sub(/%$/, "", w); x += 0; y += 0; step += 0; w += 0; alone = 1 }
                     next }
         /^(fp16|int:bits=4) \// && !done[$1]++ && $1 == "fp16" { load = $5 * $7 }
         /of stream/ { pool = 1; next }
         pool && /^(fp16|int:bits=4) \// { share = $7; sub(/%$/, "", share); share += 0
             if (!($6 > 0.99 * $5 / ($4 + 0.005) && ($4 <= 0.005 || $6 < 1.01 * $5 / ($4 - 0.005))) ||
                 !near(100 * $6 / bw, share)) bad = 1
             if ($1 == "fp16") read16 = $4; rows++ }
         /^(fp16|int:bits=4) \// && !seen[$1]++ && $1 == "fp16" { step16 = $5 }
         END { if (bw > 0 && 1820352 * 4 / 1e6 / bw > other) other = 1820352 * 4 / 1e6 / bw
               if (rows == 2 && !bad && alone && near(x, other + read16) && near(y, load / x) &&
                   near(step, step16) && w >= 100 * (step - 0.005) / (x + 0.005) - 0.5 &&
                   (x <= 0.005 || w <= 100 * (step + 0.005) / (x - 0.005) + 0.5)) exit 0
               printf "rows %d, rates off %d, other %s + read %s against %s ms, roofline %s against %s%%, step %s against %s ms\n",
                      rows, bad, other, read16, x, (x > 0 ? load / x : "-"), y, step, step16
               exit 1 }' \
        "$tmp/bb_other.txt" "$tmp/bb.txt" >"$tmp/bb_alone.txt" &&
        ok "bench --batch: the pool read alone (its rates; fp16's other work and read against its step)" ||
        bad "bench --batch pool read: $(cat "$tmp/bb_alone.txt"), in: $(cat "$tmp/bb.txt")"
    # Paging's cost on the kernels: each cache's floor (ns per head and token at blocks of 16) against
    # the same kernels on a cache in one block, as the percentage printed (to rounding: ~1 point).
    tr -s ' \n' ' ' <"$tmp/bb.txt" |
        grep -Eo 'they take [0-9.]+ \(fp16\) and [0-9.]+ \(int:bits=4\) ns per head and token in cache, so blocks of 16 tokens cost them [-+][0-9]+% and [-+][0-9]+%' >"$tmp/bb_paging.txt"
    awk 'function pct(ns, one, printed) { sub(/%$/, "", printed); return one > 0 && (100 * (ns / one - 1) - printed) ^ 2 < 2.25 }
         FNR == NR { one16 = $3; one = $6; p16 = $22; p = $24; seen = 1; next }
         /ns\/head/ { floor = 1; next }
         floor && /^(fp16|int:bits=4) \// && !done[$1]++ { ns[$1] = $4 }
         END { exit !(seen && pct(ns["fp16"], one16, p16) && pct(ns["int:bits=4"], one, p)) }' \
        "$tmp/bb_paging.txt" "$tmp/bb.txt" &&
        ok "bench --batch: paging's cost on the kernels (the floor's ns against one block's)" ||
        bad "bench --batch paging: $(grep -A2 '^paging' "$tmp/bb.txt")"
    # plate --long on a small corpus-form folder (documents after 0x01 bytes): panel (a) and its CSV.
    mkdir -p "$tmp/corpus"
    for lang in en zh; do
        { printf '\001'; head -c 60 "data/plates/$lang.txt" | iconv -c -f utf-8 -t utf-8; printf '\001'; head -c 30 data/plates/en.txt; } >"$tmp/corpus/$lang.val.txt"
    done
    "$micro" plate --long --corpus "$tmp/corpus" --out "$tmp/long" >"$tmp/long.txt" 2>"$tmp/long.err" || bad "plate --long failed: $(cat "$tmp/long.err")"
    grep -q "(a) the plate's scheme on the long held-out texts" "$tmp/long.txt" && [ -s "$tmp/long/plate-long.csv" ] &&
        ok "plate --long: panel (a) and plate-long.csv" || bad "plate --long output: $(head -3 "$tmp/long.txt")"
    [ "$(grep -c '^loss,' "$tmp/long/plate-long.csv")" = 10 ] && ok "plate --long: five schemes on both texts" ||
        bad "plate --long csv: $(head -3 "$tmp/long/plate-long.csv")"
    # Panel (g) on the long texts: micro's rows are panel (a)'s runs again (the same windows), so its
    # fp32 and int 4 losses must be the reference's and the int 4 row's to the last digit.
    grep -q '^(g) architecture x cache' "$tmp/long.txt" && sed -E 's/"[^"]*"/spec/g' "$tmp/long/plate-long.csv" | awk -F, '
        $1 == "reference" { ref[$3] = $7 } $1 == "loss" && $2 == "int 4" { int4[$3] = $7 }
        $1 == "arch" && $2 == "MHA fp32" { afp[$3] = $7 } $1 == "arch" && $2 == "MHA int 4" { a4[$3] = $7 }
        END { for (t in ref) { n++; same += afp[t] == ref[t] && a4[t] == int4[t] && int4[t] != "" } exit !(n == 2 && same == 2) }' && ok "plate --long: panel (g), micro's rows = panel (a)'s runs" ||
        bad "plate --long panel (g): $(grep -E '^(reference|arch,MHA fp32|arch,MHA int 4)' "$tmp/long/plate-long.csv" | head -6)"

    # serve-bench: the pool's bad sizes, KIVI's groups against the block (each a line at once), and
    # a small run's CSV interface; two runs agree in everything but their timings.
    expect 2 "cannot hold one block" "serve-bench pool below one block per stream" -- "$micro" serve-bench --pool-mb 0.001
    expect 2 "longer than the model's context" "serve-bench conversation beyond the context" -- "$micro" serve-bench --length 4096
    expect 2 "cannot hold one conversation" "serve-bench pool below one conversation" -- "$micro" serve-bench --pool-mb 1
    # Checked before the bandwidth is measured or the header printed: nothing on stdout.
    [ ! -s "$tmp/out" ] && ok "serve-bench's bad pool: nothing printed before its line" ||
        bad "serve-bench's bad pool printed: $(head -c 300 "$tmp/out")"
    expect 2 "--block 32" "serve-bench kivi groups across blocks" -- "$micro" serve-bench --cache kivi:bits=2
    sb=(serve-bench --conversations 5 --length 80 --pool-fp16 2 --cache fp16 --cache int:bits=4 --k q8_0 --v q4_0 --csv)
    "$micro" "${sb[@]}" >"$tmp/sb1.csv" 2>"$tmp/sb.err" && "$micro" "${sb[@]}" --threads 2 >"$tmp/sb2.csv" 2>>"$tmp/sb.err" ||
        bad "serve-bench failed: $(cat "$tmp/sb.err")"
    head -1 "$tmp/sb1.csv" | grep -q '^k_cache,v_cache,conversations_max,conversations_mean,preemptions,tokens_per_s,step_ms_p50,step_ms_p99,pool_utilisation,cache_bytes_per_step,roofline' &&
        [ "$(wc -l <"$tmp/sb1.csv")" -eq 4 ] && ok "serve-bench csv: stable columns, a row per scheme" ||
        bad "serve-bench csv: $(head -2 "$tmp/sb1.csv")"
    counts() { sed -E 's/"[^"]*"/spec/g' "$1" | cut -d, -f3-5,9,10,15-17; }
    [ "$(counts "$tmp/sb1.csv")" = "$(counts "$tmp/sb2.csv")" ] && ok "serve-bench: same held, preemptions, bytes on 1 and 2 threads" ||
        bad "serve-bench differs across runs: $(counts "$tmp/sb1.csv") / $(counts "$tmp/sb2.csv")"
    sed -E 's/"[^"]*"/spec/g' "$tmp/sb1.csv" | awk -F, 'NR > 1 && $3 >= 1 && $6 > 0 && $9 > 0 && $9 <= 1 { n++ } END { exit n != 3 }' &&
        ok "serve-bench csv: values in range" || bad "serve-bench values: $(cat "$tmp/sb1.csv")"
else
    echo "skip model-dependent checks: models/micro.bin is absent"
fi

finish
