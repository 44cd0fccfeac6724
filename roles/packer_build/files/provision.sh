#!/usr/bin/env bash
# Runs inside the Packer build VM, as root.
#   provision.sh install   security upgrade, PostgreSQL majors (clusters stopped and disabled),
#                          no background apt, build manifest
#   provision.sh seal      first-boot state, identity, private keys (the snakeoil pair), initialized
#                          clusters, build user's keys, caches and logs removed; the first boot makes
#                          each VM its own TLS key pair and fresh clusters
# Settings come from the environment (set by the Packer template):
#   PG_VERSIONS="15 16 17"  OS_VERSION=22.04  PG_REPO=pgdg|distribution
#   PGDG_URL  PGDG_KEY_URL  BUILD_USER  REVISION  CA_BUNDLE (a file; empty means none)
#   MANIFEST (where the build manifest is written)
#   SSH_HOST_KEY_TYPES="ed25519 ecdsa" (what each VM generates at first boot)
#   INITRAMFS_MODULES=dep|most (dep: what the root filesystem needs plus every KubeVirt disk bus)
#   CLOUD_INIT_DATASOURCE=nocloud|auto (nocloud: the seed is a local disk, read before networking)
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
INITRAMFS_MODULES=${INITRAMFS_MODULES:-dep}
case "$INITRAMFS_MODULES" in
  dep | most) ;;
  *) printf 'provision: INITRAMFS_MODULES=%s is not supported; use dep or most\n' "$INITRAMFS_MODULES" >&2; exit 1 ;;
esac
CLOUD_INIT_DATASOURCE=${CLOUD_INIT_DATASOURCE:-nocloud}
case "$CLOUD_INIT_DATASOURCE" in
  nocloud | auto) ;;
  *) printf 'provision: CLOUD_INIT_DATASOURCE=%s is not supported; use nocloud or auto\n' "$CLOUD_INIT_DATASOURCE" >&2; exit 1 ;;
esac
# The root the bootloader and cloud-init steps write under (a test points it at a tree).
SYSROOT=${SYSROOT:-}
# The storage drivers of every disk bus a KubeVirt VM can boot from (virtio, scsi, sata), and NVMe.
DISK_BUS_MODULES="virtio_pci virtio_blk virtio_scsi sd_mod ahci nvme"

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

conf_value() {
  # The value a PostgreSQL configuration file sets for a parameter ("" when it sets none).
  sed -n -E "s/^[[:space:]]*$2[[:space:]]*=?[[:space:]]*'?([^'#]*)'?.*/\1/p" "$1" | tail -n 1 | sed 's/[[:space:]]*$//'
}

