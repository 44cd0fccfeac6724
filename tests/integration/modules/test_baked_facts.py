"""What a baked image is, read from its bytes: ext4 roots made by ``mkfs.ext4 -d`` on GPT disks (sgdisk,
qemu-img) with an os-release, PostgreSQL servers under /usr/lib/postgresql, clusters and keys.

Each test fails on the defect it names: a 22.04 artifact registered as a 24.04 revision, majors declared
that the image does not carry, the snakeoil key (and an initialized cluster) every VM would share, and a
seal that leaves them.
"""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess

import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk, image_facts

from tests.integration.support import disks
from tests.integration.support.runner import module_task, play, run_playbook

pytestmark = pytest.mark.quick

PROVISION = pathlib.Path(__file__).resolve().parents[3] / "roles/packer_build/files/provision.sh"
JAMMY = 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n'
SNAKEOIL = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
CLUSTER_CONF = "data_directory = '/var/lib/postgresql/16/main'\nssl = on\n"


def servers(*majors):
    return {"usr/lib/postgresql/%s/bin/postgres" % m: b"\x7fELF" for m in majors}


def baked_tree(**changes):
    """A baked Ubuntu 22.04 root as the packages leave it before the seal: servers of 15, 16 and 17, the
    snakeoil pair ssl-cert makes, and cluster 16/main initialized by postgresql-common."""
    files = {"etc/os-release": JAMMY, **servers("15", "16", "17")}
    files.update(
        {
            "usr/lib/postgresql/14/bin/psql": b"\x7fELF",  # a client only: no server of 14
            "etc/ssl/private/ssl-cert-snakeoil.key": SNAKEOIL,
            "etc/ssl/certs/ssl-cert-snakeoil.pem": "-----BEGIN CERTIFICATE-----\nMIIC\n",
            "etc/postgresql/16/main/postgresql.conf": CLUSTER_CONF,
            "etc/postgresql/16/main/start.conf": "manual\n",
            "var/lib/postgresql/16/main/PG_VERSION": "16\n",
            "var/lib/postgresql/16/main/global/pg_control": b"\x00" * 512,
        }
    )
    files.update(changes)
    return files


def disk(folder: pathlib.Path, name: str, files: dict) -> pathlib.Path:
    tree = disks.ext4_tree(folder / (name + ".tree"), files)
    raw = disks.linux_disk(folder / (name + ".raw"), tree, disk_size=32 * disks.MIB)["path"]
    return disks.qcow2(raw, folder / (name + ".qcow2"))


def sealed(files):
    """``files`` with what the seal removes gone (the key pair, the cluster's data)."""
    return {
        name: content
        for name, content in files.items()
        if "ssl-cert-snakeoil" not in name and not name.startswith("var/lib/postgresql/")
    }


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    missing = [tool for tool in disks.missing_tools() if tool in ("sgdisk", "mkfs.ext4", "qemu-img", "dd")]
    assert not missing, "missing tools (make deps installs them): %s" % ", ".join(missing)
    folder = tmp_path_factory.mktemp("baked-facts")
    return {
        "unsealed": disk(folder, "unsealed", baked_tree()),
        "sealed": disk(folder, "sealed", sealed(baked_tree())),
        "folder": folder,
    }


def test_the_facts_name_os_release_the_servers_the_clusters_and_the_keys(made):
    facts = _disk.read_image_facts(str(made["unsealed"]), "linux")
    assert facts["os_release"]["version_id"] == "22.04"
    assert facts["postgresql"]["majors"] == ["15", "16", "17"]
    (cluster,) = facts["postgresql"]["clusters"]
    assert (cluster["major"], cluster["name"], cluster["pg_version"]) == ("16", "main", "16")
    assert cluster["initialized"] and cluster["data_directory"] == "/var/lib/postgresql/16/main"
    assert [k["kind"] for k in facts["private_keys"]] == ["tls_snakeoil_key"]
    problems = image_facts.declaration_problems(facts, "22.04", ["15", "16", "17"])
    assert [p["fact"] for p in problems] == ["initialized_cluster", "private_key"]
    assert (
        image_facts.declaration_problems(
            _disk.read_image_facts(str(made["sealed"]), "linux"), "22.04", ["15", "16", "17"]
        )
        == []
    )


