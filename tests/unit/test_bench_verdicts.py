"""The verdict and ratio lines the benches print, on fixed figures (the benchmarks themselves are not run)."""

from __future__ import annotations

from bench import verdict


def test_a_figure_within_its_goal_passes_and_one_beyond_it_fails():
    assert verdict.verdict("golden_info 50000 projects", 8.1, 10, "s") == (
        "golden_info 50000 projects: 8.1 s (goal <= 10 s): PASS"
    )
    assert verdict.verdict("golden_info 50000 projects", 10.4, 10, "s").endswith(": FAIL")
    assert verdict.verdict("speed-up", 2.27, 2, "x", ">=") == "speed-up: 2.27x (goal >= 2x): PASS"
    assert verdict.verdict("speed-up", 1.9, 2, "x", ">=").endswith(": FAIL")
    assert verdict.verdict("read", 8, 8, "MiB", "<").endswith("(goal < 8 MiB): FAIL")


def test_a_run_below_the_goals_scale_is_not_judged():
    note = verdict.scale_note(500, 50_000, "projects")
    line = verdict.verdict("golden_info 500 projects", 0.08, 10, "s", scale_note=note)
    assert line == (
        "golden_info 500 projects: 0.08 s (goal <= 10 s): "
        "not judged (goal is at 50000 projects, measured at 500)"
    )
    assert verdict.scale_note(100_000, 100_000, "DBInstances") == ""


def test_growth_is_judged_against_linear_with_ten_percent_slack():
    assert (
        verdict.growth("growth", 5000, 50000, 1.0, 9.7)
        == "growth 5000->50000 (10x objects): 9.7x (goal <= 11x): PASS"
    )
    assert verdict.growth("growth", 5000, 50000, 1.0, 11.5).endswith(": FAIL")
    assert verdict.growth("growth", 100, 1000, 0.5, 5.4).endswith("(goal <= 11x): PASS")


def test_golden_info_lines_give_the_ratio_at_each_size_the_goal_and_the_growth():
    lines = verdict.golden_info_lines([(5000, 4.2, 1.24), (50000, 41, 8.1)])
    assert lines == [
        "golden_info 5000 projects: 1.24 s against the dynamic client's 4.2 s: 3.39x",
        "golden_info 50000 projects: 8.1 s against the dynamic client's 41 s: 5.06x",
        "golden_info 50000 projects: 8.1 s (goal <= 10 s): PASS",
        "golden_info growth 5000->50000 (10x objects): 6.53x (goal <= 11x): PASS",
    ]
    slow = verdict.golden_info_lines([(5000, 4.2, 1.0), (50000, 41, 12.0)])
    assert slow[2].endswith(": FAIL") and slow[3].endswith("12x (goal <= 11x): FAIL")


def test_golden_info_cpu_lines_judge_the_modules_own_cpu_apart_from_the_api_servers():
    lines = verdict.golden_info_cpu_lines([(5000, 0.6, 1.5), (50000, 6.2, 16.0)])
    assert lines == [
        "golden_info 5000 projects: the module's cpu 0.6 s in its process; kube-apiserver and etcd 1.5 s",
        "golden_info 50000 projects: the module's cpu 6.2 s in its process; kube-apiserver and etcd 16 s",
        "golden_info 50000 projects, the module's own cpu: 6.2 s (goal <= 10 s): PASS",
        "golden_info own cpu growth 5000->50000 (10x objects): 10.3x (goal <= 11x): PASS",
    ]
    slow = verdict.golden_info_cpu_lines([(5000, 0.6, 1.5), (50000, 10.5, 16.0)])
    assert slow[2].endswith(": FAIL") and slow[3].endswith("17.5x (goal <= 11x): FAIL")
    small = verdict.golden_info_cpu_lines([(50, 0.01, 0.02), (500, 0.08, 0.3)])
    assert small[2].endswith("not judged (goal is at 50000 projects, measured at 500)")


def test_floor_lines_split_the_module_time_into_the_api_servers_part_and_its_own():
    lines = verdict.floor_lines("golden_info", "projects", [(5000, 2.0, 3.0), (50000, 30.0, 12.0 + 30.0)])
    assert lines == [
        "golden_info 5000 projects: API server floor 2 s of 3 s; the module's own share 1 s (33%)",
        "golden_info 50000 projects: API server floor 30 s of 42 s; the module's own share 12 s (29%)",
        "API server floor growth 5000->50000 (10x objects): 15.00x",
        "golden_info own share growth 5000->50000 (10x objects): 12x (goal <= 11x): FAIL",
    ]
    for noisy in ([(50, 0.05, 0.04), (500, 0.12, 0.2)], [(5000, 1.7, 2.4), (50000, 38.8, 34.2)]):
        assert not any("own share growth" in line for line in verdict.floor_lines("g", "projects", noisy))


