"""The QEMU device's pure parts: the NoCloud seed virt-launcher would attach, and the agent's filesystem
list as virt-handler hands it to virt-api."""

from __future__ import annotations

import base64
import json
import subprocess

from tests.lab.controllers.realboot import fs_items, nocloud_seed, wanted

VMI = {
    "metadata": {"name": "gate-1", "namespace": "p-1", "uid": "u-1"},
    "spec": {"volumes": [{"name": "seed", "cloudInitNoCloud": {"userDataBase64": ""}}]},
}


def test_the_seed_is_an_iso_labelled_cidata_with_kubevirts_meta_data(tmp_path):
    vmi = json.loads(json.dumps(VMI))
    vmi["spec"]["volumes"][0]["cloudInitNoCloud"]["userDataBase64"] = base64.b64encode(
        b"#cloud-config\n"
    ).decode()
    iso = nocloud_seed(tmp_path, vmi)
    with open(iso, "rb") as handle:
        handle.seek(0x8000 + 40)  # the primary volume descriptor's volume identifier
        assert handle.read(32).decode().strip() == "cidata"
    meta = json.loads((tmp_path / "cidata" / "meta-data").read_text())
    assert meta == {"instance-id": "gate-1.p-1", "local-hostname": "gate-1"}
    assert (tmp_path / "cidata" / "user-data").read_text() == "#cloud-config\n"
    listing = subprocess.run(
        ["xorriso", "-indev", str(iso), "-ls", "/"], capture_output=True, text=True, check=True
    ).stdout
    assert "meta-data" in listing and "user-data" in listing


def test_no_seed_without_a_nocloud_volume(tmp_path):
    assert nocloud_seed(tmp_path, {"metadata": VMI["metadata"], "spec": {}}) is None


def test_the_agents_fsinfo_becomes_filesystemlist_items():
    fsinfo = [
        {
            "name": "vda1",
            "mountpoint": "/",
            "type": "ext4",
            "total-bytes": 4 * 2**30,
            "used-bytes": 2**30,
            "disk": [{"bus-type": "virtio", "serial": "", "bus": 0}],
        },
        {"name": "sr0", "mountpoint": "/media", "type": "iso9660"},
    ]
    assert fs_items(fsinfo) == [
        {
            "diskName": "vda1",
            "mountPoint": "/",
            "fileSystemType": "ext4",
            "totalBytes": 4 * 2**30,
            "usedBytes": 2**30,
            "disk": [{"busType": "virtio", "serial": ""}],
        },
        {"diskName": "sr0", "mountPoint": "/media", "fileSystemType": "iso9660"},
    ]


def test_the_device_is_opt_in_per_vm():
    assert not wanted({"metadata": {}})
    assert not wanted({"metadata": {"annotations": {"lab.goldenimage.io/device-qemu": "false"}}})
    assert wanted({"metadata": {"annotations": {"lab.goldenimage.io/device-qemu": "true"}}})
