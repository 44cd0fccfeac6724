# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""What an image holds, read from its bytes: the image-facts document and the rules on it.

Pure: no I/O. The adapter (``_disk.read_image_facts``) reads registry values, files and boot sectors and
hands the raw reads to the builders here, which keep presence, place and kind and drop every secret value:
a password, a product key or a private key never reaches the document, so the document can be stored with
a golden and printed in a task result.

The document is a plain dict, ``{"schema_version": 1, "os_family": "windows" | "linux", ...}``:

* ``unreadable``: ``[{"source", "error"}]``, every place that had to be read and could not be. A fact that
  could not be read is not a fact that is absent: every entry is an exposure reason.
* Windows: ``bitlocker`` (``{"encrypted", "source"}``), ``software_hive`` (``{"dirty"}``: changes wait in
  its transaction logs, which are not read), ``image_state`` (``{"value", "generalized"}``, value
  None when the hive holds none), ``edition`` (``EditionID``, product name, build, ``evaluation``),
  ``licensing`` (presence of the KMS host and port, ``BackupProductKeyDefault``, ``DigitalProductId``),
  ``autologon`` (``AutoAdminLogon``, ``DefaultUserName``, whether ``DefaultPassword`` is set) and
  ``unattend`` (each answer file left on the volume, with the product keys and passwords it holds, by
  place in the file).
* Linux: ``os_release`` (``ID``, ``VERSION_ID``, ``VERSION_CODENAME``, ``PRETTY_NAME`` and the file read),
  ``machine_id`` (``absent``, ``not a regular file``, ``empty``, ``uninitialized`` or ``set``),
  ``private_keys`` (each private key file left in the image: path, kind, PEM label, size) and
  ``postgresql`` (``majors``: each ``/usr/lib/postgresql/<N>`` holding a server, ``bin/postgres``;
  ``clusters``: each cluster the image carries, configured under ``/etc/postgresql/<N>/<name>`` or with a
  data directory under ``/var/lib/postgresql/<N>/<name>``, ``initialized`` when that directory holds a
  ``PG_VERSION``: every VM booted from the image would share its database system identifier).

``declaration_problems(facts, os_version, pg_versions)`` compares what a baked image is declared to be with
what its bytes say; ``catalog_facts(facts)`` is the part a catalog entry keeps.

``exposure_reasons(facts)`` says why the bytes must never go to a bucket not proven private; an empty list
means nothing was found. ``sealed_by_image_state(facts)`` is the registry's word on sysprep.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from xml.etree import ElementTree

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

SCHEMA_VERSION = 1

# The SOFTWARE hive: where Windows Setup records how far the image got, the edition, licensing, logon.
SOFTWARE_HIVE = "C:\\Windows\\System32\\config\\SOFTWARE"
SETUP_STATE_KEY = "Microsoft\\Windows\\CurrentVersion\\Setup\\State"
IMAGE_STATE_VALUE = "ImageState"
GENERALIZED = "IMAGE_STATE_GENERALIZE_RESEAL_TO_OOBE"
CURRENT_VERSION_KEY = "Microsoft\\Windows NT\\CurrentVersion"
LICENSING_KEY = "Microsoft\\Windows NT\\CurrentVersion\\SoftwareProtectionPlatform"
WINLOGON_KEY = "Microsoft\\Windows NT\\CurrentVersion\\Winlogon"
# (key, value) pairs the adapter reads; the builders below keep presence only of the secret ones.
KMS_VALUES = ("KeyManagementServiceName", "KeyManagementServicePort")
LICENSING_VALUES = KMS_VALUES + ("BackupProductKeyDefault",)
PRODUCT_ID_VALUES = ("DigitalProductId", "DigitalProductId4")
EDITION_VALUES = ("EditionID", "ProductName", "CurrentBuild", "CurrentBuildNumber")
WINLOGON_VALUES = ("AutoAdminLogon", "DefaultUserName", "DefaultPassword")

# Answer files Windows Setup and sysprep read, and copy, where they stay after the build unless removed.
UNATTEND_FILES = (
    "C:\\autounattend.xml",
    "C:\\unattend.xml",
    "C:\\Windows\\Panther\\unattend.xml",
    "C:\\Windows\\Panther\\autounattend.xml",
    "C:\\Windows\\Panther\\Unattend\\unattend.xml",
    "C:\\Windows\\System32\\Sysprep\\unattend.xml",
    "C:\\Windows\\System32\\Sysprep\\Panther\\unattend.xml",
)
# Every ``*.xml`` in these folders is an answer file too.
UNATTEND_FOLDERS = ("C:\\Windows\\Panther\\Unattend",)
# What Setup writes over a secret in the copy it keeps once it has used it.
REDACTED = "*SENSITIVE*DATA*DELETED*"
MAX_UNATTEND_BYTES = 4 * 1024 * 1024

