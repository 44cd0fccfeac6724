"""The report of a mirror run: totals, throughput and one line per image, computed in Python, not Jinja."""

from ansible_collections.goldenimage.pipeline.plugins.filter.mirror import mirror_report


def test_mirror_report_totals_the_copied_and_skipped_images():
    results = [
        {"key": "a/1/x.iso", "bytes_moved": 3145728, "seconds": 1.5, "parts": 1, "throughput_mib_s": 2.0},
        {"key": "b/2/y.iso", "skipped": True, "bytes_moved": 0, "seconds": 0.2},
        {"key": "c/3/z.iso", "bytes_moved": 1048576, "seconds": 0.5, "parts": 2, "throughput_mib_s": 2.0},
    ]
    report = mirror_report(results)
    assert report == {
        "images": 3,
        "copied": 2,
        "skipped": 1,
        "bytes_moved": 4194304,
        "seconds": 2.2,
        "throughput_mib_s": round(4 / 2.2, 2),
        "lines": [
            "a/1/x.iso: 3145728 bytes in 1 parts at 2.0 MiB/s",
            "b/2/y.iso: already mirrored, skipped",
            "c/3/z.iso: 1048576 bytes in 2 parts at 2.0 MiB/s",
        ],
    }


def test_mirror_report_of_nothing_moved_has_no_throughput():
    assert mirror_report([])["throughput_mib_s"] == 0.0
    assert mirror_report(None)["images"] == 0
