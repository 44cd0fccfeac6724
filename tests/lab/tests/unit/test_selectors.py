import pytest

from tests.lab.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
    selector_from_label_selector_object,
)

GOLDEN = {
    "kube-dc.com/golden-os": "ubuntu-24.04",
    "kube-dc.com/golden-mode": "Block",
    "kube-dc.com/golden-active": "true",
    "tier": "3",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("   ", True),
        ("kube-dc.com/golden-os=ubuntu-24.04", True),
        ("kube-dc.com/golden-os==ubuntu-24.04", True),
        ("kube-dc.com/golden-os=windows-11", False),
        ("kube-dc.com/golden-os!=windows-11", True),
        ("kube-dc.com/golden-os!=ubuntu-24.04", False),
        ("missing!=x", True),  # != matches when the key is absent
        ("kube-dc.com/golden-mode in (Block, Filesystem)", True),
        ("kube-dc.com/golden-mode in (Filesystem)", False),
        ("kube-dc.com/golden-mode notin (Filesystem)", True),
        ("missing notin (a,b)", True),  # notin matches when the key is absent
        ("missing in (a,b)", False),
        ("kube-dc.com/golden-active", True),
        ("!kube-dc.com/golden-active", False),
        ("!missing", True),
        ("missing", False),
        ("kube-dc.com/golden-os=ubuntu-24.04 , kube-dc.com/golden-active=true,!missing", True),
        ("kube-dc.com/golden-os=ubuntu-24.04,kube-dc.com/golden-active=false", False),
        ("tier>2", True),
        ("tier<3", False),
        ("kube-dc.com/golden-active=", False),
    ],
)
def test_label_selector_matches_like_the_apiserver(text, expected):
    assert parse_label_selector(text).matches(GOLDEN) is expected


def test_empty_value_matches_empty_label():
    assert parse_label_selector("a=").matches({"a": ""})
    assert parse_label_selector("a in (x,)").matches({"a": ""})


def test_empty_selector_matches_objects_without_labels():
    assert parse_label_selector("").matches(None)
    assert parse_label_selector("").empty
    assert not parse_label_selector("a=b").matches(None)
    assert parse_label_selector("a!=b").matches(None)


def test_selector_renders_back_to_a_parseable_string():
    sel = parse_label_selector("b in (y,x), !c, a=1, d, e notin (z)")
    again = parse_label_selector(str(sel))
    assert again == sel
    assert str(sel) == "b in (x,y),!c,a=1,d,e notin (z)"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a=(", "found '('"),
        ("a in b", "expected: '('"),
        ("a in (b", "expected: ')'"),
        ("a b", "expected: in, notin"),
        ("=b", "expected: !, identifier"),
        ("a=b,", "identifier after ','"),
        ("!a=b", "found '='"),
        ("a in ()", "values set can't be empty"),
        ("a=b=c", "found '='"),
        ("-bad=x", "unable to parse requirement"),
        ("Upper.Example/x=y", "prefix part"),
        ("a=b$", "unable to parse requirement"),
        ("a=" + "v" * 64, "no more than 63"),
        ("tier>two", "must be an integer"),
    ],
)
def test_bad_label_selectors_are_rejected_with_apiserver_wording(text, fragment):
    with pytest.raises(SelectorError) as err:
        parse_label_selector(text)
    assert fragment in str(err.value)
    assert isinstance(err.value, ValueError)


def test_label_selector_object():
    sel = selector_from_label_selector_object(
        {
            "matchLabels": {"job-name": "seal"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["3", "4"]},
                {"key": "gone", "operator": "DoesNotExist"},
                {"key": "job-name", "operator": "Exists"},
                {"key": "phase", "operator": "NotIn", "values": ["x"]},
            ],
        }
    )
    assert sel.matches({"job-name": "seal", "tier": "3"})
    assert not sel.matches({"job-name": "seal", "tier": "5"})
    assert not sel.matches({"job-name": "seal", "tier": "3", "gone": ""})
    assert selector_from_label_selector_object({}).matches({"anything": "x"})
    assert not selector_from_label_selector_object(None).matches({})


@pytest.mark.parametrize(
    "bad",
    [
        {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]},
        {"matchLabels": {"bad key": "x"}},
    ],
)
def test_bad_label_selector_objects(bad):
    with pytest.raises(SelectorError):
        selector_from_label_selector_object(bad)


POD = {
    "metadata": {"name": "seal-abc", "namespace": "golden-images"},
    "spec": {"nodeName": "lab-node", "hostNetwork": False},
    "status": {"phase": "Succeeded"},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("metadata.name=seal-abc", True),
        ("metadata.name==seal-abc", True),
        ("metadata.name!=seal-abc", False),
        ("metadata.namespace=golden-images,status.phase=Succeeded", True),
        ("status.phase!=Running", True),
        ("spec.nodeName=other", False),
        ("spec.hostNetwork=false", True),
        ("spec.missing=", True),
        ("spec.missing!=", False),
    ],
)
def test_field_selector(text, expected):
    assert parse_field_selector(text).matches(POD) is expected


def test_field_selector_escapes_and_fields():
    sel = parse_field_selector(r"metadata.name=a\,b,status.phase!=x\=y")
    assert sel.fields() == ["metadata.name", "status.phase"]
    assert sel.matches({"metadata": {"name": "a,b"}, "status": {"phase": "x"}})
    assert not sel.matches({"metadata": {"name": "a,b"}, "status": {"phase": "x=y"}})


@pytest.mark.parametrize("text", ["metadata.name", "=x", r"metadata.name=a\q"])
def test_bad_field_selectors(text):
    with pytest.raises(SelectorError):
        parse_field_selector(text)
