import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import exposure as ex
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal


@pytest.mark.parametrize(
    "url,expected",
    [
        ("s3://imgs/windows/11/d/w.qcow2", (None, "imgs", "windows/11/d/w.qcow2")),
        (
            "https://s3.example.com/imgs/private/w.qcow2",
            ("https://s3.example.com", "imgs", "private/w.qcow2"),
        ),
        ("http://127.0.0.1:9000/b/a%20b/c", ("http://127.0.0.1:9000", "b", "a b/c")),
    ],
)
def test_parse_url(url, expected):
    assert ex.parse_url(url) == expected


@pytest.mark.parametrize("url", ["ftp://h/b/k", "https://h/bucket-only", "s3://b", "windows/11/x"])
def test_parse_url_refuses_what_names_no_object(url):
    with pytest.raises(ex.ExposureError):
        ex.parse_url(url)


def test_key_prefix():
    assert ex.key_prefix("windows/11/2026-08-09/w.qcow2") == "windows/11/2026-08-09/"
    assert ex.key_prefix("w.qcow2") == ""


@pytest.mark.parametrize(
    "status,code,expected",
    [
        (200, None, ex.ALLOWED),
        (206, None, ex.ALLOWED),
        (304, None, ex.ALLOWED),
        (416, "InvalidRange", ex.ALLOWED),  # a range past the end of an empty object: served
        (404, "NoSuchKey", ex.ALLOWED),  # the server looked on an anonymous caller's behalf
        (404, None, ex.ALLOWED),
        (404, "404", ex.ALLOWED),
        (404, "NoSuchBucket", ex.UNKNOWN),
        (403, "AccessDenied", ex.DENIED),
        (401, None, ex.DENIED),
        (0, "EndpointConnectionError", ex.UNKNOWN),
        (500, "InternalError", ex.UNKNOWN),
        (301, "PermanentRedirect", ex.UNKNOWN),
        ("x", None, ex.UNKNOWN),
    ],
)
def test_classify(status, code, expected):
    assert ex.classify(status, code) == expected


def test_every_probe_refused_is_private():
    found = ex.verdict({"get": (403, "AccessDenied"), "head": (403, "403"), "list": (403, "AccessDenied")})
    assert found == {
        "exposed": False,
        "verdict": ex.PRIVATE,
        "allowed": [],
        "denied": ["get", "head", "list"],
        "unknown": [],
    }


@pytest.mark.parametrize(
    "answers,allowed",
    [
        ({"get": (206, None), "head": (200, None), "list": (403, "AccessDenied")}, ["get", "head"]),
        ({"get": (403, "AccessDenied"), "head": (403, "403"), "list": (200, None)}, ["list"]),
        (
            {"get": (403, "x"), "head": (403, "x"), "list": (403, "x"), "sample_get": (206, None)},
            ["sample_get"],
        ),
        ({"get": (0, "timeout"), "head": (200, None), "list": (500, "x")}, ["head"]),
    ],
)
def test_any_allowed_read_is_public(answers, allowed):
    found = ex.verdict(answers)
    assert found["exposed"] is True
    assert found["verdict"] == ex.PUBLIC
    assert found["allowed"] == allowed


def test_a_probe_without_an_answer_is_unknown_not_private():
    found = ex.verdict({"get": (403, "x"), "head": (403, "x"), "list": (0, "EndpointConnectionError")})
    assert found["exposed"] is False
    assert found["verdict"] == ex.UNKNOWN
    assert found["unknown"] == ["list"]


@pytest.mark.parametrize("value", ["volume", "KMS", " key ", "activated"])
def test_licensed_values(value):
    assert ex.is_licensed(value) is True


@pytest.mark.parametrize("value", ["none", "byol", "Evaluation", None])
def test_unlicensed_values(value):
    assert ex.is_licensed(value) is False


def test_an_undocumented_license_value_is_refused():
    with pytest.raises(ex.ExposureError, match="retail"):
        ex.normalize_license("retail")


PUBLIC = ex.verdict({"get": (206, None), "head": (200, None), "list": (200, None)})
PRIVATE = ex.verdict({"get": (403, "x"), "head": (403, "x"), "list": (403, "x")})
UNKNOWN = ex.verdict({"get": (403, "x"), "head": (403, "x"), "list": (503, "SlowDown")})
STATUSES = {"get": 206, "head": 200, "list": 200}


def test_byol_refuses_a_licensed_image_where_anyone_reads():
    key = "private/windows/11/2026-08-27/windows11-x64-golden.qcow2"
    msg = ex.byol_refusal("volume", "cdi-os-images", key, "private/windows/11/2026-08-27/", PUBLIC, STATUSES)
    assert "volume-licensed" in msg
    assert "s3://cdi-os-images/" + key in msg
    assert "Block public access on bucket cdi-os-images" in msg
    assert "BlockPublicPolicy" in msg and "RestrictPublicBuckets" in msg
    assert "s3:GetObject on arn:aws:s3:::cdi-os-images/private/windows/11/2026-08-27/*" in msg
    assert "s3:ListBucket on arn:aws:s3:::cdi-os-images" in msg
    assert "private/ is a name, not protection" in msg
    assert "get 206" in msg and "list 200" in msg


