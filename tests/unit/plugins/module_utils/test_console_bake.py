"""The bake's console rules in console.py: news, fatal screens, what is remembered, when to give up."""

from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import console


def shot(cls="setup", base=None, fingerprint="00ff00ff00ff00ff", **extra):
    found = {"class": cls, "base_class": base or cls, "confidence": 0.9, "since": 10.0}
    if fingerprint:
        found["fingerprint"] = fingerprint
    found.update(extra)
    return found


def seen(memory, *shots):
    for taken in shots:
        memory = console.remember(memory, taken, running=True)
    return memory


def test_a_new_class_a_failure_or_a_first_stuck_is_news():
    memory = seen(console.bake_memory(True), shot())
    assert not console.shot_news(memory, shot(), 20.0, 1800, 1000.0)
    assert console.shot_news(memory, shot("blank"), 20.0, 1800, 1000.0)
    assert console.shot_news(memory, {"msg": "lab: 500"}, 20.0, 1800, 1000.0)
    assert console.shot_news(memory, shot(stuck=True), 20.0, 1800, 1000.0)
    assert not console.shot_news(seen(memory, shot(stuck=True)), shot(stuck=True), 20.0, 1800, 1000.0)
    assert console.shot_news(memory, shot(), 1000.0, 1800, 1000.0)  # the deadline


def test_a_new_picture_is_news_after_half_of_stuck_after():
    memory = dict(seen(console.bake_memory(True), shot()), round_started=0.0)
    moved = shot(fingerprint="ffffffff00000000")
    assert not console.shot_news(memory, moved, 899.0, 1800, 10000.0)
    assert console.shot_news(memory, moved, 900.0, 1800, 10000.0)
    assert not console.shot_news(memory, moved, 5000.0, 0, 10000.0)  # 0: never


def test_fatal_screens():
    fresh = console.bake_memory(True)
    assert console.shot_fatal(fresh, shot("stop-error")) == "stop-error"
    # Text once is the firmware's line of every boot; text twice after Windows drew its screens is a loop.
    assert console.shot_fatal(fresh, shot("bootprompt")) is None
    drawn_then_text = seen(fresh, shot(), shot("bootprompt"))
    assert console.shot_fatal(drawn_then_text, shot("bootprompt")) == "reinstall"
    never_drawn = seen(fresh, shot("bootprompt"))
    assert console.shot_fatal(never_drawn, shot("bootprompt")) is None
    assert console.shot_fatal(seen(fresh, shot()), shot("match:setup", base="bootprompt")) is None


def test_failed_screenshots_count_while_running_and_then_give_up():
    memory = console.bake_memory(True)
    for n in range(console.MAX_SCREEN_ERRORS):
        assert console.give_up(memory) is None
        assert console.note(
            {"msg": "lab: 500"}, memory, running=True
        ) == "console unreadable (%d of 3): lab: 500" % (n + 1)
        memory = console.remember(memory, {"msg": "lab: 500"}, running=True)
    assert console.give_up(memory) == "the last 3 failed"
    assert console.remember(memory, {"msg": "gone"}, running=False)["errors"] == 0
    assert console.note({"msg": "gone"}, memory, running=False) == ""


def test_notes_and_messages():
    assert console.note(shot(stuck=True, unchanged_for=1900), console.bake_memory(True), True) == (
        "console setup (0.9), unchanged for 1900s"
    )
    assert console.stop_error_message("ns/vm", 61, "/srv/c").endswith(
        "the stop code is on the screen, saved in /srv/c."
    )
    assert "the installer CD is booting before the disk" in console.reinstall_message("ns/vm", 61)
