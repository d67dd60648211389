#!/usr/bin/env bash
# Makes the images the real cluster runs, as docker-archive tarballs in images/, named as the
# e2e framework names them (k8s.io/kubernetes test/utils/image) so the kubelets find them
# imported and never pull: pause, agnhost, busybox, glibc-dns-testing, regression-issue-74839
# and CoreDNS. Each is a rootfs of busybox-static applets plus the Debian binaries its users
# call, with their libraries. Called by ./build.
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
k8s="$(cd go && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
CLUSTER_HOME=$here
. lib/image.sh
rm -rf images; mkdir -p images

# pause: upstream's pause.c, static.
mkdir -p "$work/pause"
gcc -Os -static -DVERSION=v3.10.2 -o "$work/pause/pause" "$k8s/build/pause/linux/pause.c"
strip "$work/pause/pause"
image "$work/pause" "images/pause.tar" -entrypoint '["/pause"]' -user 65535:65535 -t registry.k8s.io/pause:3.10.2

# agnhost: Debian's dash as /bin/sh (busybox's ash would run its own nc and ip), and the
# tools the network specs exec in it.
tools=(/usr/bin/dash=/bin/sh /usr/bin/bash=/bin/bash /usr/bin/curl /usr/bin/nc.openbsd=/usr/bin/nc
	/usr/bin/ip /usr/bin/ss /usr/bin/socat /usr/sbin/conntrack /usr/bin/dig /usr/bin/nslookup
	/usr/bin/wget /usr/bin/getent)
rootfs "$work/agnhost" "${tools[@]}"
cp bin/agnhost "$work/agnhost/agnhost"; ln -s agnhost "$work/agnhost/agnhost-2"
cp "$k8s"/test/images/agnhost/porter/localhost.{crt,key} "$work/agnhost/"
image "$work/agnhost" "images/agnhost.tar" -entrypoint '["/agnhost"]' -cmd '["pause"]' \
	-t registry.k8s.io/e2e-test-images/agnhost:2.66.1 -t registry.k8s.io/e2e-test-images/agnhost:2.55

# glibc-dns-testing: the same tools without agnhost, plus CoreDNS.
rootfs "$work/dns" "${tools[@]}"
cp bin/coredns "$work/dns/coredns"
image "$work/dns" "images/glibc-dns-testing.tar" -cmd '["bash"]' -t registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1

# busybox: busybox's applets, with GNU wget (Debian's busybox-static wget crashes).
rootfs "$work/busybox" /usr/bin/wget
image "$work/busybox" "images/busybox.tar" -cmd '["sh"]' -t registry.k8s.io/e2e-test-images/busybox:1.37.0-2

# regression-issue-74839: the Conntrack spec's server that sends an out-of-window packet.
rootfs "$work/regression"
cp bin/regression-issue-74839 "$work/regression/regression-issue-74839"
image "$work/regression" "images/regression-issue-74839.tar" -entrypoint '["/regression-issue-74839"]' \
	-t registry.k8s.io/e2e-test-images/regression-issue-74839:1.5

# CoreDNS, the cluster's DNS.
mkdir -p "$work/coredns/etc/coredns"; cp bin/coredns "$work/coredns/coredns"
image "$work/coredns" "images/coredns.tar" -entrypoint '["/coredns"]' -t registry.k8s.io/coredns/coredns:v1.15.0
ls -la images >&2
