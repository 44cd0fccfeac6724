"""List pages: the msgspec schema gives what json gives minus managedFields; unknown keys go to json."""

import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _listpage
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._listpage import decode_page

MANAGED = [
    {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}
]


def meta(**extra):
    out = {"name": "golden-debian-12", "namespace": "proj-1", "uid": "u-1", "resourceVersion": "7"}
    out.update(extra)
    return out


SNAPSHOT = {
    "apiVersion": "snapshot.storage.k8s.io/v1",
    "kind": "VolumeSnapshot",
    "metadata": meta(
        generation=1,
        labels={"kube-dc.com/golden-os": "debian-12"},
        annotations={"note": "é 😀 \u2028"},
        ownerReferences=[{"kind": "X", "name": "y", "uid": "z", "controller": True}],
        finalizers=["snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection"],
        deletionTimestamp=None,
        managedFields=MANAGED,
    ),
    "spec": {"source": {"volumeSnapshotContentName": "c"}, "nothing": None, "list": [1, 2.5, True]},
    "status": {"readyToUse": False, "restoreSize": "4Mi", "big": 123456789012345678901234567890},
}
NAMESPACE = {"metadata": meta(managedFields=MANAGED), "spec": {"finalizers": ["kubernetes"]}}
NO_METADATA = {"kind": "Thing", "spec": {}}

# Outside the schema: each must come back whole, parsed by json.
CONFIGMAP = {"kind": "ConfigMap", "metadata": meta(managedFields=MANAGED), "data": {"k": "v"}}
FUTURE_META = {"metadata": meta(managedFields=MANAGED, someFutureField={"a": 1}), "spec": {}}
FUTURE_PAGE_KEY = "future"
HUGE_FLOAT = b'{"items":[{"metadata":{"name":"a","managedFields":[]},"spec":{"x":1e400}}]}'
LONE_SURROGATE = b'{"items":[{"metadata":{"name":"\\ud800","managedFields":[]}}]}'
NOT_AN_OBJECT = b'{"items":[{"metadata":"odd"}, 3]}'


def body(items, **page):
    out = {"apiVersion": "v1", "kind": "List", "metadata": {"continue": "tok", "resourceVersion": "9"}}
    out.update(page, items=items)
    return json.dumps(out).encode()


def by_json(raw, managed_fields=False):
    answer = json.loads(raw)
    if not managed_fields:
        for item in answer.get("items") or []:
            if isinstance(item, dict) and isinstance(item.get("metadata"), dict):
                item["metadata"].pop("managedFields", None)
    return answer


PAGES = {
    "plain": body([SNAPSHOT, NAMESPACE, NO_METADATA]),
    "empty": body([]),
    "null items": body(None),
    "configmap": body([SNAPSHOT, CONFIGMAP]),
    "future metadata field": body([SNAPSHOT, FUTURE_META]),
    "future page key": body([SNAPSHOT], **{FUTURE_PAGE_KEY: 1}),
    "huge float": HUGE_FLOAT,
    "lone surrogate": LONE_SURROGATE,
    "not an object": NOT_AN_OBJECT,
}
REFUSED = {
    "configmap",
    "future metadata field",
    "future page key",
    "huge float",
    "lone surrogate",
    "not an object",
}


@pytest.fixture
def without_msgspec(monkeypatch):
    monkeypatch.setattr(_listpage, "_lean_pair", (None, None))


class CountingJson:
    def __init__(self):
        self.calls = 0

    def loads(self, raw):
        self.calls += 1
        return json.loads(raw)


@pytest.fixture
def counted(monkeypatch):
    counter = CountingJson()
    monkeypatch.setattr(_listpage, "json", counter)
    return counter


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_schema_gives_what_json_gives_without_managed_fields(name, counted):
    assert _listpage._lean()[0] is not None, "msgspec is in the test environment: the schema must be tried"
    assert decode_page(PAGES[name]) == by_json(PAGES[name])
    # Only pages outside the schema cost a json parse; the others never build managedFields.
    assert counted.calls == (1 if name in REFUSED else 0)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_without_msgspec_json_gives_the_same_pages(name, without_msgspec):
    assert decode_page(PAGES[name]) == by_json(PAGES[name])


def test_managed_fields_are_kept_when_asked_and_json_parses_them(counted):
    answer = decode_page(PAGES["plain"], managed_fields=True)
    assert answer["items"][0]["metadata"]["managedFields"] == MANAGED
    assert answer == json.loads(PAGES["plain"])
    assert counted.calls == 1


def test_dropping_managed_fields_leaves_every_other_key():
    item = decode_page(PAGES["plain"])["items"][0]
    assert "managedFields" not in item["metadata"]
    expected = dict(
        SNAPSHOT, metadata={k: v for k, v in SNAPSHOT["metadata"].items() if k != "managedFields"}
    )
    assert item == expected
    assert decode_page(PAGES["plain"])["metadata"]["continue"] == "tok"


def test_a_body_that_is_not_json_raises_as_json_does():
    with pytest.raises(ValueError):
        decode_page(b"<html>gateway timeout</html>")