def test_keys_and_clusters_in_postgresqls_own_places_are_facts(made):
    """A cluster's server.key beside its configuration, the postgres user's own SSH key, and a cluster whose
    postgresql.conf moves its data elsewhere: each is read from the disk, none passes as sealed."""
    rsa = SNAKEOIL.replace("PRIVATE KEY", "RSA PRIVATE KEY")
    files = sealed(baked_tree())
    files.update(
        {
            "etc/postgresql/16/main/server.key": rsa,
            "var/lib/postgresql/.ssh/id_rsa": rsa,
            "etc/postgresql/17/main/postgresql.conf": "# moved\ndata_directory = '/srv/pgdata17'\n",
            "srv/pgdata17/PG_VERSION": "17\n",
        }
    )
    facts = _disk.read_image_facts(str(disk(made["folder"], "pg-places", files)), "linux")
    kinds = {k["path"]: k["kind"] for k in facts["private_keys"]}
    assert kinds == {
        "/etc/postgresql/16/main/server.key": "postgresql_tls_key",
        "/var/lib/postgresql/.ssh/id_rsa": "user_ssh_key",
    }
    moved = [c for c in facts["postgresql"]["clusters"] if c["major"] == "17"]
    assert moved and moved[0]["initialized"] and moved[0]["data_directory"] == "/srv/pgdata17", moved
    problems = image_facts.declaration_problems(facts, "22.04", ["15", "16", "17"])
    assert {p["fact"] for p in problems} == {"initialized_cluster", "private_key"}


def test_a_2204_artifact_declared_2404_and_missing_majors_are_refused_by_the_seal_step(made):
    task = functools.partial(module_task, "goldenimage.pipeline.seal_verify")
    path = str(made["sealed"])
    run = run_playbook(
        play(
            task(
                "agrees", path=path, os="linux", declared={"os_version": "22.04", "pg_versions": [15, 16, 17]}
            ),
            task(
                "stream",
                path=path,
                os="linux",
                declared={"os_version": "24.04", "pg_versions": ["15", "16", "17"]},
                ignore_errors=True,
            ),
            task(
                "majors",
                path=path,
                os="linux",
                declared={"os_version": "22.04", "pg_versions": ["14", "15", "16", "17"]},
                ignore_errors=True,
            ),
            task(
                "keys",
                path=str(made["unsealed"]),
                os="linux",
                declared={"os_version": "22.04", "pg_versions": ["15", "16", "17"]},
                ignore_errors=True,
            ),
        )
    )
    assert run["agrees"]["problems"] == [] and run["agrees"]["sealed"] is True
    stream = run["stream"]
    assert stream["refused"] and [(p["read"], p["declared"]) for p in stream["problems"]] == [
        ("22.04", "24.04")
    ]
    assert "VERSION_ID=22.04" in stream["msg"] and "the declaration says 24.04" in stream["msg"]
    majors = run["majors"]["problems"]
    assert [(p["fact"], p["read"], p["declared"]) for p in majors] == [
        ("pg_majors", ["15", "16", "17"], ["14", "15", "16", "17"])
    ]
    assert {p["fact"] for p in run["keys"]["problems"]} == {"initialized_cluster", "private_key"}
    assert "BEGIN" not in run.log and "MIIEvQ" not in run.log


