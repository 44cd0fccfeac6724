"""The qcow2 header rules on headers qemu-img writes, and on those headers with fields changed."""

from __future__ import annotations

import struct
import subprocess

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import qcow2
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    path = tmp_path_factory.mktemp("qcow2") / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), "1G"], check=True)
    data = path.read_bytes()
    return path, data


def test_a_header_qemu_img_writes_is_taken(made):
    path, data = made
    found = qcow2.check_header(str(path), data[: qcow2.HEADER_BYTES], len(data))
    assert found["size"] == 1 << 30 and found["cluster_bits"] == 16


@pytest.mark.parametrize(
    "offset, fmt, value, message",
    [
        (36, ">I", 0xFFFFFFFF, r"l1_size is 4294967295 entries, more than qemu's 32 MiB L1 table"),
        (36, ">I", 1, r"l1_size is 1 entries; the virtual size 1073741824 needs 2"),
        (40, ">Q", 1 << 40, r"l1_table_offset names bytes 1099511627776 to .*, past the file's end"),
        (20, ">I", 40, r"cluster_bits is 40, outside 9 to 21"),
        (4, ">I", 7, r"version is 7"),
        (32, ">I", 1, r"crypt_method is 1: the image is encrypted"),
        (72, ">Q", 1 << 40, r"incompatible_features sets unknown bits"),
        (8, ">Q", 1 << 20, r"backing_file_offset names a backing file name outside the header cluster"),
    ],
)
def test_a_header_that_lies_is_refused_naming_the_field(made, offset, fmt, value, message):
    path, data = made
    header = bytearray(data[: qcow2.HEADER_BYTES])
    struct.pack_into(fmt, header, offset, value)
    with pytest.raises(Refusal, match=r"qcow2 %s: its header field %s" % (path, message)):
        qcow2.check_header(str(path), bytes(header), len(data))


@settings(max_examples=300, deadline=None)
@given(offset=st.integers(min_value=4, max_value=qcow2.HEADER_BYTES - 1), byte=st.integers(0, 255))
def test_any_changed_header_byte_is_taken_or_refused_never_an_error(made, offset, byte):
    path, data = made
    header = bytearray(data[: qcow2.HEADER_BYTES])
    header[offset] = byte
    try:
        found = qcow2.check_header(str(path), bytes(header), len(data))
    except Refusal:
        return
    # What is taken keeps every table inside the file.
    assert found["l1_table_offset"] + found["l1_size"] * 8 <= len(data)
    assert found["l1_size"] * 8 <= qcow2.MAX_L1_BYTES
