# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The module side of a round that runs as an async job: progress lines appended to the file the action
plugin prints from (plugin_utils/_progress.py). I/O."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os


def append_line(path, line):
    """One whole line per write, so a reader never sees half of one as complete."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "a") as out:
        out.write(line + "\n")
