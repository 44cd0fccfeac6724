#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: console_screenshot
short_description: Take a KubeVirt VM's console screenshot and say what it shows
version_added: 0.1.0
description:
  - Reads the VNC screenshot of a running VirtualMachineInstance from KubeVirt's subresource
    C(/apis/subresources.kubevirt.io/v1/namespaces/<namespace>/virtualmachineinstances/<name>/vnc/screenshot),
    a PNG, with the same authentication as the other cluster-facing modules, and classifies it from its
    pixels alone (no OCR).
  - The classes are the Kube-DC operator guide's, so installing is told from wedged in the firmware.
    V(setup) is Windows' own screens (Setup, OOBE, a desktop, and also its dark screens whose content is
    centred or coloured, such as the boot logo). V(firmware) is the edk2 firmware's own interface, the
    Boot Manager menu (the selected entry a lit bar across the screen) or the setup browser (a flat
    light-grey body); the machine is wedged there. V(bootprompt) is mostly black with a little grey or
    white text from the left margin and no menu bar (firmware boot lines, or C(Press any key to boot from
    CD or DVD)) starting on the first rows. V(stop-error) is one flat blue over most of the screen (a Windows
    stop error), or Windows 11 24H2's black stop screen (light text on black, set in from the left margin
    and starting a fifth or more down the screen). V(blank) is
    a screen almost all black (no signal, powered off, between two boots). V(match:<name>) names one of
    O(references) whose average hash is within O(match_distance).
  - Earlier releases named V(setup) C(graphical) and V(bootprompt) C(text-console).
  - RV(fingerprint) is a 64-bit average hash of the screen. Given the previous fingerprint and when it was
    first seen, the module says how long the screen has not changed (RV(unchanged_for)) and whether that
    reaches O(stuck_after). The hash ignores small changes such as a progress counter, so a long static
    phase also reads as unchanged.
  - The module only reads. It never reports a change, even when it writes O(dest).
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - Pillow (on the controller), to decode the PNG
options:
  name:
    description:
      - Name of the VirtualMachineInstance; a VirtualMachine's instance has the VM's name.
    type: str
    required: true
  namespace:
    description:
      - Namespace of the VirtualMachineInstance.
    type: str
    required: true
  dest:
    description:
      - Save the screenshot, as received, to this path on the controller (parent directories are created).
        Not written in check mode.
    type: path
  references:
    description:
      - Reference screenshots, a name to a PNG path on the controller. When one's average hash is within
        O(match_distance) of the screenshot's, the class is V(match:<name>) (the nearest wins).
    type: dict
    default: {}
  match_distance:
    description:
      - Largest Hamming distance, in bits out of 64, between fingerprints that still match a reference.
    type: int
    default: 6
  previous_fingerprint:
    description:
      - RV(fingerprint) of the previous screenshot. With O(previous_time), the module returns
        RV(unchanged_for), RV(since) and RV(stuck).
    type: str
  previous_time:
    description:
      - When O(previous_fingerprint) was first seen, in seconds since the epoch (RV(since) of the previous
        run).
    type: float
  stuck_after:
    description:
      - Seconds of an unchanged fingerprint after which RV(stuck) is true. V(0) never reports stuck.
    type: int
    default: 1800
  move_cursor:
    description:
      - Ask KubeVirt to move the pointer before the screenshot (C(moveCursor=true)), which wakes a display the
        guest has put to sleep, so that a sleeping screen does not read as V(blank).
    type: bool
    default: false
  timeout:
    description:
      - Seconds to wait for the screenshot. KubeVirt itself gives up on the VNC server after 2 seconds.
    type: int
    default: 30
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  check_mode:
    support: full
    details:
      - Reads and classifies in check mode too; only O(dest) is not written.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Reads only; the result depends on what the guest shows.
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - "The RBAC it needs: get C(virtualmachineinstances) in C(kubevirt.io), and get
    C(virtualmachineinstances/vnc/screenshot) in C(subresources.kubevirt.io)."
  - The module fails when the instance does not exist or is not C(Running); RV(vmi_phase) then says which.
