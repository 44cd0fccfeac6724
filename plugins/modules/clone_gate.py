#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: clone_gate
short_description: Boot a clone of a candidate golden as a tenant would, and judge the boot
version_added: 0.1.0
description:
  - Clones the candidate golden O(snapshot) in a project namespace O(project_namespace) exactly as a tenant's
    VM would use it, boots a KubeVirt VM from the clone, and judges the boot in two phases.
  - If the per-project seeder has already published the candidate in the project (a VolumeSnapshot there
    bound to a content with the candidate's snapshot handle), that copy is used. Otherwise the module
    publishes it the way the seeder does, a cluster-scoped pre-provisioned C(VolumeSnapshotContent) with
    C(deletionPolicy=Retain) on the candidate's handle, and a namespaced C(VolumeSnapshot) bound to it.
  - Then a PersistentVolumeClaim restored from that snapshot (the snapshot's C(restoreSize), or the
    seeder's C(kube-dc.com/clone-min-size) when larger, plus O(grow_by)) and a VM with
    C(runStrategy=Always) booting it with O(memory).
  - Phase 1, C(agent) is the guest agent connecting (VMI condition C(AgentConnected)) within O(agent_timeout),
    the strongest and earliest proof that the operating system booted.
    Stock Ubuntu and Debian cloud images ship no C(qemu-guest-agent), so for O(os=linux) the SSH server's
    banner (a TCP connection to the probed port that reads an C(SSH-2.0-) identification line) proves the
    boot too, whichever comes first; the phase is then named C(boot). The SSH host keys are made at first
    boot, so a banner means the OS came up. RV(proof) says which proof was used.
  - A Linux gate VM gets a NoCloud seed (a C(cloudInitNoCloud) volume) whose user-data turns password login
    off (on only when O(guest_credentials) carry a password) and authorises one SSH public key for the image's
    default user, the public half of O(guest_credentials.private_key) or else a one-time key whose private
    half is dropped at once. Without a datasource, cloud-init in a stock image makes no host keys and its SSH
    server never starts. Then C(disk), the OS volume the guest agent reports (C(C:\\) or C(/), from KubeVirt's
    C(filesystemlist)), must be larger than the whole golden within O(disk_timeout). Only a disk that grew in
    all three links holds that. KubeVirt's C(ExpandDisks) grew the image to the PVC, nothing sits after the OS
    volume (the bake removes WinRE), and the guest extended the volume (cloudbase-init or cloud-init). Each
    link looks healthy on its own, so only the guest's own view can pass; otherwise the verdict is
    V(disk_not_grown). With O(guest_credentials), the gate reads the volume inside the guest instead - for
    Linux over SSH with the OpenSSH client, the root filesystem's size (C(findmnt -bno SIZE /), else C(df -B1
    /)); for Windows over WinRM, C(Get-PartitionSupportedSize -DriveLetter C) with the sizes of C(C:) and its
    disk, which name the link that broke. RV(disk_check) names the check and its figures. A Linux clone that
    proved its boot by the SSH banner alone, with no O(guest_credentials), cannot show its disk, so the
    verdict is V(disk_unproven), never a pass. Phase 2, C(port) is a TCP connection to the remote port
    (O(port); RDP 3389 for Windows, SSH 22 for Linux) within O(port_timeout), from where tenants reach it
    (O(port_probe)).
  - Before anything is written, the module reads the cluster's KubeVirt CRs and refuses (V(inconclusive))
    when C(ExpandDisks) is off (not in C(spec.configuration.developerConfiguration.featureGates) on a
    KubeVirt before v1.9.0, where it is GA) or cannot be read, naming the CR and the fix.
  - The verdict keeps "did not boot" (V(no_boot)) apart from "booted, port unreachable"
    (V(port_unreachable)). The second is a firewall or service problem in the guest, not a boot failure.
  - A O(memory) below the catalog minimum (O(min_memory), C(8Gi) for Windows by default) makes the gate
    V(inconclusive). The module refuses to run instead of reporting a boot failure that says nothing about
    the image.
  - Every object a run creates carries the labels C(goldenimage.pipeline/clone-gate=<run id>) and
    C(goldenimage.pipeline/clone-gate-candidate=<candidate id>). Unless O(keep=true), everything the run
    created (found by the run's label, so an object whose create reply was lost is found too) is deleted
    before it returns, also on failure and timeout, with retries. What could not be deleted (for example
    with a token that may create but not delete) is reported in RV(left_behind) with RV(cleanup_command),
    and RV(kept) is then true.
  - Before it creates anything, a run removes what earlier runs of the same candidate left in the project
    (by label; objects kept with O(keep=true) are left alone), and refuses to run when it cannot, so
    nothing accumulates in a tenant's namespace. Do not gate one candidate twice at the same time in
    one project.
  - The golden, its content and the seeder's objects are never deleted.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - kubernetes >= 24.2.0 (on the controller)
  - KubeVirt and the CSI snapshot controller on the cluster
options:
  snapshot:
    description:
      - Name of the candidate golden C(VolumeSnapshot).
    type: str
    required: true
  snapshot_namespace:
    description:
      - Namespace of the candidate, C(golden-images) (Filesystem) or C(golden-images-block) (Block).
    type: str
    default: golden-images
  project_namespace:
    description:
      - The project namespace to clone in, as a tenant. Not the golden namespace, whose PodSecurity level
        does not admit KubeVirt's launcher pods. Do not relax a system namespace to make the gate run.
      - C(golden-images), C(golden-images-block) and O(snapshot_namespace) are refused before anything is
        written, and so is a namespace that does not match O(project_selector).
    type: str
    required: true
  project_selector:
    description:
      - How a project namespace is recognised, a label selector on the Namespace. O(project_namespace) must
        exist and match it, or the gate refuses before anything is written. The default is Kube-DC's
        convention, every project namespace carries the C(kube-dc.com/project) label.
      - An empty selector is refused. It would recognise every namespace.
    type: str
    default: kube-dc.com/project
  os:
    description:
      - Guest OS, which selects the remote port (V(windows) uses 3389, V(linux) uses 22) and the default
        O(min_memory).
    type: str
    choices: [windows, linux]
    default: windows
  memory:
    description:
      - Guest memory of the VM (C(domain.memory.guest) and the memory request). Defaults to O(min_memory).
    type: str
  min_memory:
    description:
      - The catalog's C(minMemory) for this OS. A lower O(memory) makes the gate V(inconclusive) (it does
        not run, and the verdict is never V(no_boot)).
      - Defaults to C(8Gi) for Windows (Kube-DC's catalog minimum for Windows 11) and C(1Gi) for Linux.
    type: str
  agent_timeout:
    description:
      - Seconds from the VM instance running to the guest agent connecting. A Windows first boot after
        sysprep (specialize, OOBE) takes minutes.
    type: int
    default: 1200
  disk_timeout:
    description:
      - Seconds, after the agent connected, for the guest to report its OS volume grown (the guest extends
        it at first boot).
    type: int
    default: 300
  port_timeout:
    description:
      - Seconds, after the agent connected, for the remote port to accept a TCP connection.
    type: int
    default: 300
  wait_timeout:
    description:
      - Seconds for the published snapshot to become ready and for the VM instance to reach C(Running)
        (volume restore and scheduling). Running out of it is no verdict on the image; the module fails
        with V(inconclusive).
      - The old name C(provision_timeout) is kept as an alias.
    type: int
    default: 600
    aliases: [provision_timeout]
  wait_sleep:
    description:
      - Longest pause, in seconds, between two polls.
      - The old name C(poll_interval) is kept as an alias.
    type: float
    default: 2
    aliases: [poll_interval]
  keep:
    description:
      - Keep every object the gate created (VM, claim, and the snapshot and content it published) for
        diagnosis. They also carry C(goldenimage.pipeline/clone-gate-kept=true), so later runs do not sweep
        them; delete them yourself afterwards with RV(cleanup_command)'s selector,
        C(goldenimage.pipeline/clone-gate=<run id>).
    type: bool
    default: false
  grow_by:
    description:
      - How much larger than the golden the clone's claim is, a Kubernetes quantity. The C(disk) phase
        then requires the guest's OS volume to have grown past the golden's size.
      - V(0) clones at the golden's size and skips the C(disk) phase and the C(ExpandDisks) check; the gate
        then says nothing about whether tenants' larger disks grow.
    type: str
    default: 1Gi
  require_expand_disks:
    description:
      - Refuse before writing anything when KubeVirt's C(ExpandDisks) is off or cannot be read (the
        credentials need C(list) on C(kubevirts.kubevirt.io)).
      - V(false) skips that check only; the C(disk) phase still judges what the guest sees.
    type: bool
    default: true
  storage_class:
    description:
      - StorageClass of the clone. Defaults to the cluster's default class. A snapshot restores
        only into a class of the snapshot's driver.
    type: str
  port:
    description:
      - The guest's remote port the gate probes. Defaults to the OS's contract port, C(3389) (Remote
        Desktop) for Windows and C(22) (SSH) for Linux.
      - The Windows bake (role C(goldenimage.pipeline.windows_bake)) enables Remote Desktop and its
        firewall rule group, and M(goldenimage.pipeline.seal_verify) asserts both in the sealed disk's
        registry on its O(goldenimage.pipeline.seal_verify#module:remote_desktop_port). Give the same
        port to both when the image opens another one.
    type: int
  port_probe:
    description:
      - Where to probe the remote port.
      - V(auto) uses the VMI's first interface address and the guest port.
      - Otherwise a C(host:port) template; C({ip}), C({port}), C({name}) and C({namespace}) are
        replaced by the VMI's address, the guest port, the VM name and the project namespace, and
        C({annotations[KEY]}) by the VMI's annotation C(KEY) (for a platform that records where it forwards
        the port; the probe waits while it is absent). The VMI's pod IP is reachable only from inside the
        cluster network. From outside, name the Service or load balancer that tenants use, for example
        C(rdp-{name}.{namespace}.example.net:3389).
    type: str
    default: auto
  vm_annotations:
    description:
      - Extra annotations for the gate's VM (for example ones an admission policy requires).
    type: dict
    default: {}
  fail_on_reject:
    description:
      - Fail the task when the verdict is not V(passed). Set V(false) to only report the verdict.
    type: bool
    default: true
  cleanup_timeout:
    description:
      - Seconds to wait for each created object to be gone when cleaning up.
    type: int
    default: 120
  report_every:
    description:
      - Longest time, in seconds, one call of the module waits before it returns a progress C(line). The
        action plugin of the same name calls it again with C(resume) and prints each line, so every wait
        of the gate (the published snapshot, the VM instance, the guest agent, the port) prints its
        phase, what it waits for, the last state and the elapsed time at least this often.
    type: int
    default: 20
  guest_credentials:
    description:
      - How to log in to the clone for the in-guest checks, so "the disk grew" is proven inside the guest.
      - Linux, over SSH with the OpenSSH client, reads the root filesystem's size. Give
        C({username, password}) or C({username, private_key}) (an unencrypted OpenSSH or PEM private key,
        its text). The key's public half is authorised by the gate VM's NoCloud seed, so the image's
        default user (C(ubuntu), C(debian)) logs in with it. A password is handed to C(ssh) through an
        askpass helper, never on a command line.
      - Windows, over WinRM with the Python library C(pywinrm) (as Ansible's C(winrm) connection), runs
        C(Get-PartitionSupportedSize -DriveLetter C) with C(Get-Partition) and C(Get-Disk) and tells the
        three links apart - the disk kept the golden's size (ExpandDisks), a partition after C(C:)
        strands the space (WinRE), or C(C:) may grow but was not extended (cloudbase-init
        ExtendVolumesPlugin). Give C({username, password}); O(guest_credentials.transport) C(basic) over
        O(guest_credentials.scheme) C(http) is refused, as it sends the password readable.
      - Checked before anything is written.
    type: dict
    suboptions:
      username:
        description: The guest user.
        type: str
        required: true
      password:
        description: The user's password.
        type: str
      private_key:
        description: The user's SSH private key, its text (Linux only).
        type: str
      address:
        description:
          - Where the login goes, a C(host:port) template like O(port_probe) (C({ip}), C({port}),
            C({name}), C({namespace}), C({annotations[KEY]})), with C({port}) the login port (SSH's probed
            port, or O(guest_credentials.port) for WinRM). Defaults to O(port_probe).
        type: str
      transport:
        description: WinRM's authentication (Windows only).
        type: str
        choices: [ntlm, kerberos, credssp, basic]
        default: ntlm
      scheme:
        description: WinRM's listener (Windows only).
        type: str
        choices: [https, http]
        default: https
      port:
        description: WinRM's port (Windows only); defaults to C(5986) for https and C(5985) for http.
        type: int
      server_cert_validation:
        description:
          - Whether the WinRM listener's certificate is checked against the host's CAs (Windows only). A
            clone's listener certificate is made at its first boot, so no CA vouches for it, as with the
            SSH check's host key; the gate connects only to the address its own VM reports.
        type: str
        choices: [ignore, validate]
        default: ignore
  release_digest:
    description:
      - The candidate golden's release digest (C(sha256:<64 hex>)). It must be the one published with the
        golden (annotation C(goldenimage.pipeline/release-digest)); another is refused before anything is
        written. The record is always written for the golden's own digest.
    type: str
  started:
    description:
      - When the gate began, in seconds since the epoch. Set by the action plugin; leave it out to start now.
    type: float
  gate_state:
    description:
      - What one call of the gate hands the next (its run, phase and result so far). Set by the action
        plugin from C(resume); never set it by hand.
    type: dict
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.attributes.rounds
attributes:
  check_mode:
    support: partial
    details:
      - Booting a VM cannot be predicted. In check mode the module reads the candidate, reports what it
        would create (RV(would_create)), and skips.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Every run boots a new clone.
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - "The RBAC the gate needs: get/list VolumeSnapshots and VolumeSnapshotContents; create/delete
    VolumeSnapshotContents (cluster scope), and VolumeSnapshots, PersistentVolumeClaims and
    VirtualMachines in the project; get/list VirtualMachines and VirtualMachineInstances; get on
    virtualmachineinstances/filesystemlist (subresources.kubevirt.io) for the disk phase; list KubeVirts
    for the ExpandDisks check."
  - Every timeout, O(wait_sleep) and O(report_every) must be greater than zero; another value is refused
    before anything is written.
  - "Long waits talk. Each call of the module waits at most O(report_every) seconds and returns a progress
    C(line) naming the phase, what it waits for, the last state seen and the seconds elapsed, in total and
    of the phase's timeout, for example C(clone gate of golden-images/g1 in acme: phase agent, waiting for
    the guest agent to connect ...; 45s elapsed, 40s of 1200s in this phase). A phase that runs out of its
    timeout ends with a message naming what was still pending and the last state seen."
