#!/usr/bin/env bash
# make e2e: the slow tier that boots real VMs.
#   1. builds a small bootable Debian 12 base image with debootstrap (tests/e2e/build_base.sh),
#      cached under .cache/e2e by a content key;
#   2. runs the real packer_build role on it (tests/e2e/bake.yml): Packer's QEMU builder, the
#      distribution's PostgreSQL majors, provision.sh, sealing, compression, manifest; the role names
#      the artifact by the base image's os-release (debian-12-postgres-<revision>.qcow2);
#   3. fills a local apt repository with what `apt-get install postgresql` fetches on the base image
#      (tests/e2e/apt_mirror.sh), before any measured boot;
#   4. boots the baked image and the base image with QEMU, each with a blank pgdata disk and no way out
#      but (for the apt VM) the local repository served on loopback, and measures boot-to-ready and the
#      copy-on-write delta of each (bench/boot_to_ready.py); figures in .cache/e2e/results.json.
# KVM is used where a guest really boots under it (probed once per host boot, with the CPU models
# bench/boot_to_ready.py tries), else TCG; why is recorded with the figures.
# Every step has a time limit; a step that overruns is stopped with its whole process group, so no
# VM is left running.
#
# Settings (environment): E2E_ACCEL=auto|kvm|tcg  E2E_CPU_MODEL (under KVM)  E2E_PG_VERSIONS="15" (what the distribution ships)
#   E2E_ENGINE_VERSION=15  E2E_BASE_TIMEOUT  E2E_BAKE_TIMEOUT  E2E_BENCH_TIMEOUT  E2E_TIMEOUT_BAKED
#   E2E_TIMEOUT_APT (seconds; the last two bound each VM's wait for PostgreSQL)
#   E2E_REPEAT=5 (boots of each image, interleaved; the figures are medians with their spread: with 5,
#   two boots caught in a slow spell of a shared host cannot set the median)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cache=$repo/.cache/e2e
py=$repo/.venv/bin/python
accel=${E2E_ACCEL:-auto}
pg_versions=${E2E_PG_VERSIONS:-15}
engine_version=${E2E_ENGINE_VERSION:-15}
base_timeout=${E2E_BASE_TIMEOUT:-1800}
bake_timeout=${E2E_BAKE_TIMEOUT:-2700}
repeat=${E2E_REPEAT:-5}
bench_timeout=${E2E_BENCH_TIMEOUT:-$((repeat * 1800))}
export ANSIBLE_COLLECTIONS_PATH=$repo/.collections
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false

log() { printf '\n==> e2e: %s\n' "$*"; }
die() { printf 'e2e: %s\n' "$*" >&2; exit 1; }

# program:Debian package
needs=(debootstrap:debootstrap extlinux:extlinux sfdisk:fdisk qemu-img:qemu-utils
  qemu-system-x86_64:qemu-system-x86 packer:packer cloud-localds:cloud-image-utils
  genisoimage:genisoimage ssh-keygen:openssh-client fstrim:util-linux socat:socat
  dpkg-scanpackages:dpkg-dev apt-ftparchive:apt-utils)
missing=()
for pair in "${needs[@]}"; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
done
[ -f /usr/lib/syslinux/mbr/mbr.bin ] || missing+=(syslinux-common)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing Debian packages: ${missing[*]} (sudo apt-get install -y ${missing[*]})"
  log "apt-get install ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ "$(id -u)" = 0 ] || die "the base image build needs root (debootstrap, loop mount)"
[ -x "$py" ] || die "$py is missing; run make setup first"
mkdir -p "$cache"

# The running step, in its own session so that a timeout or Ctrl-C stops it and everything it
# started (Packer, QEMU) by process group.
step_pid=""
stop_step() {
  if [ -n "$step_pid" ] && kill -0 "$step_pid" 2>/dev/null; then
    kill -TERM -- "-$step_pid" 2>/dev/null || true
    for _ in $(seq 20); do
      kill -0 "$step_pid" 2>/dev/null || break
      sleep 1
    done
    kill -KILL -- "-$step_pid" 2>/dev/null || true
  fi
  step_pid=""
}
trap 'stop_step' EXIT
trap 'stop_step; exit 130' INT TERM

# run_bounded SECONDS WHAT COMMAND...: runs COMMAND, stops it after SECONDS with a clear message.
run_bounded() {
  local seconds=$1 what=$2 started rc=0
  shift 2
  started=$SECONDS
  setsid "$@" &
  step_pid=$!
  while kill -0 "$step_pid" 2>/dev/null; do
    if [ $((SECONDS - started)) -ge "$seconds" ]; then
      printf 'e2e: %s did not finish within %ss; stopping it\n' "$what" "$seconds" >&2
      stop_step
      return 124
    fi
    sleep 2
  done
  wait "$step_pid" || rc=$?
  step_pid=""
  [ "$rc" = 0 ] || printf 'e2e: %s failed (exit %s)\n' "$what" "$rc" >&2
  return "$rc"
}

log "1/4 base image (Debian 12, debootstrap; cached)"
t0=$SECONDS
run_bounded "$base_timeout" "the base image build" tests/e2e/build_base.sh "$cache" >"$cache/base.path"
base=$(tail -n 1 "$cache/base.path")
[ -s "$base" ] || die "the base image build printed no image path"
base_s=$((SECONDS - t0))
echo "base image: $base (${base_s}s)"