seealso:
  - module: goldenimage.pipeline.clone_gate
"""

EXAMPLES = r"""
- name: What does the build VM show?
  goldenimage.pipeline.console_screenshot:
    name: win11-bake
    namespace: golden-images-build
    dest: /var/tmp/bake/console.png
  register: shot

- name: Has it changed since the last look?
  goldenimage.pipeline.console_screenshot:
    name: win11-bake
    namespace: golden-images-build
    move_cursor: true
    previous_fingerprint: "{{ shot.fingerprint }}"
    previous_time: "{{ shot.since }}"
    stuck_after: 3600
    references:
      edk2-boot-manager: files/screens/edk2-boot-manager.png
  register: again

- name: Say so
  ansible.builtin.debug:
    msg: "{{ again['class'] }}, unchanged for {{ again.unchanged_for }}s"
"""

RETURN = r"""
class:
  description:
    - V(setup), V(firmware), V(bootprompt), V(stop-error), V(blank), or V(match:<name>) for a reference.
  returned: success
  type: str
  sample: setup
base_class:
  description: The class from the pixels, even when a reference matched.
  returned: success
  type: str
  sample: bootprompt
confidence:
  description:
    - From 0.5 (at a threshold) to 1.0 (far past it); for a match, the share of the 64 hash bits that agree.
  returned: success
  type: float
  sample: 0.93
fingerprint:
  description: Average hash of the screen, 16 hex digits.
  returned: success
  type: str
  sample: 00003e7e7e7e0000
match:
  description: Name of the matching reference; empty when none matched.
  returned: success
  type: str
  sample: ""
distance:
  description: Hamming distance to the matching reference.
  returned: when a reference matched
  type: int
  sample: 2
references:
  description: Hamming distance to each reference.
  returned: success
  type: dict
  sample: {"edk2-boot-manager": 23}
features:
  description: The measures the class was decided on (shares of dark, lit, grey and blue pixels, ...).
  returned: success
  type: dict
  sample: {"dark": 0.983, "lit": 0.012, "lit_grey": 1.0, "lit_left": 0.0, "blue": 0.0, "flat": 0.975}
width:
  description: Width of the screenshot in pixels.
  returned: success
  type: int
  sample: 1024
height:
  description: Height of the screenshot in pixels.
  returned: success
  type: int
  sample: 768
taken:
  description: When the screenshot was taken, in seconds since the epoch.
  returned: success
  type: float
  sample: 1764421923.52
unchanged_for:
  description: Seconds the screen has shown the same fingerprint (0 when it changed).
  returned: when O(previous_fingerprint) and O(previous_time) are given
  type: int
  sample: 1260
since:
  description: When the current fingerprint was first seen; pass it as O(previous_time) next time.
  returned: success
  type: float
  sample: 1764420663.1
stuck:
  description: Whether RV(unchanged_for) reached O(stuck_after).
  returned: when O(previous_fingerprint) and O(previous_time) are given
  type: bool
  sample: false
vmi_phase:
  description: Phase of the VirtualMachineInstance; empty when it does not exist.
  returned: always, unless the instance could not be read
  type: str
  sample: Running
dest:
  description: Where the screenshot was saved.
  returned: when O(dest) is given and not in check mode
  type: str
  sample: /var/tmp/bake/console.png
