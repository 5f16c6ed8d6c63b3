# A small file system whose writes can be made to fail (sourced after
# lib.sh, not run): ext2 on a loop device whose image lives on a small
# tmpfs. Punching the image's blocks out under a file and filling the
# tmpfs makes each later write of those blocks fail (ENOSPC from the
# block layer) while the pages still read right from the page cache.
# Needs root, losetup, mkfs.ext2, filefrag, fallocate: the script says
# SKIP and exits 0 where one is missing.
#   $DIR/m: the mount point; loopfs_attach mounts the image again.
skip() { echo "SKIP: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (a loop device)"
for t in losetup mkfs.ext2 filefrag fallocate; do
	command -v $t > /dev/null || skip "no $t"
done
mkdir -p "$DIR/t" "$DIR/m" "$DIR/data"
mount -t tmpfs -o size=160M tmpfs "$DIR/t" 2> "$DIR/mount.err" || skip "cannot mount a tmpfs: $(cat "$DIR/mount.err")"
LOOP=
loopfs_undo() {
	stop_peers
	umount "$DIR/m" 2>/dev/null
	[ -n "$LOOP" ] && losetup -d "$LOOP"
	# the loop device lets go of the image lazily: then a lazy unmount
	for _ in $(seq 10); do umount "$DIR/t" 2>/dev/null && break; sleep 0.3; done
	mountpoint -q "$DIR/t" && umount -l "$DIR/t"
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DIR"
}
trap loopfs_undo EXIT
fallocate -l "${LOOPFS_SIZE:-128M}" "$DIR/t/img" && mkfs.ext2 -q -F -b 4096 "$DIR/t/img" || fail "the image"
loopfs_attach() {
	LOOP=$(losetup -f --show "$DIR/t/img" 2> "$DIR/loop.err") || { LOOP=; skip "no loop device: $(cat "$DIR/loop.err")"; }
	mount "$LOOP" "$DIR/m" || fail "mount $LOOP"
}
loopfs_attach

# loopfs_extents FILE: "image-block count" per extent of FILE.
loopfs_extents() {
	filefrag -v "$1" | awk '/^ *[0-9]+:/ { gsub(/\.\./, " "); gsub(/:/, " "); print $4, $3 - $2 + 1 }'
}
