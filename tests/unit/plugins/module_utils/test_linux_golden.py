import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils import golden
from ansible_collections.goldenimage.pipeline.plugins.module_utils import linux_golden as lg
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import Refusal

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
        ({}, "exactly one of registry or http, got neither"),
        ({"registry": REF, "http": {"url": URL, "checksum": HEX}}, "got registry, http"),
        ({"s3": {"url": "s3://b/k"}}, "source keys s3 are not supported"),
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