seealso:
  - module: goldenimage.pipeline.seal_verify
  - module: goldenimage.pipeline.golden_selection
"""

EXAMPLES = r"""
- name: Gate a staged Windows golden before promoting it
  goldenimage.pipeline.clone_gate:
    snapshot: golden-windows-11-golden-20260828-f0dea74da9c5
    project_namespace: acme
    os: windows
    memory: 8Gi
    min_memory: 8Gi
    agent_timeout: 2700
    wait_timeout: 900
  register: gate

- name: Keep a failing clone for diagnosis and only report
  goldenimage.pipeline.clone_gate:
    snapshot: golden-ubuntu-24-04-20260828-0123456789ab
    snapshot_namespace: golden-images-block
    project_namespace: acme
    os: linux
    keep: true
    fail_on_reject: false
    port_probe: "ssh-gate.acme.example.net:22"
  register: gate

- name: Gate a stock Ubuntu golden (no guest agent) and prove its root filesystem grew over SSH
  goldenimage.pipeline.clone_gate:
    snapshot: golden-ubuntu-24-04-20260828-0123456789ab
    snapshot_namespace: golden-images-block
    project_namespace: acme
    os: linux
    release_digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    guest_credentials:
      username: ubuntu
      private_key: "{{ lookup('ansible.builtin.file', 'gate_ed25519') }}"
  register: gate

