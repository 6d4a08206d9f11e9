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

# tensors CHECKPOINT...: each file's tensors, one "name dtype shape sha1-of-bytes" line each,
# sorted by name (needs $py): two runs' files compare with cmp, one tensor with grep "^name ".
tensors() {
    "$py" - "$@" <<'PY'
import hashlib, json, struct, sys
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    for k, v in sorted(head.items()):
        if k != "__metadata__":
            b, e = v["data_offsets"]
            print(k, v["dtype"], "x".join(map(str, v["shape"])), hashlib.sha1(data[b:e]).hexdigest())
PY
}
