"""Values roles built with regex_replace, arithmetic and loops in Jinja, now filters over pure rules."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.filter.inputs import (
    bare_digest,
    base_url,
    iso_claim_size,
)
from ansible_collections.goldenimage.pipeline.plugins.filter.mirror import (
    mirror_shown_source,
    mirror_userinfo_images,
)

MIB = 1048576


@pytest.mark.parametrize(
    "given, expected",
    [
        ("http://s3.example:9000/", "http://s3.example:9000"),
        ("http://s3.example:9000///", "http://s3.example:9000"),
        ("https://factory.talos.dev", "https://factory.talos.dev"),
        (" /var/lib/scratch/ ", "/var/lib/scratch"),
        ("", ""),
        (None, ""),
    ],
)
def test_base_url_drops_trailing_slashes_only(given, expected):
    assert base_url(given) == expected


def test_base_url_joins_without_a_double_slash():
    assert base_url("http://rgw.example/") + "/bucket/key" == "http://rgw.example/bucket/key"


def test_bare_digest_drops_its_own_prefix_and_lowers():
    hex64 = "AB" * 32
    assert bare_digest("sha256:" + hex64) == "ab" * 32
    assert bare_digest("SHA256:" + hex64, "sha256") == "ab" * 32
    assert bare_digest(hex64) == "ab" * 32
    assert bare_digest("sha512:" + "cd" * 64, "sha512") == "cd" * 64
    assert bare_digest("", "sha512") == "" and bare_digest(None) == ""


def test_bare_digest_keeps_another_algorithms_prefix():
    # A sha512 given where a sha256 is expected must not pass as a bare digest of the right kind.
    assert bare_digest("sha512:abc", "sha256") == "sha512:abc"


def test_bare_digest_refuses_an_unknown_algorithm():
    with pytest.raises(AnsibleFilterError, match="md5"):
        bare_digest("md5:abc", "md5")


@pytest.mark.parametrize(
    "size, expected",
    [
        (0, "1Mi"),
        (1, "1Mi"),
        (32768, "1Mi"),
        (10 * MIB, "11Mi"),
        (10 * MIB + 1, "12Mi"),
        (5539 * MIB, "6093Mi"),  # 6092.9 MiB, rounded up
        ("4194304", "5Mi"),  # stat's size may reach the filter as a string
    ],
)
def test_iso_claim_size_is_the_iso_plus_a_tenth_in_whole_mib(size, expected):
    assert iso_claim_size(size) == expected


def test_iso_claim_size_is_a_string_quantity():
    assert type(iso_claim_size(1)).__name__ == "str"  # str itself, not a subclass such as AnsibleUnsafeText


def test_iso_claim_size_given_wins():
    assert iso_claim_size(10 * MIB, "8Gi") == "8Gi"
    assert iso_claim_size(10 * MIB, "") == "11Mi"


@pytest.mark.parametrize("size", [None, "big", True, -1])
def test_iso_claim_size_refuses_what_is_not_a_byte_count(size):
    with pytest.raises(AnsibleFilterError, match="ISO size"):
        iso_claim_size(size)


def test_mirror_userinfo_images_names_each_image_with_credentials_in_its_url():
    images = [
        {"family": "ubuntu", "version": "24.04", "url": "https://user:pw@cloud-images.example/noble.img"},
        {"family": "debian", "version": "13", "url": "https://cloud.debian.example/trixie.qcow2"},
        {"family": "alma", "version": "10", "path": "/srv/alma.qcow2"},
        {"family": "rocky", "version": "10", "url": "https://token@mirror.example/rocky.qcow2"},
        {"family": "fedora", "version": "42", "url": ""},
    ]
    assert mirror_userinfo_images(images) == ["ubuntu/24.04", "rocky/10"]
    assert mirror_userinfo_images([]) == [] and mirror_userinfo_images(None) == []


def test_mirror_shown_source_hides_userinfo_and_query():
    image = {"url": "https://user:pw@mirror.example:8443/a/b.img?X-Amz-Signature=abc#frag"}
    assert mirror_shown_source(image) == "https://mirror.example:8443/a/b.img"
    assert mirror_shown_source({"url": "https://mirror.example/a.img"}) == "https://mirror.example/a.img"


def test_mirror_shown_source_of_a_path_or_nothing():
    assert mirror_shown_source({"path": "/srv/alma.qcow2", "url": ""}) == "/srv/alma.qcow2"
    assert mirror_shown_source({}) == ""


def test_mirror_shown_source_of_an_unreadable_url_shows_nothing_of_it():
    assert mirror_shown_source({"url": "http://[::1/x"}) == "REDACTED"


def test_url_without_credentials_passes_a_plain_url_and_refuses_user_info():
    from ansible_collections.goldenimage.pipeline.plugins.filter.inputs import url_without_credentials

    assert url_without_credentials("https://s3.example:9000/b?x=1", "o") == "https://s3.example:9000/b?x=1"
    assert url_without_credentials("", "o") == "" and url_without_credentials(None, "o") == ""
    with pytest.raises(AnsibleFilterError) as err:
        url_without_credentials("http://k:hunter2@s3.example", "windows_bake_iso_url_base", "use a Secret")
    assert str(err.value).startswith("option windows_bake_iso_url_base (http://REDACTED@s3.example): ")
    assert str(err.value).endswith("; use a Secret") and "hunter2" not in str(err.value)


def test_storable_url_keeps_no_signature_or_password_in_a_manifest():
    from ansible_collections.goldenimage.pipeline.plugins.filter.inputs import storable_url

    signed = "https://b.s3.example.com/jammy.img?X-Amz-Signature=abc&X-Amz-Credential=k"
    assert storable_url(signed) == "https://b.s3.example.com/jammy.img"
    assert "secret" not in storable_url("https://user:secret@mirror.example.com/jammy.img")
    assert storable_url("/srv/images/jammy.img") == "/srv/images/jammy.img"
    assert storable_url("") == "" and storable_url(None) == ""