- name: Gate a Windows golden and prove its C drive grew inside the guest over WinRM (HTTPS, NTLM)
  goldenimage.pipeline.clone_gate:
    snapshot: golden-windows-11-golden-20260828-0123456789ab
    snapshot_namespace: golden-images-fs
    project_namespace: acme
    os: windows
    guest_credentials:
      username: gate
      password: "{{ vault_windows_gate_password }}"
      address: "{ip}:{port}"
  register: gate

- name: Say what happened
  ansible.builtin.debug:
    msg: "{{ gate.verdict }} ({{ gate.proof }}): {{ gate.msg }}"
"""

RETURN = r"""
verdict:
  description:
    - V(passed), V(no_boot) (no boot proof, the guest agent never connected and, for Linux, no SSH banner
      answered), V(disk_not_grown) (the guest booted but its OS volume did not grow into the larger clone),
      V(disk_unproven) (the guest booted but nothing inside it could report its disk, with no guest agent and
      no O(guest_credentials)) or V(port_unreachable) (the guest booted, but the port did not answer).
      On a refusal or an infrastructure timeout, V(inconclusive).
  returned: unless skipped in check mode
  type: str
  sample: port_unreachable
proof:
  description:
    - What proved the clone booted. V(guest-agent) (C(AgentConnected)), V(ssh-banner) (Linux, no agent,
      the SSH server sent its C(SSH-2.0-) banner) or V(none) (no proof arrived; the verdict is V(no_boot)
      and RV(console_class) says what the screen showed).
  returned: when the gate reached a verdict
  type: str
  sample: ssh-banner
