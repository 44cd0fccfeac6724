#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: seal_verify
short_description: Verify offline that a golden's disk is sealed
version_added: 0.1.0
description:
  - A VM that reached C(Stopped) may have died with C(C:\BUILD_FAILED) on its disk. This module reads the
    disk itself, offline, with no mount, no loop device and no root, and says whether it is sealed.
  - The disk is a raw or qcow2 file on the controller (O(path); compressed clusters and backing chains
    included), or a PersistentVolumeClaim (O(pvc)). For a claim the module runs the same verifier in a
    Job next to the volume, so a 60 GiB disk never crosses the network, reads the verdict from the Job's
    log and deletes the Job.
  - It reads the partition table, boot sectors, filesystem metadata and the few files the checks need,
    never the disk; RV(bytes_read) says how much.
  - "Windows: the Windows partition (the largest GPT basic data or MBR NTFS partition, or O(partition))
    must start with an NTFS boot sector, not C(-FVE-FS-) (BitLocker); O(build_failed_path) and
    O(bootstrap_script_path) must be absent; O(bootstrap_log_path) must end on the O(final_line) line
    (UTF-16 or UTF-8, with or without a BOM, CRLF, trailing blank lines); and no partition may sit after
    the Windows partition (the WinRE trap that stops every clone from growing C:). Names match
    case-insensitively, as NTFS does."
  - "Windows also: the golden answers Remote Desktop where the clone gate probes it. Read offline from
    C(C:\\Windows\\System32\\config\\SYSTEM), the current control set must have C(fDenyTSConnections=0),
    its RDP-Tcp listener on O(remote_desktop_port), and an enabled inbound firewall rule allowing TCP on
    that port (the Remote Desktop rule group the bake enables)."
  - "Windows also, from the SOFTWARE hive (C(C:\\Windows\\System32\\config\\SOFTWARE)): its
    C(Microsoft\\Windows\\CurrentVersion\\Setup\\State) C(ImageState) must be
    C(IMAGE_STATE_GENERALIZE_RESEAL_TO_OOBE), which Setup records only once sysprep has generalized the
    image; the log line is written before sysprep runs, so a disk whose ImageState says otherwise is not
    sealed whatever its log says. A hive holding no ImageState leaves the log line as the only proof (the
    evidence says so); a hive that cannot be parsed is not sealed."
  - "Windows also: no credential is left behind. An answer file (C(C:\\autounattend.xml),
    C(C:\\unattend.xml), C(C:\\Windows\\Panther\\unattend.xml), C(C:\\Windows\\Panther\\autounattend.xml),
    every C(*.xml) in C(C:\\Windows\\Panther\\Unattend), C(C:\\Windows\\System32\\Sysprep\\unattend.xml),
    C(C:\\Windows\\System32\\Sysprep\\Panther\\unattend.xml)) holding a password
    (C(AdministratorPassword), an C(AutoLogon) or C(LocalAccounts) C(Password), with C(PlainText) true or
    false) or a C(ProductKey), an answer file that cannot be parsed, or Winlogon's C(DefaultPassword) fails
    the seal, naming the file and the place in it. Values Setup overwrote with C(*SENSITIVE*DATA*DELETED*)
    are not credentials."
  - "Every run records the image facts read on the way (RV(facts)) and why the image must never go to a
    bucket not proven private (RV(exposure_reasons)). No secret value is ever put in them: a password, a
    product key, a KMS host or a private key is recorded by presence, place and kind only."
  - "Linux: the image-hygiene rules: empty C(/etc/machine-id), no C(/etc/ssh/ssh_host_*) keys, no
    cloud-init instance data, no C(authorized_keys) in C(/root) or C(/home/*), no core dumps, and a small
    C(/var/log) (O(max_log_bytes)), unattended-upgrades and the apt daily timers not enabled in
    C(/etc/systemd/system), and no PostgreSQL cluster starting at boot but those in O(postgresql_clusters)
    (its C(start.conf) says C(auto) or its C(postgresql@) unit is enabled), read from ext2/3/4."
  - The module fails when the disk is not sealed, unless O(fail_on_unsealed=false).
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - dissect.hypervisor, dissect.ntfs, dissect.extfs and dissect.regf (on the controller, for O(path))
options:
  path:
    description:
      - A raw or qcow2 disk image (or a block device) on the controller.
      - A qcow2 backing file is looked up relative to the overlay's directory, as qemu does.
      - Exactly one of O(path) and O(pvc) is required.
    type: path
  pvc:
    description:
      - A PersistentVolumeClaim holding the disk, in O(namespace). A C(Filesystem) claim holds it as
        C(disk.img) (the KubeVirt and CDI convention); a C(Block) claim is the disk.
      - The claim is mounted read-only. A ReadWriteOnce claim must not be in use by a running VM.
    type: str
  namespace:
    description:
      - Namespace of O(pvc); the verifier Job runs there. Required with O(pvc).
    type: str
  os:
    description:
      - Which rules apply. Detected from the partitions when omitted (NTFS or BitLocker means V(windows),
        ext means V(linux)).
    type: str
    choices: [windows, linux]
  partition:
    description:
      - Number of the partition to verify (as the partition table numbers it; V(0) is a disk that is one
        filesystem). Found by type and size when omitted.
    type: int
  fail_on_unsealed:
    description:
      - Fail when a check does not pass. Set V(false) to only report.
    type: bool
    default: true
  build_failed_path:
    description:
      - The marker a failed Windows build leaves. Must be absent.
    type: str
    default: C:\BUILD_FAILED
  bootstrap_script_path:
    description:
      - The reboot-resume script of the bake. Must be absent, it must not ship in the golden.
    type: str
    default: C:\kube-dc-bootstrap.ps1
  bootstrap_log_path:
    description:
      - The bake's log. Must exist and end on the O(final_line) line.
    type: str
    default: C:\bootstrap.log
  final_line:
    description:
      - The command the log's last non-blank line must run. The line passes when it holds these words in
        order, the program by its base name with or without C(.exe) and a path, followed by nothing but
        more switches.
      - Before them the line may hold only a timestamp (V(2026-08-09T10:03:02), V(10:03:02)), a log label
        such as V(bootstrap:), a level such as V([INFO]), the word V(running) and PowerShell's V(&). A line
        where any other word comes first (V(echo), V(Write-Host), V(rem), V(#)) prints or comments the
        command instead of running it, and fails.
    type: str
    default: sysprep /generalize /oobe /shutdown
  max_log_bytes:
    description:
      - Linux only. Largest total size of the files under C(/var/log).
    type: int
    default: 1048576
  postgresql_clusters:
    description:
      - Linux only. The PostgreSQL clusters, as C(<major>/<cluster>) (for example V(17/main)), that must
        start at boot; every other cluster under C(/etc/postgresql) must not.
      - The default, none, fits a baked image, whose clusters are all manual until first boot activates the
        one a VM asks for.
    type: list
    elements: str
    default: []
  declared:
    description:
      - Linux only. What the image is declared to be, C(os_version) (the Ubuntu stream, for example
        V(22.04)) and C(pg_versions) (the PostgreSQL majors baked in). The facts read from the bytes must
        agree, that is C(VERSION_ID) of os-release is the stream, the servers under
        C(/usr/lib/postgresql) are the majors, no cluster is initialized (a C(PG_VERSION) under
        C(/var/lib/postgresql)) and no private key is left. Otherwise the image is refused with
        RV(problems), each fact beside the declaration, whatever O(fail_on_unsealed) says.
    type: dict
  remote_desktop_port:
    description:
      - Windows only. The port Remote Desktop must be enabled and let in on, the one the clone gate
        probes (its O(goldenimage.pipeline.clone_gate#module:port)). V(0) leaves the check out.
    type: int
    default: 3389
  verifier_image:
    description:
      - Container image of the verifier Job, required with O(pvc). It needs C(python3) and the pinned dissect
        packages; build it from C(images/seal-verifier/Containerfile) in the collection and push it (or mirror
        it) to a registry the cluster pulls from. Nothing is installed from the network at run time unless
        O(install_missing) says so.
      - The verifier's code is not part of the image, the module ships it in a ConfigMap mounted at
        C(/verifier), so the Job always runs the same rules as this module.
    type: str
  install_missing:
    description:
      - O(pvc) only. When the image lacks a dissect package, pip-install the pinned versions into scratch
        space in the Job, from the package index the pod reaches. Off by default; without it, an image that
        lacks them fails naming the package, before any verdict.
    type: bool
    default: false
  verifier_command:
    description:
      - Command of the verifier container. The disk's device path and the options are appended as arguments.
      - C(PYTHONPATH) is set to C(/verifier).
    type: list
    elements: str
    default:
      - python3
      - -m
      - ansible_collections.goldenimage.pipeline.plugins.module_utils.disk._seal_cli
  progress_file:
    description:
      - A file the wait for the verifier Job (O(pvc)) appends its progress lines to (the Job's counts and
        the seconds waited, on each change and at least every 20 s); set by the action plugin, which runs a
        claim's verification as an async job and prints the lines as they come.
    type: path
  wait_timeout:
    description:
      - Seconds to wait for the verifier Job (O(pvc) only). The Job is deleted when the time is up.
    type: int
    default: 300
  wait_sleep:
    description:
      - Longest pause, in seconds, between two polls of the Job.
    type: float
    default: 2
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  action:
    description: An action plugin of the same name runs on the controller around the module.
    support: full
    details: For O(pvc) it runs the module as an async job and prints its progress lines as they come.
  check_mode:
    support: partial
    details:
      - With O(path), full; the module only reads the file.
      - With O(pvc), the verifier Job cannot run without being created, so the task is skipped and says so.
  diff_mode:
    support: N/A
    details: Nothing is changed.
  idempotent:
    support: full
    details:
      - With O(pvc), a Job and a ConfigMap exist while the verifier runs and are always deleted afterwards,
        so the task reports C(changed=false).
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - Verify a VM's disk only while the VM is stopped; a running guest changes it under the reader.
seealso:
  - module: goldenimage.pipeline.golden_snapshot
"""

EXAMPLES = r"""
- name: Verify a Windows golden exported to a qcow2 on the controller
  goldenimage.pipeline.seal_verify:
    path: /srv/goldens/windows11-x64-golden.qcow2
  register: seal

- name: Verify the baked disk in the cluster, next to the volume
  module_defaults:
    group/goldenimage.pipeline.k8s:
      kubeconfig: "{{ kubeconfig_path }}"
  goldenimage.pipeline.seal_verify:
    pvc: win11-build-disk
    namespace: golden-images-build
    os: windows
    verifier_image: registry.example.com/tools/seal-verifier:1
    wait_timeout: 600

- name: Report on a Linux image without failing, with a larger log budget
  goldenimage.pipeline.seal_verify:
    path: /srv/goldens/debian-12.raw
    os: linux
    max_log_bytes: 4194304
    fail_on_unsealed: false
  register: hygiene

- name: Show what failed
  ansible.builtin.debug:
    msg: "{{ hygiene.checks | rejectattr('passed') | map(attribute='evidence') | list }}"
"""

RETURN = r"""
lines:
  description: The progress lines printed while the task ran (the verifier Job's, with O(pvc)).
  returned: always
  type: list
  elements: str
  sample:
    - "seal_verify: Job build/seal-verify-3f2a9c1d verifying PersistentVolumeClaim win11-disk: active=1 (0s)"
rounds:
  description: How many calls of the module the task took (always 1).
  returned: always
  type: int
sealed:
  description: Whether every check passed.
  returned: unless skipped in check mode
  type: bool
  sample: false
checks:
  description: Every check, in order, with its evidence.
  returned: unless skipped in check mode
  type: list
  elements: dict
  contains:
    name:
      description:
        - V(ntfs_boot_sector), V(build_failed_absent), V(bootstrap_script_absent),
          V(bootstrap_log_final_line), V(image_state_generalized), V(credentials_absent),
          V(nothing_after_windows_partition), V(remote_desktop_enabled) for Windows;
          V(machine_id_empty), V(ssh_host_keys_absent), V(cloud_init_instance_absent),
          V(build_authorized_keys_absent), V(core_dumps_absent), V(var_log_small) for Linux.
      type: str
      sample: build_failed_absent
    passed:
      description: Whether the check passed.
      type: bool
      sample: false
    evidence:
      description: What was found, in a sentence.
      type: str
      sample: "C:\\BUILD_FAILED is present as C:\\build_failed (12 B): the build failed and said so"
problems:
  description:
    - With O(declared), each contradiction between the bytes and the declaration (C(fact), C(read),
      C(declared), C(message)); empty when they agree.
  returned: when O(declared) is given
  type: list
  elements: dict
facts:
  description:
    - The image-facts document, read from the disk itself (never declared); it carries presence, places and
      kinds, never a secret value. C(schema_version) (V(1)) and C(os_family) say how to read it;
      C(unreadable) lists every place that had to be read and could not be (each one an exposure reason).
    - "Windows: C(bitlocker) (C(encrypted), from the boot sector's C(-FVE-FS-)), C(software_hive)
      (C(dirty): the hive's sequence numbers differ, so changes wait in C(SOFTWARE.LOG1)/C(LOG2), which are
      not read), C(image_state) (C(value),
      C(generalized)), C(edition) (C(edition_id), C(product_name), C(build), C(evaluation)), C(licensing)
      (C(kms_host), C(kms_port), C(backup_product_key), C(digital_product_id): presence of
      C(KeyManagementServiceName), C(KeyManagementServicePort), C(BackupProductKeyDefault) and
      C(DigitalProductId)/C(DigitalProductId4)), C(autologon) (C(auto_admin_logon), C(default_user_name),
      C(default_password): V(absent), V(empty) or V(set)) and C(unattend) (each answer file left: C(path),
      C(parsed), C(error), C(product_keys) and C(passwords) by C(where) in the file and C(state))."
    - "Linux: C(os_release) (C(id), C(version_id), C(version_codename), C(pretty_name) and the C(path) read,
      C(/etc/os-release) or C(/usr/lib/os-release)), C(machine_id) (V(absent), V(not a regular file),
      V(empty), V(uninitialized) or V(set)) and C(private_keys) (C(path), C(kind) V(ssh_host_key),
      V(tls_snakeoil_key), V(tls_private_key) or V(user_ssh_key), C(pem) label, C(size)), from
      C(/etc/ssh/ssh_host_*_key),
      every file under C(/etc/ssl/private), and C(id_*) keys in C(/root/.ssh) and C(/home/*/.ssh)."
  returned: unless skipped in check mode
  type: dict
  sample:
    schema_version: 1
    os_family: windows
    unreadable: []
    bitlocker: {encrypted: false, source: boot sector OEM id}
    software_hive: {dirty: false}
    image_state: {value: IMAGE_STATE_GENERALIZE_RESEAL_TO_OOBE, generalized: true}
    edition: {edition_id: EnterpriseEval, product_name: Windows 11 Enterprise Evaluation, build: "26100",
              evaluation: true}
    licensing: {kms_host: false, kms_port: false, backup_product_key: true, digital_product_id: true}
    autologon: {auto_admin_logon: false, default_user_name: null, default_password: absent}
    unattend:
      - path: C:\Windows\Panther\unattend.xml
        parsed: true
        error: null
        product_keys: []
        passwords:
          - {where: oobeSystem/Microsoft-Windows-Shell-Setup/UserAccounts/AdministratorPassword,
             state: deleted by Setup, plain_text: true}
