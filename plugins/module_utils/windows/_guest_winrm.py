# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""PowerShell inside a Windows guest over WinRM, with pywinrm (the library Ansible's own winrm
connection uses); decides nothing.

The clone gate logs in to its clone with the operator's ``guest_credentials`` to run the seed's
``Get-PartitionSupportedSize -DriveLetter C``. The clone's WinRM listener certificate is made at its
first boot, so no CA can vouch for it; like the SSH check's host key, it is not validated unless the
credentials ask for it (``server_cert_validation: validate``), and the gate connects only to the
address its own VM reports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

try:
    import winrm
except ImportError:  # reported when a Windows in-guest check is asked for
    winrm = None

MISSING = (
    "the Windows in-guest checks need the Python library pywinrm on the host running the module "
    "(pip install pywinrm; the collection's meta/ee-requirements.txt lists it)"
)


def available():
    return winrm is not None


def run(address, credentials, script, timeout):
    """Run the PowerShell ``script`` in the guest at ``(host, port)``: ``(exit code, stdout, stderr)``;
    -1 with the client's message when it could not log in or the reply did not come."""
    scheme = credentials.get("scheme") or "https"
    session = winrm.Session(
        "%s://%s:%d/wsman" % (scheme, address[0], address[1]),
        auth=(credentials["username"], credentials["password"]),
        transport=credentials.get("transport") or "ntlm",
        server_cert_validation=credentials.get("server_cert_validation") or "ignore",
        read_timeout_sec=int(timeout) + 10,
        operation_timeout_sec=int(timeout),
    )
    try:
        response = session.run_ps(script)
    except Exception as exc:  # pylint: disable=broad-except  # any client failure is "not read yet"
        return -1, "", "%s: %s" % (type(exc).__name__, exc)
    return (
        response.status_code,
        response.std_out.decode("utf-8", "replace").strip(),
        response.std_err.decode("utf-8", "replace").strip(),
    )
