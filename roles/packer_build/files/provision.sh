#!/usr/bin/env bash
# Runs inside the Packer build VM, as root.
#   provision.sh install   security upgrade, PostgreSQL majors (clusters stopped and disabled),
#                          no background apt, build manifest
#   provision.sh seal      first-boot state, identity, build user's keys, caches and logs removed
# Settings come from the environment (set by the Packer template):
#   PG_VERSIONS="15 16 17"  OS_VERSION=22.04  PG_REPO=pgdg|distribution
#   PGDG_URL  PGDG_KEY_URL  BUILD_USER  REVISION  CA_BUNDLE (a file; empty means none)
#   MANIFEST (where the build manifest is written)
#   SSH_HOST_KEY_TYPES="ed25519 ecdsa" (what each VM generates at first boot)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
APT_OPTS=(-y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
PG_VERSIONS=${PG_VERSIONS:?PG_VERSIONS is required, e.g. "15 16 17"}
PG_REPO=${PG_REPO:-pgdg}
PGDG_URL=${PGDG_URL:-https://apt.postgresql.org/pub/repos/apt}
PGDG_KEY_URL=${PGDG_KEY_URL:-https://www.postgresql.org/media/keys/ACCC4CF8.asc}
BUILD_USER=${BUILD_USER:-packer}
REVISION=${REVISION:-unknown}
CA_BUNDLE=${CA_BUNDLE:-}
MANIFEST=${MANIFEST:-/etc/goldenimage/build-manifest.json}
SSH_HOST_KEY_TYPES=${SSH_HOST_KEY_TYPES-ed25519 ecdsa} # set but empty is refused, not defaulted

log() { printf '==> provision: %s\n' "$*"; }
die() { printf 'provision: %s\n' "$*" >&2; exit 1; }

install_ca_bundle() {
  # Behind a TLS-intercepting proxy every HTTPS fetch from the guest needs the proxy's CA.
  if [ -n "$CA_BUNDLE" ] && [ -s "$CA_BUNDLE" ]; then
    log "adding the build CA bundle to the trust store"
    install -m 0644 "$CA_BUNDLE" /usr/local/share/ca-certificates/goldenimage-build.crt
    update-ca-certificates >/dev/null
  fi
}

wait_for_cloud_init() {
  # apt must not race cloud-init's own package work on first boot.
  if command -v cloud-init >/dev/null 2>&1; then
    cloud-init status --wait >/dev/null 2>&1 || true
  fi
}

security_upgrade() {
  log "security upgrade"
  apt-get update -q
  apt-get "${APT_OPTS[@]}" dist-upgrade
}

add_pgdg_repo() {
  local codename keyring=/usr/share/keyrings/pgdg.asc
  # shellcheck disable=SC1091  # os-release exists on every supported guest
  codename=$(. /etc/os-release && printf '%s' "${VERSION_CODENAME:?}")
  log "PGDG repository for $codename"
  apt-get "${APT_OPTS[@]}" install ca-certificates curl
  curl -fsSL --retry 3 -o "$keyring" "$PGDG_KEY_URL"
  printf 'deb [signed-by=%s] %s %s-pgdg main\n' "$keyring" "$PGDG_URL" "$codename" \
    >/etc/apt/sources.list.d/pgdg.list
  apt-get update -q
}

install_postgresql() {
  local major packages=()
  for major in $PG_VERSIONS; do
    if ! apt-cache show "postgresql-$major" >/dev/null 2>&1; then
      die "postgresql-$major is not available from the $PG_REPO repository"
    fi
    packages+=("postgresql-$major" "postgresql-client-$major")
  done
  log "installing ${packages[*]}"
  # No cluster may start while packages install: the image must carry none running.
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod 0755 /usr/sbin/policy-rc.d
  apt-get "${APT_OPTS[@]}" install "${packages[@]}"
  rm -f /usr/sbin/policy-rc.d
}

disable_clusters() {
  local cluster_version cluster_name rest
  # Clusters created by the packages are stopped and set to manual; first boot activates one.
  if command -v pg_lsclusters >/dev/null 2>&1; then
    while read -r cluster_version cluster_name rest; do
      [ -n "$cluster_version" ] || continue
      log "stopping and disabling cluster $cluster_version/$cluster_name (${rest%% *})"
      pg_ctlcluster "$cluster_version" "$cluster_name" stop >/dev/null 2>&1 || true
      printf 'manual\n' >"/etc/postgresql/$cluster_version/$cluster_name/start.conf"
      systemctl disable "postgresql@$cluster_version-$cluster_name.service" >/dev/null 2>&1 || true
    done < <(pg_lsclusters --no-header 2>/dev/null)
  fi
  systemctl disable postgresql.service >/dev/null 2>&1 || true
  systemctl stop postgresql.service >/dev/null 2>&1 || true
}

start_clusters_early() {
  # A VM made from the image activates its cluster from cloud-init's init stage, and the packaged unit
  # would then wait for basic.target, which waits for that whole stage (users, ssh keys, apt sources):
  # seconds of every first boot. A cluster needs its filesystems, /run/postgresql and the network target,
  # not the rest of early boot; its shutdown ordering stays as packaged.
  log "clusters start as soon as they are activated, not after cloud-init's init stage"
  mkdir -p /etc/systemd/system/postgresql@.service.d
  cat >/etc/systemd/system/postgresql@.service.d/50-goldenimage-early-start.conf <<'EOF'
[Unit]
DefaultDependencies=no
After=local-fs.target systemd-tmpfiles-setup.service network.target
Conflicts=shutdown.target
Before=shutdown.target
EOF
}

disable_background_apt() {
  # Background apt would write packages into every VM's copy-on-write delta and drift PG minors.
  log "disabling unattended-upgrades and the apt daily timers"
  local unit
  for unit in unattended-upgrades.service apt-daily.timer apt-daily-upgrade.timer \
    apt-daily.service apt-daily-upgrade.service; do
    systemctl stop "$unit" >/dev/null 2>&1 || true
    systemctl disable "$unit" >/dev/null 2>&1 || true
    systemctl mask "$unit" >/dev/null 2>&1 || true
  done
  cat >/etc/apt/apt.conf.d/99-goldenimage-no-periodic <<'EOF'
APT::Periodic::Enable "0";
APT::Periodic::Update-Package-Lists "0";
APT::Periodic::Unattended-Upgrade "0";
APT::Periodic::Download-Upgradeable-Packages "0";
EOF
}

json_string() {
  # Package names, versions and kernel releases carry no quotes or backslashes; escape anyway.
  local value=${1//\\/\\\\}
  printf '"%s"' "${value//\"/\\\"}"
}

write_manifest() {
  local major binary minor package first=1
  log "writing the build manifest to $MANIFEST"
  mkdir -p "$(dirname "$MANIFEST")"
  {
    printf '{\n  "revision": %s,\n' "$(json_string "$REVISION")"
    printf '  "os_version": %s,\n' "$(json_string "${OS_VERSION:-}")"
    printf '  "pg_repo": %s,\n' "$(json_string "$PG_REPO")"
    printf '  "kernel": %s,\n' "$(json_string "$(uname -r)")"
    printf '  "postgresql": {'
    for major in $PG_VERSIONS; do
      binary=/usr/lib/postgresql/$major/bin/postgres
      [ -x "$binary" ] || die "PostgreSQL $major is not installed at $binary"
      # "postgres (PostgreSQL) 16.4 (Ubuntu 16.4-1.pgdg22.04+1)" -> 16.4
      minor=$("$binary" --version | awk '{print $3}')
      package=$(dpkg-query -W -f='${Version}' "postgresql-$major")
      [ "$first" = 1 ] || printf ','
      first=0
      printf '\n    %s: {"minor": %s, "package_version": %s}' \
        "$(json_string "$major")" "$(json_string "$minor")" "$(json_string "$package")"
    done
    printf '\n  },\n  "packages": ['
    first=1
    while IFS= read -r package; do
      [ "$first" = 1 ] || printf ','
      first=0
      printf '\n    %s' "$(json_string "$package")"
    done < <(dpkg-query -W -f='${db:Status-Abbrev}${Package}=${Version}\n' | awk '/^ii /{print $2}' | sort)
    printf '\n  ]\n}\n'
  } >"$MANIFEST"
  chmod 0644 "$MANIFEST"
}

settle_locale() {
  # With no LANG in /etc/default/locale, cloud-init generates en_US.UTF-8 at every VM's first boot
  # (locale-gen: about 10 s under emulation). Name the locale the image already has and its PostgreSQL
  # clusters were made with: C.UTF-8 is built in and needs no generation.
  if ! grep -q '^LANG=' /etc/default/locale 2>/dev/null; then
    log "system locale C.UTF-8"
    printf 'LANG=C.UTF-8\n' >>/etc/default/locale
  fi
}

settle_ssh_host_keys() {
  # cloud-init generates rsa, ecdsa and ed25519 host keys at every VM's first boot; the 3072-bit RSA key
  # alone takes about 10 s under emulation. Generate only the configured types, and have sshd offer
  # exactly those (its defaults would look for the others and log their absence at every start).
  # The role's argument spec decides which types are valid; this only writes them down.
  local list
  # shellcheck disable=SC2086 # one word per type
  list=$(printf '%s, ' $SSH_HOST_KEY_TYPES)
  list=${list%, }
  [ -n "$list" ] || die "SSH_HOST_KEY_TYPES is empty; name at least one host key type"
  log "ssh host key types: $list"
  mkdir -p /etc/cloud/cloud.cfg.d /etc/ssh/sshd_config.d
  printf '# goldenimage.pipeline: the host keys each VM generates at first boot\nssh_genkeytypes: [%s]\n' "$list" \
    >/etc/cloud/cloud.cfg.d/60-goldenimage-ssh-host-keys.cfg
  {
    printf '# goldenimage.pipeline: the host keys cloud-init generates at first boot\n'
    for type in $SSH_HOST_KEY_TYPES; do
      printf 'HostKey /etc/ssh/ssh_host_%s_key\n' "$type"
    done
  } >/etc/ssh/sshd_config.d/60-goldenimage-host-keys.conf
}

seal() {
  log "sealing"
  local home
  if command -v cloud-init >/dev/null 2>&1; then
    # Every VM made from this image must run first boot (and its bootstrap) afresh.
    cloud-init clean --logs
  fi
  rm -rf /var/lib/cloud/instances /var/lib/cloud/instance /var/lib/cloud/data/instance-id
  # A unique machine-id per VM (DHCP client ids, journald); an empty file makes systemd generate one.
  truncate -s 0 /etc/machine-id
  if [ -e /var/lib/dbus/machine-id ] && [ ! -L /var/lib/dbus/machine-id ]; then
    rm -f /var/lib/dbus/machine-id
    ln -s /etc/machine-id /var/lib/dbus/machine-id
  fi
  # Host keys are regenerated at first boot (cloud-init or ssh's own keygen unit).
  rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub
  home=$(getent passwd "$BUILD_USER" | cut -d: -f6 || true)
  if [ -n "$home" ]; then
    rm -f "$home/.ssh/authorized_keys" "$home/.bash_history"
  fi
  rm -f /root/.ssh/authorized_keys /root/.bash_history
  rm -f /var/crash/* /core /core.*
  apt-get -q clean
  rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/* /var/tmp/*
  find /var/log -type f \( -name '*.gz' -o -name '*.[0-9]' -o -name '*.old' \) -delete
  # --no-create: opening another user's file with O_CREAT in a sticky directory such as
  # /var/log/postgresql is refused even to root (fs.protected_regular).
  find /var/log -type f -exec truncate --no-create -s 0 {} +
  if [ -d /var/log/journal ]; then
    # The build's journal would ship in every clone (journald preallocates 8 MiB per file), and under
    # the emptied machine-id each clone keeps its own anyway. journald writes to /run from here on, so
    # its files under /var can go; the directory stays, keeping the journal persistent in clones.
    # (An older journald without --relinquish-var writes to the deleted files until shutdown frees them.)
    journalctl --relinquish-var >/dev/null 2>&1 || true
    find /var/log/journal -mindepth 1 -delete
  fi
  sync
}

case "${1:-}" in
  install)
    install_ca_bundle
    wait_for_cloud_init
    security_upgrade
    if [ "$PG_REPO" = pgdg ]; then
      add_pgdg_repo
    fi
    install_postgresql
    disable_clusters
    start_clusters_early
    disable_background_apt
    settle_locale
    settle_ssh_host_keys
    write_manifest
    ;;
  seal)
    seal
    ;;
  *)
    die "usage: provision.sh install|seal"
    ;;
esac
