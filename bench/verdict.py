"""Verdict and ratio lines the benches print: each figure against its baseline and against its goal.

Pure functions of measured numbers (the unit tests run them on fixed figures). A verdict says PASS or
FAIL only when the figure was measured at the scale its goal names; a smaller (smoke) run says so
instead of passing or failing a goal it did not measure.
"""

from __future__ import annotations

import itertools

# 10x the objects may take at most 11x the time: growth within 10% of linear.
LINEAR_SLACK = 1.1


def number(value: float) -> str:
    """A figure with three significant digits, without an exponent."""
    if abs(value) >= 100:
        return "%.0f" % value
    return "%.3g" % value


def amount(value: float, unit: str = "") -> str:
    """``8.1 s``, ``9.7x``, ``0.8``: a figure with its unit (a ratio's ``x`` is written close)."""
    if not unit:
        return number(value)
    return "%s%s%s" % (number(value), "" if unit == "x" else " ", unit)


def verdict(
    label: str, value: float, goal: float, unit: str = "", test: str = "<=", scale_note: str = ""
) -> str:
    """``label: value unit (goal <= goal unit): PASS|FAIL``; ``test`` is ``<=``, ``<`` or ``>=``.

    ``scale_note`` (non-empty when the run was smaller than the goal's scale) replaces PASS/FAIL.
    """
    passed = {"<=": value <= goal, "<": value < goal, ">=": value >= goal}[test]
    state = ("PASS" if passed else "FAIL") if not scale_note else "not judged (%s)" % scale_note
    return "%s: %s (goal %s %s): %s" % (label, amount(value, unit), test, amount(goal, unit), state)


def scale_note(measured: int, goal_scale: int, what: str) -> str:
    """Empty when ``measured`` reaches the goal's scale, else why the goal is not judged."""
    if measured >= goal_scale:
        return ""
    return "goal is at %d %s, measured at %d" % (goal_scale, what, measured)


def ratio(
    label: str, baseline: float, measured: float, unit: str = "s", baseline_name: str = "baseline"
) -> str:
    """``label: measured against baseline_name baseline: ratio x`` (baseline / measured)."""
    return "%s: %s against %s %s: %.2fx" % (
        label,
        amount(measured, unit),
        baseline_name,
        amount(baseline, unit),
        baseline / max(measured, 1e-9),
    )


def growth(label: str, n0: int, n1: int, t0: float, t1: float, slack: float = LINEAR_SLACK) -> str:
    """``label n0->n1: Tx time for Nx objects (goal <= slack*N x): PASS|FAIL``: linear within ``slack``."""
    objects = n1 / n0
    return verdict(
        "%s %d->%d (%sx objects)" % (label, n0, n1, number(objects)),
        t1 / max(t0, 1e-9),
        slack * objects,
        "x",
    )


# --------------------------------------------------------------- the goals of each bench, one function each

GOLDEN_INFO_SECONDS, GOLDEN_INFO_SCALE = 10.0, 50_000
DRIFT_SECONDS, DRIFT_SCALE = 30.0, 100_000
SEAL_SECONDS, SEAL_BYTES = 0.25, 8 * 1024 * 1024
MIRROR_SPEEDUP, MIRROR_CPU_MS_PER_MIB = 2.0, 2.5
STARTUP_CPU_RATIO, STARTUP_SCALE = 0.8, 500


def fleet_lines(what: str, unit: str, goal: float, goal_scale: int, steps: list) -> list[str]:
    """``steps``: (objects, baseline seconds, seconds) by increasing size. Each size against the baseline,
    the largest against the goal's seconds, and the growth between sizes (a fleet of 0 has none)."""
    lines = [
        ratio("%s %d %s" % (what, count, unit), old, new, baseline_name="the dynamic client's")
        for count, old, new in steps
    ]
    count, _old, new = steps[-1]
    lines.append(
        verdict(
            "%s %d %s" % (what, count, unit), new, goal, "s", scale_note=scale_note(count, goal_scale, unit)
        )
    )
    sized = [step for step in steps if step[0]]
    for (n0, _, t0), (n1, _, t1) in itertools.pairwise(sized):
        lines.append(growth("%s growth" % what, n0, n1, t0, t1))
    return lines


