import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import linux_golden as lg

HEX = "f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"
REF = "docker://quay.io/containerdisks/ubuntu@sha256:" + HEX
URL = "http://rgw.example/cdi-os-images/ubuntu-24.04/20260801/sha256-%s/disk.qcow2" % HEX


def test_registry_reference_pinned_by_digest():
    assert lg.pinned_source({"registry": REF}) == {"registry": {"url": REF}}
    assert lg.source_digest({"registry": REF}) == "sha256:" + HEX


def test_registry_tag_with_digest_is_pinned_by_the_digest():
    ref = "docker://quay.io/containerdisks/ubuntu:24.04@sha256:" + HEX
    assert (
        lg.source_digest({"registry": {"url": ref, "secret_ref": "pull", "pull_method": "node"}})
        == "sha256:" + HEX
    )
    assert lg.pinned_source({"registry": {"url": ref, "secret_ref": "pull", "pull_method": "node"}}) == {
        "registry": {"url": ref, "secretRef": "pull", "pullMethod": "node"}
    }


@pytest.mark.parametrize(
    "ref,repo",
    [
        ("docker://quay.io/containerdisks/debian:12", "quay.io/containerdisks/debian"),
        ("docker://quay.io/containerdisks/debian", "quay.io/containerdisks/debian"),
        ("docker://registry.local:5000/os/debian:12", "registry.local:5000/os/debian"),
    ],
)
def test_registry_without_digest_is_refused_naming_the_move(ref, repo):
    with pytest.raises(lg.SourceError) as err:
        lg.pinned_source({"registry": ref})
    assert "registry source %s has no digest" % ref in str(err.value)
    assert "pin it as docker://%s@sha256:<digest>" % repo in str(err.value)


@pytest.mark.parametrize(
    "ref,text",
    [
        ("docker://quay.io/x@sha256:abc", "is not sha256:<64 lowercase hex digits>"),
        ("docker://quay.io/x@sha512:" + HEX, "is not sha256:<64 lowercase hex digits>"),
        ("oci-archive:///tmp/x.tar", "is not a containerdisk reference"),
        ("quay.io/x@sha256:" + HEX, "is not a containerdisk reference"),
    ],
)
def test_registry_references_that_are_refused(ref, text):
    with pytest.raises(lg.SourceError) as err:
        lg.pinned_source({"registry": ref})
    assert text in str(err.value)


def test_http_source_with_checksum():
    source = {"http": {"url": URL, "checksum": "SHA256:" + HEX.upper(), "secret_ref": "bucket"}}
    assert lg.pinned_source(source) == {
        "http": {"url": URL, "checksum": "sha256:" + HEX, "secretRef": "bucket"}
    }
    assert lg.source_digest(source) == "sha256:" + HEX
    assert lg.source_digest({"http": {"url": URL, "checksum": HEX}}) == "sha256:" + HEX


def test_presign_is_the_role_s_not_cdi_s():
    # The role signs the URL before the DataVolume is written; CDI never sees the flag.
    source = {"http": {"url": URL, "checksum": HEX, "presign": True}}
    assert lg.pinned_source(source) == {"http": {"url": URL, "checksum": "sha256:" + HEX}}
    assert lg.source_digest(source) == "sha256:" + HEX


@pytest.mark.parametrize(
    "http,text",
    [
        ({"presign": True, "secret_ref": "bucket"}, "sets both presign and secret_ref"),
        ({"presign": "yes"}, "presign of %s must be true or false" % URL),
    ],
)
def test_presign_refusals(http, text):
    with pytest.raises(lg.SourceError) as err:
        lg.pinned_source({"http": dict({"url": URL, "checksum": HEX}, **http)})
    assert text in str(err.value)


@pytest.mark.parametrize(
    "checksum,text",
    [
        (None, "has no checksum"),
        ("", "has no checksum"),
        ("md5:d41d8cd98f00b204e9800998ecf8427e", "uses md5"),
        ("sha256:1234", "is not sha256:<64 hex digits>"),
    ],
)
def test_http_source_without_a_sha256_checksum_is_refused(checksum, text):
    http = {"url": URL}
    if checksum is not None:
        http["checksum"] = checksum
    with pytest.raises(lg.SourceError) as err:
        lg.pinned_source({"http": http})
    assert text in str(err.value)
    assert URL in str(err.value)


