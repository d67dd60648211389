#!/bin/sh
# PID 1 of the test guest's initramfs (see tests/support/guest.rs). Mounts the host's root
# read-only over virtio-9p with a tmpfs overlay on top, the guest kernel's modules from a second
# share, chroots into it and runs the command passed base64-encoded as `kprs.cmd=` on the kernel
# command line. Prints `GUEST-EXIT=<code>` for the host, whose qemu exits 0 whatever happens here.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod "/lib/modules/$m" 2>/dev/null; done
mkdir -p /lower /upper /root2
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro hostroot /lower || echo "GUEST-FAIL: 9p"
mount -t tmpfs -o size=512m tmpfs /upper
mkdir -p /upper/u /upper/w
mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w /root2 || echo "GUEST-FAIL: overlay"
mount -t proc proc /root2/proc
mount -t sysfs sys /root2/sys
mount -t devtmpfs dev /root2/dev
mkdir -p /root2/dev/pts /root2/dev/shm /root2/run
mount -t devpts devpts /root2/dev/pts
mount -t tmpfs tmpfs /root2/run

mkdir -p /root2/lib/modules
mount -t 9p -o trans=virtio,version=9p2000.L,ro kmods /root2/lib/modules
# The kernel's own module requests (sctp, nft expressions) run /sbin/modprobe in this root,
# not the chroot: forward them.
mkdir -p /sbin
printf '#!/bin/sh\nexec chroot /root2 /sbin/modprobe "$@"\n' > /sbin/modprobe
chmod +x /sbin/modprobe
echo /sbin/modprobe > /proc/sys/kernel/modprobe
CMD=$(sed -n 's/.*kprs\.cmd=\([^ ]*\).*/\1/p' /proc/cmdline | base64 -d)
echo "GUEST-UP at $(cut -d' ' -f1 /proc/uptime)s"
chroot /root2 /bin/sh -c "$CMD"
echo "GUEST-EXIT=$?"
poweroff -f
