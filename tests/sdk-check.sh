#!/bin/sh
# The out-of-tree SDK, end to end: installs this build into a scratch DESTDIR, builds
# examples/backend-template against it with pkg-config alone, and checks that the
# installed weft-info finds and loads the `ref` backend and that a program compiled
# against the installed headers computes on it.
#   usage: sdk-check.sh BUILD_DIR SOURCE_DIR
# Exit status: 0 pass, 77 skipped (no pkg-config), anything else a failure.
set -eu

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
template="$src/examples/backend-template"

for tool in pkg-config meson ninja python3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "sdk: skipped: '$tool' is not installed"
        exit 77
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-sdk.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() {
    echo "sdk: FAIL: $*" >&2
    exit 1
}

# 1. Install into $tmp/stage (the build's own prefix, under DESTDIR).
DESTDIR="$tmp/stage" meson install -C "$build" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "meson install"; }
eval "$(meson introspect --buildoptions "$build" | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print("prefix=%s libdir=%s bindir=%s" % (o["prefix"], o["libdir"], o["bindir"]))')"
root="$tmp/stage$prefix"
pcdir="$root/$libdir/pkgconfig"
[ -f "$pcdir/weft.pc" ] || fail "no weft.pc under $pcdir"
# The staged tree lives away from its prefix: relocate the .pc (every other variable
# is relative to ${prefix}), so -I, -L and plugindir name the staged files.
mkdir -p "$tmp/pc"
for pc in "$pcdir"/weft*.pc; do
    sed "s|^prefix=.*|prefix=$root|" "$pc" >"$tmp/pc/${pc##*/}"
done
export PKG_CONFIG_PATH="$tmp/pc"
export LD_LIBRARY_PATH="$root/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
plugindir=$(pkg-config --variable=plugindir weft)
[ -f "$plugindir/weft-cpu.so" ] || fail "plugindir '$plugindir' holds no weft-cpu.so"

# 2. Build the template in a scratch copy: nothing from the weft tree but pkg-config.
cp -R "$template" "$tmp/template"
(cd "$tmp/template" && meson setup build >"$tmp/setup.log" 2>&1 && ninja -C build >"$tmp/ninja.log" 2>&1) ||
    { cat "$tmp/setup.log" "$tmp/ninja.log" >&2 2>/dev/null || true; fail "building the template"; }
so="$tmp/template/build/weft-ref.so"
[ -f "$so" ] || fail "no weft-ref.so built"

# 3. The installed weft-info lists ref as usable.
info="$root/$bindir/weft-info"
export WEFT_PLUGIN_PATH="$tmp/template/build:$plugindir"
"$info" >"$tmp/info.txt" 2>&1 || { cat "$tmp/info.txt" >&2; fail "weft-info exited nonzero"; }
grep -A1 '^  ref ' "$tmp/info.txt" | grep -q 'usable' ||
    { cat "$tmp/info.txt" >&2; fail "weft-info does not list ref as usable"; }
grep -q '^  ref: 1 device' "$tmp/info.txt" ||
    { cat "$tmp/info.txt" >&2; fail "weft-info lists no ref device"; }

# 4. weft-info --plugin diagnoses the file step by step.
"$info" --plugin "$so" >"$tmp/diag.txt" 2>&1 || { cat "$tmp/diag.txt" >&2; fail "weft-info --plugin"; }
for want in 'entry:       weft_plugin_init found' 'name:        ref' 'probe:       usable' \
    'init:        ok' "backend 'ref'" 'kernels on ref: 11 ops' 'provides backend:ref'; do
    grep -qF "$want" "$tmp/diag.txt" || { cat "$tmp/diag.txt" >&2; fail "weft-info --plugin: no '$want'"; }
done

# 4b. Every op/dtype the template registers passes the conformance suite against the cpu,
# and weft-info --ops shows its column.
"$info" --conformance ref >"$tmp/conf.txt" 2>&1 || { cat "$tmp/conf.txt" >&2; fail "conformance on ref"; }
tail -n 1 "$tmp/conf.txt"
"$info" --ops >"$tmp/ops.txt" 2>&1 || { cat "$tmp/ops.txt" >&2; fail "weft-info --ops"; }
grep -q 'ref' "$tmp/ops.txt" || { cat "$tmp/ops.txt" >&2; fail "weft-info --ops has no ref column"; }

# 5. A program built against the installed headers computes on ref.
# shellcheck disable=SC2046
${CC:-cc} -std=gnu11 -o "$tmp/use-ref" "$template/use-ref.c" $(pkg-config --cflags --libs weft) -lm ||
    fail "compiling use-ref.c"
"$tmp/use-ref" || fail "use-ref"