supervise_clusters_directly() {
  # The packaged unit starts a cluster through pg_ctlcluster (Perl) and pg_ctl, which polls for the
  # server: about 2 s of every first boot under emulation before the postmaster even runs (0.75 s to
  # ready without them, 4.3 s with). Each cluster made by the packages gets a drop-in that has systemd
  # run its postmaster itself, as pg_ctlcluster would have run it: same user, configuration file, log
  # file, OOM protection, and a "disabled" start.conf is still refused. The server tells systemd when it
  # accepts connections (sd_notify), stops on SIGINT (fast shutdown) and reloads on SIGHUP. A cluster
  # whose settings only pg_ctlcluster applies (an environment file, pg_ctl options, a statistics
  # directory under /run) keeps the packaged start, and the build says so.
  local version name owner datadir logfile conf group lang dropin setting
  command -v pg_lsclusters >/dev/null 2>&1 || return 0
  # Columns: version, name, port, status, owner, data directory, log file.
  while read -r version name _ _ owner datadir logfile _; do
    [ -n "$version" ] || continue
    conf=/etc/postgresql/$version/$name
    if grep -Eqv '^[[:space:]]*(#|$)' "$conf/environment" 2>/dev/null \
      || [ -n "$(conf_value "$conf/pg_ctl.conf" pg_ctl_options 2>/dev/null)" ] \
      || [ -n "$(conf_value "$conf/postgresql.conf" stats_temp_directory)" ]; then
      log "cluster $version/$name keeps pg_ctlcluster's start: it has an environment file, pg_ctl options or a stats_temp_directory"
      continue
    fi
    for setting in data_directory hba_file ident_file external_pid_file unix_socket_directories; do
      [ -n "$(conf_value "$conf/postgresql.conf" "$setting")" ] \
        || die "cluster $version/$name: postgresql.conf sets no $setting; the packages always write it"
    done
    [ "$(conf_value "$conf/postgresql.conf" data_directory)" = "$datadir" ] \
      || die "cluster $version/$name: pg_lsclusters and postgresql.conf disagree on the data directory"
    case "$logfile" in
      /*) ;;
      *) die "cluster $version/$name: pg_lsclusters names no log file ($logfile); the packages always set one" ;;
    esac
    group=$(id -gn "$owner")
    lang=$(conf_value "$conf/postgresql.conf" lc_messages)
    log "cluster $version/$name: systemd runs its postmaster directly (as $owner, log $logfile)"
    dropin=/etc/systemd/system/postgresql@$version-$name.service.d
    mkdir -p "$dropin"
    {
      printf '# goldenimage.pipeline: the postmaster runs under systemd itself, without pg_ctlcluster and pg_ctl.\n'
      printf '[Service]\nType=notify\nUser=%s\nGroup=%s\nPIDFile=\n' "$owner" "$group"
      printf 'Environment=PG_OOM_ADJUST_FILE=/proc/self/oom_score_adj%s\n' "${lang:+ LANG=$lang}"
      printf "ExecCondition=/bin/sh -c '! grep -Eqx \"[[:space:]]*disabled[[:space:]]*\" %s/start.conf'\n" "$conf"
      # The server's own output goes to the cluster's log file, opened by the cluster's owner: systemd
      # would open it as root, which fs.protected_regular refuses in the sticky /var/log/postgresql.
      # No -D: the data directory is the one the configuration names, as for pg_ctlcluster.
      printf "ExecStart=\nExecStart=/bin/sh -c 'exec /usr/lib/postgresql/%s/bin/postgres -c config_file=%s/postgresql.conf >>%s 2>&1'\n" \
        "$version" "$conf" "$logfile"
      cat <<'EOF'
ExecStop=
ExecReload=
ExecReload=/bin/kill -HUP $MAINPID
KillMode=mixed
KillSignal=SIGINT
EOF
    } >"$dropin/60-goldenimage-direct-start.conf"
  done < <(pg_lsclusters --no-header 2>/dev/null)
  systemctl daemon-reload
}

check_cluster_units() {
  # Every cluster must start and stop through its unit before the image ships: a unit that cannot
  # start would only show on the first boot of every VM. The cluster is left stopped, as baked.
  local version name unit pid
  while read -r version name _; do
    [ -n "$version" ] || continue
    unit=postgresql@$version-$name.service
    log "starting and stopping $unit once"
    systemctl start "$unit" || { systemctl status --no-pager "$unit" >&2 || true; die "$unit did not start"; }
    systemctl is-active --quiet "$unit" || die "$unit is not active after its start"
    pid=$(systemctl show -p MainPID --value "$unit")
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = postgres ] || die "$unit runs no postmaster as its main process"
    systemctl stop "$unit"
  done < <(pg_lsclusters --no-header 2>/dev/null)
}

slim_initramfs() {
  # With MODULES=most the initramfs carries every storage and filesystem driver the kernel has (36 MiB
  # on Debian 12): the bootloader reads it through the firmware and the kernel unpacks it at every boot,
  # seconds under emulation. "dep" keeps what the root filesystem needs here; the drivers of every disk
  # bus a KubeVirt VM may boot from are added, so the image still boots when its disk is not virtio.
  # Kernels that build them in (Ubuntu's) need no module; the check below accepts either.
  local kernel module listing missing=""
  if [ "$INITRAMFS_MODULES" = most ] || [ ! -d /etc/initramfs-tools ]; then
    log "initramfs left as the distribution makes it"
    return 0
  fi
  command -v update-initramfs >/dev/null 2>&1 || die "INITRAMFS_MODULES=$INITRAMFS_MODULES needs initramfs-tools"
  log "initramfs: MODULES=$INITRAMFS_MODULES plus the disk buses' drivers ($DISK_BUS_MODULES)"
  mkdir -p /etc/initramfs-tools/conf.d /etc/initramfs-tools/hooks
  printf '# goldenimage.pipeline: only what the root filesystem needs (see hooks/goldenimage-disk-buses)\nMODULES=%s\n' \
    "$INITRAMFS_MODULES" >/etc/initramfs-tools/conf.d/60-goldenimage-modules
  cat >/etc/initramfs-tools/hooks/goldenimage-disk-buses <<EOF
#!/bin/sh
# goldenimage.pipeline: the drivers of every disk bus a KubeVirt VM may boot from.
[ "\$1" = prereqs ] && exit 0
. /usr/share/initramfs-tools/hook-functions
for module in $DISK_BUS_MODULES; do manual_add_modules "\$module"; done
EOF
  chmod 0755 /etc/initramfs-tools/hooks/goldenimage-disk-buses
  update-initramfs -u -k all
  for kernel in /boot/initrd.img-*; do
    kernel=${kernel#/boot/initrd.img-}
    listing=$(lsinitramfs "/boot/initrd.img-$kernel")
    for module in $DISK_BUS_MODULES; do
      if ! grep -Eq "/${module}\.ko(\.[a-z]+)?$" <<<"$listing" \
        && ! grep -Eq "/${module}\.ko$" "/lib/modules/$kernel/modules.builtin" 2>/dev/null; then
        missing="$missing $kernel:$module"
      fi
    done
    log "initramfs of $kernel: $(du -h "/boot/initrd.img-$kernel" | cut -f1)"
  done
  [ -z "$missing" ] || die "the initramfs lacks disk bus drivers:$missing"
}

read_seed_locally() {
  # KubeVirt hands a VM its cloud-init seed on a local disk (cloudInitNoCloud), but unless told so
  # cloud-init runs NoCloud as a network datasource: bootcmd, users and SSH keys (and with them the
  # activation of the VM's PostgreSQL cluster) wait for the network to be online and for a second
  # cloud-init process, seconds of every first boot under emulation. "ds=nocloud" on the kernel command
  # line is cloud-init's own switch for a local seed: that stage then runs in cloud-init-local, before
  # networking. It also makes NoCloud the only datasource, so images booted with a config drive or a
  # network metadata service are built with CLOUD_INIT_DATASOURCE=auto. The datasource list says so too,
  # and ds-identify (a shell script every boot runs among systemd's generators) then probes no other.
  local grub_defaults=$SYSROOT/etc/default/grub grub_cfg=$SYSROOT/boot/grub/grub.cfg conf found=""
  if [ "$CLOUD_INIT_DATASOURCE" = auto ]; then
    log "cloud-init detects its datasource at boot"
    return 0
  fi
  # Last in the directory's order: the distribution's 90_dpkg.cfg lists every datasource.
  mkdir -p "$SYSROOT/etc/cloud/cloud.cfg.d"
  printf '# goldenimage.pipeline: VMs get their seed on a local disk (cloudInitNoCloud)\ndatasource_list: [NoCloud, None]\n' \
    >"$SYSROOT/etc/cloud/cloud.cfg.d/99-goldenimage-datasource.cfg"
  log "kernel command line: ds=nocloud (cloud-init reads the NoCloud seed before networking)"
  if [ -f "$grub_defaults" ]; then
    mkdir -p "$grub_defaults.d"
    # shellcheck disable=SC2016 # expanded by update-grub when it sources the file
    printf '# goldenimage.pipeline: the NoCloud seed is a local disk; cloud-init reads it before networking\nGRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }ds=nocloud"\n' \
      >"$grub_defaults.d/60-goldenimage-nocloud.cfg"
    command -v update-grub >/dev/null 2>&1 || die "$grub_defaults exists but update-grub does not; set packer_build_cloud_init_datasource to auto"
    update-grub
    grep -Eq '^[[:space:]]*linux[[:space:]]' "$grub_cfg" || die "$grub_cfg has no kernel line after update-grub"
    if grep -E '^[[:space:]]*linux[[:space:]]' "$grub_cfg" | grep -Evq '[[:space:]]ds=nocloud([[:space:]]|$)'; then
      die "$grub_cfg has a kernel line without ds=nocloud after update-grub"
    fi
    found="$grub_cfg"
  fi
  for conf in "$SYSROOT/boot/extlinux/extlinux.conf" "$SYSROOT/boot/syslinux/syslinux.cfg" "$SYSROOT/boot/syslinux/extlinux.conf"; do
    [ -f "$conf" ] || continue
    # Every APPEND line (a kernel's arguments) gets the switch once.
    sed -i -E '/^[[:space:]]*APPEND[[:space:]]/I{/[[:space:]]ds=nocloud([[:space:]]|$)/!s/[[:space:]]*$/ ds=nocloud/}' "$conf"
    grep -Eiq '^[[:space:]]*APPEND[[:space:]]' "$conf" || die "$conf has no APPEND line to put ds=nocloud on"
    found="${found:+$found, }$conf"
  done
  [ -n "$found" ] || die "found neither GRUB ($grub_defaults) nor extlinux configuration to put ds=nocloud on the kernel command line; set packer_build_cloud_init_datasource to auto"
  log "ds=nocloud is on every kernel line of $found"
}

favour_cloud_init_local() {
  # On a first boot cloud-init-local is the critical path: networking waits for it (network-pre.target)
  # and it runs bootcmd, the cluster's activation. It starts with the early-boot crowd (udev coldplug,
  # journald, mounts, tmpfiles) on the VM's few vCPUs, and under emulation its Python start-up took
  # about 6 s there against 3 to 4.5 s in an idle guest. While the system boots it gets the larger share.
  local unit dir=$SYSROOT/etc/systemd/system/cloud-init-local.service.d
  for unit in "$SYSROOT/lib/systemd/system/cloud-init-local.service" "$SYSROOT/usr/lib/systemd/system/cloud-init-local.service"; do
    [ -f "$unit" ] || continue
    mkdir -p "$dir"
    printf '# goldenimage.pipeline: the first boot waits for this stage; it goes first while the system starts\n[Service]\nStartupCPUWeight=1000\nNice=-10\n' \
      >"$dir/50-goldenimage-first.conf"
    log "cloud-init-local gets the CPU first while the system starts"
    return 0
  done
  log "no cloud-init-local.service: nothing to favour"
}

disable_background_apt() {
  # Background apt would write packages into every VM's copy-on-write delta and drift PG minors; Ubuntu
  # Pro's apt-news/esm-cache (started by apt hooks), motd-news and snap-repair fetch in every clone too.
  log "disabling unattended-upgrades, the apt daily, Ubuntu Pro, motd-news and snap-repair timers"
  local unit
  for unit in unattended-upgrades.service apt-daily.timer apt-daily-upgrade.timer \
    apt-daily.service apt-daily-upgrade.service ua-timer.timer motd-news.timer motd-news.service \
    snapd.snap-repair.timer apt-news.service esm-cache.service; do
    systemctl stop "$unit" >/dev/null 2>&1 || true
    systemctl disable "$unit" >/dev/null 2>&1 || true
    systemctl mask "$unit" >/dev/null 2>&1 || true
  done
  # snapd refreshes snaps by itself, on no timer: hold every refresh (snapd 2.58 and later).
  if command -v snap >/dev/null 2>&1; then
    snap refresh --hold >/dev/null || die "snapd is installed but 'snap refresh --hold' failed"
    log "snap refreshes held"
  fi
  mkdir -p "$SYSROOT/etc/apt/apt.conf.d"
  cat >"$SYSROOT/etc/apt/apt.conf.d/99-goldenimage-no-periodic" <<'EOF'
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

remove_private_keys() {
  # ssl-cert, which postgresql-common pulls in, generates the snakeoil pair the clusters serve TLS with
  # when it installs: every VM made from the image would serve TLS with one private key. Every private key
  # under /etc/ssl/private goes, and the snakeoil certificate with its key; the first boot generates the
  # pair afresh before any cluster starts (as it does SSH host keys).
  local dir=$SYSROOT/etc/ssl/private units=$SYSROOT/etc/systemd/system
  log "removing private keys: every file under /etc/ssl/private and the snakeoil certificate"
  if [ -d "$dir" ]; then
    find "$dir" -mindepth 1 \( -type f -o -type l \) -delete
  fi
  rm -f "$SYSROOT/etc/ssl/certs/ssl-cert-snakeoil.pem"
  mkdir -p "$units"
  cat >"$units/goldenimage-snakeoil.service" <<'EOF'
[Unit]
Description=This VM's own snakeoil TLS key pair (goldenimage.pipeline: the image ships none)
DefaultDependencies=no
After=local-fs.target
Before=postgresql.service
ConditionPathExists=!/etc/ssl/private/ssl-cert-snakeoil.key

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/make-ssl-cert generate-default-snakeoil --force-overwrite
EOF
}

empty_clusters() {
  # A cluster initialized at build time would give every VM the same database system identifier (and
  # the same data). Each cluster keeps its configuration under /etc/postgresql, its data directory is
  # emptied, and its first start on a VM initializes it afresh (fresh-cluster, from the unit's drop-in).
  local conf datadir folder lib=$SYSROOT/usr/local/lib/goldenimage
  for conf in "$SYSROOT"/etc/postgresql/*/*; do
    [ -f "$conf/postgresql.conf" ] || continue
    datadir=$(conf_value "$conf/postgresql.conf" data_directory)
    if [ -n "$datadir" ] && [ -d "$SYSROOT$datadir" ]; then
      log "emptying the data directory $datadir of cluster ${conf#"$SYSROOT"/etc/postgresql/}"
      find "$SYSROOT$datadir" -mindepth 1 -delete
    fi
  done
  for folder in "$SYSROOT"/var/lib/postgresql/*/*; do
    [ -e "$folder/PG_VERSION" ] || continue
    log "emptying the data directory ${folder#"$SYSROOT"}"
    find "$folder" -mindepth 1 -delete
  done
  mkdir -p "$lib" "$SYSROOT/etc/systemd/system/postgresql@.service.d"
  cat >"$lib/fresh-cluster" <<'EOF'
#!/bin/sh
# goldenimage.pipeline: the image ships each cluster configured and empty; its first start on a VM
# initializes it here, so every VM has its own database system identifier. Argument: <major>-<name>.
set -eu
version=${1%%-*}
name=${1#*-}
conf=/etc/postgresql/$version/$name
datadir=$(sed -n -E "s/^[[:space:]]*data_directory[[:space:]]*=?[[:space:]]*'?([^'#]*)'?.*/\1/p" "$conf/postgresql.conf" | tail -n 1)
datadir=${datadir:-/var/lib/postgresql/$version/$name}
[ -s "$datadir/PG_VERSION" ] && exit 0
owner=$(stat -c %U "$conf")
install -d -m 0700 -o "$owner" -g "$(id -gn "$owner")" "$datadir"
runuser -u "$owner" -- "/usr/lib/postgresql/$version/bin/initdb" -D "$datadir" --encoding=UTF8 \
  --locale=C.UTF-8 --auth-local=peer --auth-host=scram-sha-256 >/dev/null
# The cluster's configuration is the one under /etc/postgresql, as pg_createcluster leaves it.
rm -f "$datadir/postgresql.conf" "$datadir/pg_hba.conf" "$datadir/pg_ident.conf"
EOF
  chmod 0755 "$lib/fresh-cluster"
  cat >"$SYSROOT/etc/systemd/system/postgresql@.service.d/40-goldenimage-first-boot.conf" <<'EOF'
# goldenimage.pipeline: this VM's own TLS key pair and a fresh cluster before the cluster's first start.
[Unit]
Wants=goldenimage-snakeoil.service
After=goldenimage-snakeoil.service

[Service]
ExecStartPre=+/usr/local/lib/goldenimage/fresh-cluster %i
EOF
}

seal() {
  log "sealing"
  local home
  remove_private_keys
  empty_clusters
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

# Sourced (to try one step in a running guest), it only defines the steps.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

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
    supervise_clusters_directly
    check_cluster_units
    disable_background_apt
    settle_locale
    settle_ssh_host_keys
    read_seed_locally
    favour_cloud_init_local
    slim_initramfs
    write_manifest
    ;;
  seal)
    seal
    ;;
  *)
    die "usage: provision.sh install|seal"
    ;;
esac
