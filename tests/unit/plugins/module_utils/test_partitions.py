"""The one partition reader on tables sfdisk writes and filesystems mkfs.ext4 and mkntfs make, read through
the disk adapter a caller uses (``_disk.Image``, raw here)."""

import shutil
import subprocess
import zlib

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk, _partitions

MIB = 1024 * 1024
ESP = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
BASIC_DATA = "EBD0A0A2-B9E5-4433-87C0-68B6B72699C7"
LINUX = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"


@pytest.fixture(autouse=True)
def _tools():
    """The disks are made with real tools; a missing one fails the test (make deps installs them)."""
    missing = [t for t in ("sfdisk", "sgdisk", "mkfs.ext4", "mkntfs") if not shutil.which(t)]
    assert not missing, "missing tools (make deps installs them): %s" % ", ".join(missing)


def disk(path, size_mib, table=None):
    with open(path, "wb") as fh:
        fh.truncate(size_mib * MIB)
    if table is not None:
        subprocess.run(
            ["sfdisk", "-q", "--no-reread", "--no-tell-kernel", str(path)], input=table, text=True, check=True
        )
    return path


def ext4(path, offset, size, label):
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-L", label, "-E", "offset=%d" % offset, str(path), "%dk" % (size // 1024)],
        check=True,
    )


