# The model a user brings (docs/models.md), a tiny synthetic GGUF (tests/make_gguf qwen2, a byte-level
# BPE vocabulary of its own, no BOS): micro plate --model gets panels (a), (b), (e) and (f) with its
# name in the title and its texts in its own tokens; (c), (d) and (g), micro's, are neither printed nor
# in --csv or --json; --html (micro's page) is refused in one line; the same CSV on 1 and 2 threads.
# bench --eval prints micro eval's peak memory on 1,500 tokens against the fp32 weights + 1 GB.
# And every command on each architecture (llama3 with BOS, qwen2, qwen3), small shapes: eval with
# --score second-half and KL's tail, inspect, attention, capacity, generate (the same bytes on 1 and 2
# threads), serve-bench; scripts/gguf-check does the same against llama.cpp in CI's interop part.
. "$(dirname "$0")/lib.sh"
make_gguf=${MICRO_MAKE_GGUF:?}

"$make_gguf" "$tmp/user.gguf" qwen2 1 400 || bad "make_gguf qwen2"
texts=(--en data/plates/en.txt:300 --zh data/plates/zh.txt:80)
expect 0 "" "plate --model on a GGUF of its own vocabulary" -- "$micro" plate --model "$tmp/user.gguf" "${texts[@]}" --no-files
grep -q '^micro plate on user.gguf: ' "$tmp/out" && grep -q 'in its own tokenizer (no BOS' "$tmp/out" &&
    grep -q '^(a) the plate.s scheme on user.gguf' "$tmp/out" && grep -q '^(b) beyond the plate' "$tmp/out" &&
    grep -q '^(e) ' "$tmp/out" && grep -q '^(f) the frontier' "$tmp/out" && ! grep -q '^(d) \|^(g) \|^(c) what it buys' "$tmp/out" &&
    ok "panels (a), (b), (e), (f) with the model's name; not (c), (d), (g)" || bad "plate's panels: $(grep '^(' "$tmp/out")"
"$micro" plate --model "$tmp/user.gguf" "${texts[@]}" --no-files --csv --threads 1 >"$tmp/p1.csv" &&
    "$micro" plate --model "$tmp/user.gguf" "${texts[@]}" --no-files --csv --threads 2 >"$tmp/p2.csv" &&
    cmp -s "$tmp/p1.csv" "$tmp/p2.csv" && ! grep -q '^capacity\|^serve\|^arch' "$tmp/p1.csv" &&
    grep -q '^loss,int 4,en,' "$tmp/p1.csv" && head -1 "$tmp/p1.csv" | grep -q ',kl_p99,kl_max$' &&
    ok "--csv: panels (a) and (b) only, the same on 1 and 2 threads" || bad "plate --csv on the GGUF"
"$micro" plate --model "$tmp/user.gguf" "${texts[@]}" --no-files --json | grep -q '"schemes": \[' &&
    ok "--json" || bad "plate --json on the GGUF"
expect 2 "on a model with a vocabulary of its own" "plate --html on a GGUF of its own vocabulary" -- \
    "$micro" plate --model "$tmp/user.gguf" "${texts[@]}" --html --out "$tmp/page"
[ ! -e "$tmp/page/plate.html" ] && ok "nothing written" || bad "--html wrote $(ls "$tmp/page")"
for a in llama3 qwen2 qwen3; do
    g=$tmp/$a.gguf
    "$make_gguf" "$g" "$a" 2 300 || bad "make_gguf $a"
    "$micro" eval --model "$g" --cache q8_0 --score second-half:64 --text data/plates/en.txt:800 --csv >"$tmp/$a-half.csv" &&
        head -1 "$tmp/$a-half.csv" | grep -q ',kl_p99,kl_max$' && [ "$(wc -l <"$tmp/$a-half.csv")" = 2 ] &&
        "$micro" inspect --model "$g" --text data/plates/en.txt:300 --csv >"$tmp/$a-inspect.csv" &&
        [ "$(wc -l <"$tmp/$a-inspect.csv")" -gt 2 ] &&
        "$micro" attention --model "$g" --text data/plates/en.txt:200 --cache int:bits=2 --out "$tmp/$a-att" >"$tmp/$a-att.txt" &&
        grep -q "agrees with fp32's" "$tmp/$a-att.txt" &&
        "$micro" capacity --model "$g" --csv --bits 16,4 | grep -q "^$a.gguf,4-bit," &&
        [ "$("$micro" generate --model "$g" --prompt "The plate" -n 8 --threads 1)" = \
          "$("$micro" generate --model "$g" --prompt "The plate" -n 8 --threads 2)" ] &&
        "$micro" serve-bench --model "$g" --conversations 3 --length 48 --cache fp16 --cache q8_0 --csv >"$tmp/$a-serve.csv" &&
        [ "$(wc -l <"$tmp/$a-serve.csv")" -ge 3 ] &&
        ok "$a: eval --score second-half, inspect, attention, capacity, generate, serve-bench" ||
        bad "$a: a command failed on the model: $(tail -2 "$tmp/out" 2>/dev/null)"
done
"$micro" bench --eval --no-decode --model "$tmp/user.gguf" --positions 64 --repeat 1 >"$tmp/bench.txt" 2>&1 &&
    grep -Eq '^memory: .micro eval --model FILE .* on (1[5-9]|[2-9])[0-9]{3} tokens' "$tmp/bench.txt" &&
    grep -Eq 'peak resident [0-9]+ MB\. Target: at most the fp32 weights' "$tmp/bench.txt" &&
    grep -Eq '1 GB = [0-9]+ MB: met' "$tmp/bench.txt" &&
    ok "bench --eval: micro eval's peak memory on 1,500 tokens or more, its target met" || bad "bench --eval's memory line: $(tail -3 "$tmp/bench.txt")"
finish