def test_drift_lines_skip_the_growth_from_an_empty_fleet():
    lines = verdict.drift_lines([(0, 1.1, 1.0), (10000, 10.7, 3.0), (100000, 115, 29.0)])
    assert lines[0] == "drift report 0 DBInstances: 1 s against the dynamic client's 1.1 s: 1.10x"
    assert "drift report 100000 DBInstances: 29 s (goal <= 30 s): PASS" in lines
    assert [line for line in lines if "growth" in line] == [
        "drift report growth 10000->100000 (10x objects): 9.67x (goal <= 11x): PASS"
    ]
    assert verdict.drift_lines([(1000, 4.9, 2.0)])[-1].endswith(
        "not judged (goal is at 100000 DBInstances, measured at 1000)"
    )


def test_seal_lines_judge_time_and_bytes_and_give_the_seeds_ratio():
    lines = verdict.seal_lines([(4, 0.2, 3 * 1024 * 1024, 5.8)])
    assert lines == [
        "seal_verify fresh process, image cold, 4 GiB data: 0.2 s against the seed's convert-and-read 5.8 s: "
        "29.00x",
        "seal_verify fresh process, image cold, 4 GiB data: 0.2 s (goal <= 0.25 s): PASS",
        "seal_verify fresh process, image cold, 4 GiB data, bytes read: 3 MiB (goal < 8 MiB): PASS",
    ]
    late = verdict.seal_lines([(8, 0.65, 9 * 1024 * 1024, 5.8)])
    assert late[1].endswith(": FAIL") and late[2].endswith(": FAIL")


def test_mirror_lines_judge_the_speed_up_on_the_capped_link_and_the_cpu_per_mib():
    lines = verdict.mirror_lines(capped_put=10.0, capped_mirror=4.0, loopback_cpu_ms=2.1, cap_mib=25)
    assert lines == [
        "mirror, capped 25 MiB/s a connection: 4 s against one put_object 10 s: 2.50x",
        "mirror speed-up over one put_object, capped link: 2.5x (goal >= 2x): PASS",
        "mirror client cpu, loopback: 2.1 ms/MiB (goal <= 2.5 ms/MiB): PASS",
    ]
    slow = verdict.mirror_lines(capped_put=10.0, capped_mirror=6.0, loopback_cpu_ms=5.4, cap_mib=25)
    assert slow[1].endswith(": FAIL") and slow[2].endswith(": FAIL")


def test_startup_lines_judge_the_paired_cpu_ratio_from_500_objects():
    lines = verdict.startup_lines([(50, 1.0, 1.1, 0.9), (500, 1.6, 2.2, 0.73), (5000, 2.0, 2.3, 0.87)])
    assert lines[0] == (
        "golden_info task cpu against k8s_info, 50 objects: 1 s against kubernetes.core.k8s_info 1.1 s: 1.10x"
    )
    assert lines[1].endswith("not judged (goal is at 500 objects, measured at 50)")
    assert (
        lines[3]
        == "golden_info task cpu against k8s_info, 500 objects, paired ratio: 0.73 (goal <= 0.8): PASS"
    )
    assert lines[5].endswith("0.87 (goal <= 0.8): FAIL")


def test_boot_to_ready_keeps_every_run_and_judges_the_medians():
    from bench import boot_to_ready

    def run(ready, cow):
        return {"boot_to_ready_s": ready, "cow_delta_bytes": cow, "guest_agent_s": 5.0}

    mib = 1024 * 1024
    baked = boot_to_ready.summary([run(20.0, 10 * mib), run(22.0, 12 * mib), run(40.0, 11 * mib)])
    apt = boot_to_ready.summary([run(200.0, 900 * mib), run(180.0, 950 * mib), run(210.0, 980 * mib)])
    assert baked["boot_to_ready_s"] == {"median": 22.0, "min": 20.0, "max": 40.0}
    assert len(baked["runs"]) == 3
    results = {
        "scenarios": {"baked": baked, "apt": apt},
        "ratios": {"boot_to_ready": 200.0 / 22.0, "cow_delta": 950 / 11},
    }
    assert boot_to_ready.goal_lines(results) == [
        "boot-to-ready, apt at first boot / baked (medians): 9.09x (goal >= 8x): PASS",
        "COW delta of the baked VM (median): 11 MiB (goal <= 64 MiB): PASS",
    ]


def test_boot_to_ready_times_the_first_answer_even_while_an_earlier_probe_still_waits():
    """A probe sent before the guest had an address waits on QEMU's SYN retransmits (here 1 s); the answer
    the guest can give from 0.3 s on is timed then, not when the waiting probe gives up."""
    import time

    from bench import boot_to_ready

    start = time.monotonic()

    class Guest:
        def alive(self):
            return True

        def elapsed(self):
            return time.monotonic() - start

    def probe():
        if time.monotonic() - start < 0.3:
            time.sleep(1.0)
            return None
        return "ready"

    watch = boot_to_ready.FirstAnswer(Guest(), probe, lambda reply: reply == "ready", interval=0.05)
    watch.start()
    watch.join(5)
    assert watch.last == "ready"
    assert 0.3 <= watch.at <= 0.6, watch.at


def test_boot_to_ready_says_when_no_guest_agent_answered_before_postgresql():
    from bench import boot_to_ready

    runs = [{"boot_to_ready_s": 21.7, "cow_delta_bytes": 1, "guest_agent_s": None}] * 3
    assert boot_to_ready.summary(runs)["guest_agent_s"] is None