def test_the_seal_removes_the_key_pair_and_the_clusters_data_and_the_first_boot_makes_them(made, tmp_path):
    root = disks.write_tree(tmp_path / "root", baked_tree(**{"etc/ssl/private/app/other.key": SNAKEOIL}))
    subprocess.run(
        ["bash", "-c", '. "$1" && remove_private_keys && empty_clusters', "seal-test", str(PROVISION)],
        env=dict(os.environ, SYSROOT=str(root), PG_VERSIONS="15 16 17"),
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    tree_disk = disks.linux_disk(tmp_path / "root.raw", root, disk_size=32 * disks.MIB)["path"]
    facts = _disk.read_image_facts(str(tree_disk), "linux")
    assert facts["private_keys"] == [], facts["private_keys"]
    assert [c for c in facts["postgresql"]["clusters"] if c["initialized"]] == []
    assert facts["postgresql"]["clusters"][0]["configured"], "the cluster's configuration stays"
    assert image_facts.declaration_problems(facts, "22.04", ["15", "16", "17"]) == []
    assert not (root / "etc/ssl/certs/ssl-cert-snakeoil.pem").exists()
    unit = (root / "etc/systemd/system/goldenimage-snakeoil.service").read_text()
    assert "make-ssl-cert generate-default-snakeoil" in unit
    dropin = (root / "etc/systemd/system/postgresql@.service.d/40-goldenimage-first-boot.conf").read_text()
    assert "After=goldenimage-snakeoil.service" in dropin and "fresh-cluster %i" in dropin
    fresh = root / "usr/local/lib/goldenimage/fresh-cluster"
    assert os.access(fresh, os.X_OK) and "initdb" in fresh.read_text()
    assert subprocess.run(["sh", "-n", str(fresh)], check=False).returncode == 0


def test_baked_image_refuses_a_contradicting_artifact_before_anything_is_written(
    lab, kube_client, kube_namespace, made
):
    from kubernetes import client

    auth = {"kubeconfig": "{{ lookup('env', 'KUBECONFIG') }}"}
    task = functools.partial(module_task, "goldenimage.pipeline.baked_image")
    catalog = {"namespace": kube_namespace, "name": "catalog"}
    common = dict(namespace=kube_namespace, pg_versions=["15", "16", "17"], replicas=1, catalog=catalog)
    common.update(wait_timeout=60, wait_sleep=1)

    def register(title, name, stream, artifact, src=None, **more):
        path = str(made[artifact])
        src = str(made[src]) if src else path
        return task(
            title,
            name=name,
            os_version=stream,
            src=src,
            artifact=path,
            harvester_url=lab.harvester_url,
            **common,
            **more,
        )

    run = run_playbook(
        play(
            register("as 24.04", "v20261201-2404", "24.04", "sealed", ignore_errors=True),
            register("shared key", "v20261201", "22.04", "unsealed", ignore_errors=True),
            # The facts read from one file while another is uploaded would certify bytes nobody read.
            register("other bytes", "v20261203", "22.04", "sealed", src="unsealed", ignore_errors=True),
            register("agrees", "v20261202", "22.04", "sealed"),
            module_defaults={"goldenimage.pipeline.baked_image": auth},
        ),
        env=lab.env(),
    )
    refused = run["as 24.04"]
    assert refused["refused"] and refused["problems"][0]["fact"] == "os_release"
    assert "revision v20261201-2404 (artifact" in refused["msg"]
    assert {p["fact"] for p in run["shared key"]["problems"]} == {"initialized_cluster", "private_key"}
    other = run["other bytes"]
    assert other["refused"] and "the bytes registered are" in other["msg"], other["msg"]
    images = client.CustomObjectsApi(kube_client).list_namespaced_custom_object(
        "harvesterhci.io", "v1beta1", kube_namespace, "virtualmachineimages"
    )["items"]
    assert [i["metadata"]["name"] for i in images] == ["ubuntu-2204-postgres-v20261202"]
    cm = client.CoreV1Api(kube_client).read_namespaced_config_map("catalog", kube_namespace)
    entries = yaml.safe_load(cm.data["catalog.yaml"])["images"]
    assert list(entries) == ["v20261202"]
    assert entries["v20261202"]["facts"] == {
        "os_release": {"id": "ubuntu", "version_id": "22.04", "version_codename": "jammy"},
        "pg_majors": ["15", "16", "17"],
        "initialized_clusters": [],
        "private_keys": [],
        "machine_id": "empty",
    }
