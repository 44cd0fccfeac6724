"""The collector pause around fleet-sized reads: nested pauses restore the state they found."""

import gc

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._gc import paused_gc


def test_pauses_nest_and_restore():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_still_restores_the_collector():
    try:
        with paused_gc():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()