def floor_lines(what: str, unit: str, steps: list) -> list[str]:
    """``steps``: (objects, API server floor seconds, module seconds) by increasing size: how much of the
    module's time is the API server answering the same pages, and how each part grows."""
    lines = [
        "%s %d %s: API server floor %s of %s; the module's own share %s (%.0f%%)"
        % (
            what,
            count,
            unit,
            amount(floor, "s"),
            amount(total, "s"),
            amount(total - floor, "s"),
            100.0 * (total - floor) / max(total, 1e-9),
        )
        for count, floor, total in steps
    ]
    sized = [step for step in steps if step[0]]
    for (n0, f0, t0), (n1, f1, t1) in itertools.pairwise(sized):
        lines.append(
            "API server floor growth %d->%d (%sx objects): %.2fx"
            % (n0, n1, number(n1 / n0), f1 / max(f0, 1e-9))
        )
        if t0 > f0 and t1 > f1:  # a share within the noise of the floor has no growth to judge
            lines.append(growth("%s own share growth" % what, n0, n1, t0 - f0, t1 - f1))
    return lines


def own_cpu_lines(what: str, unit: str, goal: float, goal_scale: int, steps: list) -> list[str]:
    """``steps``: (objects, CPU seconds of the module's process, CPU seconds of the API server and etcd) by
    increasing size. The module's own cost, judged against the goal's seconds apart from the server it
    waits on (which on a cluster runs on its own nodes), and its growth."""
    lines = [
        "%s %d %s: the module's cpu %s in its process; kube-apiserver and etcd %s"
        % (what, count, unit, amount(cpu, "s"), amount(server, "s"))
        for count, cpu, server in steps
    ]
    count, cpu, _server = steps[-1]
    lines.append(
        verdict(
            "%s %d %s, the module's own cpu" % (what, count, unit),
            cpu,
            goal,
            "s",
            scale_note=scale_note(count, goal_scale, unit),
        )
    )
    sized = [step for step in steps if step[0]]
    for (n0, c0, _), (n1, c1, _) in itertools.pairwise(sized):
        lines.append(growth("%s own cpu growth" % what, n0, n1, c0, c1))
    return lines


def golden_info_lines(steps: list) -> list[str]:
    """golden_info in process: (projects, dynamic-client seconds, raw-page seconds) by size."""
    return fleet_lines("golden_info", "projects", GOLDEN_INFO_SECONDS, GOLDEN_INFO_SCALE, steps)


def golden_info_cpu_lines(steps: list) -> list[str]:
    """golden_info in process: (projects, the module's cpu seconds, the API server's cpu seconds) by size."""
    return own_cpu_lines("golden_info", "projects", GOLDEN_INFO_SECONDS, GOLDEN_INFO_SCALE, steps)


def drift_lines(steps: list) -> list[str]:
    """The drift report: (DBInstances, dynamic-client seconds, raw-page seconds) by size."""
    return fleet_lines("drift report", "DBInstances", DRIFT_SECONDS, DRIFT_SCALE, steps)


def seal_lines(rows: list) -> list[str]:
    """seal_verify in a fresh process, the image's pages evicted: (data GiB, seconds, bytes read, the seed's
    seconds likewise) by size."""
    lines = []
    for gib, seconds, read, seed in rows:
        label = "seal_verify fresh process, image cold, %d GiB data" % gib
        lines.append(ratio(label, seed, seconds, baseline_name="the seed's convert-and-read"))
        lines.append(verdict(label, seconds, SEAL_SECONDS, "s"))
        lines.append(
            verdict(label + ", bytes read", read / 1024 / 1024, SEAL_BYTES / 1024 / 1024, "MiB", "<")
        )
    return lines


def mirror_lines(
    capped_put: float, capped_mirror: float, loopback_cpu_ms: float, cap_mib: float
) -> list[str]:
    """The mirror against one put_object on the capped link (seconds each), and its client CPU per MiB
    on loopback."""
    speedup = capped_put / max(capped_mirror, 1e-9)
    return [
        ratio(
            "mirror, capped %g MiB/s a connection" % cap_mib,
            capped_put,
            capped_mirror,
            baseline_name="one put_object",
        ),
        verdict("mirror speed-up over one put_object, capped link", speedup, MIRROR_SPEEDUP, "x", ">="),
        verdict("mirror client cpu, loopback", loopback_cpu_ms, MIRROR_CPU_MS_PER_MIB, "ms/MiB"),
    ]


def startup_lines(steps: list) -> list[str]:
    """A whole read task against kubernetes.core.k8s_info: (objects, golden_info cpu s, k8s_info cpu s,
    median of the paired golden_info/k8s_info cpu ratios) by size."""
    lines = []
    for count, ours, theirs, paired in steps:
        label = "golden_info task cpu against k8s_info, %d objects" % count
        lines.append(ratio(label, theirs, ours, baseline_name="kubernetes.core.k8s_info"))
        note = scale_note(count, STARTUP_SCALE, "objects")
        lines.append(verdict(label + ", paired ratio", paired, STARTUP_CPU_RATIO, scale_note=note))
    return lines
