"""Command line: run the lab in the background or the foreground.

    python -m tests.lab up [--state-dir .lab] [--port N] [--no-s3]
    python -m tests.lab status [--state-dir .lab]
    python -m tests.lab down [--state-dir .lab]
    python -m tests.lab serve [...]        # foreground; `up` starts this as a detached process
    python -m tests.lab faults [--state-dir .lab] [--reset] [KNOB=VALUE ...]   # show or set fault knobs

The DBInstance API group and version follow --dbinstance-group/--dbinstance-version or the
LAB_DBINSTANCE_GROUP / LAB_DBINSTANCE_VERSION environment variables.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
# etcd, kube-apiserver and the CRDs take seconds when the machine is idle, a minute or more under load.
STARTUP_TIMEOUT = 240.0
SHUTDOWN_TIMEOUT = 60.0  # the lab stops etcd, kube-apiserver and kube-controller-manager first


def _paths(state_dir: pathlib.Path) -> dict[str, pathlib.Path]:
    return {
        "info": state_dir / "lab.json",
        "log": state_dir / "lab.log",
        "kubeconfig": state_dir / "kubeconfig",
        "fault_kubeconfig": state_dir / "kubeconfig-faults",
        "s3env": state_dir / "s3.env",
    }


def _read_info(state_dir: pathlib.Path) -> dict | None:
    try:
        return json.loads(_paths(state_dir)["info"].read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _answers(info: dict) -> bool:
    """True when the lab behind `info` answers /version with its token."""
    request = urllib.request.Request(info["url"] + "/version")
    request.add_header("Authorization", f"Bearer {info['token']}")
    context = ssl._create_unverified_context() if info["url"].startswith("https") else None
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _running(state_dir: pathlib.Path) -> dict | None:
    info = _read_info(state_dir)
    if info and _alive(info["pid"]) and _answers(info):
        return info
    return None


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _describe(state_dir: pathlib.Path, info: dict) -> str:
    paths = _paths(state_dir)
    lines = [f"lab running at {info['url']} (pid {info['pid']})", f"KUBECONFIG={paths['kubeconfig']}"]
    lines.append(f"K8S_AUTH_KUBECONFIG={paths['kubeconfig']}")
    if info.get("front_url"):
        lines.append(
            f"# kube-apiserver's own address, no faults. The fault knobs (python -m tests.lab faults) act on "
            f"{info['front_url']}, kubeconfig {paths['fault_kubeconfig']}; Harvester's API (harvester_url) "
            f"is {info['front_url']}"
        )
    if paths["s3env"].exists():
        lines.append(f"# S3 environment ({paths['s3env']}):")
        lines += paths["s3env"].read_text().splitlines()
    return "\n".join(lines)


def _serve_args(args: argparse.Namespace) -> list[str]:
    out = ["--state-dir", str(args.state_dir), "--port", str(args.port)]
    if args.no_s3:
        out.append("--no-s3")
    if args.dbinstance_group:
        out += ["--dbinstance-group", args.dbinstance_group]
    if args.dbinstance_version:
        out += ["--dbinstance-version", args.dbinstance_version]
    if args.kubedc_resync is not None:
        out += ["--kubedc-resync", str(args.kubedc_resync)]
    return out


def cmd_up(args: argparse.Namespace) -> int:
    state_dir = args.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    info = _running(state_dir)
    if info:
        print(_describe(state_dir, info))
        return 0
    _paths(state_dir)["info"].unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    with open(_paths(state_dir)["log"], "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.lab", "serve", *_serve_args(args)],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(
                f"the lab exited with status {proc.returncode}; see {_paths(state_dir)['log']}",
                file=sys.stderr,
            )
            return 1
        info = _read_info(state_dir)
        if info and info.get("pid") == proc.pid and _answers(info):
            print(_describe(state_dir, info))
            return 0
        time.sleep(0.1)
    proc.terminate()
    print(
        f"the lab did not answer within {STARTUP_TIMEOUT:.0f}s; see {_paths(state_dir)['log']}",
        file=sys.stderr,
    )
    return 1


def cmd_down(args: argparse.Namespace) -> int:
    info = _read_info(args.state_dir)
    if not info or not _alive(info["pid"]):
        _paths(args.state_dir)["info"].unlink(missing_ok=True)
        print("lab not running")
        return 0
    os.kill(info["pid"], signal.SIGTERM)
    deadline = time.monotonic() + SHUTDOWN_TIMEOUT
    while time.monotonic() < deadline and (_alive(info["pid"]) or _port_open(info["port"])):
        time.sleep(0.1)
    if _alive(info["pid"]):
        os.kill(info["pid"], signal.SIGKILL)
        while _alive(info["pid"]):
            time.sleep(0.1)
    _paths(args.state_dir)["info"].unlink(missing_ok=True)
    print("lab stopped")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    info = _running(args.state_dir)
    if not info:
        print("lab not running")
        return 3
    print(_describe(args.state_dir, info))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from . import Lab

    lab = Lab(
        args.state_dir,
        port=args.port,
        with_s3=not args.no_s3,
        dbinstance_group=args.dbinstance_group,
        dbinstance_version=args.dbinstance_version,
        kubedc_resync=args.kubedc_resync,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    lab.start()
    info_path = _paths(lab.state_dir)["info"]
    try:
        info = {
            "pid": os.getpid(),
            "url": lab.url,
            "front_url": lab.front_url,
            "port": lab.port,
            "token": lab.admin_token,
        }
        tmp = info_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(info))
        tmp.chmod(0o600)
        tmp.replace(info_path)
        print(
            f"lab serving at {lab.url}; kubeconfig {lab.kubeconfig}; fault proxy at {lab.front_url}, "
            f"kubeconfig {lab.fault_kubeconfig}",
            flush=True,
        )
        while not done.wait(1.0):
            pass
    finally:
        lab.stop()
        info_path.unlink(missing_ok=True)
    return 0


def _knob(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not KNOB=VALUE (e.g. commit_drop_rate=0.05)")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def cmd_faults(args: argparse.Namespace) -> int:
    """Show the fault knobs of the running lab, or set some (PUT /lab/faults with the admin token)."""
    info = _running(args.state_dir)
    if not info:
        print("lab not running", file=sys.stderr)
        return 3
    knobs = dict(args.knobs)
    if args.reset:
        knobs = {
            "conflict_rate": 0,
            "error_rate": 0,
            "latency_ms": 0,
            "drop_rate": 0,
            "commit_drop_rate": 0,
            "objects": {},
            **knobs,
        }
    front = info.get("front_url", info["url"])
    request = urllib.request.Request(
        front + "/lab/faults",
        data=json.dumps(knobs).encode() if knobs else None,
        method="PUT" if knobs else "GET",
        headers={"Authorization": f"Bearer {info['token']}", "Content-Type": "application/json"},
    )
    context = ssl._create_unverified_context() if front.startswith("https") else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            print(json.dumps(json.loads(resp.read()), indent=2, sort_keys=True))
        print(
            f"the knobs act on requests through the fault proxy {front} (kubeconfig "
            f"{_paths(args.state_dir)['fault_kubeconfig']}); kube-apiserver's own address {info['url']} "
            f"(kubeconfig {_paths(args.state_dir)['kubeconfig']}) has none",
            file=sys.stderr,
        )
    except urllib.error.HTTPError as exc:
        print(
            f"the lab refused the knobs: {json.loads(exc.read() or b'{}').get('message', exc)}",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lab", description="The lab Kubernetes API server.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (
        ("up", "start in the background and wait until it answers"),
        ("down", "stop the background lab and wait until its port is closed"),
        ("status", "say whether the lab runs (exit status 3 when not)"),
        ("serve", "run in the foreground"),
        ("faults", "show or set the fault knobs of the running lab"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--state-dir", type=pathlib.Path, default=pathlib.Path(".lab"))
        if name in ("up", "serve"):
            p.add_argument("--port", type=int, default=0)
            p.add_argument("--no-s3", action="store_true", help="do not start the loopback S3 server")
            p.add_argument("--dbinstance-group", default=os.environ.get("LAB_DBINSTANCE_GROUP"))
            p.add_argument("--dbinstance-version", default=os.environ.get("LAB_DBINSTANCE_VERSION"))
            p.add_argument(
                "--kubedc-resync",
                type=float,
                default=None,
                metavar="SECONDS",
                help="Kube-DC seeder resync (default: LAB_KUBEDC_RESYNC_SECONDS, else 900, the platform's)",
            )
        if name == "faults":
            p.add_argument(
                "--reset", action="store_true", help="clear every knob (then apply the given ones)"
            )
            p.add_argument("knobs", nargs="*", type=_knob, metavar="KNOB=VALUE")
    args = parser.parse_args(argv)
    args.state_dir = args.state_dir.resolve()
    handlers = {
        "up": cmd_up,
        "down": cmd_down,
        "status": cmd_status,
        "serve": cmd_serve,
        "faults": cmd_faults,
    }
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
