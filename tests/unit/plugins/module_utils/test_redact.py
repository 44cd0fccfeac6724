import base64

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils import errors, redact

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


def test_signed_query_values_are_found_wherever_a_definition_holds_a_url():
    url = (
        "http://s3.lab:9000/isos/w.iso?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=key%2F20261203%2Fus"
        "-east-1%2Fs3%2Faws4_request&X-Amz-Expires=600&X-Amz-Signature=5e1f00d2&token=t0k3n%2Bx&n=1"
    )
    definitions = [{"kind": "DataVolume", "spec": {"source": {"http": {"url": url}}}}, {"kind": "Other"}]
    assert redact.signed_query_values(definitions) == {
        "key%2F20261203%2Fus-east-1%2Fs3%2Faws4_request",
        "key/20261203/us-east-1/s3/aws4_request",
        "5e1f00d2",
        "t0k3n%2Bx",
        "t0k3n+x",
    }
    assert redact.signed_query_values({"url": "http://h/p?n=1&ok=yes", "list": ["plain", 3]}) == set()
