"""KubeVirt's VNC screenshot subresource in the lab: a real PNG of what the guest's screen would show.

Served as virt-api serves it, behind kube-apiserver's aggregation layer (the APIService
``v1.subresources.kubevirt.io``, apiserver.py): the lab's listener answers the aggregator's requests
(front.py), the caller named by it in X-Remote-User, and discovery for the group version so the
APIService is Available.

    GET /apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}/vnc/screenshot

answers as virt-api does: 404 NotFound when the VMI does not exist, 400 BadRequest "VMI is not running"
when it is not Running and "No graphics devices are present." when `autoattachGraphicsDevice` is
false; otherwise 200 with `image/png`. The query parameter `moveCursor` is accepted (the lab's screen
never sleeps). The screen is chosen by the annotation `lab.goldenimage.io/console` on the VM (read on
every request, so a test can change it while the guest runs), else on the VMI: `blank`, `text`
(firmware lines and "Press any key to boot from CD or DVD" at the top left), `stop-error` (a Windows
stop error) or `graphical` (a Setup window; the default). Images are drawn with Pillow.

The same virt-api serves `.../virtualmachineinstances/{name}/filesystemlist`, the guest agent's
filesystems (guestagent.py), 409 Conflict while the agent is not connected.
"""

from __future__ import annotations

import functools
import io
import json

from ..extensions import add_route
from ..objects import ApiError
from . import Controller, LabContext
from .guestagent import filesystems

SUBRESOURCE_GROUP = "subresources.kubevirt.io"
GROUP_VERSION = "/apis/subresources.kubevirt.io/v1"
PREFIX = GROUP_VERSION + "/namespaces/"
# What virt-api lists for the group version (the subresources the lab serves).
DISCOVERY = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "subresources.kubevirt.io/v1",
    "resources": [
        {"name": name, "singularName": "", "namespaced": True, "kind": kind, "verbs": ["get"]}
        for name, kind in (
            ("virtualmachineinstances/vnc", "VirtualMachineInstance"),
            ("virtualmachineinstances/vnc/screenshot", "VirtualMachineInstance"),
            ("virtualmachineinstances/filesystemlist", "VirtualMachineInstanceFileSystemList"),
        )
    ],
}
GROUP = "kubevirt.io"
CONSOLE = "lab.goldenimage.io/console"
SCREENS = ("blank", "text", "stop-error", "graphical")
SIZE = (1024, 768)
DVD = '"UEFI QEMU DVD-ROM QM00005 " from PciRoot(0x0)/Pci(0x1F,0x2)/Sata(0x2,0xFFFF,0x0)'
TEXT_LINES = (
    "BdsDxe: loading Boot0002 " + DVD,
    "BdsDxe: starting Boot0002 " + DVD,
    "Press any key to boot from CD or DVD....",
)


def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def _blank(draw) -> None:
    pass


def _text(draw) -> None:
    for row, line in enumerate(TEXT_LINES):
        draw.text((0, 2 + row * 19), line, fill=(187, 187, 187), font=_font(15))


def _stop_error(draw) -> None:
    draw.rectangle((0, 0, *SIZE), fill=(0, 120, 215))
    white = (255, 255, 255)
    draw.text((110, 90), ":(", fill=white, font=_font(140))
    lines = (
        "Your PC ran into a problem and needs to restart. We're just",
        "collecting some error info, and then we'll restart for you.",
        "",
        "20% complete",
    )
    for row, line in enumerate(lines):
        draw.text((110, 300 + row * 34), line, fill=white, font=_font(26))
    draw.rectangle((110, 480, 200, 570), fill=white)  # the QR code's place
    for cell in range(0, 81, 9):
        draw.rectangle((114 + cell, 484 + (cell * 7) % 72, 121 + cell, 491 + (cell * 7) % 72), fill=(0, 0, 0))
    draw.text((230, 490), "Stop code: INACCESSIBLE_BOOT_DEVICE", fill=white, font=_font(18))


