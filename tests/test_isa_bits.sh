#!/usr/bin/env bash
# The same bits under every kernel set: micro plate's rows (every codec family: the plate's scheme,
# FP8, KIVI, llama.cpp's blocks, KVQuant, rotations, MX, NVFP4, TurboQuant, QJL), by the fast
# evaluator and token by token, and micro sweep --preset all (every family at every width), on short
# texts, and micro eval on a model users bring (a qwen3 GGUF of tests/make_gguf: NeoX RoPE, q/k
# norms, heads of 128), under MICRO_ISA=portable and each set this CPU runs, byte for byte. Panel (d)'s serve rows
# are timings and are left out. It names the sets it could not run (an AVX2 machine runs two of
# three). scripts/isa-bits does the same on the full plates (a part of .ci/run).
. "$(dirname "$0")/lib.sh"

# The fast evaluator on 73 English tokens (two spans: 64 and 9) and 61 Chinese; token by token on
# fewer (every step is a decode step, and the portable build's are the slowest part of the test).
plate=(plate --csv --no-files --serve-fp16 1 --serve-length 16 --threads 2)
fast=(--en data/plates/en.txt:72 --zh data/plates/zh.txt:20)
decode=(--en data/plates/en.txt:40 --zh data/plates/zh.txt:12 --decode)
outputs() { # ISA: every output, into $tmp/ISA.*
    MICRO_ISA=$1 "$micro" "${plate[@]}" "${fast[@]}" >"$tmp/$1.plate" 2>"$tmp/$1.err" &&
        MICRO_ISA=$1 "$micro" "${plate[@]}" "${decode[@]}" >"$tmp/$1.decode" 2>>"$tmp/$1.err" &&
        MICRO_ISA=$1 "$micro" sweep --preset all --text data/plates/en.txt:48 --text data/plates/zh.txt:16 \
            >"$tmp/$1.sweep" 2>>"$tmp/$1.err" &&
        MICRO_ISA=$1 "$micro" sweep --model "$tmp/qwen3.gguf" --text data/plates/en.txt:72 --text data/plates/zh.txt:20 \
            --grid '{q4_0|kivi:bits=2|int:bits=3,rot=hadamard|turboquant:bits=3}' >"$tmp/$1.gguf" 2>>"$tmp/$1.err" &&
        MICRO_ISA=$1 "$micro" eval --csv --model "$tmp/qwen3.gguf" --text data/plates/en.txt:72 --k int:bits=4,prerope \
            --v int:bits=4 >>"$tmp/$1.gguf" 2>>"$tmp/$1.err"
}

"$MICRO_MAKE_GGUF" "$tmp/qwen3.gguf" qwen3 || bad "make_gguf could not write a qwen3 model"

outputs portable || bad "portable: $(head -c 300 "$tmp/portable.err")"
rows=$(grep -vc '^serve' "$tmp/portable.plate")
families=$(cut -d, -f2 "$tmp/portable.sweep" | tr -d '"' | sed 's/[:,].*//' | sort -u | tr '\n' ' ')
echo "portable: $rows plate rows, sweep families: $families"
not_run=()
for isa in avx2 avx512; do
    if ! MICRO_ISA=$isa "$micro" --version >/dev/null 2>"$tmp/why"; then
        not_run+=("$isa ($(cat "$tmp/why"))")
        continue
    fi
    if ! outputs $isa; then
        bad "$isa: $(head -c 300 "$tmp/$isa.err")"
        continue
    fi
    for what in plate decode sweep gguf; do
        if cmp -s <(grep -v '^serve' "$tmp/portable.$what") <(grep -v '^serve' "$tmp/$isa.$what"); then
            ok "$isa: micro $what's rows are portable's, byte for byte"
        else
            bad "$isa: micro $what differs from portable: $(diff <(grep -v '^serve' "$tmp/portable.$what") \
                <(grep -v '^serve' "$tmp/$isa.$what") | head -4 | tr '\n' ' ')"
        fi
    done
done
[ "$rows" -gt 100 ] && ok "the plate gave $rows rows" || bad "the plate gave only $rows rows"
[ ${#not_run[@]} -eq 0 ] || echo "not run here: ${not_run[*]}"
finish
