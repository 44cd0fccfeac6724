import base64

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors, redact

SECRET = "s3cr:et/p@ss"


def test_refuses_a_url_with_a_password_without_echoing_it():
    url = "http://user:hunter2@mirror.example/ubuntu.img"
    with pytest.raises(errors.Refusal) as exc:
        redact.refuse_credentials(url, "url", "put the credentials in a Secret and pass secret_ref")
    assert "hunter2" not in exc.value.msg
    assert "option url" in exc.value.msg and "secret_ref" in exc.value.msg


def test_refuses_a_user_only_url():
    with pytest.raises(errors.Refusal):
        redact.refuse_credentials("https://token@host/x", "url", "use a header")


def test_accepts_a_plain_url():
    assert redact.refuse_credentials("https://host:8443/a?b=c", "url", "x") == "https://host:8443/a?b=c"


@pytest.mark.parametrize(
    "url, expected",
    [
        ("http://user:pw@host:9000/b/k", "http://REDACTED@host:9000/b/k"),
        ("http://[::1]:9000/k", "http://[::1]:9000/k"),
        ("http://u:p@[::1]:9000/k", "http://REDACTED@[::1]:9000/k"),
        (
            "https://s3/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F2026&X-Amz-Signature=abc",
            "https://s3/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED",
        ),
        ("https://h/k?part=1", "https://h/k?part=1"),
        (None, None),
    ],
)
def test_redact_url(url, expected):
    assert redact.redact_url(url) == expected


def test_signed_and_strip_query():
    url = "https://s3/b/k?X-Amz-Signature=abc&X-Amz-Expires=60"
    assert redact.signed(url)
    assert not redact.signed("https://s3/b/k?versionId=1")
    assert redact.strip_query(url) == "https://s3/b/k"
    assert redact.strip_query("http://u:p@h/k?x=1") == "http://h/k"


def test_redact_text_masks_every_form():
    encoded = base64.b64encode(SECRET.encode()).decode()
    text = "raw %s quoted %s b64 %s" % (SECRET, "s3cr%3Aet%2Fp%40ss", encoded)
    out = redact.redact_text(text, [SECRET])
    assert SECRET not in out and encoded not in out and "s3cr%3Aet%2Fp%40ss" not in out
    assert out.count(redact.MASK) == 3


def test_redact_message_redacts_every_url_in_text():
    text = redact.redact_message(
        'Could not connect to "http://u:pw@h:1/b/k?X-Amz-Signature=s1g" nor ftp://h/x'
    )
    assert "pw" not in text and "s1g" not in text and "http://REDACTED@h:1/b/k" in text
    assert "ftp://h/x" in text


def test_url_secrets_are_what_masking_needs():
    assert set(redact.url_secrets("http://u:p%40ss@h/b?token=t0k&X-Amz-Date=1")) == {"p%40ss", "p@ss", "t0k"}
    assert redact.url_secrets("http://h/b") == []
    # A query value as the URL spells it (what an echoed URL shows), decoded, and quoted again.
    signed = "https://s3/b/k?X-Amz-Credential=AKIA%2F2026%2Fus&X-Amz-Signature=s1g%2Bx+y"
    assert set(redact.url_secrets(signed)) == {
        "AKIA%2F2026%2Fus",
        "AKIA/2026/us",
        "s1g%2Bx+y",
        "s1g+x y",
        "s1g%2Bx%20y",
    }


def test_a_redacted_url_holds_no_secret():
    # A result is searched after its objects were redacted: REDACTED must not become a value to mask.
    assert redact.url_secrets(redact.redact_url("https://u:pw@h/k?X-Amz-Signature=s1g&token=t0k")) == []


def test_secrets_in_finds_the_secrets_of_urls_anywhere_in_a_structure():
    params = {
        "definitions": [
            {"spec": {"source": {"http": {"url": "https://s3/b/k?X-Amz-Signature=s1g&X-Amz-Date=1"}}}},
            {"data": {"note": "mirror at http://user:pw0rd@h/x, then go"}},
        ],
        "name": "plain",
        "count": 3,
        "registry": "docker://ro:t0ken@quay.io/x@sha256:" + "a" * 64,
    }
    assert redact.secrets_in(params) == {"s1g", "pw0rd", "t0ken"}
    assert redact.secrets_in({"url": "https://h/k?part=1", "ref": "docker://quay.io/x@sha256:ab"}) == set()


def test_redact_fields_redacts_every_url_and_leaves_the_value_alone():
    obj = {"spec": {"urls": ["http://u:pw@h/k", "https://h/k?token=t"], "size": 3, "name": "n"}}
    shown = redact.redact_fields(obj)
    assert shown == {
        "spec": {"urls": ["http://REDACTED@h/k", "https://h/k?token=REDACTED"], "size": 3, "name": "n"}
    }
    assert obj["spec"]["urls"][0] == "http://u:pw@h/k"


def test_refuse_credentials_in_names_the_path_of_the_url():
    value = {"spec": {"source": {"http": {"url": "http://u:hunter2@h/k"}}, "other": ["https://h/k?token=t"]}}
    with pytest.raises(errors.Refusal) as exc:
        redact.refuse_credentials_in(value, "DataVolume ns/x", "use a Secret")
    assert exc.value.msg.startswith("DataVolume ns/x field spec.source.http.url (http://REDACTED@h/k): ")
    assert "hunter2" not in exc.value.msg and exc.value.msg.endswith("; use a Secret")
    redact.refuse_credentials_in({"spec": {"url": "https://h/k?token=t"}}, "DataVolume ns/x", "x")
    with pytest.raises(errors.Refusal, match=r"^x field a\[1\] \(docker://REDACTED@quay.io/r\)"):
        redact.refuse_credentials_in({"a": ["n", "docker://u:p@quay.io/r"]}, "x", "y")
