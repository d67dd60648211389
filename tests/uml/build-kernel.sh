#!/usr/bin/env bash
# Builds the User-mode Linux kernel the UML tests boot (tests/support/uml.rs), from Debian's
# linux-source-6.1 with tests/uml/kernel.config merged over the UML defconfig, and prints the
# kernel's path.
#
# Why our own build: Debian's user-mode-linux package has no nf_tables for ip, ip6 or inet
# (CONFIG_NF_TABLES_IPV4/IPV6/INET are not set), so neither our nftables mode nor the helper
# rules of our IPVS mode can run in it. Everything is built in (=y), so the guest needs no
# module files; modules.builtin is installed beside the kernel so that modprobe and upstream
# kube-proxy's module checks find what is built in.
#
# Idempotent: the result lives in $KPRS_UML_CACHE (default /var/cache/kube-proxy-rs/uml) under
# a key made of this script and the config fragment, and `current` links to the newest build;
# a second run with the same inputs does nothing. Takes about 5 minutes on 2 CPUs.
# Needs: apt-get (to download linux-source-6.1), xz-utils, make, gcc, flex, bison, bc.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
fragment="$here/kernel.config"
cache="${KPRS_UML_CACHE:-/var/cache/kube-proxy-rs/uml}"
key="$(cat "$0" "$fragment" | sha256sum | cut -c1-16)"
out="$cache/$key"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

if [ -x "$out/linux" ] && [ -f "$out/stamp" ]; then
  ln -sfn "$key" "$cache/current"
  echo "$out/linux"
  exit 0
fi

work="$(mktemp -d "$cache/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "uml kernel: downloading linux-source-6.1" >&2
# apt's sandbox user cannot write here; that is only a warning.
apt-get download -q linux-source-6.1 >/dev/null 2>"$work/apt.log" || {
  cat "$work/apt.log" >&2
  exit 1
}
deb="$(echo linux-source-6.1_*_all.deb)"
version="$(dpkg-deb -f "$deb" Version)"
dpkg-deb --fsys-tarfile "$deb" | tar -x --to-stdout ./usr/src/linux-source-6.1.tar.xz | tar -xJ
rm -f "$deb"
cd linux-source-6.1

echo "uml kernel: configuring $version" >&2
make -s ARCH=um defconfig
./scripts/kconfig/merge_config.sh -m .config "$fragment" >/dev/null
make -s ARCH=um olddefconfig
# A symbol that olddefconfig dropped (a missing dependency) would leave the lab without what it
# needs and fail far from here: say which.
missing=()
while IFS= read -r line; do
  case "$line" in
    CONFIG_*=*) grep -qxF "$line" .config || missing+=("$line") ;;
  esac
done <"$fragment"
if [ ${#missing[@]} -gt 0 ]; then
  echo "uml kernel: the config did not take: ${missing[*]}" >&2
  exit 1
fi

echo "uml kernel: building (make -j$(nproc) linux)" >&2
make -s ARCH=um -j"$(nproc)" linux modules >"$work/make.log" 2>&1 || {
  tail -40 "$work/make.log" >&2
  exit 1
}
release="$(make -s ARCH=um kernelrelease)"
staged="$work/out"
mkdir -p "$staged"
strip -o "$staged/linux" linux
make -s ARCH=um modules_install INSTALL_MOD_PATH="$staged/modroot" >/dev/null
# The source and build links point into this build tree, which is removed.
rm -f "$staged/modroot/lib/modules/$release/source" "$staged/modroot/lib/modules/$release/build"
cp .config "$staged/config"
printf 'source=linux-source-6.1 %s\nrelease=%s\nkey=%s\n' "$version" "$release" "$key" >"$staged/stamp"

rm -rf "$out"
mv "$staged" "$out"
ln -sfn "$key" "$cache/current"
echo "uml kernel: built $release in $out" >&2
echo "$out/linux"
