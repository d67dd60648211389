#!/bin/bash
# usage: build-initramfs.sh KROOT KVER OUT.cpio.gz
# A small initramfs for the test guest: busybox, the modules that mount the host over virtio-9p
# (in load order), and init.sh as /init. The guest kernel is Debian's, unpacked in KROOT.
set -euo pipefail
KROOT=$1 KVER=$2 OUT=$3
R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
mkdir -p "$R"/{bin,sbin,proc,sys,dev,lib/modules}
cp /bin/busybox "$R/bin/"
for a in $(/bin/busybox --list); do [ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"; done
depmod -b "$KROOT" "$KVER"
for m in virtio_pci 9pnet_virtio 9p overlay; do
  modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r f; do
  cp "$f" "$R/lib/modules/"
  basename "$f" >> "$R/modules.order"
done
cp "$(dirname "$0")/init.sh" "$R/init"
chmod +x "$R/init"
(cd "$R" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$OUT"