if [ "$accel" = auto ]; then
  # Probed by booting: /dev/kvm can exist and open while guests still fail under it.
  probe=$cache/accel-$(cat /proc/sys/kernel/random/boot_id)
  if [ ! -s "$probe" ]; then
    log "does a guest boot under KVM here?"
    run_bounded 600 "the KVM probe" "$py" bench/boot_to_ready.py --probe-kvm "$base" --kvm-probe-timeout 120 \
      --workdir "$cache/kvm-probe" >"$probe.tmp"
    mv "$probe.tmp" "$probe"
  fi
  # The last line is "kvm <cpu model>" or "tcg"; the lines before say what each try found.
  read -r accel cpu_model < <(tail -n 1 "$probe")
  accel_why=$(head -n -1 "$probe" | paste -sd ';' -)
else
  accel_why="E2E_ACCEL=$accel"
fi
cpu_model=${E2E_CPU_MODEL:-${cpu_model:-host}}
echo "accelerator: $accel ($accel_why)"

log "2/4 packer_build role on the base image (PostgreSQL $pg_versions from the distribution, $accel)"
key=$(basename "$base" .qcow2)
key=${key##*-}
# The bake is cached per base image and per what builds it: a change to the role's provisioning bakes again.
bake_key=$(cat roles/packer_build/files/* roles/packer_build/templates/* tests/e2e/bake.yml | sha256sum | cut -c1-8)
out=$cache/baked-$key-$bake_key
mkdir -p "$out"
# A revision built earlier from this base is reused: its date makes the role find its manifest.
build_date=$(find "$out" -maxdepth 1 -name '*.manifest.json' -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2-)
if [ -n "$build_date" ]; then
  build_date=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["build_date"])' "$build_date")
fi
base_sum=$(sha256sum "$base" | cut -d' ' -f1)
# The build disk keeps the base image's size (its root filesystem does not grow).
disk_mib=$(qemu-img info --output=json "$base" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["virtual-size"] // 1048576)')
"$py" - "$cache/bake-vars.json" "$base" "$base_sum" "$pg_versions" "$out" "$accel" "$disk_mib" "$build_date" "$py" <<'PY'
import json, sys
path, base, digest, majors, out, accel, disk_mib, build_date, python = sys.argv[1:]
extra = {
    "e2e_base_image": base,
    "e2e_base_image_checksum": "sha256:" + digest,
    "e2e_pg_versions": majors.split(),
    "e2e_output_dir": out,
    "e2e_accelerator": accel,
    "e2e_disk_size": disk_mib + "M",
    "e2e_ssh_timeout": "20m",
    "packer_build_date": build_date,
    "ansible_python_interpreter": python,
}
with open(path, "w") as fh:
    json.dump(extra, fh, indent=2)
PY
t0=$SECONDS
run_bounded "$bake_timeout" "the packer_build role" "$repo/.venv/bin/ansible-playbook" -i localhost, -c local \
  tests/e2e/bake.yml -e "@$cache/bake-vars.json"
bake_s=$((SECONDS - t0))
manifest=$(find "$out" -maxdepth 1 -name '*.manifest.json' -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2-)
[ -n "$manifest" ] || die "packer_build wrote no manifest in $out"
baked=$out/$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["artifact"])' "$manifest")
[ -s "$baked" ] || die "the baked image $baked is missing"
echo "baked image: $baked (${bake_s}s)"

log "3/4 local apt repository for the apt baseline (filled now, before any measured boot)"
run_bounded "$base_timeout" "the local apt repository" tests/e2e/apt_mirror.sh "$base" "$cache" >"$cache/mirror.path"
mirror=$(tail -n 1 "$cache/mirror.path")
[ -s "$mirror/Release" ] || die "the local apt repository was not filled"
echo "apt repository: $mirror"

log "4/4 boot-to-ready and COW delta: baked image vs apt-get install at first boot ($accel)"
rm -rf "${cache:?}/boot"
run_bounded "$bench_timeout" "the boot-to-ready benchmark" "$py" bench/boot_to_ready.py \
  --base "$base" --baked "$baked" --apt-mirror "$mirror" --engine-version "$engine_version" \
  --accel "$accel" --cpu-model "$cpu_model" --accel-why "$accel_why" \
  --timeout-baked "${E2E_TIMEOUT_BAKED:-600}" --timeout-apt "${E2E_TIMEOUT_APT:-1800}" \
  --repeat "$repeat" --bus-check sata scsi --results "$cache/results.json" --workdir "$cache/boot"
"$py" - "$cache/results.json" "$base_s" "$bake_s" "$manifest" <<'PY'
import json, sys
path, base_s, bake_s, manifest_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(path) as fh:
    results = json.load(fh)
with open(manifest_path) as fh:
    manifest = json.load(fh)
keep = ("revision", "artifact", "os", "os_version", "pg_versions", "kernel", "sizes", "compression", "checksums", "packer_version")
results["build"] = {
    "base_image_s": base_s,
    "packer_build_s": bake_s,
    "manifest": {k: manifest.get(k) for k in keep},
}
with open(path, "w") as fh:
    json.dump(results, fh, indent=2)
PY
log "done: $cache/results.json"