disk_check:
  description:
    - How the disk's growth was read and what it showed, as C({name, detail}). V(guest-agent-filesystems)
      is the guest agent's filesystem list; V(ssh-root-filesystem) is the root filesystem's size read
      over SSH with O(guest_credentials); V(winrm-partition) is C(C:)'s partition, the size it may take
      (C(Get-PartitionSupportedSize)) and its disk's size read over WinRM, naming the broken link.
  returned: when the C(disk) phase read the guest
  type: dict
  sample:
    name: ssh-root-filesystem
    detail: "/ is 1.9 GiB on a 2.0 GiB clone of a 1.0 GiB golden (read over SSH: findmnt -bno SIZE / ...)"
gate_record:
  description:
    - This run's verdict, written on the golden as annotation C(goldenimage.pipeline/gate) (JSON) when
      the gate reached a verdict that is not V(inconclusive); promotion reads it there and accepts only a
      pass for the golden's own release digest.
    - C(verdict), C(passed), C(proof) (as RV(proof)), C(disk_check) and C(disk_detail) (as RV(disk_check)),
      C(candidate) (C(namespace/name) of the golden snapshot), C(release_digest) (the golden's, from
      annotation C(goldenimage.pipeline/release-digest); empty when it has none), C(snapshot_handle) (the
      candidate content's handle), C(project), C(run) (the run id of its labels), C(at) (RFC 3339 UTC) and
      C(memory).
  returned: when the gate reached a verdict
  type: dict
  sample:
    verdict: passed
    passed: true
    proof: ssh-banner
    disk_check: ssh-root-filesystem
    disk_detail: "/ is 1.9 GiB on a 2.0 GiB clone of a 1.0 GiB golden (read over SSH: ...)"
    candidate: golden-images-block/golden-ubuntu-24-04-20260828-0123456789ab
    release_digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    snapshot_handle: snapshot-7c1f
    project: acme
    run: 5f3a9c21
    at: "2026-08-28T10:15:00Z"
    memory: 1Gi
passed:
  description: Whether the verdict is V(passed).
  returned: unless skipped in check mode
  type: bool
  sample: false
msg:
  description: The verdict in one sentence.
  returned: always
  type: str
phases:
  description:
    - Each phase that ran, in order, as C({name, passed, seconds, detail}). V(provision) covers the published
      snapshot becoming ready. V(start) covers the VMI reaching C(Running).
      V(agent) covers C(AgentConnected); V(boot) replaces it when a Linux clone proved its boot by the
      SSH banner. V(disk) covers the OS volume growing. V(port) covers the TCP probe.
  returned: unless skipped in check mode
  type: list
  elements: dict
  sample:
    - {name: provision, passed: true, seconds: 0.4, detail: existing project copy acme/golden-windows-11}
    - {name: start, passed: true, seconds: 2.1, detail: phase Running}
    - {name: agent, passed: true, seconds: 95.0, detail: AgentConnected}
    - name: disk
      passed: true
      seconds: 0.2
      detail: "C:\\ is 64.6 GiB on a 65.0 GiB clone of a 64.0 GiB golden"
    - {name: port, passed: false, seconds: 300.0, detail: "10.0.3.7:3389: connection refused"}
memory:
  description: The guest memory of the gate's VM (O(memory), else O(min_memory)).
  returned: unless refused before the memory was resolved
  type: str
  sample: 8Gi
min_memory:
  description: The catalog minimum the memory was held to.
  returned: unless refused before the memory was resolved
  type: str
  sample: 8Gi
expand_disks:
  description: Why C(ExpandDisks) counts as on, per KubeVirt CR.
  returned: when the C(ExpandDisks) check ran and passed
  type: str
  sample: KubeVirt kubevirt/kubevirt lists the ExpandDisks feature gate
os_volume:
  description: The OS volume as the guest agent last reported it.
  returned: when the C(disk) phase read one
  type: dict
  sample: {mountPoint: "C:\\", totalBytes: 69793218560, usedBytes: 21474836480}
probe:
  description: The C(host:port) probed.
  returned: when the port phase ran
  type: str
  sample: 10.0.3.7:3389
source:
  description:
    - The project snapshot the clone was restored from. V(published_by) is V(project) when a ready
      snapshot on the candidate's handle already existed there (the seeder's copy), V(gate) when the gate
      published it.
  returned: unless refused before reading the cluster
  type: dict
  sample: {name: golden-windows-11-golden, namespace: acme, handle: snapshot-7c1f, published_by: project}
