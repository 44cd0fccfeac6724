#!/usr/bin/env bash
# Builds a small bootable Debian 12 cloud image (qcow2) from Debian packages, standing in for the
# Ubuntu cloud image where that cannot be downloaded: one MBR partition, ext4, extlinux, the Debian
# kernel, cloud-init (NoCloud), openssh-server, qemu-guest-agent and systemd-networkd (DHCP).
#
#   tests/e2e/build_base.sh CACHE_DIR        prints the image path on its last line
#
# The image is cached as CACHE_DIR/debian-12-base-<key>.qcow2; the key hashes this script and the
# mirror, so a re-run with the same inputs reuses it. Needs root (loop mount), debootstrap,
# extlinux, sfdisk and qemu-img.
# growpart (cloud-guest-utils) is there so that a clone on a larger disk grows its root partition at
# first boot (cloud-init's growpart), which the clone gate's disk check needs (tests/lab/realboot.py).
set -euo pipefail
# shellcheck source=tests/e2e/chroot.sh
. "$(dirname "$0")/chroot.sh"

cache_dir=${1:?usage: build_base.sh CACHE_DIR}
SUITE=bookworm
SIZE_MIB=3072
PART_START_SECTOR=2048
# debootstrap resolves few dependencies, so it lays down a minimal system and apt adds the rest.
BOOTSTRAP_PACKAGES=(systemd-sysv udev dbus)
PACKAGES=(
  linux-image-amd64 initramfs-tools iproute2 netbase openssh-server qemu-guest-agent cloud-init
  sudo ca-certificates curl gpg less cloud-guest-utils
)

log() { printf '==> base image: %s\n' "$*" >&2; }
die() { printf 'build_base: %s\n' "$*" >&2; exit 1; }

host_mirror() {
  # The guest and debootstrap use the mirror the host's apt uses (deb822 or one-line format).
  local uri
  uri=$(grep -hoE '^URIs:[[:space:]]*http[^ ]*/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 |
    awk '{print $2}' || true)
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1=="deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list)
  fi
  printf '%s' "${uri:-http://deb.debian.org/debian}"
}

[ "$(id -u)" = 0 ] || die "needs root (debootstrap and a loop mount)"
for tool in debootstrap extlinux sfdisk qemu-img mkfs.ext4 losetup; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (apt-get install debootstrap extlinux fdisk qemu-utils e2fsprogs mount)"
done
mbr=/usr/lib/syslinux/mbr/mbr.bin
[ -f "$mbr" ] || die "$mbr is missing (apt-get install syslinux-common)"

MIRROR=$(host_mirror)
SECURITY_MIRROR=${MIRROR%/debian*}/debian-security
mkdir -p "$cache_dir"
key=$( { cat "$0" "$(dirname "$0")/chroot.sh"; printf '%s\n' "$MIRROR" "$SUITE" "$SIZE_MIB"; } | sha256sum | cut -c1-12)
image=$cache_dir/debian-12-base-$key.qcow2
if [ -s "$image" ]; then
  log "cached: $image"
  printf '%s\n' "$image"
  exit 0
fi

work=$(mktemp -d "$cache_dir/base-build.XXXXXX")
root=$work/root
raw=$work/disk.raw
mounted=""
cleanup() { chroot_cleanup "$root" "$work" "$mounted" var/cache/apt/archives; }
trap cleanup EXIT

log "disk: ${SIZE_MIB} MiB raw, one partition from sector $PART_START_SECTOR"
truncate -s "${SIZE_MIB}M" "$raw"
printf 'label: dos\nstart=%s, type=83, bootable\n' "$PART_START_SECTOR" | sfdisk -q "$raw"
offset=$((PART_START_SECTOR * 512))
part_bytes=$(((SIZE_MIB * 1024 * 1024) - offset))
# Features extlinux reads: no 64bit, no metadata checksum seed, no orphan file.
mkfs.ext4 -q -F -L rootfs -E "offset=$offset" -O ^64bit,^metadata_csum_seed,^orphan_file \
  "$raw" "$((part_bytes / 1024))k"
