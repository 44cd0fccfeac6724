"""The layer's tar, written without tarfile for plain members, is tarfile's PAX output byte for byte:
each header built directly equals ``TarInfo.tobuf``, and a whole layer equals the archive tarfile
writes from the same members (so the digests of existing images do not move)."""

from __future__ import annotations

import gzip
import io
import tarfile

from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import _oci, microvm
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm.microvm import Entry
from hypothesis import given, settings
from hypothesis import strategies as st

KINDS = ("file", "dir", "symlink", "hardlink", "char", "block", "fifo")
names = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x24F), min_size=1, max_size=120)
numbers = st.one_of(st.integers(0, 3000), st.integers(0, 8**11 + 5), st.integers(-5, -1))


def member(name, kind, mode, uid, gid, mtime, size, link, xattrs, rdev):
    return microvm.Member(
        name=name,
        type=kind,
        mode=mode,
        uid=uid,
        gid=gid,
        mtime=mtime,
        size=size if kind == "file" else 0,
        linkname=link if kind in ("symlink", "hardlink") else "",
        xattrs=xattrs or microvm.NO_XATTRS,
        rdev=rdev,
        inum=1,
    )


def tarfile_header(m):
    return _oci._tarinfo(m).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


@settings(max_examples=400, deadline=None)
@given(
    name=names,
    kind=st.sampled_from(KINDS),
    mode=st.integers(0, 0o7777),
    uid=numbers,
    gid=numbers,
    mtime=numbers,
    size=st.integers(0, 8**11 + 5),
    link=names,
    xattrs=st.one_of(st.just({}), st.dictionaries(st.sampled_from(["user.a", "security.b"]), st.binary())),
    rdev=st.tuples(st.integers(0, 4095), st.integers(0, 0xFFFFF)),
)
def test_a_header_built_directly_is_the_one_tarfile_builds(
    name, kind, mode, uid, gid, mtime, size, link, xattrs, rdev
):
    m = member(name, kind, mode, uid, gid, mtime, size, link, xattrs, rdev)
    direct = _oci._ustar(m)
    if direct is not None:
        assert direct == tarfile_header(m)


def test_plain_members_take_the_direct_header():
    assert _oci._ustar(member("etc/hostname", "file", 0o644, 0, 0, 1000, 5, "", {}, (0, 0))) is not None
    assert _oci._ustar(member("dev/null", "char", 0o666, 0, 0, 1000, 0, "", {}, (1, 3))) is not None
    assert _oci._ustar(member("x" * 101, "file", 0o644, 0, 0, 1000, 5, "", {}, (0, 0))) is None
    assert _oci._ustar(member("etc/x", "file", 0o644, 0, 0, 1000, 5, "", {"user.a": b"1"}, (0, 0))) is None


def test_a_layer_is_the_archive_tarfile_writes_from_the_same_members():
    data = {7: b"hello", 8: bytes(3 * _oci.CHUNK + 17), 9: b"\xff" * 513}
    entries = [
        Entry("etc", "dir", mode=0o755, mtime=5),
        Entry("etc/hostname", "file", size=5, inum=7, nlink=2, mtime=9),
        Entry("etc/hostname-again", "file", size=5, inum=7, nlink=2, mtime=9),
        Entry("var/big", "file", size=len(data[8]), inum=8),
        Entry("var/odd", "file", size=513, inum=9, xattrs={"user.k": b"v"}),
        Entry("usr/" + "d" * 120, "symlink", link="../" + "t" * 150),
        Entry("usr/ünï", "fifo", uid=3_000_000),
    ]
    members, _skipped = microvm.tar_members(entries, epoch=100)
    out = io.BytesIO()
    layer = _oci.write_layer(members, lambda inum: io.BytesIO(data[inum]), out)
    expected = io.BytesIO()
    with tarfile.TarFile(
        fileobj=expected, mode="w", format=tarfile.PAX_FORMAT, errors="surrogateescape"
    ) as tar:
        for m in members:
            size = m["size"] if m["type"] == "file" else 0
            tar.addfile(_oci._tarinfo(m), io.BytesIO(data[m["inum"]]) if size else None)
    assert gzip.decompress(out.getvalue()) == expected.getvalue()
    assert layer["raw_size"] == len(expected.getvalue())
