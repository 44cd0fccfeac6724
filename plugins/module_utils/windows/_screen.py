# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Reading a VM's console: KubeVirt's VNC screenshot subresource, decoded with Pillow into the small
frame console.py judges. What the frame shows is console.py's to say."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import console

SCREENSHOT_PATH = (
    "/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{name}/vnc/screenshot"
)
# Frames are box-averaged down to this size before classification: enough for text strokes to survive.
FRAME_SIZE = (256, 192)
PILLOW_REASON = "to decode the console screenshot; install Pillow (pip install Pillow) on the controller"


class MissingPillow(PipelineError):
    """Pillow is not installed on the controller."""


class NotAnImage(PipelineError):
    """The answer is not a PNG image; the message says what it is."""


def pillow_image():
    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingPillow(str(exc)) from exc
    return Image


def frame_from_png(data):
    """``(Frame, (width, height))`` of a PNG (bytes, or a path): RGB, box-averaged to at most FRAME_SIZE."""
    image_module = pillow_image()
    try:
        with image_module.open(io.BytesIO(data) if isinstance(data, bytes) else data) as image:
            if image.format != "PNG":
                raise NotAnImage("a %s image, not a PNG" % image.format)
            rgb = image.convert("RGB")
    except (OSError, SyntaxError, ValueError) as exc:
        raise NotAnImage(str(exc) or type(exc).__name__) from exc
    size = rgb.size
    factor = max(1, -(-size[0] // FRAME_SIZE[0]), -(-size[1] // FRAME_SIZE[1]))
    if factor > 1:
        rgb = rgb.reduce(factor)
    return console.Frame(rgb.width, rgb.height, rgb.tobytes()), size


def download(module, namespace, name, handle, timeout, move_cursor=False):
    """Stream one screenshot of ``namespace/name`` into the open binary ``handle``."""
    return module.download(
        SCREENSHOT_PATH.format(namespace=namespace, name=name),
        handle,
        query=[("moveCursor", "true")] if move_cursor else [],
        headers={"Accept": "image/png"},
        timeout=timeout,
        limit=console.MAX_SCREENSHOT_BYTES,
        action="read the console of VirtualMachineInstance %s/%s" % (namespace, name),
    )


def last_screen(module, namespace, name, timeout=10):
    """What the console of ``namespace/name`` shows now: console.judge's verdict, or ``{"error": why}``."""
    buffer = io.BytesIO()
    try:
        download(module, namespace, name, buffer, timeout)
        frame, _size = frame_from_png(buffer.getvalue())
    except MissingPillow as exc:
        return {"error": "Pillow is missing (%s)" % exc}
    except NotAnImage as exc:
        return {"error": "not a PNG image: %s" % exc}
    except Exception as exc:  # a PipelineError from the API, said in one line
        return {"error": getattr(exc, "msg", None) or str(exc)}
    return console.judge(frame)