# 6. The README's first example links the core and its op layer alone (a tensors-only
# program needs no nn or train library) and prints what the README says.
awk '/^## A taste/ { taste = 1 } taste && /^```$/ && inside { exit }
     taste && inside { print } taste && /^```c$/ { inside = 1 }' "$src/README.md" >"$tmp/taste.c"
# shellcheck disable=SC2046
${CC:-cc} -std=gnu11 -Werror=implicit-function-declaration -o "$tmp/taste" "$tmp/taste.c" \
    $(pkg-config --cflags --libs weft) || fail "compiling the README's example"
needed=$(readelf -d "$tmp/taste" | sed -n 's/.*Shared library: \[\(libweft[^]]*\)\].*/\1/p' | tr '\n' ' ')
[ "$needed" = "libweft-ops.so libweft.so " ] ||
    fail "the README's example links '$needed', not libweft-ops.so and libweft.so alone"
"$tmp/taste" | grep -qF 'tensor([[ 0.,  4.],' || fail "the README's example printed otherwise"

# 7. The README's "Training from C" builds as the README's "Installing" says (weft.h and
# weft/train.h declare every call: no implicit declarations) and runs with no
# LD_LIBRARY_PATH and no WEFT_PLUGIN_PATH: the rpath finds libweft, libweft the plugins.
awk '/^## Training from C/ { sec = 1 } sec && /^```$/ && inside { exit }
     sec && inside { print } sec && /^```c$/ { inside = 1 }' "$src/README.md" >"$tmp/fit.c"
[ -s "$tmp/fit.c" ] || fail "no 'Training from C' example in the README"
# shellcheck disable=SC2046
${CC:-cc} -std=gnu11 -Werror=implicit-function-declaration -o "$tmp/fit" "$tmp/fit.c" \
    $(pkg-config --cflags --libs weft-train) -Wl,-rpath,"$(pkg-config --variable=libdir weft)" ||
    fail "compiling the README's 'Training from C'"
env -u LD_LIBRARY_PATH -u WEFT_PLUGIN_PATH "$tmp/fit" >"$tmp/fit.txt" 2>&1 ||
    { cat "$tmp/fit.txt" >&2; fail "the README's 'Training from C' failed"; }
grep -q '^weight 1x2, loss 0\.0000$' "$tmp/fit.txt" ||
    { cat "$tmp/fit.txt" >&2; fail "the README's 'Training from C' did not fit"; }

# 8. The installed apps on their own: RUNPATH relative to the executable, the plugins
# found beside the installed libweft, a short training run with TensorBoard events.
readelf -d "$info" | grep -q 'RUNPATH.*\$ORIGIN' ||
    { readelf -d "$info" >&2; fail "weft-info has no \$ORIGIN-relative RUNPATH"; }
# the cpu plugin keeps its OpenBLAS (OpenMP build) pin once installed
pin=$(readelf -d "$build/plugins/weft-cpu.so" | sed -n 's/.*R[UN]*PATH.*\[\(.*\)\]/\1/p' | tr ':' '\n' |
    grep -v ORIGIN || true)
for dir in $pin; do
    readelf -d "$plugindir/weft-cpu.so" | grep -q "PATH.*$dir" ||
        fail "the installed weft-cpu.so lost the rpath $dir"
done
env -u LD_LIBRARY_PATH -u WEFT_PLUGIN_PATH "$info" >"$tmp/info-alone.txt" 2>&1 ||
    { cat "$tmp/info-alone.txt" >&2; fail "the installed weft-info without LD_LIBRARY_PATH"; }
grep -qF "$plugindir" "$tmp/info-alone.txt" ||
    { cat "$tmp/info-alone.txt" >&2; fail "weft-info does not search the installed plugin dir"; }
grep -A1 '^  cpu ' "$tmp/info-alone.txt" | grep -q 'usable' ||
    { cat "$tmp/info-alone.txt" >&2; fail "the installed weft-info finds no usable cpu plugin"; }
train="$root/$bindir/weft-train"
(cd "$tmp" && env -u LD_LIBRARY_PATH -u WEFT_PLUGIN_PATH "$train" "$src/configs/mnist-mlp.ini" \
    --set train.epochs=1 --set data.workers=0 --set train.checkpoint="$tmp/run/model.safetensors" \
    --set train.log="$tmp/run/log.csv" --set train.tensorboard="$tmp/run/tb") \
    >"$tmp/train.txt" 2>&1 || { cat "$tmp/train.txt" >&2; fail "the installed weft-train"; }
[ -f "$tmp/run/model.safetensors" ] || { cat "$tmp/train.txt" >&2; fail "weft-train saved no model"; }
ls "$tmp/run/tb"/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard event file"
echo "sdk: ok"
