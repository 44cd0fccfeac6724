"""microvm_image on real disks and a real registry: GPT and MBR raw disks and a qcow2 made in the test
(``mkfs.ext4 -d``, sgdisk, sfdisk, qemu-img), pushed to ``docker-registry`` on loopback, pulled back
with skopeo into an OCI layout and unpacked with ``umoci unpack --rootless``, then compared with the
source tree: names, kinds, modes, owners, link targets, hard links, contents and the xattr.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import microvm_image

from tests.integration.support import disks
from tests.integration.support import microvm_parts as parts
from tests.integration.support.runner import module_task, run_playbook

MODULE = "goldenimage.pipeline.microvm_image"
V = parts.VERSION
EPOCH = 1_700_000_000


@pytest.fixture(autouse=True, scope="module")
def _tools():
    # Declared Debian packages (make setup installs them): a missing one is a failure, not a skip.
    assert not parts.missing_tools(), "missing tools (make setup installs them): %s" % parts.missing_tools()


class Module:
    """What the runner needs of AnsibleModule: params with defaults, check mode, diff."""

    def __init__(self, check=False, **params):
        self.params = {name: spec.get("default") for name, spec in microvm_image.argument_spec().items()}
        self.params.update(params)
        self.check_mode = check
        self._diff = True

    def log(self, line):
        pass


def run(check=False, **params):
    return microvm_image.Runner(Module(check=check, **params)).run()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    work = tmp_path_factory.mktemp("microvm")
    tree = parts.root_tree(work / "tree")
    root = parts.ext4_root(tree, work / "root.ext4")
    gpt = parts.gpt_disk(work / "gpt.raw", root)
    mbr = parts.mbr_disk(work / "mbr.raw", root)
    qcow2 = disks.qcow2(gpt["path"], work / "gpt.qcow2")
    xattr_in_tree = parts.user_xattrs_work(tree / "etc/hostname")
    return {
        "work": work,
        "tree": tree,
        "root": root,
        "gpt": gpt["path"],
        "mbr": mbr["path"],
        "qcow2": qcow2,
        "xattr_in_tree": xattr_in_tree,
    }


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    reg = parts.Registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.stop()


def variant(made, name, changes=None, version=V, tree_hook=None):
    """A whole-disk ext4 image (no partition table) of a changed tree."""
    tree = parts.root_tree(made["work"] / ("tree-" + name), version, changes)
    if tree_hook:
        tree_hook(tree)
    return parts.ext4_root(tree, made["work"] / ("%s.ext4" % name))


def expected_rootfs(made):
    """The source tree as the rootfs image should hold it: no kernel, no modules, no device nodes."""
    owners = dict(parts.OWNERS)
    found = parts.describe_tree(made["tree"], owners=owners, skip=("dev/null",))
    for path in ("boot/vmlinux", "boot/config-%s" % V):
        found.pop(path)
    for path in list(found):
        if path.startswith("usr/lib/modules/%s/" % V):
            found.pop(path)
    return found


def files_as_found(*folders):
    """Every file under ``folders`` with what a rewrite changes: inode, size and modification time."""
    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink():
                st = path.stat()
                found[str(path)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    assert found, "nothing found under %s" % (folders,)
    return found


@pytest.mark.suite("idempotence")
def test_round_trip_through_the_registry_and_back(made, registry, tmp_path):
    dest = tmp_path / "layout"
    params = dict(
        src=str(made["gpt"]),
        dest=str(dest),
        registry=registry.url,
        repository="flintlock/ubuntu",
        source_date_epoch=EPOCH,
    )
    predict = run_playbook(
        [
            {
                "hosts": "localhost",
                "gather_facts": False,
                "tasks": [module_task(MODULE, "predict", check=True, diff=True, **params)],
            }
        ]
    )
    assert predict.ok, predict.log
    predicted = predict["predict"]

    # Check mode: every digest computed, nothing written, nothing pushed.
    assert predicted["changed"] is True
    assert predicted["pushed"] == {"kernel": True, "modules": True, "rootfs": True}
    assert not dest.exists()
    assert registry.manifest("flintlock/ubuntu/rootfs", V) == 404
    assert predicted["diff"]["before"]["registry"] == dict(
        ("%s/flintlock/ubuntu/%s:%s" % (registry.host, n, V), None) for n in ("kernel", "modules", "rootfs")
    )

    def play(name):
        return [{"hosts": "localhost", "gather_facts": False, "tasks": [module_task(MODULE, name, **params)]}]

    result = run_playbook(play("build and push"))
    assert result.ok, result.log
    stored = files_as_found(dest, registry.workdir / "data")
    rerun = run_playbook(play("again"))
    assert rerun.ok, rerun.log
    first, again = result["build and push"], rerun["again"]
    # The rerun wrote no file: neither the layout nor the registry's storage (a push would write there).
    assert files_as_found(dest, registry.workdir / "data") == stored
    assert first["changed"] is True and first["kernel_version"] == V
    assert first["partition"]["number"] == 2 and first["partition"]["name"] == "root"
    for name in ("kernel", "modules", "rootfs"):
        assert first[name]["digest"] == predicted[name]["digest"]
        assert first[name]["reference"] == "%s/flintlock/ubuntu/%s:%s" % (registry.host, name, V)
        assert registry.manifest("flintlock/ubuntu/%s" % name, V) == 200
    assert [
        line for line in first["progress"] if "blob flintlock/ubuntu/rootfs@" in line and "pushed" in line
    ]

    # The rerun finds the same digests: nothing pushed, nothing written, changed false.
    assert again["changed"] is False
    assert again["pushed"] == {"kernel": False, "modules": False, "rootfs": False}
    assert again["layout"]["changed"] is False
    for name in ("kernel", "modules", "rootfs"):
        assert again[name]["digest"] == first[name]["digest"]

    # Fragments: kernel.filename always set, modules volume at /lib/modules/<version>.
    # The snippets name each image by its digest: a tag moved later never changes what boots.
    def pinned(name):
        return "%s@%s" % (first[name]["reference"].rsplit(":", 1)[0], first[name]["digest"])

    spec = first["spec"]
    assert spec["kernel"]["filename"] == "boot/vmlinux" and spec["kernel"]["image"] == pinned("kernel")
    assert spec["additional_volumes"][0]["mount_point"] == "/lib/modules/" + V
    assert first["capmvm"]["volumes"] == [
        {"id": "modules", "image": pinned("modules"), "mountPoint": "/lib/modules/" + V}
    ]
    assert first["moved_tags"] == [] and again["moved_tags"] == []

    # Independent readers: skopeo pulls, umoci unpacks rootless.
    rootfs = parts.pull_and_unpack(first["rootfs"]["reference"], tmp_path, "rootfs")
    seen = parts.describe_tree(rootfs)
    want = expected_rootfs(made)
    assert seen == want
    assert oct(os.lstat(rootfs / "usr/bin/tool").st_mode & 0o7777) == "0o4755"
    assert oct(os.lstat(rootfs / "usr/bin/sgid-tool").st_mode & 0o7777) == "0o2755"
    assert oct(os.lstat(rootfs / "tmp").st_mode & 0o7777) == "0o1777"
    assert os.lstat(rootfs / "usr/bin/tool").st_ino == os.lstat(rootfs / "usr/bin/tool-again").st_ino
    assert (
        os.readlink(rootfs / "lib") == "usr/lib"
        and os.readlink(rootfs / "usr/bin/python3") == "/usr/bin/python3.11"
    )
    assert parts.owner(rootfs / "home/dev/notes.txt") == (1000, 1001)
    assert os.getxattr(rootfs / "etc/hostname", parts.XATTR[0]) == parts.XATTR[1]
    assert int(os.lstat(rootfs / "etc/os-release").st_mtime) == parts.OLD_MTIME  # older than the epoch: kept
    assert int(os.lstat(rootfs / "etc/hostname").st_mtime) == EPOCH  # newer: clamped
    assert sorted(os.listdir(rootfs / "usr/lib/modules")) == [V] and not os.listdir(
        rootfs / "usr/lib/modules" / V
    )
    if os.geteuid() == 0:
        assert "dev/null (char)" in first["left_out"]["entries"] and not (rootfs / "dev/null").exists()

    # The modules image, mounted at /lib/modules/<version>, gives /lib/modules/<version>/kernel/...
    modules = parts.pull_and_unpack(first["modules"]["reference"], tmp_path, "modules")
    source_modules = made["tree"] / "usr/lib/modules" / V
    assert parts.describe_tree(modules) == parts.describe_tree(source_modules, owners={})
    guest = pathlib.PurePosixPath(spec["additional_volumes"][0]["mount_point"])
    assert (modules / "kernel/fs/ext4/ext4.ko").is_file() and not (modules / "lib").exists()
    assert str(guest / "kernel/fs/ext4/ext4.ko") == "/lib/modules/%s/kernel/fs/ext4/ext4.ko" % V

    kernel = parts.pull_and_unpack(first["kernel"]["reference"], tmp_path, "kernel")
    assert sorted(os.listdir(kernel / "boot")) == ["config-" + V, "vmlinux"]
    assert (kernel / "boot/vmlinux").read_bytes() == (made["tree"] / "boot/vmlinux").read_bytes()

    # The layout written next to the push holds the same three tags and digests.
    index = json.loads((dest / "index.json").read_text())
    tags = {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]}
    assert tags == {n: first[n]["digest"] for n in ("kernel", "modules", "rootfs")}
    disks.run("umoci", "stat", "--image", "%s:rootfs" % dest)


def test_mbr_qcow2_and_gpt_give_the_same_digests(made, tmp_path):
    digests = []
    for src in (made["gpt"], made["mbr"], made["qcow2"], made["root"]):
        result = run(src=str(src), dest=str(tmp_path / src.name), source_date_epoch=EPOCH)
        digests.append(tuple(result[n]["digest"] for n in ("kernel", "modules", "rootfs")))
    assert len(set(digests)) == 1
    rerun = run(src=str(made["mbr"]), dest=str(tmp_path / "again"), source_date_epoch=EPOCH)
    assert tuple(rerun[n]["digest"] for n in ("kernel", "modules", "rootfs")) == digests[0]


def test_slim_reports_bytes_per_group_and_leaves_them_out(made, tmp_path):
    plain = run(src=str(made["gpt"]), dest=str(tmp_path / "plain"))
    slim = run(src=str(made["gpt"]), dest=str(tmp_path / "slim"), slim=True, slim_container_images=True)
    tree = made["tree"]

    def size(*paths):
        return sum((tree / p).stat().st_size for p in paths)

    assert slim["removed"] == {
        "apt": size("var/cache/apt/pkgcache.bin", "var/lib/apt/lists/deb.debian.org_Packages"),
        "docs": size("usr/share/doc/bash/README", "usr/share/man/man1/bash.1.gz"),
        "locales": size("usr/share/locale/de/LC_MESSAGES/bash.mo"),
        "kernel": 0,
        "firmware": size("usr/lib/firmware/i915/gpu.bin"),
        "container_images": size("var/lib/containerd/io.containerd.content.v1.content/blobs/sha256/ab"),
    }
    assert plain["removed"] == {}
    assert slim["sizes"]["source_bytes"] == plain["sizes"]["rootfs_bytes"]
    assert slim["sizes"]["rootfs_bytes"] == plain["sizes"]["rootfs_bytes"] - sum(slim["removed"].values())
    assert slim["rootfs"]["size"] < plain["rootfs"]["size"]
    assert (
        slim["kernel"]["digest"] == plain["kernel"]["digest"]
        and slim["modules"]["digest"] == plain["modules"]["digest"]
    )


def test_hygiene_is_reported_and_require_sealed_refuses(made, tmp_path):
    result = run(src=str(made["gpt"]), dest=str(tmp_path / "ok"))
    assert result["hygiene"]["sealed"] is True
    dirty = variant(
        made,
        "dirty",
        {"etc/machine-id": "4b1d0f6a2c9e4e7f8a3b5c6d7e8f9a0b\n", "etc/ssh/ssh_host_ed25519_key": "k\n"},
    )
    reported = run(src=str(dirty), dest=str(tmp_path / "dirty"))
    assert reported["hygiene"]["failed"] == ["machine_id_empty", "ssh_host_keys_absent"]
    with pytest.raises(
        Refusal, match="fails the sealing checks machine_id_empty, ssh_host_keys_absent"
    ) as info:
        run(src=str(dirty), dest=str(tmp_path / "refused"), require_sealed=True)
    assert info.value.result["hygiene"]["sealed"] is False
    assert not (tmp_path / "refused").exists()


# Refusals on real disks: each before anything is written ------------------------------------------


def refused(tmp_path, match, **params):
    dest = tmp_path / "never"
    with pytest.raises(Refusal, match=match):
        run(dest=str(dest), **params)
    assert not dest.exists()


def test_two_module_versions_refused_then_chosen(made, tmp_path):
    def second(tree):
        other = tree / "usr/lib/modules/5.15.65/kernel"
        other.mkdir(parents=True)
        (other / "x.ko").write_bytes(b"x")

    image = variant(made, "two", tree_hook=second)
    refused(tmp_path, r"/lib/modules: holds more than one kernel version: 5.10.77, 5.15.65", src=str(image))
    chosen = run(src=str(image), dest=str(tmp_path / "chosen"), kernel_version=V)
    assert chosen["kernel_version"] == V
    refused(
        tmp_path,
        r"kernel_version 6.1.0: has no /lib/modules/6.1.0 \(the image holds: 5.10.77, 5.15.65\)",
        src=str(image),
        kernel_version="6.1.0",
    )


def test_an_image_without_modules_is_refused(made, tmp_path):
    image = variant(made, "nomodules", {p: None for p in parts.module_files()})
    refused(tmp_path, r"root filesystem: has no /lib/modules/<version> directory", src=str(image))


def test_kernel_and_modules_versions_must_match(made, tmp_path):
    image = variant(made, "mismatch", {"boot/vmlinux": parts.kernel_bytes("5.15.65")})
    refused(
        tmp_path,
        r"kernel /boot/vmlinux: is version 5.15.65 but the modules are /lib/modules/5.10.77",
        src=str(image),
    )


def test_kernel_config_must_match_the_modules(made, tmp_path):
    image = variant(made, "config", {"boot/config-%s" % V: None, "boot/config-5.15.65": "# config\n"})
    refused(tmp_path, r"is for version 5.15.65 but the modules are /lib/modules/5.10.77", src=str(image))


def test_a_missing_kernel_and_a_bzimage_are_refused(made, tmp_path):
    refused(
        tmp_path,
        r"kernel /boot/vmlinux.bin: is not a file",
        src=str(made["gpt"]),
        hypervisor="cloudhypervisor",
    )
    bz = bytearray(8192)
    bz[0x202:0x206] = b"HdrS"
    image = variant(made, "bzimage", {"boot/vmlinux": bytes(bz)})
    refused(tmp_path, r"is a compressed bzImage", src=str(image))


def test_partition_selection_refusals(made, tmp_path):
    refused(tmp_path, r"no partition numbered or labelled 'data'", src=str(made["gpt"]), partition="data")
    refused(
        tmp_path,
        r"partition 1 'EFI'.*holds no filesystem this module recognises; microvm_image reads ext2/3/4",
        src=str(made["gpt"]),
        partition="1",
    )
    twins = parts.gpt_disk(made["work"] / "twins.raw", made["root"], names=("root-a", "root-b"))["path"]
    refused(tmp_path, r"more than one Linux partition could be the root", src=str(twins))
    windows = parts.gpt_disk(made["work"] / "basic-data.raw", made["root"], kind="0700")["path"]
    refused(tmp_path, r"no Linux partition holds a filesystem microvm_image reads", src=str(windows))
    assert (
        run(src=str(windows), dest=str(tmp_path / "by-label"), partition="root")["partition"]["number"] == 2
    )
    picked = run(src=str(twins), dest=str(tmp_path / "picked"), partition="root-b")
    assert picked["partition"]["number"] == 3


def test_not_a_disk_image(made, tmp_path):
    junk = tmp_path / "junk.raw"
    junk.write_bytes(os.urandom(1024 * 1024))
    refused(tmp_path, r"holds no partition table and no filesystem", src=str(junk))
    with pytest.raises(PipelineError, match="does not exist"):
        run(src=str(tmp_path / "absent.raw"), dest=str(tmp_path / "x"))


def test_tls_basic_auth_ca_bundle_and_no_log(made, tmp_path):
    reg = parts.Registry(tmp_path / "tls", tls=True, users={"pusher": "s3cr3t-pw"})
    try:
        base = dict(src=str(made["gpt"]), registry=reg.host, repository="lm/ubuntu", username="pusher")
        play = [
            {
                "hosts": "localhost",
                "gather_facts": False,
                "tasks": [
                    module_task(MODULE, "unverified CA", ignore_errors=True, password="s3cr3t-pw", **base),
                    module_task(
                        MODULE,
                        "wrong password",
                        ignore_errors=True,
                        password="nope",
                        ca_bundle=str(reg.ca),
                        **base,
                    ),
                    module_task(MODULE, "push", password="s3cr3t-pw", ca_bundle=str(reg.ca), **base),
                    module_task(MODULE, "push again", password="s3cr3t-pw", ca_bundle=str(reg.ca), **base),
                ],
            }
        ]
        result = run_playbook(play, args=["-vvv"])
        assert result.ok, result.log
        assert result.entry("unverified CA")["status"] == "ignored"
        assert "CERTIFICATE_VERIFY_FAILED" in result["unverified CA"]["msg"]
        assert result.entry("wrong password")["status"] == "ignored"
        assert "HTTP 401, the credentials of pusher were refused" in result["wrong password"]["msg"]
        assert result["push"]["changed"] is True and result["push again"]["changed"] is False
        assert reg.manifest("lm/ubuntu/rootfs", V, auth=("pusher", "s3cr3t-pw")) == 200
        assert "s3cr3t-pw" not in result.stdout + result.stderr
        assert "s3cr3t-pw" not in json.dumps(result.tasks)
        dest = tmp_path / "pulled"
        disks.run(
            "skopeo",
            "copy",
            "--quiet",
            "--src-creds",
            "pusher:s3cr3t-pw",
            "--src-tls-verify=false",
            "docker://%s/lm/ubuntu/kernel:%s" % (reg.host, V),
            "oci:%s:kernel" % dest,
        )
        assert (
            json.loads((dest / "index.json").read_text())["manifests"][0]["digest"]
            == result["push"]["kernel"]["digest"]
        )
    finally:
        reg.stop()
        shutil.rmtree(tmp_path / "tls", ignore_errors=True)


def test_token_auth_push_and_rerun(made, tmp_path):
    """A registry with token auth: the module answers the Bearer challenge at the realm (TLS, verified
    with ca_bundle) with the basic credentials, and retries with the token it gets."""
    reg = parts.Registry(tmp_path / "token", tls=True, users={"pusher": "t0ken-pw"}, token=True)
    try:
        base = dict(src=str(made["gpt"]), registry=reg.host, repository="lm/ubuntu", ca_bundle=str(reg.ca))
        with pytest.raises(
            PipelineError, match="HTTP 401, anonymous access is not allowed; set username and password"
        ):
            run(**base)
        first = run(username="pusher", password="t0ken-pw", **base)
        assert first["pushed"] == {"kernel": True, "modules": True, "rootfs": True}
        granted = {
            (r["scope"].rsplit(":", 1)[0], frozenset(r["scope"].rsplit(":", 1)[1].split(",")))
            for r in reg.token_server.requests
            if r["user"] == "pusher"
        }
        assert ("repository:lm/ubuntu/rootfs", frozenset({"pull", "push"})) in granted
        again = run(username="pusher", password="t0ken-pw", **base)
        assert again["changed"] is False and again["rootfs"]["digest"] == first["rootfs"]["digest"]
        assert "t0ken-pw" not in json.dumps(first)
    finally:
        reg.stop()


def test_publish_playbook_end_to_end(made, registry, tmp_path):
    playbook = pathlib.Path(__file__).resolve().parents[3] / "playbooks" / "publish_microvm_images.yml"
    extra = {
        "microvm_images_src": str(made["qcow2"]),
        "microvm_images_registry": registry.url,
        "microvm_images_repository": "playbook/ubuntu",
        "microvm_fragments_dir": str(tmp_path),
    }
    first = run_playbook(playbook, extra_vars=extra)
    assert first.ok, first.log
    result = first["Build the kernel, modules and root filesystem images and publish them"]
    assert result["changed"] is True and result["removed"]["docs"] > 0
    report = first["Size report"]["msg"]
    assert any(line.startswith("without slim: ") and "not measured" not in line for line in report)
    assert report[0] == "kernel %s for amd64 (read from /usr/bin/env)" % V
    spec = yaml.safe_load((tmp_path / "spec.yml").read_text())
    assert spec["kernel"]["image"] == "%s/playbook/ubuntu/kernel@%s" % (
        registry.host,
        result["kernel"]["digest"],
    )
    assert spec["additional_volumes"][0]["mount_point"] == "/lib/modules/" + V
    assert (
        yaml.safe_load((tmp_path / "capmvm.yml").read_text())["volumes"][0]["mountPoint"]
        == "/lib/modules/" + V
    )
    again = run_playbook(playbook, extra_vars=extra)
    assert again.ok, again.log
    assert again["Build the kernel, modules and root filesystem images and publish them"]["changed"] is False


def test_a_tag_moved_to_other_bytes_is_reported_and_the_snippets_name_digests(made, registry, tmp_path):
    params = dict(registry=registry.url, repository="flintlock/moves", dest=str(tmp_path / "oci"))
    first = run(src=str(made["gpt"]), source_date_epoch=EPOCH, **params)
    assert first["moved_tags"] == [] and "warnings" not in first
    other = variant(made, "moved", {"etc/hostname": "other\n"})
    predicted = run(check=True, src=str(other), source_date_epoch=EPOCH, **params)
    second = run(src=str(other), source_date_epoch=EPOCH, **params)
    # The variant's tree has its own random kernel and modules too: every image's tags move.
    moves = []
    for name in ("kernel", "modules", "rootfs"):
        old, new = first[name]["digest"], second[name]["digest"]
        assert old != new
        ref = "%s/flintlock/moves/%s:%s" % (registry.host, name, V)
        moves += [
            {"where": "layout", "tag": name, "from": old, "to": new},
            {"where": "registry", "tag": ref, "from": old, "to": new},
        ]

    def order(move):
        return (move["where"], move["tag"])

    assert sorted(second["moved_tags"], key=order) == sorted(moves, key=order)
    assert sorted(predicted["moved_tags"], key=order) == sorted(moves, key=order)
    assert second["diff"]["after"]["moved_tags"] == second["moved_tags"]
    assert "registry tag %s moved from %s to %s" % (ref, old, new) in second["warnings"]
    assert "registry tag %s would move from %s to %s" % (ref, old, new) in predicted["warnings"]
    assert registry.manifest("flintlock/moves/rootfs", V) != 404
    assert second["capmvm"]["rootVolume"]["image"] == "%s/flintlock/moves/rootfs@%s" % (registry.host, new)