def ntfs(path, offset, size):
    part = path.with_suffix(".ntfs")
    disk(part, size // MIB)
    subprocess.run(["mkntfs", "-q", "-F", "-f", "-L", "C", str(part)], check=True, capture_output=True)
    with open(path, "r+b") as fh, open(part, "rb") as src:
        fh.seek(offset)
        fh.write(src.read())


def read(path):
    image = _disk.Image(str(path))
    try:
        return _partitions.read_partitions(image)
    finally:
        image.close()


def test_gpt_in_disk_order_with_types_names_and_filesystems(tmp_path):
    # Listed out of disk order: the reader gives them by offset, each with its own number.
    table = (
        "label: gpt\n"
        "start=4096, size=6144, type=%s, name=root\n"
        "start=2048, size=2048, type=%s, name=EFI\n"
        'start=10240, size=8192, type=%s, name="Basic data partition"\n' % (LINUX, ESP, BASIC_DATA)
    )
    path = disk(tmp_path / "gpt.raw", 12, table)
    ext4(path, 4096 * 512, 6144 * 512, "cloudimg-rootfs")
    ntfs(path, 10240 * 512, 8192 * 512)
    parts = read(path)
    assert [(p["number"], p["offset"], p["size"]) for p in parts] == [
        (2, 2048 * 512, 2048 * 512),
        (1, 4096 * 512, 6144 * 512),  # the last LBA counts
        (3, 10240 * 512, 8192 * 512),
    ]
    assert [p["type"] for p in parts] == [ESP.lower(), LINUX.lower(), BASIC_DATA.lower()]
    assert [p["type_name"] for p in parts] == [
        "EFI system partition",
        "Linux filesystem partition",
        "Windows basic data partition",
    ]
    assert [p["name"] for p in parts] == ["EFI", "root", "Basic data partition"]
    assert [p["filesystem"] for p in parts] == [None, "ext", "ntfs"]
    assert [p["label"] for p in parts] == ["", "cloudimg-rootfs", ""]


def test_gpt_on_4k_sectors(tmp_path):
    table = "label: gpt\nsector-size: 4096\nstart=256, size=1024, type=%s, name=root\n" % LINUX
    path = disk(tmp_path / "4k.raw", 8, table)
    parts = read(path)
    assert [(p["number"], p["offset"], p["size"], p["name"]) for p in parts] == [(1, MIB, 4 * MIB, "root")]


def test_mbr_primary_and_logical_partitions(tmp_path):
    table = (
        "label: dos\n"
        "start=2048, size=2048, type=c\n"
        "start=4096, size=12288, type=5\n"
        "start=6144, size=4096, type=83\n"
        "start=12288, size=4096, type=7\n"
    )
    path = disk(tmp_path / "mbr.raw", 10, table)
    ext4(path, 6144 * 512, 4096 * 512, "root")
    parts = read(path)
    assert [(p["number"], p["offset"], p["size"], p["type"]) for p in parts] == [
        (1, 2048 * 512, 2048 * 512, "0x0c"),
        (5, 6144 * 512, 4096 * 512, "0x83"),
        (6, 12288 * 512, 4096 * 512, "0x07"),
    ]
    assert [p["type_name"] for p in parts] == ["FAT32 (LBA)", "Linux", "NTFS or exFAT"]
    assert parts[1]["filesystem"] == "ext" and parts[1]["label"] == "root"


def test_a_whole_disk_filesystem_is_partition_zero_of_the_disk_size(tmp_path):
    path = disk(tmp_path / "whole.raw", 8)
    ext4(path, 0, 8 * MIB, "bare")
    assert read(path) == [
        {
            "number": 0,
            "offset": 0,
            "size": 8 * MIB,
            "type": "none",
            "type_name": "whole disk",
            "name": "",
            "label": "bare",
            "filesystem": "ext",
        }
    ]


def test_a_blank_disk_has_no_partitions(tmp_path):
    assert read(disk(tmp_path / "blank.raw", 1)) == []


def read_noting(path):
    image = _disk.Image(str(path))
    notes = []
    try:
        return _partitions.read_partitions(image, notes), notes
    finally:
        image.close()


def test_a_damaged_primary_gpt_is_read_from_the_backup_as_sgdisk_does(tmp_path):
    path = disk(tmp_path / "gpt.raw", 4)
    subprocess.run(
        ["sgdisk", "-n", "1:2048:4095", "-t", "1:8300", "-c", "1:root", str(path)],
        check=True,
        capture_output=True,
    )
    intact, notes = read_noting(path)
    assert notes == [] and [(p["number"], p["name"]) for p in intact] == [(1, "root")]
    last_lba = 4 * MIB // 512 - 1
    with open(path, "r+b") as fh:
        fh.seek(512 + 40)  # the header's first usable LBA, under its CRC
        fh.write(b"\xff\xff")
    parts, notes = read_noting(path)
    assert parts == intact
    assert notes == [
        "%s: the primary GPT header at LBA 1 is damaged (its header checksum does not match); the partitions "
        "were read from the backup header at LBA %d, as sgdisk does (sgdisk -e or gdisk's w rewrites the "
        "primary)" % (path, last_lba)
    ]
    # A reader that cannot pass the note on (the seal verdict, image facts) is refused instead.
    with pytest.raises(
        _partitions.PartitionTableError,
        match=r"gpt\.raw: the primary GPT header at LBA 1 is damaged \(its header checksum does not match\); "
        r"rewrite it from the backup \(sgdisk -e\)",
    ):
        read(path)
    # sgdisk agrees that the backup holds the table.
    listing = subprocess.run(["sgdisk", "-p", str(path)], capture_output=True, text=True, check=False)
    assert "root" in listing.stdout
    with open(path, "r+b") as fh:
        fh.seek(last_lba * 512 + 40)
        fh.write(b"\xff\xff")
    with pytest.raises(
        _partitions.PartitionTableError,
        match=r"gpt\.raw: the primary GPT header at LBA 1 is damaged \(its header checksum does not match\) "
        r"and so is the backup at LBA %d \(its header checksum does not match\)" % last_lba,
    ):
        read_noting(path)


def test_a_damaged_table_names_the_disk_and_the_damage(tmp_path):
    path = disk(tmp_path / "gpt.raw", 4, "label: gpt\nstart=2048, size=2048, type=%s\n" % LINUX)
    with open(path, "r+b") as fh:
        fh.seek(1024 + 32)  # the first entry's first LBA, under the entries' CRC
        fh.write(b"\x01")
    parts, notes = read_noting(path)
    assert [p["offset"] for p in parts] == [2048 * 512]  # the backup's entries
    assert "damaged (its partition entries checksum does not match)" in notes[0]
    with open(path, "r+b") as fh:
        fh.seek(4 * MIB - 512 + 16)
        fh.write(zlib.crc32(b"not the header").to_bytes(4, "little"))
    with pytest.raises(
        _partitions.PartitionTableError, match=r"the backup at LBA 8191 \(its header checksum"
    ):
        read_noting(path)
    with open(path, "r+b") as fh:
        fh.seek(512)
        fh.write(bytes(512))
    with pytest.raises(
        _partitions.PartitionTableError, match=r"damaged \(no GPT header\) and so is the backup"
    ):
        read_noting(path)


def test_a_backup_gpt_that_lists_other_partitions_is_said_and_the_primary_read(tmp_path):
    """Both headers check out but disagree (a tool rewrote one of them): read by the primary, as sgdisk
    does, and the note says so rather than passing over it."""
    first, second = disk(tmp_path / "a.raw", 4), disk(tmp_path / "b.raw", 4)
    for path, name in ((first, "root"), (second, "renamed")):
        subprocess.run(
            ["sgdisk", "-n", "1:2048:4095", "-t", "1:8300", "-c", "1:" + name, str(path)],
            check=True,
            capture_output=True,
        )
    parts, notes = read_noting(first)
    assert notes == [] and parts[0]["name"] == "root"
    with open(second, "rb") as src, open(first, "r+b") as dst:  # b's primary header and entries onto a
        dst.seek(512)
        dst.write(src.read(34 * 512)[512:])
    parts, notes = read_noting(first)
    assert parts[0]["name"] == "renamed"
    assert notes == [
        "%s: the backup GPT header at LBA %d lists other partitions than the primary at LBA 1; the primary "
        "was read, as sgdisk does (sgdisk -v shows both; sgdisk -e rewrites the backup from the primary)"
        % (first, 4 * MIB // 512 - 1)
    ]
    listing = subprocess.run(["sgdisk", "-p", str(first)], capture_output=True, text=True, check=False)
    assert "renamed" in listing.stdout


def test_overlapping_partitions_are_refused_naming_both(tmp_path):
    path = disk(tmp_path / "mbr.raw", 8)
    boot = bytearray(512)
    for slot, (start, sectors) in enumerate(
        ((2048, 8192), (6144, 4096))
    ):  # the second starts inside the first
        entry = 446 + 16 * slot
        boot[entry + 4] = 0x83
        boot[entry + 8 : entry + 16] = start.to_bytes(4, "little") + sectors.to_bytes(4, "little")
    boot[510:512] = b"\x55\xaa"
    with open(path, "r+b") as fh:
        fh.write(bytes(boot))
    with pytest.raises(
        _partitions.PartitionTableError,
        match=r"mbr\.raw: partitions 1 and 2 overlap \(bytes 1048576-5242879 and 3145728-5242879\)"
        r".*sgdisk -v",
    ):
        read(path)
    listing = subprocess.run(["sfdisk", "--verify", str(path)], capture_output=True, text=True, check=False)
    assert "overlap" in (listing.stdout + listing.stderr).lower()
