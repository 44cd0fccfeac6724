#!/usr/bin/env bash
# Fills a local apt repository with exactly the packages `apt-get install postgresql` fetches on a VM
# booted from the base image, before any measured boot, so that the apt baseline reads them from the host
# (loopback) instead of a distribution mirror whose speed changes from hour to hour.
#
#   tests/e2e/apt_mirror.sh BASE_IMAGE CACHE_DIR      prints the repository's directory on its last line
#
# The base image is copied to a raw file and its root is mounted (loop); in a chroot of that copy apt reads
# the distribution's indexes and downloads, without installing, what `apt-get install postgresql` would
# install there (recommends included, as on the VM). The .debs become a flat repository (Packages,
# Packages.gz, Release; `deb [trusted=yes] http://HOST/ ./`). It is cached as CACHE_DIR/apt-mirror-<key>,
# the key hashing this script and the base image's name (which carries its own content key). Needs root.
set -euo pipefail
# shellcheck source=tests/e2e/chroot.sh
. "$(dirname "$0")/chroot.sh"

base=${1:?usage: apt_mirror.sh BASE_IMAGE CACHE_DIR}
cache_dir=${2:?usage: apt_mirror.sh BASE_IMAGE CACHE_DIR}
PACKAGES=(postgresql)
PART_START_SECTOR=2048

log() { printf '==> apt mirror: %s\n' "$*" >&2; }
die() { printf 'apt_mirror: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (a loop mount and a chroot)"
for tool in qemu-img dpkg-scanpackages apt-ftparchive gzip; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (apt-get install qemu-utils dpkg-dev apt-utils)"
done
[ -s "$base" ] || die "no base image at $base"

key=$( { cat "$0" "$(dirname "$0")/chroot.sh"; basename "$base"; printf '%s\n' "${PACKAGES[@]}"; } | sha256sum | cut -c1-12)
repo=$cache_dir/apt-mirror-$key
if [ -s "$repo/Release" ]; then
  log "cached: $repo ($(find "$repo" -name '*.deb' | wc -l) packages)"
  printf '%s\n' "$repo"
  exit 0
fi

work=$(mktemp -d "$cache_dir/apt-mirror-build.XXXXXX")
root=$work/root
mounted=""
cleanup() { chroot_cleanup "$root" "$work" "$mounted" mnt/debs; }
trap cleanup EXIT

log "copying the base image's root (raw, throwaway)"
qemu-img convert -f qcow2 -O raw "$base" "$work/disk.raw"
mkdir -p "$root"
mount -o "loop,offset=$((PART_START_SECTOR * 512))" "$work/disk.raw" "$root"
mounted=1
chroot_mounts "$root"
# The image resolves through systemd-resolved, which does not run in a chroot.
rm -f "$root/etc/resolv.conf"
cp /etc/resolv.conf "$root/etc/resolv.conf"

debs=$work/debs
mkdir -p "$debs/partial" "$root/mnt/debs"
mount --bind "$debs" "$root/mnt/debs"
log "apt-get install --download-only ${PACKAGES[*]} in the base image's root"
{
  chroot "$root" apt-get -q update &&
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get -q -y --download-only \
      -o Dir::Cache::archives=/mnt/debs install "${PACKAGES[@]}"
} >"$work/apt.log" 2>&1 || { tail -n 30 "$work/apt.log" >&2; die "apt-get --download-only failed"; }
umount "$root/mnt/debs"
count=$(find "$debs" -maxdepth 1 -name '*.deb' | wc -l)
[ "$count" -gt 0 ] || die "apt downloaded nothing for ${PACKAGES[*]}"

log "flat repository of $count packages"
mkdir -p "$work/repo"
mv "$debs"/*.deb "$work/repo/"
(
  cd "$work/repo"
  dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages
  gzip -9nk Packages
  apt-ftparchive -o APT::FTPArchive::Release::Origin=goldenimage-e2e \
    -o APT::FTPArchive::Release::Suite=local release . >Release
)
grep -c '^Package: ' "$work/repo/Packages" >/dev/null || die "dpkg-scanpackages listed no package"
rm -rf "$repo"
mv "$work/repo" "$repo"
log "filled: $repo ($(du -sh "$repo" | cut -f1))"
printf '%s\n' "$repo"