created:
  description: Objects the gate created, as C({kind, name, namespace}), in creation order.
  returned: always
  type: list
  elements: dict
kept:
  description:
    - Whether objects the run created are still in the cluster, because O(keep=true) or because the cleanup
      failed (then RV(left_behind) names them).
  returned: always
  type: bool
kept_vm:
  description: With O(keep=true), the kept VirtualMachine as C(namespace/name).
  returned: when objects were kept with O(keep=true)
  type: str
  sample: acme/gate-5f3a9c21-acme
kept_pvc:
  description: With O(keep=true), the kept clone's PersistentVolumeClaim as C(namespace/name).
  returned: when objects were kept with O(keep=true)
  type: str
  sample: acme/gate-5f3a9c21-acme
console_class:
  description:
    - When the guest agent never connected (V(no_boot)), what the clone's console showed as the wait ran out,
      in the classes of M(goldenimage.pipeline.console_screenshot) (V(setup), V(firmware), V(bootprompt),
      V(stop-error), V(blank)); empty when the screenshot could not be read (RV(console) says why).
      The message words it, for example V(firmware) as wedged in the firmware's boot manager.
  returned: when the verdict is V(no_boot)
  type: str
  sample: firmware
console:
  description:
    - The screenshot's C(base_class), C(confidence) and C(fingerprint), or C(error) when it was not read.
  returned: when the verdict is V(no_boot)
  type: dict
  sample: {base_class: firmware, confidence: 0.93, fingerprint: "ff00000000000000"}
