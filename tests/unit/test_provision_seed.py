"""packer_build's provision.sh: ds=nocloud on every kernel line of the image's bootloader, and
cloud-init-local first in line for the CPU while the system starts.

The step runs for real on a directory tree (SYSROOT) with the bootloader files a base image has; for
GRUB a stand-in update-grub builds grub.cfg's kernel lines from the defaults the way grub-mkconfig does
(sourcing /etc/default/grub, then /etc/default/grub.d/*.cfg)."""

import os
import pathlib
import subprocess

import pytest

PROVISION = pathlib.Path(__file__).resolve().parents[2] / "roles/packer_build/files/provision.sh"

EXTLINUX = """DEFAULT debian
TIMEOUT 1
LABEL debian
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND root=UUID=1234 ro console=ttyS0,115200n8
LABEL rescue
  LINUX /vmlinuz.old
  append root=UUID=1234 ro single ds=nocloud
"""

# What grub-mkconfig does with the defaults, reduced to the kernel lines.
UPDATE_GRUB = """#!/bin/sh
set -e
. "$SYSROOT/etc/default/grub"
for f in "$SYSROOT"/etc/default/grub.d/*.cfg; do [ -e "$f" ] && . "$f"; done
mkdir -p "$SYSROOT/boot/grub"
{
  echo "menuentry 'Debian' {"
  echo "	linux /vmlinuz root=UUID=1234 ro $GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT"
  echo "}"
  echo "menuentry 'Debian (recovery mode)' {"
  echo "	linux /vmlinuz root=UUID=1234 ro single $GRUB_CMDLINE_LINUX"
  echo "}"
} >"$SYSROOT/boot/grub/grub.cfg"
"""


