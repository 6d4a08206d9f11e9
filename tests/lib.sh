# tests/lib.sh: what the weft-train shell tests share. Sourced after they set $train
# (the weft-train binary), $tmp (a scratch directory) and fail().

# expect_error NAME EXIT PATTERN [weft-train arguments...]: fails before training, with
# exit code EXIT and a message matching PATTERN: a basic regular expression, or fixed
# text when the test sets expect_fixed=1 (grep -F).
expect_error() {
    name=$1 want=$2 pattern=$3
    shift 3
    set +e
    "$train" "$@" >"$tmp/$name.txt" 2>&1
    code=$?
    set -e
    [ "$code" = "$want" ] || { cat "$tmp/$name.txt"; fail "$name: exit $code, expected $want"; }
    if [ "${expect_fixed:-0}" = 1 ]; then
        grep -qF -- "$pattern" "$tmp/$name.txt"
    else
        grep -q "$pattern" "$tmp/$name.txt"
    fi || { cat "$tmp/$name.txt"; fail "$name: no message matching '$pattern'"; }
    grep -q '^epoch 1/' "$tmp/$name.txt" && fail "$name: reported after an epoch had trained"
    echo "$name: $(grep 'weft-train:' "$tmp/$name.txt" | tail -1)"
}
