"""How the playbooks word a clone gate's verdict: only no_boot is "did not boot"."""

from __future__ import annotations

import pathlib

import jinja2
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def rejected_message(verdict: str) -> str:
    plays = yaml.safe_load((ROOT / "playbooks" / "publish_windows_golden.yml").read_text())
    tasks = [t for play in plays for t in play.get("tasks") or []]
    stop = next(t for t in tasks if t.get("name") == "Stop when the clone was rejected")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    context = {
        "windows_export_golden": {"namespace": "golden-images", "name": "golden-windows-11"},
        "publish_project_namespace": "acme",
        "publish_gate": {"verdict": verdict, "msg": "the gate said so", "kept": False, "passed": False},
    }
    context.update(stop.get("vars") or {})
    words = {k: env.from_string(v).render(**context) if isinstance(v, str) else v for k, v in context.items()}
    return env.from_string(stop["ansible.builtin.fail"]["msg"]).render(**words)


@pytest.mark.parametrize("verdict", ["inconclusive", "port_unreachable"])
def test_only_no_boot_is_worded_did_not_boot(verdict):
    text = rejected_message(verdict)
    assert "did not boot" not in text
    assert "(verdict %s)" % verdict in text


def test_no_boot_is_did_not_boot_and_inconclusive_says_nothing_of_the_image():
    assert "did not boot" in rejected_message("no_boot")
    assert "says nothing about the image" in rejected_message("inconclusive")