swept:
  description: Objects earlier runs of the same candidate left in the project, removed before this run.
  returned: unless refused before reading the cluster
  type: list
  elements: dict
would_sweep:
  description: In check mode, the objects of earlier runs a real run would remove first.
  returned: in check mode
  type: list
  elements: dict
left_behind:
  description: Objects the cleanup could not delete, as C({apiVersion, kind, name, namespace, run}).
  returned: when cleanup failed
  type: list
  elements: dict
cleanup_command:
  description:
    - The kubectl command that removes what the run left behind, by its run label. With O(keep=true) the
      message also names the kept objects (the VM, its claim, and what the gate published) and this command.
  returned: when cleanup failed, or objects were kept with O(keep=true)
  type: str
  sample: >-
    kubectl delete -n acme
    virtualmachines.kubevirt.io,persistentvolumeclaims,volumesnapshots.snapshot.storage.k8s.io
    -l goldenimage.pipeline/clone-gate=5f3a9c21 &&
    kubectl delete volumesnapshotcontents.snapshot.storage.k8s.io -l goldenimage.pipeline/clone-gate=5f3a9c21
would_create:
  description: In check mode, the objects a real run would create.
  returned: in check mode
  type: list
  elements: dict
line:
  description: The progress line of the last round (also printed by the action plugin).
  returned: unless skipped in check mode
  type: str
