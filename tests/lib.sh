# Sourced by the shell tests: the micro under test, a scratch folder, and the checks they share.
# The tests run from the source root (data/, models/ by relative path).
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

# expect STATUS NEEDLE LABEL -- CMD...: the exit status, a stderr holding NEEDLE, and for a failure
# exactly one stderr line (or a usage after it, for an unknown option). A hang fails after 300 s.
expect() {
    local want=$1 needle=$2 label=$3
    shift 4
    timeout 300 "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        bad "$label: exit $got, wanted $want ($(head -c 300 "$tmp/err"))"
    elif [ -n "$needle" ] && ! grep -q -- "$needle" "$tmp/err"; then
        bad "$label: stderr lacks '$needle': $(head -c 300 "$tmp/err")"
    elif [ "$want" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -ne 1 ] && ! grep -q "^usage" "$tmp/err"; then
        bad "$label: stderr is not one line: $(head -c 600 "$tmp/err")"
    else
        ok "$label"
    fi
}

# The closing line and the exit status of a test script.
finish() {
    echo "$pass passed, $fails failed"
    [ "$fails" -eq 0 ]
}
