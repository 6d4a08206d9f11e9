#!/usr/bin/env bash
# bench/gpu-carry.sh: packs the Debian packages weft's build and tests need into .carry/
# (git-ignored), for the GPU machine, which has nvcc, meson and ninja but no package
# registry and no network. Run it here (bookworm: its glibc 2.36 is older than the GPU
# image's, so the libraries run there), then pass `carry: [".carry"]` with the device
# call; bench/gpu-check.sh sources .carry/env.sh when it exists.
#
#   bash bench/gpu-carry.sh        -> .carry/root (extracted), .carry/env.sh; ~45 MiB
set -euo pipefail
cd "$(dirname "$0")/.."
# What weft links or runs (Criterion, inih, OpenBLAS-OpenMP, zlib, pkg-config) and what
# their .pc files name, minus what every Linux image has (libc, libgcc, libstdc++, libgomp).
packages="libcriterion-dev libcriterion3 libboxfort-dev libffi-dev libgit2-1.5 libgit2-dev
  libhttp-parser2.9 libhttp-parser-dev libmbedcrypto7 libmbedtls14 libmbedx509-1
  libmbedtls-dev libnanomsg5 libnanomsg-dev libssh2-1 libssh2-1-dev libpcre2-dev
  libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libssl-dev
  libinih-dev libinih1 libinireader0
  libopenblas-openmp-dev libopenblas0-openmp libgfortran5 libquadmath0
  zlib1g-dev pkgconf pkgconf-bin libpkgconf3 pkg-config"
rm -rf .carry
mkdir -p .carry/debs .carry/root
# shellcheck disable=SC2086 # one word per package
(cd .carry/debs && apt-get download $packages >/dev/null)
for deb in .carry/debs/*.deb; do
    dpkg-deb -x "$deb" .carry/root
done
rm -rf .carry/debs .carry/root/usr/share/doc .carry/root/usr/share/man \
       .carry/root/usr/share/lintian .carry/root/usr/share/locale
# Static archives and LAPACK are not used; the device tool may not carry symbolic links,
# so they are listed and made again by env.sh.
find .carry/root -name '*.a' -delete
rm -f .carry/root/usr/lib/x86_64-linux-gnu/openblas-openmp/liblapack.so* \
      .carry/root/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so*
(cd .carry/root && find . -type l -printf '%p %l\n') > .carry/links.txt
find .carry/root -type l -delete
# The .pc files say prefix=/usr; env.sh points them at wherever the tree lands.
cat > .carry/env.sh <<'ENV'
# Sourced by bench/gpu-check.sh: makes the carried packages visible to the build.
carry_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/root"
while read -r link target; do
    [ -e "$carry_root/$link" ] || ln -sf "$target" "$carry_root/$link" 2>/dev/null || true
done < "$carry_root/../links.txt"
for pc in $(find "$carry_root" -name '*.pc'); do
    sed -i "s|^prefix=.*|prefix=$carry_root/usr|; s|/usr/lib/x86_64-linux-gnu|$carry_root/usr/lib/x86_64-linux-gnu|g; s|/usr/include|$carry_root/usr/include|g" "$pc"
done
multiarch="$carry_root/usr/lib/x86_64-linux-gnu"
export PATH="$carry_root/usr/bin:$PATH"
export PKG_CONFIG_PATH="$multiarch/pkgconfig:$multiarch/openblas-openmp/pkgconfig:$carry_root/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$multiarch:$multiarch/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$multiarch:$multiarch/openblas-openmp${LIBRARY_PATH:+:$LIBRARY_PATH}"
export C_INCLUDE_PATH="$carry_root/usr/include:$carry_root/usr/include/x86_64-linux-gnu${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}"
export WEFT_OPENBLAS_DIR="$multiarch/openblas-openmp"
ENV
du -sh .carry