mkdir -p "$root"
mount -o "loop,offset=$offset" "$raw" "$root"
mounted=1
uuid=$(blkid -o value -s UUID -p -O "$offset" "$raw")

# Downloaded packages are kept between builds: a changed key rebuilds without downloading again.
debs=$cache_dir/debs
mkdir -p "$debs/partial"
buildlog=$cache_dir/base-build.log
log "debootstrap $SUITE from $MIRROR (log: $buildlog)"
include=$(IFS=,; printf '%s' "${BOOTSTRAP_PACKAGES[*]}")
debootstrap --variant=minbase --cache-dir="$(realpath "$debs")" --include="$include" "$SUITE" "$root" "$MIRROR" \
  >"$buildlog" 2>&1 || { tail -n 30 "$buildlog" >&2; die "debootstrap failed; see $buildlog"; }

log "installing ${PACKAGES[*]}"
cp /etc/resolv.conf "$root/etc/resolv.conf"
chroot_mounts "$root"
mount --bind "$debs" "$root/var/cache/apt/archives"
# With updates and security from the start, the image build's own upgrade has little left to do.
cat >"$root/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
EOF
# Services must not start inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
{
  chroot "$root" apt-get -q update &&
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get -q -y dist-upgrade &&
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get -q -y --no-install-recommends install "${PACKAGES[@]}" &&
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get -q -y --no-install-recommends install systemd-resolved
} >>"$buildlog" 2>&1 || { tail -n 30 "$buildlog" >&2; die "apt-get install in the image failed; see $buildlog"; }
rm -f "$root/usr/sbin/policy-rc.d"
# The initramfs above carries most drivers (built in the chroot, it cannot know the VM's). Later
# rebuilds run inside a VM, where only its own drivers are needed: under emulation that is minutes
# instead of a quarter of an hour.
printf 'MODULES=dep\n' >"$root/etc/initramfs-tools/conf.d/10-modules-dep.conf"
umount "$root/var/cache/apt/archives"
for fs in dev/pts dev proc sys; do
  umount "$root/$fs"
done

log "configuring"
printf 'UUID=%s / ext4 errors=remount-ro 0 1\n' "$uuid" >"$root/etc/fstab"
printf 'debian\n' >"$root/etc/hostname"
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
# Any wired NIC gets DHCP even before (or without) cloud-init's network config.
cat >"$root/etc/systemd/network/20-wired.network" <<'EOF'
[Match]
Name=en* eth*

[Network]
DHCP=yes
EOF
for unit in systemd-networkd.service systemd-resolved.service ssh.service; do
  systemctl --root="$root" enable "$unit" >/dev/null 2>&1
done
ln -sfn /run/systemd/resolve/stub-resolv.conf "$root/etc/resolv.conf"
# The image is a template: identity and host keys are made at first boot (systemd, cloud-init).
truncate -s 0 "$root/etc/machine-id"
rm -f "$root"/etc/ssh/ssh_host_*_key "$root"/etc/ssh/ssh_host_*_key.pub
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/var/log/apt/*

log "bootloader: extlinux"
mkdir -p "$root/boot/extlinux"
cat >"$root/boot/extlinux/extlinux.conf" <<EOF
DEFAULT debian
TIMEOUT 1
PROMPT 0
LABEL debian
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND root=UUID=$uuid ro console=tty0 console=ttyS0,115200n8
EOF
extlinux --install "$root/boot/extlinux" >/dev/null 2>&1 || die "extlinux --install failed"
# Blocks of deleted files (package downloads, logs) become holes, so qcow2 stores only live data.
fstrim "$root" >/dev/null 2>&1 || log "fstrim failed; the image keeps freed blocks"
sync
umount "$root"
mounted=""
dd if="$mbr" of="$raw" bs=440 count=1 conv=notrunc status=none

log "converting to qcow2"
qemu-img convert -f raw -O qcow2 "$raw" "$work/image.qcow2"
mv "$work/image.qcow2" "$image"
log "built: $image"
printf '%s\n' "$image"
