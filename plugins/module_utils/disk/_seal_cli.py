# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The seal verifier's adapter: one disk image in, one verdict out. It does the I/O (reads the image,
installs dissect when asked) and leaves every rule to ``seal``. The module calls ``verify`` for a
file; the verifier Job runs this file as a command next to the volume, so a disk never crosses the
network:

    python3 -m ansible_collections.goldenimage.pipeline.plugins.module_utils.disk._seal_cli /disk/disk.img

It prints one line, ``SEAL_VERIFY_RESULT <json>``, and exits 0 with a verdict (sealed or not) or 2
when the disk cannot be judged. It imports nothing from Ansible, only its siblings (``seal``, ``image_facts``,
``_disk``, ``_partitions``, ``errors``) and dissect.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import (
    _disk,
    _partitions,
    image_facts,
    seal,
)

MARKER = "SEAL_VERIFY_RESULT "
# Installed into a scratch directory when the verifier image lacks them (--install-missing).
DISSECT_REQUIREMENTS = (
    "dissect.cstruct==4.7",
    "dissect.util==3.24",
    "dissect.hypervisor==3.21",
    "dissect.ntfs==3.16",
    "dissect.extfs==3.15",
    "dissect.regf==3.14",
    'backports.zstd==1.8.0; python_version < "3.14"',
)


def verify_file(path, **options):
    """``verify`` of a file on the controller: a disk that cannot be judged fails naming the file.

    A missing ``dissect`` package passes through as ``_disk.MissingLibrary`` (the module says how to
    install it); in the verifier Job the claim is named instead, by the Job's caller.
    """
    try:
        return verify(path, **options)
    except _disk.MissingLibrary:
        raise
    except PipelineError as exc:
        raise PipelineError("cannot verify %s: %s" % (path, exc.msg), **exc.fields) from exc


def verify(
    path,
    os_name=None,
    partition=None,
    build_failed=seal.DEFAULT_BUILD_FAILED,
    bootstrap_script=seal.DEFAULT_BOOTSTRAP_SCRIPT,
    bootstrap_log=seal.DEFAULT_BOOTSTRAP_LOG,
    final_line=seal.DEFAULT_FINAL_LINE,
    max_log_bytes=seal.DEFAULT_MAX_LOG_BYTES,
    remote_desktop_port=seal.REMOTE_DESKTOP_PORT,
    postgresql_clusters=(),
):
    """The verdict on one image as a dict; raises a ``PipelineError`` when the disk cannot be judged."""
    started = time.monotonic()
    image = _disk.Image(path)
    try:
        parts = seal.check_partitions(path, _partitions.read_partitions(image))
        detected = seal.detect_os(parts)
        chosen_os = os_name or detected
        if chosen_os is None:
            raise seal.SealError(
                "cannot tell the OS: no partition holds NTFS, BitLocker or ext; set the os option (%s)"
                % "; ".join(seal.describe_partition(p) for p in parts)
            )
        if chosen_os == "windows":
            target = seal.pick_windows_partition(parts, partition)
            checks, facts = _windows(
                image,
                parts,
                target,
                build_failed,
                bootstrap_script,
                bootstrap_log,
                final_line,
                remote_desktop_port,
            )
        else:
            target = seal.pick_linux_partition(parts, partition)
            view = _disk.ExtView(image, target)
            checks = seal.linux_checks(view, max_log_bytes, postgresql_clusters)
            facts = _disk.linux_facts(view)
        sealed, failed = seal.verdict(checks)
        return {
            "sealed": sealed,
            "failed_checks": failed,
            "checks": checks,
            "facts": facts,
            "exposure_reasons": image_facts.exposure_reasons(facts),
            "os": chosen_os,
            "detected_os": detected,
            "partition": target["number"],
            "partitions": parts,
            "format": image.format,
            "chain": image.chain,
            "virtual_size": image.virtual_size,
            "bytes_read": image.bytes_read,
            "seconds": round(time.monotonic() - started, 4),
        }
    finally:
        image.close()


def _windows(
    image, parts, target, build_failed, bootstrap_script, bootstrap_log, final_line, remote_desktop_port
):
    boot = image.read(target["offset"], _disk.SECTOR)
    view, unreadable, remote_desktop = None, None, None
    if target.get("filesystem") == "ntfs":
        try:
            view = _disk.NtfsView(image, target)
        except _disk.MissingLibrary:
            raise
        except _disk.DiskError as exc:
            unreadable = str(exc)
    elif target.get("filesystem") == "bitlocker":
        unreadable = "the volume is BitLocker-encrypted"
    else:
        unreadable = "the partition holds no NTFS"
    if view is not None and remote_desktop_port:
        hive = seal.find(view, seal.volume_path(seal.SYSTEM_HIVE))
        remote_desktop = _disk.remote_desktop_settings(view, hive)
    facts = _disk.windows_facts(image, target, view=view, unreadable=unreadable)
    checks = seal.windows_checks(
        boot,
        view,
        parts,
        target,
        build_failed=build_failed,
        bootstrap_script=bootstrap_script,
        bootstrap_log=bootstrap_log,
        final_line=final_line,
        unreadable=unreadable,
        remote_desktop=remote_desktop,
        remote_desktop_port=remote_desktop_port,
        facts=facts,
    )
    return checks, facts


def _install_missing():
    """Make dissect importable in a stock Python image: pip-install the pinned set into scratch."""
    try:
        for name in _disk.LIBRARIES:
            __import__(name)
        return
    except ImportError:
        pass
    target = tempfile.mkdtemp(prefix="seal-verify-")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-cache-dir", "--target", target]
    subprocess.check_call(command + list(DISSECT_REQUIREMENTS), stdout=sys.stderr)
    sys.path.insert(0, target)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="_seal_cli", description="Verify offline that a disk image is sealed."
    )
    parser.add_argument("path", help="raw or qcow2 image, or a block device")
    parser.add_argument("--os", dest="os_name", choices=["windows", "linux"])
    parser.add_argument("--partition", type=int)
    parser.add_argument("--build-failed", default=seal.DEFAULT_BUILD_FAILED)
    parser.add_argument("--bootstrap-script", default=seal.DEFAULT_BOOTSTRAP_SCRIPT)
    parser.add_argument("--bootstrap-log", default=seal.DEFAULT_BOOTSTRAP_LOG)
    parser.add_argument("--final-line", default=seal.DEFAULT_FINAL_LINE)
    parser.add_argument("--max-log-bytes", type=int, default=seal.DEFAULT_MAX_LOG_BYTES)
    parser.add_argument("--remote-desktop-port", type=int, default=seal.REMOTE_DESKTOP_PORT)
    parser.add_argument("--postgresql-cluster", dest="postgresql_clusters", action="append", default=[])
    parser.add_argument("--install-missing", action="store_true", help="pip-install dissect when absent")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.install_missing:
            _install_missing()
        result = verify(
            os.path.abspath(args.path),
            os_name=args.os_name,
            partition=args.partition,
            build_failed=args.build_failed,
            bootstrap_script=args.bootstrap_script,
            bootstrap_log=args.bootstrap_log,
            final_line=args.final_line,
            max_log_bytes=args.max_log_bytes,
            remote_desktop_port=args.remote_desktop_port,
            postgresql_clusters=args.postgresql_clusters,
        )
        code = 0
    except (PipelineError, subprocess.CalledProcessError) as exc:
        result = {"error": str(exc), "missing": getattr(exc, "name", None)}
        code = 2
    sys.stdout.write(MARKER + json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