# Linux: where private keys are left by the build or by packages (ssl-cert makes the snakeoil pair).
OS_RELEASE_FILES = ("/etc/os-release", "/usr/lib/os-release")
OS_RELEASE_FIELDS = ("ID", "VERSION_ID", "VERSION_CODENAME", "PRETTY_NAME")
SSH_DIR = "/etc/ssh"
TLS_PRIVATE_DIR = "/etc/ssl/private"
SNAKEOIL_KEY = "/etc/ssl/private/ssl-cert-snakeoil.key"
USER_SSH_KEY_NAMES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk")
# Windows: OpenSSH for Windows keeps its host keys here; a user's keys are under the profile's .ssh.
WINDOWS_SSH_DIR = "C:\\ProgramData\\ssh"
WINDOWS_USERS_DIR = "C:\\Users"
PG_LIB_DIR = "/usr/lib/postgresql"
PG_DATA_DIR = "/var/lib/postgresql"
PG_CONF_DIR = "/etc/postgresql"
# Folders searched for keys at every level (a cluster's server.key sits in /etc/postgresql/<N>/<name>).
KEY_TREES = (TLS_PRIVATE_DIR, PG_CONF_DIR)
PG_SERVER = "bin/postgres"
PEM_PRIVATE = re.compile(rb"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY-----")
KEY_HEAD_BYTES = 8192

KEY_BEARING = "key-bearing"
CREDENTIAL_BEARING = "credential-bearing"
UNPROVEN = "unproven"


def document(os_family, unreadable=(), **facts):
    """The facts document: the schema version, the OS family, what could not be read, the facts."""
    doc = {"schema_version": SCHEMA_VERSION, "os_family": os_family, "unreadable": list(unreadable)}
    doc.update(facts)
    return doc


def unreadable(source, error):
    return {"source": source, "error": str(error)}


# Windows builders ---------------------------------------------------------------------------------


def bitlocker_fact(boot_sector):
    """Read from the boot sector: BitLocker writes ``-FVE-FS-`` where NTFS writes its OEM id."""
    return {"encrypted": bytes(boot_sector[3:11]) == b"-FVE-FS-", "source": "boot sector OEM id"}


def hive_fact(head):
    """The SOFTWARE hive's base block: ``dirty`` when its two sequence numbers differ, that is when changes
    wait in its transaction logs (``SOFTWARE.LOG1``/``LOG2``), which are not read. None when absent."""
    if head is None:
        return None
    data = bytes(head)
    if len(data) < 12 or data[:4] != b"regf":
        return {"dirty": None}
    return {"dirty": data[4:8] != data[8:12]}


def image_state_fact(value):
    """``ImageState`` of the SOFTWARE hive's ``Setup\\State`` key (None when the hive holds none)."""
    text = value if isinstance(value, str) else None
    return {"value": text, "generalized": (text or "").strip().upper() == GENERALIZED}


def _present(value):
    if value is None:
        return False
    if isinstance(value, (bytes, bytearray)):
        return any(bytes(value))
    if isinstance(value, str):
        return bool(value.strip().strip("\x00"))
    return True


def edition_fact(values):
    """The edition the SOFTWARE hive names (not secret). An evaluation edition installs the public key of
    the evaluation media, so that key is no licence."""
    edition = values.get("EditionID") if isinstance(values.get("EditionID"), str) else None
    build = values.get("CurrentBuild") or values.get("CurrentBuildNumber")
    return {
        "edition_id": edition,
        "product_name": values.get("ProductName") if isinstance(values.get("ProductName"), str) else None,
        "build": str(build) if build is not None else None,
        "evaluation": bool(edition) and edition.strip().lower().endswith("eval"),
    }


def licensing_fact(values):
    """Presence of each licensing value: the KMS host and port, the installed key, the product ids."""
    return {
        "kms_host": _present(values.get("KeyManagementServiceName")),
        "kms_port": _present(values.get("KeyManagementServicePort")),
        "backup_product_key": _present(values.get("BackupProductKeyDefault")),
        "digital_product_id": any(_present(values.get(name)) for name in PRODUCT_ID_VALUES),
    }


