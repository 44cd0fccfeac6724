"""A Windows guest's WinRM service in the lab: WS-Management over HTTPS with Basic authentication, on a
loopback port the VMI's `lab.goldenimage.io/forwarded-5986` annotation names.

A lab guest is no Windows: it answers one PowerShell script, the one that reads C:'s partition
(`Get-Partition -DriveLetter C`, `Get-PartitionSupportedSize -DriveLetter C`, `Get-Disk`), from the disk
the guest booted, with the figures Windows would print; any other script fails as an unknown command
does. The protocol is what a Windows listener speaks to a client such as pywinrm: Create a shell,
Command, Receive (the output streams, base64, then CommandState Done with its exit code), Signal
terminate, Delete the shell, every reply naming the request it answers in RelatesTo.
"""

from __future__ import annotations

import base64
import http.server
import pathlib
import tempfile
import threading
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable

from ..tls import make_certificate, server_context

PORT = 5986
SHELL = "http://schemas.microsoft.com/wbem/wsman/1/windows/shell"
TRANSFER = "http://schemas.xmlsoap.org/ws/2004/09/transfer"
DONE = SHELL + "/CommandState/Done"
# What the partition script must read; the lab prints its three figures when all three are asked for.
CMDLETS = ("Get-Partition -DriveLetter C", "Get-PartitionSupportedSize -DriveLetter C", "Get-Disk")
FORMAT = "'{0} {1} {2}' -f $p.Size, $s.SizeMax, $d.Size"
ENVELOPE = (
    '<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" '
    'xmlns:a="http://schemas.xmlsoap.org/ws/2004/08/addressing" '
    'xmlns:w="http://schemas.dmtf.org/wbem/wsman/1/wsman.xsd" '
    'xmlns:rsp="http://schemas.microsoft.com/wbem/wsman/1/windows/shell">'
    "<s:Header><a:RelatesTo>{relates}</a:RelatesTo></s:Header><s:Body>{body}</s:Body></s:Envelope>"
)


def _text(root: ET.Element, suffix: str) -> str:
    node = next((n for n in root.iter() if n.tag.endswith(suffix)), None)
    return (node.text or "") if node is not None else ""


def run_script(script: str, sizes: Callable[[], tuple[int, int, int]]) -> tuple[int, str, str]:
    """What the guest's PowerShell prints for ``script``: (exit code, stdout, stderr)."""
    if all(c in script for c in CMDLETS) and FORMAT in script:
        return 0, "%d %d %d\r\n" % sizes(), ""
    return 1, "", "the lab's Windows guest runs only the partition script; it cannot run this one\r\n"


class WinRMGuest:
    """One guest's WinRM listener: HTTPS on 127.0.0.1, accepting ``username:password`` by Basic auth."""

    def __init__(self, credentials: str, sizes: Callable[[], tuple[int, int, int]]):
        self.folder = pathlib.Path(tempfile.mkdtemp(prefix="lab-winrm-"))
        cert, key = make_certificate(self.folder)
        expected = "Basic " + base64.b64encode(credentials.encode("utf-8")).decode("ascii")
        outputs: dict[str, tuple[int, str, str]] = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="WSMAN"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                root = ET.fromstring(body)
                action, relates = _text(root, "}Action"), _text(root, "}MessageID")
                self._reply(relates, self._answer(root, action))

            def _answer(self, root: ET.Element, action: str) -> str:
                if action == TRANSFER + "/Create":
                    shell = str(uuid.uuid4()).upper()
                    return (
                        "<x:ResourceCreated xmlns:x='%s'><w:ReferenceParameters><w:SelectorSet>"
                        "<w:Selector Name='ShellId'>%s</w:Selector></w:SelectorSet>"
                        "</w:ReferenceParameters></x:ResourceCreated>" % (TRANSFER, shell)
                    )
                if action == SHELL + "/Command":
                    command = _text(root, "}Command").split()
                    script = ""
                    if len(command) == 3 and command[1].lower() == "-encodedcommand":
                        script = base64.b64decode(command[2]).decode("utf-16-le")
                    ident = str(uuid.uuid4()).upper()
                    outputs[ident] = run_script(script, sizes)
                    return (
                        "<rsp:CommandResponse><rsp:CommandId>%s</rsp:CommandId></rsp:CommandResponse>" % ident
                    )
                if action == SHELL + "/Receive":
                    node = next(n for n in root.iter() if n.tag.endswith("}DesiredStream"))
                    ident = node.get("CommandId")
                    code, out, err = outputs.pop(ident, (1, "", "no such command\r\n"))
                    streams = "".join(
                        "<rsp:Stream Name='%s' CommandId='%s'>%s</rsp:Stream>"
                        % (name, ident, base64.b64encode(text.encode("utf-8")).decode("ascii"))
                        for name, text in (("stdout", out), ("stderr", err))
                        if text
                    )
                    return (
                        "<rsp:ReceiveResponse>%s<rsp:CommandState CommandId='%s' State='%s'>"
                        "<rsp:ExitCode>%d</rsp:ExitCode></rsp:CommandState></rsp:ReceiveResponse>"
                        % (streams, ident, DONE, code)
                    )
                if action == SHELL + "/Signal":
                    return "<rsp:SignalResponse/>"
                return ""  # Delete of the shell

            def _reply(self, relates: str, body: str) -> None:
                data = ENVELOPE.format(relates=relates, body=body).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", "application/soap+xml;charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = server_context(cert, key).wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="lab-winrm-%d" % self.port)
        self.thread.daemon = True
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        for path in self.folder.iterdir():
            path.unlink()
        self.folder.rmdir()
