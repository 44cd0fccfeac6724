"""What the lab's guest agent reports of its filesystems: virt-api's `filesystemlist` subresource.

    GET /apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}/filesystemlist

The guest extends its OS volume at first boot (cloudbase-init's ExtendVolumes, cloud-init's growpart),
but only into space right after it: a volume with a partition behind it (Windows' WinRE) stays as the
golden had it, and so does one on a disk image that was never grown (KubeVirt without ExpandDisks).
"""

from __future__ import annotations

import json

LAB_PREFIX = "lab.goldenimage.io/"
BOOT_NOTE = LAB_PREFIX + "boot"
# What the guest's disk is as it boots: the OS volume ("offset,size,last") and the disk's size in bytes.
VOLUME_NOTE = LAB_PREFIX + "os-volume"
DISK_NOTE = LAB_PREFIX + "disk-bytes"
# The filesystem list a real guest agent reported (realboot.py writes it).
AGENT_FILESYSTEMS_NOTE = LAB_PREFIX + "agent-filesystems"
GPT_TAIL = 2**20  # the backup GPT and alignment at the end of the disk
MOUNTS = {
    "windows": {"diskName": "C:", "mountPoint": "C:\\", "fileSystemType": "NTFS"},
    "linux": {"diskName": "vda", "mountPoint": "/", "fileSystemType": "ext4"},
}


# "false" on the VM: the guest does not extend its OS volume (cloudbase-init without ExtendVolumes).
EXTEND_NOTE = LAB_PREFIX + "extend-volumes"


def partition(vmi: dict) -> tuple[int, int, int] | None:
    """The OS partition as the guest sees it: (its size, the largest size it could take, the disk's
    size), in bytes; None before the guest booted a disk the lab could read."""
    notes = vmi["metadata"].get("annotations") or {}
    if VOLUME_NOTE not in notes:
        return None
    offset, size, last = (int(v) for v in notes[VOLUME_NOTE].split(","))
    disk = int(notes.get(DISK_NOTE) or 0)
    room = disk - offset - GPT_TAIL if last and disk - GPT_TAIL > offset + size else size
    extended = notes.get(EXTEND_NOTE, "true").lower() != "false"
    return (room if extended else size), room, disk


def filesystems(vmi: dict) -> list[dict]:
    """The guest's filesystems as its agent reports them: the OS volume, extended when it can be; for a
    guest booted under QEMU (realboot.py), what its real agent said."""
    notes = vmi["metadata"].get("annotations") or {}
    if AGENT_FILESYSTEMS_NOTE in notes:
        return json.loads(notes[AGENT_FILESYSTEMS_NOTE])
    guest = notes.get(BOOT_NOTE, "").split(":", 1)[0]
    found = partition(vmi)
    if guest not in MOUNTS or found is None:
        return []
    total, _room, _disk = found
    return [
        dict(MOUNTS[guest], totalBytes=total, usedBytes=min(total, total // 2), disk=[{"busType": "virtio"}])
    ]