lines:
  description: Every progress line printed while the gate waited, one per round.
  returned: always
  type: list
  elements: str
rounds:
  description: How many calls of the module the gate took.
  returned: always
  type: int
resume:
  description: The options that continue the gate in another call (C(gate_state)).
  returned: when the gate is not over
  type: dict
done:
  description: Whether the gate is over (a verdict); false in a round that returns to be called again.
  returned: unless skipped in check mode
  type: bool
cleanup_errors:
  description: Objects that could not be deleted, with the error.
  returned: when cleanup failed
  type: list
  elements: str
"""

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import gate
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden._clone_gate import Gate
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule


def argument_spec():
    return dict(
        snapshot=dict(type="str", required=True),
        snapshot_namespace=dict(type="str", default="golden-images"),
        project_namespace=dict(type="str", required=True),
        project_selector=dict(type="str", default=gate.PROJECT_SELECTOR),
        os=dict(type="str", choices=["windows", "linux"], default="windows"),
        memory=dict(type="str"),
        min_memory=dict(type="str"),
        agent_timeout=dict(type="int", default=1200),
        disk_timeout=dict(type="int", default=300),
        port_timeout=dict(type="int", default=300),
        **inputs.wait_arg_spec(
            600, 2, wait=None, timeout_aliases=["provision_timeout"], sleep_aliases=["poll_interval"]
        ),
        keep=dict(type="bool", default=False),
        storage_class=dict(type="str"),
        grow_by=dict(type="str", default=gate.GROW_BY),
        require_expand_disks=dict(type="bool", default=True),
        port=dict(type="int"),
        port_probe=dict(type="str", default="auto"),
        vm_annotations=dict(type="dict", default={}),
        fail_on_reject=dict(type="bool", default=True),
        cleanup_timeout=dict(type="int", default=120),
        report_every=dict(type="int", default=gate.REPORT_EVERY),
        guest_credentials=dict(
            type="dict",
            no_log=False,
            options=dict(
                username=dict(type="str", required=True),
                password=dict(type="str", no_log=True),
                private_key=dict(type="str", no_log=True),
                address=dict(type="str"),
                transport=dict(type="str", choices=list(gate.WINRM_TRANSPORTS), default="ntlm"),
                scheme=dict(type="str", choices=sorted(gate.WINRM_PORTS), default="https"),
                port=dict(type="int"),
                server_cert_validation=dict(type="str", choices=["ignore", "validate"], default="ignore"),
            ),
        ),
        release_digest=dict(type="str"),
        started=dict(type="float"),
        gate_state=dict(type="dict"),
    )


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: Gate(module).run())


if __name__ == "__main__":
    main()