def autologon_fact(values):
    """Winlogon's automatic logon: whether it is on, for whom, and whether a password is stored (never it)."""
    auto = values.get("AutoAdminLogon")
    password = values.get("DefaultPassword")
    if password is None:
        stored = "absent"
    elif _present(password):
        stored = "set"
    else:
        stored = "empty"
    user = values.get("DefaultUserName")
    return {
        "auto_admin_logon": None if auto is None else str(auto).strip() == "1",
        "default_user_name": user if isinstance(user, str) and user else None,
        "default_password": stored,
    }


def _local(tag):
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _text(element):
    return (element.text or "").strip()


def _child(element, name):
    for child in element:
        if _local(child.tag).lower() == name.lower():
            return child
    return None


def _component_path(stack):
    """A secret's place in the answer file: ``<pass>/<component>/<element>/...`` (names, never values)."""
    parts = []
    for element in stack:
        name = _local(element.tag)
        if name == "settings":
            parts.append(element.get("pass") or "settings")
        elif name == "component":
            parts.append(element.get("name") or "component")
        elif name != "unattend":
            parts.append(name)
    return "/".join(parts)


def _secret_state(text):
    if not text:
        return "empty"
    if text == REDACTED:
        return "deleted by Setup"
    return "set"


def unattend_fact(path, data):
    """What an answer file left on the volume holds: product keys and passwords, by place, never the values.

    A file that cannot be parsed is kept with its error: its bytes may still hold a key or a password.
    """
    fact = {"path": path, "parsed": False, "error": None, "product_keys": [], "passwords": []}
    if len(data) > MAX_UNATTEND_BYTES:
        fact["error"] = "larger than %d bytes, not parsed" % MAX_UNATTEND_BYTES
        return fact
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        fact["error"] = "not well-formed XML (%s)" % exc
        return fact
    fact["parsed"] = True

    def walk(element, stack):
        stack = stack + [element]
        name = _local(element.tag)
        lowered = name.lower()
        if lowered == "productkey":
            key = _child(element, "Key")
            text = _text(key) if key is not None else _text(element)
            state = _secret_state(text)
            if state != "empty":
                fact["product_keys"].append({"where": _component_path(stack), "state": state})
            return
        value = _child(element, "Value")
        if lowered in ("password", "administratorpassword") or (
            lowered.endswith("password") and value is not None
        ):
            text = _text(value) if value is not None else _text(element)
            plain = _child(element, "PlainText")
            fact["passwords"].append(
                {
                    "where": _component_path(stack),
                    "state": _secret_state(text),
                    # PlainText false is base64 with a fixed suffix: an encoding, not a protection.
                    "plain_text": plain is None or _text(plain).lower() != "false",
                }
            )
            return
        for child in element:
            walk(child, stack)

    walk(root, [])
    return fact


# Linux builders -----------------------------------------------------------------------------------


def os_release_fact(path, text):
    """The fields of os-release(5) this collection keys on; None when no os-release was found."""
    if path is None:
        return None
    fields = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[key.strip()] = value
    fact = {name.lower(): fields.get(name) for name in OS_RELEASE_FIELDS}
    fact["path"] = path
    return fact


def machine_id_fact(data, regular=True):
    """``absent`` (None), ``not a regular file`` (a link, not followed), ``empty``, ``uninitialized`` or
    ``set``: only the state, never the id."""
    if data is None:
        return "absent"
    if not regular:
        return "not a regular file"
    text = bytes(data).strip()
    if not text:
        return "empty"
    if text == b"uninitialized":
        return "uninitialized"
    return "set"


def private_key_kind(path):
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    if path.startswith(WINDOWS_SSH_DIR + "\\") and name.startswith("ssh_host_") and name.endswith("_key"):
        return "ssh_host_key"
    if path.startswith(SSH_DIR + "/") and name.startswith("ssh_host_") and name.endswith("_key"):
        return "ssh_host_key"
    if path == SNAKEOIL_KEY:
        return "tls_snakeoil_key"
    if path.startswith(TLS_PRIVATE_DIR + "/"):
        return "tls_private_key"
    if path.startswith(PG_CONF_DIR + "/"):
        return "postgresql_tls_key"
    if "/.ssh/" in path or "\\.ssh\\" in path:
        return "user_ssh_key"
    return "private_key"


