#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: microvm_image
short_description: Turn a raw or qcow2 disk into flintlock's kernel, modules and root filesystem OCI images
version_added: 0.1.0
description:
  - Reads the disk's partition table itself (GPT or MBR, from the image's bytes), picks the root
    filesystem partition and reads its filesystem without mounting it, without a loop device and
    without root. A qcow2 is read through its clusters, never converted.
  - Supported roots (and separate C(/boot) partitions) are ext2, ext3 and ext4 (Debian, Ubuntu,
    image-builder's CAPI disks), XFS (RHEL, Rocky, Alma, Amazon Linux) and btrfs (openSUSE, Fedora
    Cloud). An XFS or btrfs root gives the same images as an ext4 root with the same files. XFS
    extended attributes are read where XFS keeps small ones (inside the inode), and any it keeps
    elsewhere are listed in RV(left_out). A btrfs root is its default subvolume (what a mount without
    C(subvol=) shows), with the subvolumes nested in it as their directories; a root kept in another
    subvolume (Fedora's C(root) under the top level) is not chosen by name.
  - A partition that holds something the module recognises but does not read is named in the refusal,
    with what to do about it; recognised are a LUKS volume, swap, squashfs, F2FS, a ZFS pool member,
    bcachefs, FAT, NTFS and BitLocker. The root inside LUKS, ZFS or squashfs is not read; give the root as
    a disk image of its own.
  - A root on LVM2 is read from its logical volume, with no activation and no device-mapper (the LVM2
    metadata is read with C(dissect.volume)); each visible logical volume of an LVM2 physical volume
    counts as a partition named C(<vg>/<lv>) (the installers' C(rl/root), C(ubuntu-vg/ubuntu-lv)). A
    logical volume of one linear segment on that physical volume is read; a thin, mirrored, RAID or
    striped one, one of several segments or on another physical volume is named in the refusal with why,
    as is a physical volume whose metadata cannot be read.
  - A qcow2 overlay (one with a backing file) is refused, as the source digest the provenance records
    covers O(src)'s own bytes only; flatten it with C(qemu-img convert) first.
  - A GPT disk whose primary header (or its partition entries) fails its checksum is read from the
    backup header at the disk's last LBA, as sgdisk does, and the task warns (its result's C(warnings))
    that the primary is damaged; both damaged is refused.
  - Builds three OCI images, each one deterministic layer. C(kernel) holds the kernel (C(boot/vmlinux)
    for Firecracker, C(boot/vmlinux.bin) for Cloud Hypervisor) and C(boot/config-<version>) when the
    image has it. C(modules) holds the contents of C(/lib/modules/<version>) at its root, because
    flintlock mounts the volume's image root at C(/lib/modules/<version>), so the guest sees
    C(/lib/modules/<version>/kernel/...). C(rootfs) holds the root filesystem without the kernel and
    without C(/lib/modules) contents (they ship in the other two), keeping owners, modes
    (setuid/setgid/sticky), symlinks, hard links (as tar links) and portable extended attributes.
  - A fourth image, C(initrd), holds C(boot/initrd.img) when the disk has an initrd for the kernel
    version (C(/boot/initrd.img-<version>), or C(/boot/initramfs-<version>.img)); the rootfs then
    leaves that file out. The snippets name it as the C(initrd) flintlock and CAPMVM take. The run's
    progress names the initrd taken, or says none was found; one of those paths that is a link to nothing
    or no regular file, or two different initrds under both names, is refused.
  - The kernel is the hypervisor's C(boot/vmlinux) (or O(kernel_path)) when the root filesystem has
    it, else the distribution's C(/boot/vmlinuz-<version>). A compressed x86 bzImage is turned into
    the ELF vmlinux the hypervisors boot the way the kernel's C(scripts/extract-vmlinux) does (the first
    gzip, xz, bzip2, lzma, LZ4 or zstd payload that decompresses to an ELF); an arm64 C(Image) ships as
    it is, and a wholly compressed one (Debian's arm64 vmlinuz is a gzipped Image) is decompressed.
    The ELF's machine must be O(architecture)'s (x86_64 for C(amd64), aarch64 for C(arm64)).
  - When the root filesystem's C(/boot) holds no kernel (and no O(kernel_path) is given), the kernel
    and its config come from a separate C(/boot) partition, chosen the way the root is (an ext2/3/4,
    XFS or btrfs partition other than the root, the XBOOTLDR type first, then one whose GPT name or ext
    label is C(boot), then the smallest other Linux partition); a tie is refused.
  - The kernel's version (from its banner, its C(boot/config-<version>) and the modules directory)
    must agree; a disagreement is refused naming both. More than one version under C(/lib/modules)
    without O(kernel_version) is refused listing them.
  - With O(slim), the root filesystem drops what a micro-VM does not need (apt caches and lists, docs
    and man pages, locales beyond O(keep_locales), kernel images and headers, firmware, and with
    O(slim_container_images) the baked container images), and the result reports the bytes each group
    removed.
  - Checks the root filesystem's sealing hygiene with the rules M(goldenimage.pipeline.seal_verify)
    uses for Linux (empty machine-id, no SSH host keys, no cloud-init instance state, no build
    authorized_keys, no core dumps, small C(/var/log)) and reports them; O(require_sealed) refuses an
    unsealed image.
  - A root whose C(/etc/fstab) mounts a filesystem from a disk (not tmpfs, NFS or a bind mount) where
    the image needs files at boot - C(/usr) and below, C(/lib*), C(/bin), C(/sbin), C(/etc), C(/var) -
    is refused naming the fstab line, the root read and O(partition); the rootfs would hold that mount
    point empty. Such a filesystem is not merged into the rootfs; merge it into the root first.
  - Refused before anything is written, among others, are a directory given as O(src), a O(dest) that
    is a file (or under one), and an image that ends before one of its partitions does (a truncated
    download or copy).
  - A malformed image is refused, never a traceback. A qcow2 header is checked against qemu's limits
    and the file before it is read (a table past the end, an oversized L1 or refcount table, an unknown
    incompatible feature, encryption), naming the field; what a reader then trips over (a GPT entry or
    an extent outside the disk) is refused naming the image. Layers are written beside O(dest) and
    moved into the layout only when every image is whole, so a refused or failed run leaves the layout
    as it was.
  - Before the disk is read, the layout's C(index.json) must be an OCI image index and the registry
    must answer C(GET /v2/) with the credentials given; a corrupt index or an unreachable registry is
    refused before anything is written.
  - Writes the images to an OCI image layout (O(dest)) and/or pushes them to a registry over the OCI
    distribution API. A rerun that finds the same digests writes and pushes nothing.
  - Given a signing key (O(signing_key_path) or O(signing_key)), signs each pushed image where it is made, the
    way C(cosign sign) stores a signature - a simple-signing payload naming the repository and the manifest
    digest, as the layer of an OCI manifest under the tag C(sha256-<hex>.sig), the base64 ECDSA P-256
    signature in its C(dev.cosignproject.cosign/signature) annotation - and pushes an in-toto SLSA v1
    provenance statement in a DSSE envelope under C(sha256-<hex>.att), as C(cosign attest) stores it, naming
    the source disk's SHA-256 (input C(source-disk)), the kernel version, the image and the builder.
    C(cosign verify --key) and C(cosign verify-attestation --key --type slsaprovenance1) accept them. A
    signature this key already made for the digest, and a statement it signed for the same build, are kept,
    so a rerun pushes nothing. Signatures of other keys under the tag stay.
  - Given O(trust_policy), verifies each image before RV(spec) and RV(capmvm) name it - its signature and
    provenance, read back from the registry (in check mode, what the tags would hold), must verify with a key
    of O(public_keys) (or the signing key) that the policy lets sign O(family) and O(stream), the signature
    must name the image's digest and the statement must name the image with it. Unsigned, signed by a key the
    policy does not trust for the family, or signed for another digest is refused naming the image, the key
    and the check; a family the policy relaxes goes unsigned with the reason recorded.
  - Signs and verifies in-process with the Python library C(cryptography). Nothing reaches a transparency log
    (Rekor) or a keyless signing service (Fulcio); verification is by key.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  src:
    description:
      - The disk image, raw (for example image-builder's C(build-raw-*) output) or qcow2.
    type: path
    required: true
  partition:
    description:
      - The root filesystem's partition, as its number or its label (the GPT partition name or the
        ext4 volume label), or its LVM2 logical volume as C(<vg>/<lv>). Needed when the root is on a
        partition of a non-Linux type.
      - Omitted, the largest ext2/3/4, XFS or btrfs partition of a Linux type or logical volume is taken
        (a discoverable-root GPT type before the generic Linux filesystem type and logical volumes, then
        one whose filesystem has C(/etc/fstab) or C(/sbin/init) before a larger one, as a separate
        C(/usr) volume is larger than its root); a tie is refused, and a choice among several is said in
        the result's C(warnings) with the others.
    type: str
  boot_partition:
    description:
      - The separate C(/boot) partition, as its number or its label, for a disk whose root holds no
        kernel. Omitted, the XBOOTLDR type is taken, then a partition named or labelled C(boot), then
        another Linux type, the smallest; two such candidates are refused, naming them.
      - A label that several partitions carry is refused (here and in O(partition)); give the number.
    type: str
  kernel_version:
    description:
      - The kernel release to ship, the name of its C(/lib/modules/<version>) directory. Detected when
        the image holds one version. Quote it.
    type: raw
  hypervisor:
    description:
      - Which layout the kernel image follows.
    type: str
    choices: [firecracker, cloudhypervisor]
    default: firecracker
  kernel_path:
    description:
      - Where the kernel is in the root filesystem, and its name in the kernel image and in
        C(kernel.filename). Defaults to C(boot/vmlinux) (Firecracker) or C(boot/vmlinux.bin) (Cloud
        Hypervisor). An ELF vmlinux, a compressed x86 bzImage (its vmlinux is extracted and shipped under
        this name) or an arm64 C(Image), plain or compressed.
      - Omitted and the default missing, C(/boot/vmlinuz-<version>) is taken.
      - A path with a C(..) component is refused (the path is also the kernel's name in the image). A
        path outside C(/boot), such as Fedora's C(/lib/modules/<version>/vmlinuz), is taken when it is a
        regular file in the root filesystem.
      - Whatever the path, the file must be a Linux kernel, carrying the C(Linux version) banner every
        Linux build has (a bzImage is recognised by its C(HdrS) setup header before it is extracted);
        any other ELF or file is refused. A payload that decompresses to more than 1 GiB is refused, not
        cut; the extraction streams to a scratch file, so memory stays bounded.
    type: str
  slim:
    description:
      - Remove what a micro-VM does not need from the root filesystem and report bytes per group.
    type: bool
    default: false
  slim_groups:
    description:
      - The groups O(slim) removes.
    type: list
    elements: str
    choices: [apt, docs, locales, kernel, firmware]
    default: [apt, docs, locales, kernel, firmware]
  slim_container_images:
    description:
      - With O(slim), also remove baked container images (C(/var/lib/containerd), C(/var/lib/docker)).
    type: bool
    default: false
  keep_locales:
    description:
      - Locales O(slim) keeps under C(/usr/share/locale); a language keeps its regional variants.
    type: list
    elements: str
    default: [C, en, en_US]
  deterministic:
    description:
      - Sorted entries, file mtimes clamped to O(source_date_epoch), the config's C(created) set to it,
        and gzip without a timestamp, so the same input gives the same digests.
    type: bool
    default: true
  source_date_epoch:
    description:
      - The fixed time (seconds since 1970) O(deterministic) uses. Defaults to E(SOURCE_DATE_EPOCH) on the
        controller, else 0.
    type: int
  devices:
    description:
      - Archive device nodes (character and block). They are skipped by default and listed in
        RV(left_out).
    type: bool
    default: false
  sparse_files:
    description:
      - What to do with a sparse file, one whose holes (ranges without data, and unwritten extents) come
        to at least O(sparse_threshold) bytes. Holes are found from the file's extent map and never read,
        on ext2/3/4, XFS (holes and unwritten extents of the data fork) and btrfs (gaps, hole and
        preallocated extents); a map that cannot be read is measured by the file's size against the
        blocks its inode says it holds.
      - flintlock's unpacker (containerd's archive apply, over Go's C(archive/tar)) gives a sparse tar
        entry's holes back as zeros and writes every byte, so no layer keeps a hole in the guest; each
        sparse file is listed in RV(sparse) with its apparent and allocated size.
      - C(refuse) stops before anything is written, naming the files. C(write) ships them at their full
        apparent size, the holes as zeros in the layer (the guest's volume holds those zeros).
        C(exclude) leaves them out (every name of the file) and lists them in RV(left_out).
    type: str
    choices: [refuse, write, exclude]
    default: refuse
  sparse_threshold:
    description:
      - The bytes of holes from which a file counts as sparse for O(sparse_files). A file with fewer is
        written as it reads (its holes as zeros) and counted in RV(sparse). C(0) counts
        every file with a hole.
    type: int
    default: 16777216
  compression_level:
    description:
      - gzip level of the layers (1 fastest, 9 smallest).
    type: int
    default: 6
  architecture:
    description:
      - The disk's OCI platform architecture, recorded in each image's config. Unset, it is read from the
        disk, from the ELF machine of the root's first programs (C(/usr/bin/env), C(/bin/sh),
        C(/sbin/init), ...).
      - Set, it must agree with those programs; it is needed only for a root with none of them as an ELF.
      - The kernel (ELF machine or arm64 C(Image) header) and a sample of the kernel modules (compressed
        ones decompressed) must be of the same architecture; a mixed disk is refused before anything is
        written.
    type: str
  require_sealed:
    description:
      - Refuse a root filesystem that fails a sealing hygiene check, before anything is written.
    type: bool
    default: false
  modules_volume_id:
    description:
      - The volume id of the modules volume in RV(spec) and RV(capmvm).
    type: str
    default: modules
  dest:
    description:
      - An OCI image layout directory; each image is a tag in it (O(tags)). Created when missing. A
        non-empty directory that is not an OCI layout is refused.
    type: path
  tags:
    description:
      - The tag of each image in O(dest), and the name of its repository under O(repository) when
        pushing, as C({kernel, modules, rootfs, initrd}) keys.
    type: dict
  registry:
    description:
      - The registry to push to, C(host[:port]) (HTTPS) or C(http://host:port) for a plain HTTP registry.
        Credentials in it are refused.
    type: str
  repository:
    description:
      - The repository prefix in O(registry); the images go to C(<repository>/kernel),
        C(<repository>/modules) and C(<repository>/rootfs) (names from O(tags)).
    type: str
  tag:
    description:
      - The tag of the images in the registry. Defaults to the kernel version.
    type: str
  username:
    description:
      - Registry user, for basic auth or for the token service of a Bearer challenge.
    type: str
  password:
    description:
      - Registry password or token.
    type: str
  validate_certs:
    description:
      - Verify the registry's TLS certificate.
    type: bool
    default: true
  ca_bundle:
    description:
      - A PEM file of CA certificates to verify the registry with.
    type: path
  timeout:
    description:
      - Seconds one registry request may take.
    type: int
    default: 60
  family:
    description:
      - The family the images belong to, as the O(trust_policy) rules and relaxed entries name it.
      - Defaults to O(repository).
    type: str
  stream:
    description: The stream the images belong to, when the O(trust_policy) rules name streams.
    type: str
extends_documentation_fragment:
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.signing.prefixed
  - goldenimage.pipeline.signing.builder
  - goldenimage.pipeline.provenance.trust_policy
attributes:
  check_mode:
    support: full
    details: Reads the disk, computes every digest, reads the layout and registry; writes and pushes nothing.
  diff_mode:
    support: full
    details: Shows each tag's digest before and after, in the layout and in the registry, and whether each
      image was signed by the key and its provenance kept.
  idempotent:
    support: full
    details: With O(deterministic), a rerun finds the same digests and reports C(changed=false).
notes:
  - Runs on the controller (or wherever the disk is); it needs C(dissect.extfs) and C(dissect.hypervisor)
    there, as M(goldenimage.pipeline.seal_verify) does. A zstd bzImage needs Python 3.14 or
    C(backports.zstd); LZ4 is read with C(dissect.util), which C(dissect.extfs) brings.
  - C(/lost+found) at the filesystem root is not archived; sockets never are.
  - "One key serves both tools: give the PEM here and to C(cosign import-key-pair --key); verifiers get the
    public half. With a Rekor log run for the platform, C(cosign sign --key) on the same digest can add an
    entry that proves when the signature existed; this module writes none and verifies by key alone."
seealso:
  - module: goldenimage.pipeline.seal_verify
  - module: goldenimage.pipeline.artifact_sign
  - module: goldenimage.pipeline.artifact_verify
"""

EXAMPLES = r"""
- name: Three images from image-builder's raw output, pushed for flintlock
  goldenimage.pipeline.microvm_image:
    src: /srv/images/ubuntu-2204-kube-v1.30.4.raw
    slim: true
    dest: /srv/oci/ubuntu-2204
    registry: registry.example.com
    repository: liquidmetal/ubuntu-2204
    username: "{{ registry_user }}"
    password: "{{ registry_password }}"
  register: microvm

- name: Signed where made, verified before the snippets name the images
  goldenimage.pipeline.microvm_image:
    src: /srv/images/ubuntu-2204-kube-v1.30.4.raw
    registry: registry.example.com
    repository: liquidmetal/ubuntu-2204
    signing_key_path: /etc/goldenimage/signing.pem
    builder:
      playbook: microvm.yml
      host: "{{ inventory_hostname }}"
    # As a catalog's trust section keeps it: the key as PEM, trusted for this family only.
    trust_policy:
      rules:
        - name: release-2026
          public_key: "{{ lookup('ansible.builtin.file', 'keys/release.pub') }}"
          families: [liquidmetal/ubuntu-2204]
  register: microvm

- name: A Cloud Hypervisor kernel from a qcow2 with two kernels installed
  goldenimage.pipeline.microvm_image:
    src: /srv/images/custom.qcow2
    hypervisor: cloudhypervisor
    kernel_version: "5.15.65"
    dest: /srv/oci/custom
"""

RETURN = r"""
kernel_version:
  description: The kernel release the kernel and modules images ship.
  returned: success
  type: str
  sample: "5.10.77"
kernel_source:
  description:
    - Where the kernel came from. C(extracted) is the payload format of the bzImage the vmlinux was
      extracted from (C(gzip), C(xz), C(bzip2), C(lzma), C(lz4), C(zstd)), null when the file shipped as
      it is.
  returned: success
  type: dict
  sample: {path: /boot/vmlinuz-6.1.0-57-cloud-amd64, partition: 1, extracted: lz4}
architecture:
  description:
    - The disk's architecture as recorded in the images' configs, and the program it was read from (null
      when the root held no ELF among the programs probed and O(architecture) was taken as set).
  returned: success
  type: dict
  sample: {name: arm64, read_from: /usr/bin/env}
boot_partition:
  description:
    - The separate C(/boot) partition the kernel came from, as RV(partition); null when the root has it.
  returned: success
  type: dict
  sample:
    number: 1
    offset: 1048576
    size: 536870912
    type: bc13c2ff-59e6-4262-a352-b275fd6f7172
    name: boot
    label: ""
partition:
  description:
    - The partition read as the root filesystem.
    - For a root on LVM2, the logical volume - C(number) and C(name) are C(<vg>/<lv>), C(type) is C(lvm),
      C(offset) and C(size) its run of extents in the image, and C(volume_of) the number of the partition
      holding its physical volume.
  returned: success
  type: dict
  sample:
    number: 2
    offset: 9437184
    size: 2138046464
    type: 0fc63daf-8483-4772-8e79-3d69d8477de4
    name: root
    label: cloudimg-rootfs
kernel:
  description:
    - The kernel image. C(digest) is the manifest's, C(size) the compressed layer's, C(content_bytes) the
      file data it carries, C(entries) its tar members; C(reference) is the pushed reference, or the layout
      tag without O(registry).
  returned: success
  type: dict
  sample:
    digest: "sha256:5b0c3e..."
    size: 11534336
    content_bytes: 41943040
    layer_digest: "sha256:8f1d..."
    diff_id: "sha256:77aa..."
    config_digest: "sha256:c0de..."
    entries: 3
    reference: registry.example.com/liquidmetal/ubuntu-2204/kernel:5.10.77
modules:
  description: The modules image, same fields as RV(kernel).
  returned: success
  type: dict
  sample:
    digest: "sha256:..."
    size: 52428800
    reference: registry.example.com/liquidmetal/ubuntu-2204/modules:5.10.77
rootfs:
  description: The root filesystem image, same fields as RV(kernel).
  returned: success
  type: dict
  sample:
    digest: "sha256:..."
    size: 402653184
    reference: registry.example.com/liquidmetal/ubuntu-2204/rootfs:5.10.77
initrd:
  description: The initrd image (C(boot/initrd.img)), same fields as RV(kernel).
  returned: when the disk has an initrd for the kernel version
  type: dict
  sample:
    digest: "sha256:..."
    size: 33554432
    reference: registry.example.com/liquidmetal/ubuntu-2204/initrd:5.10.77
report:
  description:
    - What a person reads after a build, one line each - the kernel version and architecture, each image
      (the initrd when there is one) with its reference, digest, compressed size and bytes of files, what
      O(slim) removed per group, and the sealing hygiene verdict.
  returned: success
  type: list
  elements: str
  sample:
    - kernel 6.1.0-57-cloud-amd64 for amd64 (read from /usr/bin/env)
    - "initrd: registry.example.com/debian-12/initrd:6.1.0-57-cloud-amd64 sha256:... (9437184 bytes
      compressed, 33554432 bytes of files)"
removed:
  description: Bytes of file data O(slim) removed, per group (empty without O(slim)).
  returned: success
  type: dict
  sample: {apt: 104857600, docs: 52428800, locales: 41943040, kernel: 0, firmware: 367001600}
sizes:
  description:
    - C(source_bytes) is the root filesystem's file data before O(slim), C(rootfs_bytes) after,
      C(removed_bytes) their difference, and C(shipped_separately) what the kernel, modules and
      initrd images carry.
  returned: success
  type: dict
  sample:
    source_bytes: 1363148800
    rootfs_bytes: 797966336
    removed_bytes: 565182464
    shipped_separately: 94371840
hygiene:
  description: The sealing hygiene checks of the root filesystem (name, passed, evidence) and the verdict.
  returned: success
  type: dict
  sample:
    sealed: false
    failed: [ssh_host_keys_absent]
    checks:
      - {name: machine_id_empty, passed: true, evidence: /etc/machine-id is empty}
left_out:
  description:
    - Entries not archived (sockets, device nodes without O(devices), sparse files with
      O(sparse_files=exclude)) and xattrs not copied (ext4's binary ACLs, XFS's C(trusted.SGI_ACL_*), and on
      XFS an inode whose attributes live outside it).
  returned: success
  type: dict
  sample: {entries: ["dev/console (char)"], xattrs: ["/usr/bin/x system.posix_acl_access"]}
sparse:
  description:
    - The sparse files (O(sparse_threshold) bytes of holes or more) per image, with their apparent size
      and the bytes held in written blocks, the policy applied (O(sparse_files)), and how many files
      have fewer holes (C(below_threshold), written with their holes as zeros).
  returned: success
  type: dict
  sample:
    policy: exclude
    threshold: 16777216
    files:
      - {image: rootfs, path: /var/lib/big.img, apparent_size: 4294967296, allocated_size: 4096}
    below_threshold: {files: 12, hole_bytes: 81920}
spec:
  description:
    - The flintlock C(MicroVMSpec) fields the images fill (proto names), to merge into a full spec, with
      each volume's C(size_in_mb) (its files, a fifth more for the filesystem, and 64 MiB; flintlock
      ignores it on the root volume today) and C(initrd) when there is one.
    - Each image is named by its manifest digest (C(<registry>/<repository>/<name>@sha256:...)), not by
      its tag, so a tag moved later never changes what a MicroVM boots.
    - Without O(registry), every image reference is left out (see RV(snippet_note)).
  returned: success
  type: dict
  sample:
    kernel:
      image: r.example/u/kernel@sha256:1111...
      filename: boot/vmlinux
      add_network_config: true
    root_volume:
      id: root
      is_read_only: false
      size_in_mb: 1024
      source:
        container_source: r.example/u/rootfs@sha256:2222...
    additional_volumes:
      - id: modules
        is_read_only: false
        mount_point: /lib/modules/5.10.77
        size_in_mb: 180
        source:
          container_source: r.example/u/modules@sha256:3333...
capmvm:
  description:
    - The CAPMVM C(MicrovmMachineTemplate) C(spec.template.spec) fields (CAPMVM's volumes have no size), with
      C(initrd) when there is one, naming each image by its digest. Without O(registry), every image
      reference is left out.
  returned: success
  type: dict
  sample:
    kernel:
      image: r.example/u/kernel@sha256:1111...
      filename: boot/vmlinux
    rootVolume:
      id: root
      image: r.example/u/rootfs@sha256:2222...
    volumes:
      - id: modules
        image: r.example/u/modules@sha256:3333...
        mountPoint: /lib/modules/5.10.77
snippet_note:
  description:
    - Why RV(spec) and RV(capmvm) name no image. The layout's tags are no reference containerd resolves (a
      bare C(kernel) reads as C(docker.io/library/kernel)); push the images, or copy each tag to a
      registry, and fill the references in.
  returned: when O(registry) is not set
  type: str
layout:
  description: What the layout held and holds per tag (C(before), C(after)), and whether it changed.
  returned: when O(dest) is set
  type: dict
  sample:
    path: /srv/oci/ubuntu-2204
    changed: false
    before: {kernel: "sha256:5b0c3e..."}
    after: {kernel: "sha256:5b0c3e..."}
moved_tags:
  description:
    - Each tag that pointed at other bytes and was (in check mode, would be) moved to this build's
      manifest - V(where) (V(layout) or V(registry)), V(tag), V(from) and V(to) digests. Also in the
      diff (C(after.moved_tags)) and as a warning each; empty when no tag moved.
  returned: success
  type: list
  elements: dict
  sample:
    - {where: registry, tag: "registry.example.com/liquidmetal/ubuntu-2204/rootfs:5.10.77",
       from: "sha256:4444444444444444444444444444444444444444444444444444444444444444",
       to: "sha256:2222222222222222222222222222222222222222222222222222222222222222"}
pushed:
  description: Per image, whether its manifest was pushed (false when the tag already held this digest).
  returned: when O(registry) is set
  type: dict
  sample: {kernel: false, modules: false, rootfs: true}
signatures:
  description:
    - Per image, what signing did - the key id, the C(sha256-<hex>.sig) and C(.att) tags, whether each was
      (or in check mode would be) pushed, and the provenance recorded (V(subject), V(inputs), V(builder),
      V(parameters), V(time)).
  returned: when a signing key is given
  type: dict
  sample:
    kernel:
      key_id: 3f1c0a9a1d6b4e0f9c2b7d5e8a4f6c1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b
      signature_tag: sha256-5b0c3e0d.sig
      attestation_tag: sha256-5b0c3e0d.att
      signature_pushed: false
      attestation_pushed: false
      provenance:
        inputs: [{name: source-disk, digest: {sha256: 9f86d081}}]
        parameters: {kernel_version: "5.10.77", image: kernel}
verified:
  description:
    - Per image, the verdict of the trust policy (V(verified), or V(unsigned_allowed) with the V(relaxed)
      reason), the key that signed, the policy's name of it (V(signer)) and the reference by digest. A failed
      check fails the task with the verdict (V(unsigned), V(untrusted_key), V(signature_mismatch),
      V(subject_digest_differs), V(replayed_revision)), the V(image), the V(key) and the V(check).
  returned: when O(trust_policy) is given
  type: dict
  sample:
    rootfs:
      verdict: verified
      check: all
      key: 3f1c0a9a1d6b4e0f9c2b7d5e8a4f6c1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b
      signer: release-2026
      reference: registry.example.com/liquidmetal/ubuntu-2204/rootfs@sha256:5b0c3e0d
progress:
  description: Progress lines (elapsed, phase, counts, bytes), one per blob and per chunk of a large layer.
  returned: always
  type: list
  elements: str
  sample:
    - "12.0 s: rootfs layer: 40213/81920 entries, 612.0 MiB"
    - "14.2 s: blob liquidmetal/ubuntu-2204/rootfs@5b0c3e: 16.0/380.0 MiB (4%), 0.3 s"
"""

import importlib
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.inputs import (
    positive,
    version_string,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.redact import (
    refuse_credentials,
    url_secrets,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import seal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import qcow2
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import microvm
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance

SLIM_CHOICES = ["apt", "docs", "locales", "kernel", "firmware"]


def argument_spec():
    return dict(
        src=dict(type="path", required=True),
        partition=dict(type="str"),
        boot_partition=dict(type="str"),
        kernel_version=dict(type="raw"),
        hypervisor=dict(type="str", choices=["firecracker", "cloudhypervisor"], default="firecracker"),
        kernel_path=dict(type="str"),
        slim=dict(type="bool", default=False),
        slim_groups=dict(type="list", elements="str", choices=SLIM_CHOICES, default=list(SLIM_CHOICES)),
        slim_container_images=dict(type="bool", default=False),
        keep_locales=dict(type="list", elements="str", default=["C", "en", "en_US"]),
        deterministic=dict(type="bool", default=True),
        source_date_epoch=dict(type="int"),
        devices=dict(type="bool", default=False),
        sparse_files=dict(type="str", choices=list(microvm.SPARSE_CHOICES), default="refuse"),
        sparse_threshold=dict(type="int", default=microvm.DEFAULT_SPARSE_THRESHOLD),
        compression_level=dict(type="int", default=6),
        architecture=dict(type="str"),
        require_sealed=dict(type="bool", default=False),
        modules_volume_id=dict(type="str", default="modules"),
        dest=dict(type="path"),
        tags=dict(type="dict"),
        registry=dict(type="str"),
        repository=dict(type="str"),
        tag=dict(type="str"),
        username=dict(type="str"),
        password=dict(type="str", no_log=True),
        validate_certs=dict(type="bool", default=True),
        ca_bundle=dict(type="path"),
        timeout=dict(type="int", default=60),
        family=dict(type="str"),
        stream=dict(type="str"),
        builder=provenance.builder_option(),
        **dict(provenance.key_options("signing_"), **provenance.trust_policy_spec()),
    )


def check_inputs(params, environ=None):
    """Every parameter rule, before the disk is opened. Returns the normalized settings."""
    environ = os.environ if environ is None else environ
    microvm.check_compression_level(params["compression_level"])
    microvm.check_kernel_path(params.get("kernel_path"))
    microvm.check_sparse_threshold(params["sparse_threshold"])
    positive(params["timeout"], "timeout")
    settings = {
        "kernel_version": version_string(params.get("kernel_version"), "kernel_version"),
        "names": microvm.layout_tags(params.get("tags")),
        "scheme": None,
        "host": None,
    }
    settings["epoch"] = microvm.source_date_epoch(
        params.get("source_date_epoch"), environ.get("SOURCE_DATE_EPOCH")
    )
    if params.get("registry"):
        refuse_credentials(microvm.registry_url(params["registry"]), "registry", "set username and password")
        settings["scheme"], settings["host"] = microvm.parse_registry(
            params["registry"], bool(params.get("username"))
        )
        settings["repository"] = microvm.check_repository(params["repository"])
    signs = bool(params.get("signing_key_path") or params.get("signing_key"))
    settings["policy"] = None
    if params.get("trust_policy") is not None:
        settings["policy"] = provenance.normalize_policy(params["trust_policy"])
    microvm.check_signing_target(signs, settings["policy"] is not None, bool(params.get("registry")))
    settings["family"] = params.get("family") or params.get("repository")
    if params.get("tag") is not None:
        microvm.check_tag("tag", params["tag"])
    groups = []
    if params["slim"]:
        groups = list(params["slim_groups"]) + (
            ["container_images"] if params["slim_container_images"] else []
        )
    settings["slim_groups"] = groups
    return settings


class Runner:
    def __init__(self, module, adapters=None):
        self.module = module
        self.params = module.params
        self.check = module.check_mode
        self.progress = []
        self.started = time.monotonic()
        if adapters is None:
            from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import (
                _disk,
                _ext4,
                _btrfs,
                _lvm,
                _partitions,
                _xfs,
            )
            from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import (
                _cosign,
                _kernel,
                _oci,
            )
            from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing

            adapters = {
                "disk": _disk,
                "ext4": _ext4,
                "kernel": _kernel,
                "oci": _oci,
                "partitions": _partitions,
                "lvm": _lvm,
                "xfs": _xfs,
                "btrfs": _btrfs,
                "signing": _signing,
                "cosign": _cosign,
            }
        self.io = adapters
        self.fs = self.boot_fs = None
        self.extracted = None
        self.scratch_paths = []
        self.index = self.registry = None
        # True while the disk is read: what a reader raises then is about the image.
        self.reading = True
        self.table_notes = []

    def log(self, line):
        line = "%.1f s: %s" % (time.monotonic() - self.started, line)
        self.progress.append(line)
        if hasattr(self.module, "log"):
            self.module.log(line)

    # observe ---------------------------------------------------------------------------------------

    def _open(self):
        src = self.params["src"]
        if os.path.isfile(src):
            # A qcow2 header's tables are checked against the file before the reader trusts them.
            with open(src, "rb") as fh:
                head = fh.read(qcow2.HEADER_BYTES)
            if head[:4] == qcow2.MAGIC:
                fields = qcow2.check_header(src, head, os.path.getsize(src))
                microvm.check_no_backing_file(src, fields["backing_file_offset"])
        try:
            image = self.io["disk"].Image(src)  # its DiskError names the file
        except READ_ERRORS as exc:
            raise microvm.malformed_image(src, None, exc) from exc
        try:
            return image, self._with_volumes(
                image, self.io["partitions"].read_partitions(image, self.table_notes)
            )
        except READ_ERRORS as exc:
            image.close()
            raise microvm.malformed_image(src, image.format, exc) from exc
        except BaseException:
            image.close()
            raise

    def _kernel_facts(self, kernel_tree, real):
        """``(head, banner version, extracted)`` of the kernel file: a bzImage's vmlinux is streamed into a
        scratch file (``extracted``: the format and its size), a vmlinux or an arm64 Image is read in
        chunks; memory stays bounded either way."""
        entry = kernel_tree[real]
        fh = self._data(entry.inum)
        head = fh.read(4096)
        if microvm.needs_extraction(microvm.kernel_kind(head)):
            microvm.check_compressed_kernel_size(real, entry.size)
            handle, self.extracted = tempfile.mkstemp(prefix="microvm-vmlinux-")
            with os.fdopen(handle, "w+b") as out:
                name, size, banner = self.io["kernel"].extract_vmlinux(head + fh.read(), real, out)
                out.seek(0)
                head = out.read(4096)
            self.log("extracted the vmlinux from /%s (%s, %d bytes)" % (real, name, size))
            return head, banner, (name, size)
        scan = microvm.BannerScan()
        chunk = head
        while chunk and scan.feed(chunk) is None:
            chunk = fh.read(4 * 1024 * 1024)
        return head, scan.version, None

    def _machines(self, tree, paths):
        """``[(path, ELF machine or None)]`` of the files at ``paths``."""
        kernel = self.io["kernel"]
        return [
            (path, microvm.elf_machine(kernel.elf_head(self._data(tree[path].inum), path))) for path in paths
        ]

    def _data(self, inum):
        """A file member's data: the extracted vmlinux, or the file of the filesystem that holds it."""
        if inum == EXTRACTED:
            return open(self.extracted, "rb")
        if isinstance(inum, tuple):
            return self.boot_fs.open(inum[1])
        return self.fs.open(inum)

    def _tree(self, image, part):
        """The reader of ``part``'s filesystem (ext2/3/4, XFS or btrfs, as ``microvm.reader_of`` says)."""
        tree = self.io[microvm.reader_of(part)].Tree(image, part)
        self.log("reading %s on %s" % (tree.filesystem, microvm.describe(part)))
        return tree

    def _with_volumes(self, image, parts):
        """``parts`` with each LVM2 physical volume replaced by its logical volumes (a root on LVM is read
        from its logical volume); a physical volume whose metadata cannot be read stays, saying why."""
        found = []
        for part in parts:
            if part.get("filesystem") != "lvm2":
                found.append(part)
                continue
            lvm = self.io["lvm"]
            try:
                group = lvm.volume_group(image, part)
            except lvm.LvmError as exc:
                found.append(dict(part, why=str(exc)))
                continue
            for volume in microvm.volume_partitions(part, group):
                if not volume.get("why"):
                    volume["filesystem"], volume["label"] = self.io["partitions"].signature(
                        image.read, volume["offset"]
                    )
                found.append(volume)
        return found

    def _rootlike(self, image, parts):
        """The numbers of the root candidates whose filesystem has /etc/fstab or /sbin/init, when there is
        more than one candidate (a separate /usr volume is larger than its root)."""
        candidates = microvm.root_candidates(parts)
        if len(candidates) < 2:
            return ()
        found = set()
        for part in candidates:
            try:
                view = self._tree(image, part).view
                if view.exists("etc/fstab") or view.exists("sbin/init"):
                    found.add(part["number"])
            except PROBE_ERRORS:
                # Unreadable here, it is read (and refused naming why) only if chosen.
                continue
        return found

    def _boot(self, image, parts, root, tree):
        """The root's entries with a separate /boot partition's seen mounted at ``boot``, and that
        partition, when the root holds no kernel; else ``(tree, None)``."""
        if not microvm.needs_boot_partition(tree, self.params.get("kernel_path")):
            return tree, None
        boot = microvm.choose_boot_partition(
            self.params["src"], parts, root, self.params.get("boot_partition")
        )
        self.log("looking for the kernel in a separate /boot partition")
        self.boot_fs = self._tree(image, boot)
        kernel_tree = dict(tree)
        kernel_tree.update(microvm.mounted(self.boot_fs.walk(), "boot", BOOT_DEVICE))
        return kernel_tree, boot

    def _keys(self, settings):
        """The signing key and the keyring, read and checked before anything is opened or written."""
        params = self.params
        self.signer = None
        self.ring = {}
        if not (
            params.get("signing_key_path") or params.get("signing_key") or settings["policy"] is not None
        ):
            return
        signing = self.io["signing"]
        if params.get("signing_key_path") or params.get("signing_key"):
            key = signing.private_key_from(params, "signing_")
            self.signer = (key, signing.key_id(key))
        if settings["policy"] is not None:
            self.ring = signing.keyring_of(
                params.get("public_keys"), extra=provenance.public_keys(settings["policy"])
            )
            if self.signer:
                self.ring.setdefault(self.signer[1], self.signer[0].public_key())

    # run -------------------------------------------------------------------------------------------

    def run(self):
        params = self.params
        settings = check_inputs(params)
        self._keys(settings)
        if self.signer:
            provenance.check_signer(
                self.signer[1], settings["family"], params.get("stream"), settings["policy"]
            )
        microvm.check_source(params["src"], os.path.isdir(params["src"]))
        layout = None
        if params.get("dest"):
            layout = self.io["oci"].Layout(params["dest"])
            microvm.check_dest_kind(params["dest"], layout.kind())
            listing = layout.listing()
            microvm.check_dest_layout(params["dest"], listing, bool(listing) and layout.exists())
            self.index = microvm.layout_index(params["dest"], layout.index_bytes())
        self.registry = None
        if settings["host"]:
            # Reached (and the credentials taken) before the disk is read or a layer written.
            self.registry = self._registry(settings)
            self.registry.reachable("%s/%s" % (settings["repository"], settings["names"]["rootfs"]))
        image, parts = self._open()
        try:
            return self._run(settings, layout, image, parts)
        except READ_ERRORS as exc:
            if not self.reading:
                raise
            # A reader tripping over the image's own structures (a qcow2 header that lies, a table past
            # the end): the image is refused, and nothing was kept in the layout.
            raise microvm.malformed_image(params["src"], image.format, exc) from exc
        finally:
            image.close()
            if self.extracted:
                os.unlink(self.extracted)
            for path in self.scratch_paths:
                if os.path.exists(path):
                    os.unlink(path)

    def _run(self, settings, layout, image, parts):
        params = self.params
        microvm.check_within(params["src"], parts, image.virtual_size)
        rootlike = () if params.get("partition") else self._rootlike(image, parts)
        part = microvm.choose_partition(params["src"], parts, params.get("partition"), rootlike)
        chosen = microvm.root_choice_note(parts, part, params.get("partition"))
        if chosen:
            self.table_notes.append(chosen)
        self.fs = fs = self._tree(image, part)
        self.tree = tree = fs.walk(progress=lambda n: self.log("walked %d entries" % n))
        self.log("walked %d entries" % len(tree))
        fstab = tree.get("etc/fstab")
        if fstab is not None and fstab.kind == "file":
            text = self._data(fstab.inum).read(1024 * 1024).decode("utf-8", "replace")
            microvm.check_root_mounts(params["src"], part, text)

        kernel_arcname = microvm.kernel_path_for(params["hypervisor"], params.get("kernel_path"))
        kernel_tree, boot = self._boot(image, parts, part, tree)
        modules = microvm.module_versions(tree)[1]
        configs = microvm.config_versions(kernel_tree)
        version = microvm.choose_version(modules, configs, settings["kernel_version"], None, kernel_arcname)
        kernel_real = microvm.locate_kernel(
            kernel_tree, params.get("kernel_path"), params["hypervisor"], version
        )
        architecture, read_from = microvm.disk_architecture(
            params["src"], self._machines(tree, microvm.architecture_probes(tree)), params.get("architecture")
        )
        self.architecture = architecture
        modules_root = microvm.module_versions(tree)[0]
        kernel = self.io["kernel"]
        microvm.check_modules_architecture(
            version,
            [
                (path, kernel.elf_head(self._data(tree[path].inum), path))
                for path in microvm.module_probes(tree, modules_root, version)
            ],
            architecture,
        )
        head, banner, extracted = self._kernel_facts(kernel_tree, kernel_real)
        kind = microvm.check_kernel_format(kernel_arcname, head, params["hypervisor"], architecture)
        microvm.check_linux_kernel(kernel_real, kind, banner)
        microvm.choose_version(modules, configs, settings["kernel_version"], banner, kernel_arcname)

        checks = seal.linux_checks(fs.view)
        sealed, failed = seal.verdict(checks)
        if params["require_sealed"]:
            microvm.refuse_unsealed(params["src"], checks, sealed, failed)

        initrd_real = microvm.locate_initrd(kernel_tree, version)
        self.log(
            "initrd: /%s" % initrd_real
            if initrd_real
            else "no initrd for kernel %s (/%s): the images boot without one"
            % (version, ", /".join(p % version for p in microvm.INITRD_PATHS))
        )
        parts_of = microvm.split(
            tree,
            version,
            kernel_real,
            kernel_arcname,
            configs.get(version),
            settings["slim_groups"],
            tuple(params["keep_locales"]),
            kernel_tree,
            initrd_real,
        )
        images = microvm.images_of(parts_of)
        kernel_source = {"path": "/" + kernel_real, "partition": (boot or part)["number"], "extracted": None}
        if extracted:
            kernel_source["extracted"] = extracted[0]
            parts_of["kernel"] = microvm.with_data(
                parts_of["kernel"], kernel_arcname, extracted[1], EXTRACTED
            )
        mount_point = "/lib/modules/%s" % version
        microvm.check_modules_layout(parts_of["modules"], version, mount_point)
        sparse, small = microvm.sparse_files(parts_of, params["sparse_threshold"])
        parts_of, sparse_left_out = microvm.apply_sparse_policy(
            params["src"], parts_of, sparse, params["sparse_files"]
        )
        for found in sparse:
            self.log(
                "sparse file %s (%s image): %d bytes, %d allocated (%s)"
                % (
                    found["path"],
                    found["image"],
                    found["apparent_size"],
                    found["allocated_size"],
                    params["sparse_files"],
                )
            )

        tag = params.get("tag") or version
        host = settings["host"]
        repository = settings.get("repository")
        names = settings["names"]
        refs = microvm.references(host, repository, tag, names)

        scratch = None
        writes = not self.check
        built = {}
        skipped = list(sparse_left_out)
        try:
            if writes and layout is None:
                scratch = tempfile.mkdtemp(prefix="microvm-image-")
            for name in images:
                members, left_out = microvm.tar_members(
                    parts_of[name], params["deterministic"], settings["epoch"], params["devices"]
                )
                skipped.extend(left_out)
                built[name] = self._build(name, members, layout, scratch, writes, settings)

            self.reading = False
            if writes and layout is not None:
                # Every layer is whole: only now does the layout receive them.
                for name in images:
                    kept = built[name]["_layer_path"]
                    # Whether the layout lacked the layer, known before it is moved in: a rerun that
                    # writes a deleted blob again reports a change.
                    built[name]["_layer_missing"] = not layout.has_blob(
                        built[name]["layer_digest"], built[name]["size"]
                    )
                    built[name]["_layer_path"] = layout.keep(kept, built[name]["layer_digest"])
                    self.scratch_paths.remove(kept)
            result = {
                "changed": False,
                "kernel_version": version,
                "kernel_source": kernel_source,
                "architecture": {"name": architecture, "read_from": read_from},
                "partition": partition_fields(part),
                "boot_partition": boot and partition_fields(boot),
                "removed": parts_of["removed"],
                "hygiene": {"sealed": sealed, "failed": failed, "checks": checks},
                "left_out": {"entries": skipped, "xattrs": sorted(fs.skipped_xattrs)},
                "sparse": microvm.sparse_report(
                    sparse, small, params["sparse_files"], params["sparse_threshold"]
                ),
            }
            if self.table_notes:
                result["warnings"] = list(self.table_notes)
            rootfs_bytes = built["rootfs"]["content_bytes"]
            removed_bytes = sum(parts_of["removed"].values())
            result["sizes"] = {
                "source_bytes": rootfs_bytes + removed_bytes,
                "rootfs_bytes": rootfs_bytes,
                "removed_bytes": removed_bytes,
                "shipped_separately": sum(built[n]["content_bytes"] for n in images if n != "rootfs"),
            }
            diff = {"before": {}, "after": {}}
            moves = []
            if layout is not None:
                result["layout"] = self._layout(layout, built, names, writes)
                result["changed"] = result["changed"] or result["layout"]["changed"]
                diff["before"]["layout"] = result["layout"]["before"]
                diff["after"]["layout"] = result["layout"]["after"]
                moves.extend(
                    microvm.tag_moves("layout", result["layout"]["before"], result["layout"]["after"])
                )
            if host:
                registry = self.registry
                pushed, before = self._push(registry, settings, repository, tag, names, built, writes)
                result["pushed"] = pushed
                result["changed"] = result["changed"] or any(pushed.values())
                diff["before"]["registry"] = before
                diff["after"]["registry"] = dict((refs[n], built[n]["digest"]) for n in images)
                moves.extend(microvm.tag_moves("registry", before, diff["after"]["registry"]))
                planned = {}
                signer = self._image_signing(registry)
                if self.signer:
                    result["signatures"], planned = signer.sign_all(
                        settings, repository, names, built, version, writes
                    )
                    result["changed"] = result["changed"] or any(
                        v["signature_pushed"] or v["attestation_pushed"]
                        for v in result["signatures"].values()
                    )
                    diff["before"]["signatures"] = dict(
                        (n, v["before"]) for n, v in result["signatures"].items()
                    )
                    diff["after"]["signatures"] = dict(
                        (n, v["after"]) for n, v in result["signatures"].items()
                    )
                if settings["policy"] is not None:
                    result["verified"] = signer.verify_all(settings, repository, names, built, planned)
            # A tag that held other bytes is moved: said in the result, the diff and a warning.
            result["moved_tags"] = moves
            if moves:
                diff["after"]["moved_tags"] = moves
            for move in moves:
                self.log(
                    "%s tag %s moves from %s to %s" % (move["where"], move["tag"], move["from"], move["to"])
                )
                result.setdefault("warnings", []).append(
                    "%s tag %s %s from %s to %s"
                    % (
                        move["where"],
                        move["tag"],
                        "would move" if self.check else "moved",
                        move["from"],
                        move["to"],
                    )
                )
        finally:
            if scratch:
                for entry in os.listdir(scratch):
                    os.unlink(os.path.join(scratch, entry))
                os.rmdir(scratch)

        for name in images:
            public = dict((k, v) for k, v in built[name].items() if not k.startswith("_"))
            public["reference"] = refs[name]
            result[name] = public
        # Without a registry the tags are the layout's only: no reference containerd resolves (SNIPPET_NOTE).
        resolvable = microvm.pinned(refs, dict((n, built[n]["digest"]) for n in images)) if host else None
        sizes = dict((n, microvm.volume_size_mb(built[n]["content_bytes"])) for n in ("rootfs", "modules"))
        with_initrd = "initrd" in built
        volume_id = params["modules_volume_id"]
        result["spec"] = microvm.microvm_spec(
            resolvable, kernel_arcname, version, volume_id, sizes, with_initrd
        )
        result["capmvm"] = microvm.capmvm_template(
            resolvable, kernel_arcname, version, volume_id, with_initrd
        )
        if not host:
            result["snippet_note"] = microvm.SNIPPET_NOTE
        result["report"] = microvm.report(result)
        if self.module._diff:
            result["diff"] = diff
        result["progress"] = self.progress
        return result

    def _build(self, name, members, layout, scratch, writes, settings):
        oci = self.io["oci"]
        params = self.params
        out = path = None
        if writes:
            if layout is not None:
                out, path = layout.scratch()
            else:
                path = os.path.join(scratch, name + ".layer")
                out = open(path, "wb")  # noqa: SIM115 - closed below
        self.log("%s layer: %d entries" % (name, len(members)))

        def progress(done, total, raw):
            self.log("%s layer: %d/%d entries, %.1f MiB" % (name, done, total, raw / 1048576.0))

        try:
            layer = oci.write_layer(members, self._data, out, params["compression_level"], progress)
        finally:
            if out is not None:
                out.close()
        if writes and layout is not None:
            self.scratch_paths.append(path)
        layer_desc = microvm.descriptor(microvm.MEDIA_LAYER, layer["digest"], layer["size"])
        created = microvm.created_at(params["deterministic"], settings["epoch"], time.time())
        labels = {"org.opencontainers.image.title": name}
        config = microvm.canonical(microvm.image_config(layer["diff_id"], created, self.architecture, labels))
        config_desc = microvm.descriptor(microvm.MEDIA_CONFIG, oci.digest_of(config), len(config))
        manifest = microvm.canonical(microvm.image_manifest(config_desc, layer_desc))
        self.log("%s layer: %s, %d bytes" % (name, layer["digest"], layer["size"]))
        return {
            "digest": oci.digest_of(manifest),
            "size": layer["size"],
            "content_bytes": microvm.content_bytes(members),
            "layer_digest": layer["digest"],
            "diff_id": layer["diff_id"],
            "config_digest": config_desc["digest"],
            "entries": len(members),
            "_layer_path": path,
            "_config": config,
            "_manifest": manifest,
        }

    def _layout(self, layout, built, names, writes):
        existing = self.index
        before = {}
        for entry in (existing or {}).get("manifests", []):
            ref = (entry.get("annotations") or {}).get(microvm.REF_NAME)
            if ref in names.values():
                before[ref] = entry["digest"]
        tagged = {}
        missing = False
        for name in built:
            item = built[name]
            tagged[names[name]] = microvm.descriptor(
                microvm.MEDIA_MANIFEST, item["digest"], len(item["_manifest"])
            )
            missing = missing or item.get(
                "_layer_missing", not layout.has_blob(item["layer_digest"], item["size"])
            )
            for digest, size in (
                (item["config_digest"], len(item["_config"])),
                (item["digest"], len(item["_manifest"])),
            ):
                missing = missing or not layout.has_blob(digest, size)
        index = microvm.merge_index(existing, tagged)
        changed = missing or index != existing
        if writes:
            for name in built:
                layout.put_bytes(built[name]["_config"])
                layout.put_bytes(built[name]["_manifest"])
            if index != existing:
                layout.write_index(index, microvm.canonical(index))
        after = dict((names[n], built[n]["digest"]) for n in built)
        self.log("layout %s: %s" % (layout.path, "updated" if changed else "already holds these digests"))
        return {"path": layout.path, "changed": changed, "before": before, "after": after}

    def _registry(self, settings):
        params = self.params
        return self.io["oci"].Registry(
            settings["scheme"],
            settings["host"],
            params.get("username"),
            params.get("password"),
            params["validate_certs"],
            params.get("ca_bundle"),
            params["timeout"],
            self.log,
        )

    def _image_signing(self, registry):
        params = self.params
        return self.io["cosign"].ImageSigning(
            registry,
            self.io,
            self.log,
            self.signer,
            self.ring,
            params["src"],
            params.get("builder"),
            params.get("stream"),
            self.check,
        )

    def _push(self, registry, settings, repository, tag, names, built, writes):
        pushed = {}
        before = {}
        for name in built:
            item = built[name]
            repo = "%s/%s" % (repository, names[name])
            current = registry.manifest_digest(repo, tag, microvm.MEDIA_MANIFEST)
            before["%s/%s:%s" % (settings["host"], repo, tag)] = current
            if current == item["digest"]:
                self.log("%s/%s:%s already has %s" % (settings["host"], repo, tag, item["digest"]))
                pushed[name] = False
                continue
            pushed[name] = True
            if not writes:
                self.log("%s/%s:%s would be pushed (%s)" % (settings["host"], repo, tag, item["digest"]))
                continue
            registry.push_blob(repo, item["layer_digest"], item["size"], path=item["_layer_path"])
            registry.push_blob(repo, item["config_digest"], len(item["_config"]), data=item["_config"])
            got = registry.push_manifest(repo, tag, item["_manifest"], microvm.MEDIA_MANIFEST)
            if got and got != item["digest"]:
                raise PipelineError(
                    "registry %s: %s:%s stored the manifest as %s, not %s"
                    % (settings["host"], repo, tag, got, item["digest"])
                )
            self.log("%s/%s:%s pushed %s" % (settings["host"], repo, tag, item["digest"]))
        return pushed, before


def _read_errors():
    """What the disk and filesystem readers raise on inconsistent structures: the generic errors
    ``microvm.MALFORMED_ERRORS`` names and each dissect reader's own base error."""
    found = list(microvm.MALFORMED_ERRORS)
    for name in ("hypervisor", "extfs", "xfs", "btrfs", "volume"):
        try:
            found.append(importlib.import_module("dissect.%s.exceptions" % name).Error)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


READ_ERRORS = _read_errors()
# What probing a root candidate may raise: it is read (and refused naming why) only if chosen.
PROBE_ERRORS = (PipelineError,) + READ_ERRORS

# The member inode number that reads the vmlinux extracted from a bzImage (no inode has it), and the
# device that tags the inode numbers of a separate /boot partition.
EXTRACTED = -1
BOOT_DEVICE = "boot"


def partition_fields(part):
    fields = dict((k, part[k]) for k in ("number", "offset", "size", "type", "name", "label"))
    if part.get("volume_of") is not None:
        fields["volume_of"] = part["volume_of"]
    return fields


def fs_entry_inum(tree, path):
    return tree[path].inum


# Which options go together, checked by Ansible before the runner starts: the images go to dest (an OCI
# layout directory) and/or registry, a registry needs its repository, credentials come in pairs.
ARGUMENT_RULES = dict(
    required_one_of=[("dest", "registry")],
    mutually_exclusive=[("signing_key_path", "signing_key")],
    required_by={"registry": "repository"},
    required_together=[("username", "password")],
)


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True, **ARGUMENT_RULES)
    # A password inside the registry URL is refused, and masked in the invocation that prints it.
    if module.params.get("registry"):
        module.no_log_values.update(url_secrets(microvm.registry_url(module.params["registry"])))
    run_module(module, lambda: Runner(module).run())


if __name__ == "__main__":
    main()
