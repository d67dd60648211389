# Container images from host files, without a registry or a daemon (sourced): a rootfs of
# busybox-static applets plus chosen host binaries with the libraries they load, written as a
# docker-archive tarball by bin/mkimage. Needs $CLUSTER_HOME.

# rootfs DIR [HOST_PATH[=IMAGE_PATH]]...: busybox applets, the given host binaries and the
# shared libraries they load, and the users and groups the e2e specs run as.
rootfs() {
	local dir=$1; shift
	mkdir -p "$dir"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc,tmp,proc,sys,dev,root,var/run}
	chmod 1777 "$dir/tmp"
	cp /bin/busybox "$dir/bin/busybox"
	local applet
	for applet in $(/bin/busybox --list-full); do
		[[ -e "$dir/$applet" || -L "$dir/$applet" ]] || ln -s /bin/busybox "$dir/$applet"
	done
	local spec src dst lib
	for spec in "$@"; do
		src=${spec%%=*}; dst=${spec#*=}
		mkdir -p "$dir/$(dirname "$dst")"; rm -f "$dir/$dst"; cp -L "$src" "$dir/$dst"
		# busybox's shell runs its own applet of a name unless that path is a real file:
		# the real binary takes every applet path of its name.
		for applet in $(/bin/busybox --list-full | grep -E "(^|/)$(basename "$dst")\$" || true); do
			[[ "/$applet" == "$dst" ]] || ln -f "$dir/$dst" "$dir/$applet"
		done
		for lib in $(libraries_of "$src"); do
			[[ -e "$dir/$lib" ]] || { mkdir -p "$dir/$(dirname "$lib")"; cp -L "$lib" "$dir/$lib"; }
		done
	done
	printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' \
		'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >"$dir/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' 'user-defined-in-image:x:1000:user-defined-in-image' \
		'group-defined-in-image:x:50000:user-defined-in-image' >"$dir/etc/group"
	echo 'hosts: files dns' >"$dir/etc/nsswitch.conf"
	: >"$dir/etc/hosts"; : >"$dir/etc/resolv.conf"
}
# libraries_of FILE...: the shared libraries the files load (and the dynamic loader).
libraries_of() {
	ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(0x/ {print $1}' | sort -u
}

# image DIR OUT MKIMAGE_ARGS...: the rootfs DIR as the image tarball OUT.
image() {
	local dir=$1 out=$2; shift 2
	tar --numeric-owner --owner=0 --group=0 -C "$dir" -cf "$dir.layer.tar" .
	"$CLUSTER_HOME/bin/mkimage" -o "$out" -layer "$dir.layer.tar" "$@"
	rm -f "$dir.layer.tar"
}