def is_key_candidate(path):
    """Whether the adapter reads the head of ``path`` (a file it listed) to look for a private key."""
    name = path.rsplit("/", 1)[-1]
    if path.startswith(SSH_DIR + "/") and name.startswith("ssh_host_") and name.endswith("_key"):
        return True
    if path.startswith(TLS_PRIVATE_DIR + "/"):
        return True
    if path.startswith(PG_CONF_DIR + "/") and name.endswith(".key"):
        return True
    return "/.ssh/" in path and name in USER_SSH_KEY_NAMES


def is_windows_key_candidate(folder, name):
    """Whether the adapter reads the head of ``name`` in ``folder`` (a C:\\ path) of a Windows volume: a
    host key of OpenSSH for Windows, or a user's ``id_*`` under ``C:\\Users\\<user>\\.ssh``."""
    lowered = name.lower()
    if folder.lower() == WINDOWS_SSH_DIR.lower():
        return lowered.startswith("ssh_host_") and lowered.endswith("_key")
    return folder.lower().endswith("\\.ssh") and lowered in USER_SSH_KEY_NAMES


def private_key_fact(path, size, head):
    """A key file left in the image (None when empty): its kind and PEM label, never the key.

    Every non-empty file under /etc/ssl/private and every non-empty SSH host key counts, PEM or not
    (DER and PKCS#12 carry no header); a user's ``id_*`` counts when it carries a PEM private-key header.
    """
    if not size:
        return None
    match = PEM_PRIVATE.search(bytes(head or b""))
    kind = private_key_kind(path)
    if kind == "user_ssh_key" and match is None:
        return None
    label = (match.group(1).decode("ascii") + "PRIVATE KEY") if match else None
    return {"path": path, "kind": kind, "pem": label, "size": size}


def _major(name):
    return name if isinstance(name, str) and name.isdigit() and not name.startswith("0") else None


_DATA_DIRECTORY = re.compile(r"""^\s*data_directory\s*=?\s*'([^']*)'""", re.MULTILINE)


def configured_data_directory(conf):
    """The ``data_directory`` a cluster's postgresql.conf sets (the last one wins, as PostgreSQL reads
    it), or None when it sets none."""
    found = _DATA_DIRECTORY.findall(str(conf or ""))
    return found[-1] if found and found[-1] else None


def postgresql_fact(installed, configured, data_dirs, elsewhere=None):
    """The PostgreSQL the image carries.

    ``installed``: ``{major: whether /usr/lib/postgresql/<major>/bin/postgres is a file}`` for every entry
    of /usr/lib/postgresql; ``configured``: ``[(major, name)]`` under /etc/postgresql; ``data_dirs``:
    ``{(major, name): PG_VERSION's text or None}`` under /var/lib/postgresql; ``elsewhere``: ``{(major,
    name): (the data_directory its postgresql.conf sets, PG_VERSION's text there or None)}``. Directories
    that are not major numbers are not PostgreSQL's and are left out.
    """
    majors = sorted((m for m, server in (installed or {}).items() if _major(m) and server), key=int)
    clusters = {}
    for major, name in configured or ():
        if _major(major):
            clusters[(major, name)] = {"major": major, "name": name, "configured": True, "initialized": False}
    for (major, name), version in (data_dirs or {}).items():
        if not _major(major):
            continue
        entry = clusters.setdefault(
            (major, name), {"major": major, "name": name, "configured": False, "initialized": False}
        )
        if version is not None:
            entry["initialized"] = True
            entry["pg_version"] = version.strip()[:16]
            entry["data_directory"] = "%s/%s/%s" % (PG_DATA_DIR, major, name)
    for (major, name), (path, version) in (elsewhere or {}).items():
        if _major(major) and (major, name) in clusters and version is not None:
            clusters[(major, name)].update(
                initialized=True, pg_version=version.strip()[:16], data_directory=path
            )
    ordered = [clusters[key] for key in sorted(clusters, key=lambda k: (int(k[0]), k[1]))]
    return {"majors": majors, "clusters": ordered}


# Rules --------------------------------------------------------------------------------------------


def _declared_majors(pg_versions):
    return sorted({str(v).strip() for v in pg_versions or ()}, key=lambda v: (len(v), v))


