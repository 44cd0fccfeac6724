# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Commands inside a guest over SSH, with the OpenSSH client binary; decides nothing.

The clone gate logs in to its clone with the operator's ``guest_credentials`` to read what only the
guest can tell (its root filesystem's size). Secrets never reach an argument list: a private key is
written to a 0600 file in a private temporary folder, a password goes to ``ssh`` through an askpass
helper that reads it from the helper's own environment, and the folder is removed afterwards. The
clone is a throw-away VM whose host key is new at every boot, so its host key is not checked against
a known_hosts file (the gate connects only to the address its own VM reports).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import tempfile

ASKPASS = "#!/bin/sh\nprintf '%s\\n' \"$GOLDENIMAGE_GUEST_PASSWORD\"\n"


def keypair():
    """A fresh one-time ed25519 key pair, ``(private, public)`` as text (ssh-keygen)."""
    folder = tempfile.mkdtemp(prefix="gate-key-")
    try:
        path = os.path.join(folder, "key")
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "clone-gate", "-f", path],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        with open(path) as private, open(path + ".pub") as public:
            return private.read(), public.read().strip()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _text(raw):
    return raw.decode("utf-8", "replace").strip()


def public_of(private_key):
    """The OpenSSH public key line of ``private_key`` (ssh-keygen -y), or None when it cannot be read
    without a passphrase."""
    folder = tempfile.mkdtemp(prefix="gate-key-")
    try:
        path = os.path.join(folder, "key")
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(private_key if private_key.endswith("\n") else private_key + "\n")
        done = subprocess.run(  # the exit code is read below
            ["ssh-keygen", "-y", "-P", "", "-f", path],
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        return done.stdout.decode("ascii", "replace").strip() or None if done.returncode == 0 else None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(address, credentials, command, timeout):
    """Run ``command`` in the guest at ``(host, port)``: ``(exit code, stdout, stderr)``; an exit code of
    255 with ssh's own message when it could not log in."""
    folder = tempfile.mkdtemp(prefix="gate-ssh-")
    env = dict(os.environ)
    argv = [
        "ssh",
        "-F",
        "/dev/null",
        "-p",
        str(address[1]),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "ConnectTimeout=%d" % max(1, int(timeout)),
        "-o",
        "IdentitiesOnly=yes",
    ]
    try:
        if credentials.get("private_key"):
            key = os.path.join(folder, "key")
            with os.fdopen(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
                text = credentials["private_key"]
                out.write(text if text.endswith("\n") else text + "\n")
            argv += ["-i", key, "-o", "PreferredAuthentications=publickey", "-o", "BatchMode=yes"]
        else:
            helper = os.path.join(folder, "askpass")
            with os.fdopen(os.open(helper, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700), "w") as out:
                out.write(ASKPASS)
            env.update(
                SSH_ASKPASS=helper,
                SSH_ASKPASS_REQUIRE="force",
                DISPLAY=env.get("DISPLAY") or ":0",
                GOLDENIMAGE_GUEST_PASSWORD=credentials["password"],
            )
            argv += [
                "-o",
                "PreferredAuthentications=password,keyboard-interactive",
                "-o",
                "NumberOfPasswordPrompts=1",
            ]
        argv += ["%s@%s" % (credentials["username"], address[0]), command]
        try:
            done = subprocess.run(  # the exit code is the answer
                argv,
                check=False,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=timeout + 5,
            )
        except subprocess.TimeoutExpired:
            return 255, "", "ssh did not finish within %ds" % (timeout + 5)
        except OSError as exc:
            return 255, "", "ssh could not run: %s" % exc
        return done.returncode, _text(done.stdout), _text(done.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