"""

import os
import tempfile
import time
import traceback

from ansible.module_utils.basic import missing_required_lib
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _screen, console

API_VERSION = "kubevirt.io/v1"
KIND = "VirtualMachineInstance"
SCREENSHOT_PATH = _screen.SCREENSHOT_PATH
FRAME_SIZE = _screen.FRAME_SIZE
PILLOW_REASON = _screen.PILLOW_REASON
MissingPillow = _screen.MissingPillow
NotAnImage = _screen.NotAnImage
frame_from_png = _screen.frame_from_png


def argument_spec():
    return dict(
        name=dict(type="str", required=True),
        namespace=dict(type="str", required=True),
        dest=dict(type="path"),
        references=dict(type="dict", default={}),
        match_distance=dict(type="int", default=console.DEFAULT_MATCH_DISTANCE),
        previous_fingerprint=dict(type="str"),
        previous_time=dict(type="float"),
        stuck_after=dict(type="int", default=1800),
        move_cursor=dict(type="bool", default=False),
        timeout=dict(type="int", default=30),
    )


class Screenshot(object):
    """Read one instance's console into a file, judge it, and return the result (never exits)."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.where = "%s/%s" % (self.p["namespace"], self.p["name"])

    def decode(self, source, what, **extra):
        try:
            return frame_from_png(source)
        except MissingPillow as exc:
            raise PipelineError(
                missing_required_lib("Pillow", reason=PILLOW_REASON),
                exception=traceback.format_exc(),
                **extra,
            ) from exc
        except NotAnImage as exc:
            raise PipelineError("%s is not a PNG image: %s" % (what, exc), **extra) from exc

    def reference_prints(self, **extra):
        prints = {}
        for name, path in sorted((self.p["references"] or {}).items()):
            if not os.path.isfile(path):
                raise PipelineError("reference %s: cannot read %s: no such file" % (name, path), **extra)
            frame, _size = self.decode(path, "reference %s (%s)" % (name, path), **extra)
            prints[name] = console.average_hash(frame)
        return prints

    def fetch_png(self, handle, phase):
        """Stream the screenshot into ``handle``: it never sits whole in memory."""
        try:
            p = self.p
            _screen.download(self.module, p["namespace"], p["name"], handle, p["timeout"], p["move_cursor"])
        except PipelineError as exc:
            exc.fields["vmi_phase"] = phase
            raise

    def run(self):
        p = self.p
        console.check_options(p["match_distance"], p["timeout"], p["stuck_after"])
        vmi = self.module.get(API_VERSION, KIND, p["name"], p["namespace"])
        phase = console.running_phase(KIND, self.where, vmi)
        keep = bool(p["dest"]) and not self.module.check_mode
        folder = os.path.dirname(os.path.abspath(p["dest"])) if keep else None
        if folder and not os.path.isdir(folder):
            try:
                os.makedirs(folder)
            except OSError as exc:
                raise PipelineError("cannot write the screenshot to %s: %s" % (p["dest"], exc)) from exc
        handle, partial = tempfile.mkstemp(prefix=".console-", suffix=".png", dir=folder)
        try:
            with os.fdopen(handle, "wb") as out:
                self.fetch_png(out, phase)
            taken = time.time()
            result = self.judge(partial, taken, phase)
            if keep:
                try:
                    os.rename(partial, p["dest"])
                except OSError as exc:
                    raise PipelineError(
                        "cannot write the screenshot to %s: %s" % (p["dest"], exc), **result
                    ) from exc
                result["dest"] = p["dest"]
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        return result

    def judge(self, path, taken, phase):
        p = self.p
        frame, (width, height) = self.decode(path, "the screenshot of %s" % self.where, vmi_phase=phase)
        prints = self.reference_prints(vmi_phase=phase)
        verdict = console.judge(frame, prints, p["match_distance"])
        result = dict(
            changed=False,
            vmi_phase=phase,
            width=width,
            height=height,
            taken=round(taken, 3),
            references={name: console.hamming(verdict["fingerprint"], fp) for name, fp in prints.items()},
        )
        result.update((key, value) for key, value in verdict.items() if key != "distance")
        if verdict["distance"] is not None:
            result["distance"] = verdict["distance"]
        held = console.unchanged(
            verdict["fingerprint"], p["previous_fingerprint"], p["previous_time"], taken, p["stuck_after"]
        )
        result["since"] = round(held["since"], 3)
        if p["previous_fingerprint"] is not None and p["previous_time"] is not None:
            result.update(unchanged_for=held["unchanged_for"], stuck=held["stuck"])
        return result


def main():
    module = KubeModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        required_together=[("previous_fingerprint", "previous_time")],
    )
    run_module(module, lambda: Screenshot(module).run())


if __name__ == "__main__":
    main()
