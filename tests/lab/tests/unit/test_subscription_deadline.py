"""A watch subscription's timed read returns when its deadline passes, however late the thread runs.

A controller runner takes events with short timeouts; a read that outlives its timeout holds the
controller until some unrelated event arrives, which in a quiet lab can be minutes. The lateness is
made deterministic with a clock shim (every monotonic reading 150 us after the one before), so the
deadline has always passed by the time the read checks it again.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[4]

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>

static long long late_ns;

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && id == CLOCK_MONOTONIC) {
        late_ns += 150000;
        long long ns = (long long)ts->tv_nsec + late_ns;
        ts->tv_sec += ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return rc;
}
"""

CHILD = """
from tests.lab.apistore import ApiSubscription
sub = ApiSubscription(None, set())
sub._queue.put("event")
assert sub.get_shared(timeout=0.0001) == "event"
assert sub.get_shared(timeout=0.0001) is None
print("returned")
"""


def test_a_late_thread_still_gets_its_timeout(tmp_path):
    source, shim = tmp_path / "late_clock.c", tmp_path / "late_clock.so"
    source.write_text(SHIM)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(source), "-ldl"], check=True)
    env = dict(os.environ, LD_PRELOAD=str(shim))
    try:
        run = subprocess.run(
            [sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("get_shared(timeout=0.0001) was still blocked after 10 s") from None
    assert run.returncode == 0 and "returned" in run.stdout, run.stderr