def test_byol_names_only_the_reads_that_succeeded():
    found = ex.verdict({"get": (403, "x"), "head": (403, "x"), "list": (200, None)})
    msg = ex.byol_refusal("kms", "b", "k/x", "k/", found, {"get": 403, "head": 403, "list": 200})
    assert "KMS-configured" in msg
    assert "s3:ListBucket on arn:aws:s3:::b" in msg
    assert "s3:GetObject" not in msg.split("so that anonymous")[1].split(" is refused")[0]


def test_byol_refuses_when_the_answers_prove_nothing():
    msg = ex.byol_refusal("key", "b", "k/x", "k/", UNKNOWN, {"get": 403, "head": 403, "list": 503})
    assert "key-bearing" in msg
    assert "did not prove that bucket b refuses" in msg


def test_byol_lets_a_licensed_image_into_a_private_bucket():
    assert ex.byol_refusal("volume", "b", "k/x", "k/", PRIVATE, {}) is None


@pytest.mark.parametrize("state", ["none", "byol", "evaluation"])
def test_byol_lets_an_unlicensed_image_anywhere(state):
    assert ex.byol_refusal(state, "b", "k/x", "k/", PUBLIC, STATUSES) is None
    assert ex.byol_refusal(state, "b", "k/x", "k/", UNKNOWN, STATUSES) is None


def test_the_key_never_decides():
    # The same answers under a private/ key and a public-looking key give the same verdict.
    answers = {"get": (206, None), "head": (200, None), "list": (200, None)}
    assert ex.verdict(answers) == PUBLIC
    for key in ("private/w.qcow2", "public/w.qcow2"):
        assert ex.byol_refusal("volume", "b", key, ex.key_prefix(key), PUBLIC, STATUSES) is not None


# credentials and presigning ------------------------------------------------------------------------


def test_parse_url_refuses_credentials_without_echoing_them():
    with pytest.raises(Refusal) as caught:
        ex.parse_url("https://key:s3cr3t@s3.example.com/imgs/w.qcow2")
    assert "s3cr3t" not in caught.value.msg and "access_key/secret_key" in caught.value.msg


@pytest.mark.parametrize(
    "url, words",
    [
        ("http://key:s3cr3t@rgw.example/b/k", "carries credentials"),
        ("http://rgw.example/b/k?X-Amz-Signature=s1g", "already has a query string"),
        ("http://rgw.example/b/", "does not name an object"),
        ("s3://b/k", "no host to sign for"),
    ],
)
def test_presign_target_refusals(url, words):
    with pytest.raises(Refusal) as caught:
        ex.presign_target(url)
    assert words in caught.value.msg
    assert "s3cr3t" not in caught.value.msg and "s1g" not in caught.value.msg


def test_presign_target():
    assert ex.presign_target("http://rgw.svc:8080/b/w/k.qcow2") == ("http://rgw.svc:8080", "b", "w/k.qcow2")


@pytest.mark.parametrize(
    "expiry, words", [(0, "greater than zero"), (-1, "greater than zero"), (604801, "out of range")]
)
def test_expiry_rules(expiry, words):
    with pytest.raises(Refusal, match=words):
        ex.check_expiry(expiry)
    assert ex.check_expiry(604800) == 604800


def test_signing_needs_keys_and_the_result_has_a_redacted_form():
    with pytest.raises(Refusal, match="needs access_key and secret_key"):
        ex.check_signing_keys("a", "", "b", "k")
    signed = ex.signed_result("http://h/b/k?X-Amz-Credential=AK%2F1&X-Amz-Signature=s1g")
    assert signed["url"].endswith("s1g") and "s1g" not in signed["url_redacted"]


def test_worth_sampling():
    assert ex.worth_sampling((403, "AccessDenied"), (403, None))
    assert ex.worth_sampling((404, "NoSuchKey"), (404, None))
    assert not ex.worth_sampling((206, None), (200, None))


def test_an_anonymous_import_is_refused_only_when_the_anonymous_read_is():
    url = "http://rgw.example/cdi-os-images/ubuntu/noble.qcow2"
    refused = ex.anonymous_import_refusal(url, "cdi-os-images", "ubuntu/noble.qcow2", (403, "AccessDenied"))
    assert isinstance(refused, Refusal)
    msg = refused.msg
    assert msg.startswith(
        "http source %s: an anonymous GET of s3://cdi-os-images/ubuntu/noble.qcow2 was " % url
    )
    assert "(HTTP 403 AccessDenied)" in msg and "neither presign nor secret_ref" in msg
    assert (
        "nothing was written; for a private S3 or Ceph RGW bucket import with source.s3 and a secret_ref"
        in msg
    )
    assert "set presign: true on the http source" in msg
    assert refused.result["refused"] is True and refused.result["get_status"] == 403
    assert "HTTP 401 refused" in ex.anonymous_import_refusal(url, "b", "k", (401, None)).msg
    # Served, a missing key the server looked for, or no answer at all: the import goes ahead.
    for get in ((206, None), (200, None), (404, "NoSuchKey"), (0, "EndpointConnectionError: x"), (500, "x")):
        assert ex.anonymous_import_refusal(url, "b", "k", get) is None


def test_an_anonymous_import_refusal_keeps_a_signature_out_of_the_message():
    url = "https://s3.example/b/k?X-Amz-Signature=abc123&X-Amz-Credential=AKIA"
    refused = ex.anonymous_import_refusal(url, "b", "k", (403, "AccessDenied"))
    assert "abc123" not in refused.msg