@pytest.mark.parametrize(
    "source,text",
    [
        ("docker://x", "is not a mapping"),
        ({}, "exactly one of registry, http or s3, got none"),
        ({"registry": REF, "http": {"url": URL, "checksum": HEX}}, "got registry, http"),
        ({"s3": {"url": "s3://b/k", "secret_ref": "b", "checksum": HEX}}, "is not a path-style http(s)"),
        ({"s3": {"url": URL, "checksum": HEX}}, "has no secret_ref"),
        ({"s3": {"url": URL + "?X-Amz-Signature=x", "secret_ref": "b", "checksum": HEX}}, "without a query"),
        ({"s3": {"url": URL, "secret_ref": "b"}}, "has no checksum"),
        ({"s3": {"url": URL, "secret_ref": "b", "checksum": HEX, "presign": True}}, "keys presign are not"),
        ({"lvm": {}}, "source keys lvm are not supported"),
        ({"http": {"url": "ftp://x/y", "checksum": HEX}}, "is not an http(s) URL"),
        ({"http": {"url": URL, "checksum": HEX, "md5": "x"}}, "source.http keys md5 are not supported"),
        ({"registry": {"url": REF, "pull_method": "daemon"}}, "pull_method 'daemon' is not pod or node"),
        ({"http": ["x"]}, "must be a URL or a mapping"),
    ],
)
def test_malformed_sources_are_refused(source, text):
    with pytest.raises(lg.SourceError) as err:
        lg.pinned_source(source)
    assert text in str(err.value)


def test_source_errors_are_golden_errors():
    assert issubclass(lg.SourceError, golden.GoldenError)


@pytest.mark.parametrize(
    "source, option, move",
    [
        (
            {"http": {"url": "http://mirror:hunter2@rgw.example/k.qcow2", "checksum": HEX}},
            "source.http.url",
            "presign",
        ),
        ({"http": "https://hunter2@rgw.example/k.qcow2"}, "source.http.url", "secret_ref"),
        (
            {"registry": "docker://bot:hunter2@quay.io/os/debian@sha256:" + HEX},
            "source.registry.url",
            "secret_ref",
        ),
        (
            {"registry": {"url": "docker://bot:hunter2@quay.io/os/debian:12"}},
            "source.registry.url",
            "secret_ref",
        ),
    ],
)
def test_a_source_url_with_credentials_is_refused_without_echoing_them(source, option, move):
    for rule in (lg.pinned_source, lg.source_digest):
        with pytest.raises(Refusal) as err:
            rule(source)
        assert err.value.msg.startswith("option %s (" % option) and "REDACTED@" in err.value.msg
        assert "hunter2" not in err.value.msg and move in err.value.msg


def test_messages_show_a_tokenised_url_redacted():
    with pytest.raises(lg.SourceError) as err:
        lg.pinned_source({"http": {"url": URL + "?token=t0k&X-Amz-Signature=s1g"}})
    assert "t0k" not in str(err.value) and "s1g" not in str(err.value) and "token=REDACTED" in str(err.value)


def image(family="ubuntu-24-04", source=None, **extra):
    return dict(
        family=family, os_name="Ubuntu 24.04", size="8Mi", source=source or {"registry": REF}, **extra
    )


def test_the_build_plan_names_every_object_of_a_golden_in_one_namespace():
    http = {"http": {"url": URL, "checksum": "sha256:" + "ab" * 32, "secret_ref": "s3"}}
    plan = lg.build_plan([image(), image("debian-12", http)], "2026-08-28", "golden-images-block")
    first = plan[0]
    assert first["golden"] == "golden-ubuntu-24-04-20260828-f0dea74da9c5"
    assert (first["datavolume"], first["pvc"], first["job"]) == (
        first["golden"] + "-import",
        first["golden"] + "-disk",
        first["golden"] + "-convert",
    )
    assert first["namespace"] == "golden-images-block" and first["source"] == {"registry": {"url": REF}}
    assert (first["digest"], first["secret_ref"], first["presign"]) == ("sha256:" + HEX, "", False)
    assert plan[1]["digest"] == "sha256:" + "ab" * 32 and plan[1]["secret_ref"] == "s3"
    # A digest given beside the source names the golden.
    assert lg.build_plan([image(digest="sha256:" + "cd" * 32)], "20260828", "ns")[0]["golden"].endswith(
        "cdcdcdcdcdcd"
    )