exposure_reasons:
  description:
    - Why the image's bytes must never go to a bucket not proven private, from RV(facts); empty when nothing
      was found. Each starts with V(key-bearing) (KMS settings, a product key in an answer file, an
      installed product key of an edition that is not an evaluation edition, a private key),
      V(credential-bearing) (a password in an answer file, Winlogon's C(DefaultPassword)) or V(unproven)
      (an encrypted volume, a place that could not be read).
  returned: unless skipped in check mode
  type: list
  elements: str
  sample:
    - "credential-bearing: C:\\Windows\\Panther\\unattend.xml holds passwords
      (oobeSystem/Microsoft-Windows-Shell-Setup/UserAccounts/AdministratorPassword)"
failed_checks:
  description: Names of the checks that did not pass.
  returned: unless skipped in check mode
  type: list
  elements: str
  sample: [build_failed_absent]
os:
  description: The rules applied, V(windows) or V(linux).
  returned: unless skipped in check mode
  type: str
  sample: windows
detected_os:
  description: The OS the partitions suggest (V(null) when none).
  returned: unless skipped in check mode
  type: str
  sample: windows
partition:
  description: Number of the partition verified.
  returned: unless skipped in check mode
  type: int
  sample: 3
partitions:
  description: The partition table, in disk order.
  returned: unless skipped in check mode
  type: list
  elements: dict
  sample:
    - {number: 3, offset: 44040192, size: 67108864, type: ebd0a0a2-b9e5-4433-87c0-68b6b72699c7,
       type_name: Windows basic data partition, name: Basic data partition, filesystem: ntfs}
format:
  description: Format of the image file, V(raw) or V(qcow2).
  returned: unless skipped in check mode
  type: str
  sample: qcow2
chain:
  description: The files the disk was read from, the image first, then its backing files.
  returned: unless skipped in check mode
  type: list
  elements: dict
  sample: [{path: /srv/goldens/top.qcow2, format: qcow2}, {path: /srv/goldens/base.qcow2, format: qcow2}]
virtual_size:
  description: Size of the virtual disk in bytes.
  returned: unless skipped in check mode
  type: int
  sample: 68719476736
bytes_read:
  description: Bytes read from the image files (the chain included) to reach the verdict.
  returned: unless skipped in check mode
  type: int
  sample: 108036
seconds:
  description: Time the verification took (for O(pvc), inside the Job).
  returned: unless skipped in check mode
  type: float
  sample: 0.04
job:
  description: The verifier Job, already deleted.
  returned: with O(pvc), unless skipped in check mode
  type: dict
  sample: {name: seal-verify-3f2a9c1e, namespace: golden-images-build, pod: seal-verify-3f2a9c1e-x7k2p,
           duration: 4.2}
skipped:
  description: True in check mode with O(pvc), where the verifier Job cannot run.
  returned: in check mode with O(pvc)
  type: bool
  sample: true
"""

import traceback

from ansible.module_utils.basic import missing_required_lib
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import eol
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._progress_file import append_line
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk, image_facts, seal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _seal_cli as seal_cli
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk._seal_job import VerifierJob
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule

DISSECT_REASON = (
    "to read disk images offline. Modules of goldenimage.pipeline run on the Ansible controller: "
    "install it there and use delegate_to: localhost (or connection: local) for these tasks"
)


def argument_spec():
    return dict(
        path=dict(type="path"),
        pvc=dict(type="str"),
        namespace=dict(type="str"),
        os=dict(type="str", choices=["windows", "linux"]),
        partition=dict(type="int"),
        fail_on_unsealed=dict(type="bool", default=True),
        build_failed_path=dict(type="str", default=seal.DEFAULT_BUILD_FAILED),
        bootstrap_script_path=dict(type="str", default=seal.DEFAULT_BOOTSTRAP_SCRIPT),
        bootstrap_log_path=dict(type="str", default=seal.DEFAULT_BOOTSTRAP_LOG),
        final_line=dict(type="str", default=seal.DEFAULT_FINAL_LINE),
        max_log_bytes=dict(type="int", default=seal.DEFAULT_MAX_LOG_BYTES),
        postgresql_clusters=dict(type="list", elements="str", default=[]),
        declared=dict(type="dict"),
        remote_desktop_port=dict(type="int", default=seal.REMOTE_DESKTOP_PORT),
        verifier_image=dict(type="str"),
        install_missing=dict(type="bool", default=False),
        verifier_command=dict(type="list", elements="str", default=["python3", "-m", seal_cli.__name__]),
        progress_file=dict(type="path"),
        **inputs.wait_arg_spec(300, 2, wait=None),
    )


def rule_options(params):
    return dict(
        os_name=params["os"],
        partition=params["partition"],
        build_failed=params["build_failed_path"],
        bootstrap_script=params["bootstrap_script_path"],
        bootstrap_log=params["bootstrap_log_path"],
        final_line=params["final_line"],
        max_log_bytes=params["max_log_bytes"],
        postgresql_clusters=params["postgresql_clusters"],
        remote_desktop_port=params["remote_desktop_port"],
    )


def verify_file(path, params):
    try:
        return seal_cli.verify_file(path, **rule_options(params))
    except _disk.MissingLibrary as exc:
        raise PipelineError(
            missing_required_lib(exc.name, reason=DISSECT_REASON), exception=traceback.format_exc()
        ) from exc


class SealVerify(object):
    """Verify a file or a claim and return the verdict; an unsealed disk is refused (seal.py's rule)."""

    def __init__(self, module):
        self.module = module
        self.p = module.params

    def run(self):
        p = self.p
        inputs.positive_all(p, ("wait_timeout", "wait_sleep"))
        if p["path"]:
            result = verify_file(p["path"], p)
            what = p["path"]
        else:
            what = "PersistentVolumeClaim %s/%s" % (p["namespace"], p["pvc"])
            seal.refuse_without_verifier_image(p["verifier_image"], what)
            if self.module.check_mode:
                return seal.check_mode_skip(what)
            report = (lambda line: append_line(p["progress_file"], line)) if p["progress_file"] else None
            job = VerifierJob(self.module, p["namespace"], p["pvc"], report=report)
            command = p["verifier_command"] + (["--install-missing"] if p["install_missing"] else [])
            result = job.run(p["verifier_image"], command, rule_options(p))
        result["changed"] = False
        if p["declared"] is not None:
            declared = p["declared"]
            result["problems"] = image_facts.declaration_problems(
                result.get("facts"),
                inputs.version_string(declared.get("os_version"), "declared.os_version"),
                [
                    eol.normalize_pg_major(inputs.version_string(v, "declared.pg_versions"))
                    for v in declared.get("pg_versions") or []
                ],
            )
        # The seal's own verdict first (it names the failed checks); then what the bytes contradict.
        result = seal.refuse_unsealed(result, what, p["fail_on_unsealed"])
        if result.get("problems"):
            image_facts.refuse_contradicted(what, result["problems"], result.get("facts"))
        return result


def main():
    module = KubeModule(
        argument_spec=argument_spec(),
        required_one_of=[("path", "pvc")],
        mutually_exclusive=[("path", "pvc")],
        required_by={"pvc": "namespace"},
        supports_check_mode=True,
    )
    run_module(module, lambda: SealVerify(module).run())


if __name__ == "__main__":
    main()