def declaration_problems(facts, os_version, pg_versions):
    """What a baked image's bytes contradict in its declaration, or leave in it that every VM would share.

    Each problem is ``{"fact", "read", "declared", "message"}``, the fact read and the declaration side by
    side; [] when the bytes agree. ``os_version`` is the Ubuntu stream (``22.04``), compared with
    os-release's ``VERSION_ID``; ``pg_versions`` the majors, compared with the servers installed under
    /usr/lib/postgresql. Private keys (the snakeoil pair PostgreSQL serves TLS with, SSH host keys) and
    initialized clusters (one database system identifier) would be shared by every VM made from it.
    """
    if not isinstance(facts, dict) or facts.get("os_family") != "linux":
        return [
            _problem("os_family", (facts or {}).get("os_family"), "linux", "no Linux image facts were read")
        ]
    problems = [
        _problem(
            "unreadable",
            item.get("source"),
            None,
            "%s could not be read (%s)" % (item.get("source"), item.get("error")),
        )
        for item in facts.get("unreadable") or []
    ]
    release = facts.get("os_release") or {}
    read = release.get("version_id")
    if read != str(os_version):
        where = release.get("path") or "/etc/os-release"
        problems.append(
            _problem(
                "os_release",
                read,
                str(os_version),
                "%s says VERSION_ID=%s (%s), the declaration says %s"
                % (where, read, release.get("pretty_name") or release.get("id"), os_version)
                if release
                else "the image has no os-release; the declaration says %s" % os_version,
            )
        )
    postgresql = facts.get("postgresql") or {}
    installed, declared = list(postgresql.get("majors") or []), _declared_majors(pg_versions)
    if _declared_majors(installed) != declared:
        problems.append(
            _problem(
                "pg_majors",
                installed,
                declared,
                "%s holds PostgreSQL %s (a server, bin/postgres, per major), the declaration says %s"
                % (PG_LIB_DIR, ", ".join(installed) or "none", ", ".join(declared) or "none"),
            )
        )
    for cluster in postgresql.get("clusters") or []:
        if cluster.get("initialized"):
            problems.append(
                _problem(
                    "initialized_cluster",
                    cluster["data_directory"],
                    None,
                    "cluster %s/%s is initialized (%s/PG_VERSION): every VM would share its database system "
                    "identifier; the seal removes it and the first boot makes a fresh one"
                    % (cluster["major"], cluster["name"], cluster["data_directory"]),
                )
            )
    for key in facts.get("private_keys") or []:
        problems.append(
            _problem(
                "private_key",
                key["path"],
                None,
                "%s (%s) is left in the image: every VM would share it; the seal removes it and the "
                "first boot generates one per VM" % (key["path"], key["kind"]),
            )
        )
    return problems


def refuse_contradicted(subject, problems, facts):
    """An image whose bytes contradict its declaration (``declaration_problems``) or carry what every VM
    made from it would share is refused, each fact read beside what was declared, before anything is
    uploaded or registered."""
    if not problems:
        return
    raise Refusal(
        subject,
        "the bytes are not what is declared: %s" % "; ".join(problem["message"] for problem in problems),
        "build the revision again from what the declaration says (the seal removes private keys and "
        "initialized clusters), or declare what the image is",
        problems=problems,
        facts=facts,
    )


def _problem(fact, read, declared, message):
    return {"fact": fact, "read": read, "declared": declared, "message": message}


def catalog_facts(facts):
    """What a catalog entry keeps of a Linux image's facts: os-release, the majors and clusters, the key
    paths left (never a key), the machine-id state."""
    release = (facts or {}).get("os_release") or {}
    postgresql = (facts or {}).get("postgresql") or {}
    return {
        "os_release": {k: release.get(k) for k in ("id", "version_id", "version_codename")},
        "pg_majors": list(postgresql.get("majors") or []),
        "initialized_clusters": [
            "%s/%s" % (c["major"], c["name"])
            for c in postgresql.get("clusters") or []
            if c.get("initialized")
        ],
        "private_keys": [key["path"] for key in (facts or {}).get("private_keys") or []],
        "machine_id": (facts or {}).get("machine_id"),
    }


def sealed_by_image_state(facts):
    """The registry's word on sysprep: True (generalized to OOBE), False (another state), None (no word).

    Stronger than a log line, which the answer file writes before sysprep runs: Setup records
    ``IMAGE_STATE_GENERALIZE_RESEAL_TO_OOBE`` only when sysprep /generalize /oobe has sealed the image.
    """
    state = (facts or {}).get("image_state") or {}
    if state.get("value") is None:
        return None
    return bool(state.get("generalized"))