def run(tmp_path, datasource="nocloud", update_grub=UPDATE_GRUB, step="read_seed_locally"):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    tool = bindir / "update-grub"
    tool.write_text(update_grub)
    tool.chmod(0o755)
    env = dict(
        os.environ,
        PATH="%s:%s" % (bindir, os.environ["PATH"]),
        SYSROOT=str(tmp_path / "root"),
        PG_VERSIONS="17",
        CLOUD_INIT_DATASOURCE=datasource,
    )
    return subprocess.run(
        ["bash", "-c", '. "$1" && "$2"', "provision-test", str(PROVISION), step],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def tree(tmp_path, files):
    root = tmp_path / "root"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def kernel_lines(text, word):
    return [line for line in text.splitlines() if line.strip().lower().startswith(word)]


def test_every_extlinux_append_line_gets_the_switch_once_and_a_rerun_changes_nothing(tmp_path):
    root = tree(tmp_path, {"boot/extlinux/extlinux.conf": EXTLINUX})
    conf = root / "boot/extlinux/extlinux.conf"
    first = run(tmp_path)
    assert first.returncode == 0, first.stderr
    appends = kernel_lines(conf.read_text(), "append")
    assert len(appends) == 2
    assert all(line.split().count("ds=nocloud") == 1 for line in appends), appends
    assert appends[0].endswith("console=ttyS0,115200n8 ds=nocloud")
    # Nothing else in the file moved.
    assert [line for line in conf.read_text().splitlines() if "ds=nocloud" not in line] == [
        line for line in EXTLINUX.splitlines() if "ds=nocloud" not in line and "APPEND" not in line
    ]
    # The datasource list names NoCloud alone, after the distribution's 90_dpkg.cfg in the directory's order.
    listed = root / "etc/cloud/cloud.cfg.d/99-goldenimage-datasource.cfg"
    assert "datasource_list: [NoCloud, None]" in listed.read_text().splitlines()
    assert sorted(["90_dpkg.cfg", listed.name])[-1] == listed.name
    written = conf.read_text()
    again = run(tmp_path)
    assert again.returncode == 0, again.stderr
    assert conf.read_text() == written


def test_grub_gets_a_defaults_drop_in_and_every_generated_kernel_line_carries_it(tmp_path):
    defaults = 'GRUB_CMDLINE_LINUX="console=ttyS0"\nGRUB_CMDLINE_LINUX_DEFAULT=""\n'
    root = tree(tmp_path, {"etc/default/grub": defaults})
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert (root / "etc/default/grub.d/60-goldenimage-nocloud.cfg").is_file()
    linux = kernel_lines((root / "boot/grub/grub.cfg").read_text(), "linux")
    assert len(linux) == 2
    assert all(line.split().count("ds=nocloud") == 1 and "console=ttyS0" in line for line in linux), linux


def test_a_grub_that_leaves_a_kernel_line_without_the_switch_fails_the_build(tmp_path):
    tree(tmp_path, {"etc/default/grub": 'GRUB_CMDLINE_LINUX=""\n'})
    sources_drop_ins = 'for f in "$SYSROOT"/etc/default/grub.d/*.cfg; do [ -e "$f" ] && . "$f"; done'
    assert sources_drop_ins in UPDATE_GRUB
    ignores_drop_ins = UPDATE_GRUB.replace(sources_drop_ins, "")
    done = run(tmp_path, update_grub=ignores_drop_ins)
    assert done.returncode != 0
    assert "kernel line without ds=nocloud" in done.stderr, done.stderr


def test_no_bootloader_found_fails_naming_the_way_out(tmp_path):
    tree(tmp_path, {"etc/hostname": "build\n"})
    done = run(tmp_path)
    assert done.returncode != 0
    assert "found neither GRUB" in done.stderr, done.stderr
    assert "set packer_build_cloud_init_datasource to auto" in done.stderr, done.stderr


def test_auto_leaves_the_kernel_command_line_alone(tmp_path):
    files = {"boot/extlinux/extlinux.conf": EXTLINUX, "etc/default/grub": 'GRUB_CMDLINE_LINUX=""\n'}
    root = tree(tmp_path, files)
    done = run(tmp_path, datasource="auto")
    assert done.returncode == 0, done.stderr
    assert (root / "boot/extlinux/extlinux.conf").read_text() == EXTLINUX
    assert not (root / "etc/default/grub.d").exists()
    assert not (root / "boot/grub").exists()
    assert not (root / "etc/cloud").exists()


@pytest.mark.parametrize("value", ["NoCloud", "configdrive", " "])
def test_an_unknown_datasource_is_refused_before_any_step(tmp_path, value):
    root = tree(tmp_path, {"boot/extlinux/extlinux.conf": EXTLINUX})
    done = run(tmp_path, datasource=value)
    assert done.returncode != 0
    assert "is not supported; use nocloud or auto" in done.stderr, done.stderr
    assert (root / "boot/extlinux/extlinux.conf").read_text() == EXTLINUX


CLOUD_INIT_LOCAL = """[Unit]
Description=Cloud-init: Local Stage (pre-network)
DefaultDependencies=no
Before=network-pre.target

[Service]
Type=oneshot
ExecStart=/usr/bin/cloud-init init --local
"""


@pytest.mark.parametrize("unit_dir", ["lib/systemd/system", "usr/lib/systemd/system"])
def test_cloud_init_local_gets_the_cpu_first_while_the_system_starts(tmp_path, unit_dir):
    root = tree(tmp_path, {unit_dir + "/cloud-init-local.service": CLOUD_INIT_LOCAL})
    done = run(tmp_path, step="favour_cloud_init_local")
    assert done.returncode == 0, done.stderr
    drop_in = root / "etc/systemd/system/cloud-init-local.service.d/50-goldenimage-first.conf"
    lines = [line for line in drop_in.read_text().splitlines() if line and not line.startswith("#")]
    # Only while the system starts (StartupCPUWeight), and ahead of its own early-boot neighbours.
    assert lines == ["[Service]", "StartupCPUWeight=1000", "Nice=-10"]
    written = drop_in.read_text()
    assert run(tmp_path, step="favour_cloud_init_local").returncode == 0
    assert drop_in.read_text() == written
    assert (root / unit_dir / "cloud-init-local.service").read_text() == CLOUD_INIT_LOCAL


def test_an_image_without_cloud_init_local_gets_no_drop_in(tmp_path):
    root = tree(tmp_path, {"etc/hostname": "build\n"})
    done = run(tmp_path, step="favour_cloud_init_local")
    assert done.returncode == 0, done.stderr
    assert not (root / "etc/systemd").exists()


def stand_ins(tmp_path, snap_rc):
    """systemctl and snap stand-ins that log their arguments; snap answers with ``snap_rc``."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    for name, rc in (("systemctl", 0), ("snap", snap_rc)):
        tool = bindir / name
        tool.write_text('#!/bin/sh\necho "%s $*" >>"%s"\nexit %d\n' % (name, log, rc))
        tool.chmod(0o755)
    return log


def test_background_apt_ubuntu_pro_and_snap_refreshes_are_stopped(tmp_path):
    tree(tmp_path, {"etc/hostname": "build\n"})
    log = stand_ins(tmp_path, 0)
    done = run(tmp_path, step="disable_background_apt")
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    masked = {line.split()[-1] for line in calls if line.startswith("systemctl mask ")}
    for unit in (
        "apt-daily.timer",
        "apt-news.service",
        "esm-cache.service",
        "ua-timer.timer",
        "motd-news.timer",
    ):
        assert unit in masked, calls
    assert "snapd.snap-repair.timer" in masked and "snap refresh --hold" in calls
    periodic = tmp_path / "root/etc/apt/apt.conf.d/99-goldenimage-no-periodic"
    assert 'APT::Periodic::Enable "0";' in periodic.read_text()


def test_a_snapd_that_cannot_hold_refreshes_fails_the_build(tmp_path):
    tree(tmp_path, {"etc/hostname": "build\n"})
    stand_ins(tmp_path, 1)
    done = run(tmp_path, step="disable_background_apt")
    assert done.returncode == 1 and "'snap refresh --hold' failed" in done.stderr
