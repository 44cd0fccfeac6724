"""`make demo` (tools/demo.sh, playbooks/demo.yml) on a lab of its own: every act runs and the summary
names what each made, so a change that breaks an act fails here instead of on a user's first try.

One run of the whole demo (one lab start) keeps this small; `ACT=<name>` is checked for the act
selection alone, from the play list `ansible-playbook --list-tasks` prints, without a lab.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCHEMATIC = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
WORKER_GOLDEN = "cozy-public/talos-worker-%s-v1.13.0" % SCHEMATIC

pytestmark = pytest.mark.lab_only


def demo_env(state, **extra):
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("K8S_AUTH_", "AWS_")) or name == "KUBECONFIG":
            env.pop(name)
    env.update({"DEMO_STATE": str(state), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}, **extra)
    return env


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    state = tmp_path_factory.mktemp("demo") / "lab"
    try:
        run = subprocess.run(
            [str(ROOT / "tools/demo.sh")],
            cwd=ROOT,
            env=demo_env(state),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    finally:
        subprocess.run(
            [str(ROOT / "tools/demo.sh"), "stop"],
            cwd=ROOT,
            env=demo_env(state),
            capture_output=True,
            check=False,
        )
    assert run.returncode == 0, "rc=%d\n%s\n%s" % (run.returncode, run.stdout[-20000:], run.stderr[-5000:])
    return {"out": run.stdout, "state": state}


def summary(out):
    """The lines of the summary task's message."""
    start = out.index('"DEMO SUMMARY"')
    return out[start : out.index("]", start)]


def test_golden_act_captures_a_ready_golden(demo):
    lines = summary(demo["out"])
    assert '"golden VolumeSnapshots: 1"' in lines, lines
    assert "readyToUse=True" in lines, lines
    assert "contract problems: 0" in demo["out"]


def test_workers_act_imports_the_golden_renders_a_clone_and_shows_a_refusal(demo):
    out = demo["out"]
    lines = summary(out)
    assert "%s phase=Succeeded" % WORKER_GOLDEN in lines, lines
    # The pool renders a disk that clones the golden rather than importing over HTTP.
    assert "clones PVC %s into 1Gi of class replicated" % WORKER_GOLDEN in out, out
    # The refused render: the play went on and printed the refusal the way the module words it.
    assert "refused as expected: pool tenant-demo/tiny: diskSize 32Mi" in out, out
    assert "set diskSize to at least 64Mi" in out


def test_microvm_act_pushes_three_images_with_their_sizes(demo):
    out = demo["out"]
    lines = summary(out)
    assert '"micro-VM images in registry 127.0.0.1:' in lines and ": 3" in lines, lines
    for part in ("kernel", "modules", "rootfs"):
        assert "/demo/ubuntu-2204/%s:5.10.77" % part in lines, lines
    # The size report of publish_microvm_images: each image's digest and bytes, and what slim removed.
    assert "kernel 5.10.77: " in out and "bytes compressed" in out, out
    assert "removed by slim (bytes per group): " in out


def test_summary_tells_how_to_look_stop_and_go_real(demo):
    lines = summary(demo["out"])
    kubeconfig = demo["state"] / "kubeconfig"
    for kind in ("volumesnapshots -n golden-images-block", "datavolumes -A"):
        assert "kubectl --kubeconfig %s get %s" % (kubeconfig, kind) in lines, lines
    assert "DEMO_STATE=%s tools/demo.sh stop" % demo["state"] in lines
    assert "K8S_AUTH_KUBECONFIG=<kubeconfig>" in lines and "publish_worker_image" in lines


@pytest.mark.parametrize(
    ("act", "plays", "absent"),
    [
        ("workers", ["Act workers", "Publish the Cozystack worker images", "Summary"], "Capture the golden"),
        ("golden", ["Golden image demo", "Summary"], "Render a pool"),
        ("microvm", ["Act microvm", "Publish flintlock micro-VM images", "Summary"], "Render a pool"),
    ],
)
def test_one_act_runs_alone(act, plays, absent):
    env = demo_env(ROOT / ".lab/none", ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"))
    run = subprocess.run(
        [
            str(ROOT / ".venv/bin/ansible-playbook"),
            "-i",
            "localhost,",
            "playbooks/demo.yml",
            "--list-tasks",
            "--tags",
            act,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for play in plays:
        assert play in run.stdout, run.stdout
    tasks = [
        line for line in run.stdout.splitlines() if "TAGS:" in line and "Validating arguments" not in line
    ]
    assert tasks and absent not in "\n".join(tasks), run.stdout