def test_the_build_plan_refuses_before_anything_is_written():
    with pytest.raises(lg.SourceError, match=r"linux_golden_images\[1\] \(family debian\): "):
        lg.build_plan([image(), image("debian", {"registry": "docker://q/debian:12"})], "2026-08-28", "ns")
    long_family = "f" * 40
    with pytest.raises(lg.SourceError) as caught:
        lg.build_plan([image(long_family)], "2026-08-28", "ns")
    # The Job name is golden-<family>-<8>-<12>-convert: 37 characters besides the family.
    assert (
        "(77 characters), longer than the 63 Kubernetes allows: use a family id of at most 26"
        in caught.value.msg
    )
    assert len(lg.build_plan([image("f" * 26)], "2026-08-28", "ns")[0]["job"]) == 63
    with pytest.raises(lg.SourceError, match="linux_golden_images makes the same golden more than once"):
        lg.build_plan([image(), image()], "2026-08-28", "ns")
    with pytest.raises(lg.SourceError, match=r"linux_golden_images\[0\]: expected a mapping"):
        lg.build_plan(["ubuntu"], "2026-08-28", "ns")


NAMESPACES = {"Filesystem": "golden-images", "Block": "golden-images-block"}


def test_the_distribution_plan_imports_bucket_objects_in_the_namespace_of_their_mode():
    http = {"http": {"url": URL, "checksum": "sha256:" + HEX, "presign": True}}
    plan = lg.distribution_plan(
        [image(source=http), image("debian", http, mode="Block")], "2026-08-28", NAMESPACES
    )
    assert [(e["mode"], e["namespace"]) for e in plan] == [
        ("Filesystem", "golden-images"),
        ("Block", "golden-images-block"),
    ]
    assert plan[0]["datavolume"] == plan[0]["golden"] + "-disk" and plan[0]["presign"] is True
    with pytest.raises(lg.SourceError, match="artifact ubuntu-24-04 has a registry source"):
        lg.distribution_plan([image()], "2026-08-28", NAMESPACES)
    with pytest.raises(lg.SourceError, match="mode 'block' is not Block or Filesystem"):
        lg.distribution_plan([image(source=http, mode="block")], "2026-08-28", NAMESPACES)
    with pytest.raises(lg.SourceError, match="linux_golden_artifacts makes the same golden"):
        lg.distribution_plan([image(source=http), image(source=http)], "2026-08-28", NAMESPACES)


def test_secret_refs_name_each_secret_once_per_namespace():
    plan = [
        {"namespace": "a", "secret_ref": "s3"},
        {"namespace": "a", "secret_ref": "s3"},
        {"namespace": "b", "secret_ref": "s3"},
        {"namespace": "a", "secret_ref": ""},
    ]
    assert lg.secret_refs(plan) == [{"namespace": "a", "name": "s3"}, {"namespace": "b", "name": "s3"}]


def test_a_private_bucket_object_becomes_cdis_s3_source_with_its_secret_ref():
    source = {"s3": {"url": URL, "secret_ref": "bucket-keys", "checksum": HEX}}
    assert lg.pinned_source(source) == {"s3": {"url": URL, "secretRef": "bucket-keys"}}
    assert lg.source_digest(source) == golden.normalize_digest(
        HEX if HEX.startswith("sha256:") else "sha256:" + HEX
    )
    plan = lg.distribution_plan(
        [{"family": "windows-11-golden", "os_name": "windows", "size": "75Gi", "source": source}],
        "2026-09-01",
        {"Filesystem": "golden-images"},
    )
    assert plan[0]["source"] == {"s3": {"url": URL, "secretRef": "bucket-keys"}}
    assert plan[0]["secret_ref"] == "bucket-keys"
    assert lg.secret_refs(plan) == [{"namespace": "golden-images", "name": "bucket-keys"}]


def test_an_s3_url_with_credentials_is_refused_naming_the_secret_ref_move():
    with pytest.raises(Exception) as err:
        lg.pinned_source({"s3": {"url": "https://AKIA:secret@s3.example.com/b/k.qcow2", "secret_ref": "x"}})
    assert "secret_ref" in str(err.value) and "secret@" not in str(err.value)
