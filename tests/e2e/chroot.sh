# shellcheck shell=bash
# Sourced by the e2e scripts that work in a chroot of an image root mounted from a loop device.
#   chroot_mounts ROOT                         /proc, /sys, /dev and /dev/pts inside ROOT
#   chroot_cleanup ROOT WORK MOUNTED [PATH...]  unmounts PATHs (relative to ROOT), those four and, when
#                                              MOUNTED is not empty, ROOT itself; then removes WORK

chroot_mounts() {
  mount -t proc proc "$1/proc"
  mount -t sysfs sysfs "$1/sys"
  mount --bind /dev "$1/dev"
  mount --bind /dev/pts "$1/dev/pts"
}

chroot_cleanup() {
  local root=$1 work=$2 mounted=$3 fs
  shift 3
  for fs in "$@" dev/pts dev proc sys; do
    mountpoint -q "$root/$fs" 2>/dev/null && umount -l "$root/$fs"
  done
  if [ -n "$mounted" ]; then
    umount "$root" 2>/dev/null || umount -l "$root" || true
  fi
  rm -rf "$work"
}
