# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The interpreter's cyclic garbage collector, paused around fleet-sized reads and reports."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import gc


@contextlib.contextmanager
def paused_gc():
    """Run a block with the cyclic garbage collector paused (reentrant).

    Parsing a list of tens of thousands of objects makes millions of containers; each allocation
    burst would trigger full collections over everything already parsed, which makes parsing grow
    faster than the list. Parsed JSON holds no reference cycles, so reference counting frees it.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