def _graphical(draw) -> None:
    width, height = SIZE
    for y in range(height):  # Setup's dark purple-to-blue backdrop
        shade = y / height
        draw.line((0, y, width, y), fill=(int(40 + 30 * shade), int(20 + 40 * shade), int(90 + 80 * shade)))
    draw.rectangle((212, 184, 812, 584), fill=(243, 243, 243), outline=(120, 120, 120))
    draw.rectangle((212, 184, 812, 214), fill=(255, 255, 255))
    draw.text((222, 190), "Windows Setup", fill=(20, 20, 20), font=_font(16))
    for index, colour in enumerate(((242, 80, 34), (127, 186, 0), (0, 164, 239), (255, 185, 0))):
        x, y = 242 + (index % 2) * 22, 240 + (index // 2) * 22
        draw.rectangle((x, y, x + 19, y + 19), fill=colour)
    for row, line in enumerate(("Installing Windows", "Copying Windows files", "Getting files ready 42%")):
        draw.text((300, 240 + row * 30), line, fill=(30, 30, 30), font=_font(18))
    draw.rectangle((262, 500, 762, 520), outline=(90, 90, 90))
    draw.rectangle((263, 501, 472, 519), fill=(6, 176, 37))


@functools.lru_cache(maxsize=len(SCREENS))
def render(screen: str) -> bytes:
    """The PNG of one lab screen."""
    from PIL import Image, ImageDraw

    painters = {"blank": _blank, "text": _text, "stop-error": _stop_error, "graphical": _graphical}
    image = Image.new("RGB", SIZE, (0, 0, 0))
    painters[screen](ImageDraw.Draw(image))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


class ConsoleController(Controller):
    """virt-api's screenshot subresource; it watches nothing, it only answers requests."""

    name = "virt-api-console"
    watches = ()

    def __init__(self, lab: LabContext):
        super().__init__(lab)
        add_route(lab.store, GROUP_VERSION, self.screenshot)

    def screenshot(self, method, path, query, headers, raw, identity) -> tuple[int, str, bytes]:
        if path.rstrip("/") == GROUP_VERSION and method == "GET":
            return 200, "application/json", json.dumps(DISCOVERY).encode()
        if not path.startswith(PREFIX):
            raise _not_found()
        parts = path[len(PREFIX) :].split("/")
        if len(parts) < 4 or parts[1] != "virtualmachineinstances":
            raise _not_found()
        if parts[3:] == ["filesystemlist"]:
            return self.filesystemlist(method, parts[0], parts[2], identity)
        if parts[3:] != ["vnc", "screenshot"]:
            raise _not_found()
        namespace, _, name = parts[:3]
        vmi = self._readable(method, namespace, name, identity, "virtualmachineinstances/vnc/screenshot")
        devices = ((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}
        if devices.get("autoattachGraphicsDevice") is False:
            raise ApiError(400, "BadRequest", "No graphics devices are present.")
        if (vmi.get("status") or {}).get("phase") != "Running":
            raise ApiError(400, "BadRequest", "VMI is not running")
        vm = self._get("virtualmachines", namespace, name) or {}
        screen = (vm.get("metadata", {}).get("annotations") or {}).get(CONSOLE) or (
            vmi["metadata"].get("annotations") or {}
        ).get(CONSOLE, "graphical")
        if screen not in SCREENS:
            raise ApiError(500, "InternalError", f"lab: {CONSOLE}={screen!r} is none of {', '.join(SCREENS)}")
        return 200, "image/png", render(screen)

    def filesystemlist(self, method, namespace, name, identity) -> tuple[int, str, bytes]:
        vmi = self._readable(method, namespace, name, identity, "virtualmachineinstances/filesystemlist")
        agent = [
            c for c in (vmi.get("status") or {}).get("conditions") or [] if c.get("type") == "AgentConnected"
        ]
        if not agent or agent[0].get("status") != "True":
            raise ApiError(409, "Conflict", "VMI does not have guest agent connected")
        body = {"kind": "VirtualMachineInstanceFileSystemList", "items": filesystems(vmi)}
        return 200, "application/json", json.dumps(body).encode()

    def _readable(self, method, namespace, name, identity, resource) -> dict:
        """The VMI behind a subresource GET the caller may make; 405, 403 or 404 otherwise."""
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow {method} on this resource")
        if not identity.allows("get", SUBRESOURCE_GROUP, resource, namespace):
            raise ApiError(
                403,
                "Forbidden",
                f'{resource}.{SUBRESOURCE_GROUP} "{name}" is forbidden: User "{identity.user}" cannot get '
                f'resource "{resource}" in API group "{SUBRESOURCE_GROUP}" in the namespace "{namespace}"',
            )
        vmi = self._get("virtualmachineinstances", namespace, name)
        if vmi is None:
            raise ApiError(
                404,
                "NotFound",
                f'virtualmachineinstance.{GROUP} "{name}" not found',
                {"name": name, "group": GROUP, "kind": "virtualmachineinstance"},
            )
        return vmi

    def _get(self, plural: str, namespace: str, name: str) -> dict | None:
        try:
            return self.lab.store.get(self.lab.store.resource(GROUP, "v1", plural), namespace, name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return None


CONTROLLERS = [ConsoleController]

__all__ = ["CONSOLE", "CONTROLLERS", "PREFIX", "SCREENS", "ConsoleController", "render"]
