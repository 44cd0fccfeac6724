# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Run goldenimage.pipeline.baked_image round after round until Harvester has imported the image,
printing each round's line (phase, progress, elapsed).

The first round registers the image (or finds it); the later ones see it, write nothing and continue the
wait, and the one that sees it imported records the catalog. The result is therefore the first round's
(what was written, the image's diff) updated with the last round's, and its diff lists the changes of
every round (the catalog's comes with the last one).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.plugin_utils._progress import PollingAction


class ActionModule(PollingAction):
    MODULE = "goldenimage.pipeline.baked_image"
    KEEP_FIRST = True

    def run(self, tmp=None, task_vars=None):
        self._diffs = []
        result = super(ActionModule, self).run(tmp, task_vars)
        if self._diffs:
            result["diff"] = self._diffs
        return result

    def in_background(self, args):
        # The upload of src is one request: it runs as an async job that reports how far it got.
        return (
            bool(args.get("src")) and not args.get("uploaded") and args.get("state", "present") == "present"
        )

    def seen_round(self, out):
        diff = out.get("diff")
        self._diffs.extend(diff if isinstance(diff, list) else [diff] if diff else [])