def leftover_credentials(facts):
    """Sentences naming each credential left on a Windows volume (answer files, Winlogon); [] when none."""
    found = []
    for item in (facts or {}).get("unattend") or []:
        if not item.get("parsed"):
            found.append(
                "%s is left on the volume and cannot be parsed (%s): it may hold passwords or keys"
                % (item["path"], item.get("error"))
            )
            continue
        secrets = ["password %s" % p["where"] for p in item.get("passwords") or [] if p.get("state") == "set"]
        secrets += [
            "product key %s" % k["where"] for k in item.get("product_keys") or [] if k["state"] == "set"
        ]
        if secrets:
            found.append("%s holds %s" % (item["path"], ", ".join(secrets)))
    logon = (facts or {}).get("autologon") or {}
    if logon.get("default_password") == "set":
        found.append(
            "%s\\%s\\DefaultPassword is set%s"
            % (
                SOFTWARE_HIVE,
                WINLOGON_KEY,
                " and AutoAdminLogon is 1" if logon.get("auto_admin_logon") else "",
            )
        )
    return found


def exposure_reasons(facts):
    """Why the image's bytes must never go to a bucket not proven private; [] when nothing was found.

    Key-bearing: KMS host or port settings, a product key in an answer file, an installed product key
    of an edition that is not an evaluation edition, private keys. Credential-bearing: passwords in an
    answer file, Winlogon's DefaultPassword. Unproven: no facts, a schema this code does not know, an
    encrypted volume or any place that could not be read.
    """
    if not isinstance(facts, dict) or not facts:
        return [
            "%s: no image facts were read, so nothing shows the image holds no key or credential" % UNPROVEN
        ]
    if facts.get("schema_version") != SCHEMA_VERSION:
        return [
            "%s: image facts of schema version %r, not %d: read the image again"
            % (UNPROVEN, facts.get("schema_version"), SCHEMA_VERSION)
        ]
    reasons = [
        "%s: %s could not be read (%s)" % (UNPROVEN, item.get("source"), item.get("error"))
        for item in facts.get("unreadable") or []
    ]
    family = facts.get("os_family")
    if family == "windows":
        reasons += _windows_reasons(facts)
    elif family != "linux":
        reasons.append("%s: image facts of an unknown OS family %r" % (UNPROVEN, family))
    return reasons + _key_reasons(facts)


def _windows_reasons(facts):
    reasons = []
    if (facts.get("bitlocker") or {}).get("encrypted"):
        reasons.append("%s: the volume is BitLocker-encrypted, so nothing on it was read" % UNPROVEN)
    licensing = facts.get("licensing") or {}
    kms = [
        name
        for name, key in (("KeyManagementServiceName", "kms_host"), ("KeyManagementServicePort", "kms_port"))
        if licensing.get(key)
    ]
    if kms:
        reasons.append(
            "%s: KMS is configured (%s in %s\\%s): a volume-licensed image"
            % (KEY_BEARING, ", ".join(kms), SOFTWARE_HIVE, LICENSING_KEY)
        )
    edition = facts.get("edition") or {}
    installed = [
        name
        for name, key in (
            ("BackupProductKeyDefault", "backup_product_key"),
            ("DigitalProductId", "digital_product_id"),
        )
        if licensing.get(key)
    ]
    if installed and not edition.get("evaluation"):
        reasons.append(
            "%s: a product key is installed (%s) and the edition %r is not an evaluation edition"
            % (KEY_BEARING, ", ".join(installed), edition.get("edition_id"))
        )
    for item in facts.get("unattend") or []:
        keys = [k["where"] for k in item.get("product_keys") or [] if k.get("state") == "set"]
        if keys:
            reasons.append("%s: %s holds a product key (%s)" % (KEY_BEARING, item["path"], ", ".join(keys)))
        passwords = [p["where"] for p in item.get("passwords") or [] if p.get("state") == "set"]
        if passwords:
            reasons.append(
                "%s: %s holds passwords (%s)" % (CREDENTIAL_BEARING, item["path"], ", ".join(passwords))
            )
        if not item.get("parsed"):
            reasons.append(
                "%s: %s cannot be parsed (%s); it may hold keys or passwords"
                % (UNPROVEN, item["path"], item.get("error"))
            )
    if (facts.get("autologon") or {}).get("default_password") == "set":
        reasons.append(
            "%s: Winlogon's DefaultPassword is set in %s\\%s"
            % (CREDENTIAL_BEARING, SOFTWARE_HIVE, WINLOGON_KEY)
        )
    return reasons


def _key_reasons(facts):
    return [
        "%s: %s is left in the image (%s%s)"
        % (KEY_BEARING, key["path"], key["kind"], ", " + key["pem"] if key.get("pem") else "")
        for key in facts.get("private_keys") or []
    ]
