"""Image facts read from real disks: NTFS made by mkntfs and wimlib with SOFTWARE hives written by hivexsh,
ext4 made by ``mkfs.ext4 -d``. Each fact is read, each leftover secret is flagged, and no secret value
reaches the document, the verdict or the module's result.
"""

from __future__ import annotations

import functools
import json
import pathlib

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk, image_facts
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _seal_cli as seal_cli

from tests.integration.support import disks
from tests.integration.support.runner import module_task, play, run_playbook

ADMIN_PASSWORD = "Adm1n-Pa55-4c9e"
LOGON_PASSWORD = "Winl0gon-Pa55-71d2"
PRODUCT_KEY = "VK7JG-NPHTM-C97JM-9MPGT-3V66T"
KMS_HOST = "kms.corp.example"
SECRETS = (ADMIN_PASSWORD, LOGON_PASSWORD, PRODUCT_KEY, KMS_HOST)

PANTHER_UNATTEND = f"""<?xml version="1.0" encoding="utf-8"?>
<unattend xmlns="urn:schemas-microsoft-com:unattend">
  <settings pass="specialize">
    <component name="Microsoft-Windows-Shell-Setup" processorArchitecture="amd64">
      <ProductKey>{PRODUCT_KEY}</ProductKey>
    </component>
  </settings>
  <settings pass="oobeSystem">
    <component name="Microsoft-Windows-Shell-Setup" processorArchitecture="amd64">
      <UserAccounts>
        <AdministratorPassword><Value>{ADMIN_PASSWORD}</Value><PlainText>true</PlainText></AdministratorPassword>
      </UserAccounts>
    </component>
  </settings>
</unattend>
""".replace("\n", "\r\n")
# What Setup leaves in the Panther copy once it has applied the file: the secrets overwritten.
SETUP_REDACTED = PANTHER_UNATTEND.replace(ADMIN_PASSWORD, image_facts.REDACTED).replace(
    PRODUCT_KEY, image_facts.REDACTED
)
LICENSED_HIVE = dict(
    edition="Enterprise",
    licensing={"KeyManagementServiceName": "string:" + KMS_HOST, "KeyManagementServicePort": "string:1688"},
    winlogon={
        "AutoAdminLogon": "string:1",
        "DefaultUserName": "string:Administrator",
        "DefaultPassword": "string:" + LOGON_PASSWORD,
    },
)
SOFTWARE = "Windows/System32/config/SOFTWARE"
OPENSSH_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
SNAKEOIL_KEY = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
OS_RELEASE = (
    'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
    "VERSION_CODENAME=bookworm\nID=debian\n"
)
MACHINE_ID = "4b1d0f6a2c9e4e7f8a3b5c6d7e8f9a0b\n"

WINDOWS = {
    "clean": {},
    "leftovers": {SOFTWARE: ("hive", LICENSED_HIVE), "Windows/Panther/unattend.xml": PANTHER_UNATTEND},
    "redacted_by_setup": {"Windows/Panther/unattend.xml": SETUP_REDACTED},
    "not_generalized": {SOFTWARE: ("hive", {"image_state": "IMAGE_STATE_COMPLETE"})},
    "no_image_state": {SOFTWARE: ("hive", {"image_state": None})},
    "broken_software_hive": {SOFTWARE: b"regf" + b"\0" * 4092},
    "dirty_software_hive": {SOFTWARE: ("dirty", {})},
    "answer_files_elsewhere": {
        "AutoUnattend.xml": PANTHER_UNATTEND,
        "Windows/System32/Sysprep/unattend.xml": "<unattend><AutoLogon><Password><Value>x1</Value>"
        "</Password></AutoLogon></unattend>",
        "Windows/Panther/Unattend/Build.XML": "<unattend><not closed>",
    },
    "windows_keys": {
        "ProgramData/ssh/ssh_host_ed25519_key": OPENSSH_KEY,
        "ProgramData/ssh/ssh_host_ed25519_key.pub": "ssh-ed25519 AAAAC3Nza host\n",
        "ProgramData/ssh/sshd_config": "Port 22\n",
        "Users/Administrator/.ssh/id_ed25519": OPENSSH_KEY,
    },
    "no_software_hive": {SOFTWARE: None},
    "echo_sysprep": {
        "bootstrap.log": disks.SEALED_LOG.split("\r\n", maxsplit=1)[0]
        + "\r\necho sysprep /generalize /oobe /shutdown\r\n"
    },
}


def _files(changes):
    resolved = {}
    for name, content in changes.items():
        if isinstance(content, tuple):
            hive = bytearray(disks.software_hive(**content[1]))
            if content[0] == "dirty":  # Windows bumps the primary sequence number first, the secondary last
                hive[4] = (hive[4] + 1) % 256
            content = bytes(hive)
        resolved[name] = content
    return disks.sealed_windows_files(resolved)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("facts-disks")
    out: dict[str, pathlib.Path] = {}
    for case, changes in WINDOWS.items():
        out[case] = disks.windows_disk(folder / ("%s.raw" % case), _files(changes))["path"]
    out["bitlocker"] = disks.windows_disk(folder / "bitlocker.raw", _files({}), bitlocker=True)["path"]
    out["leftovers-qcow2"] = disks.qcow2(out["leftovers"], folder / "leftovers.qcow2", compressed=True)
    tree = disks.ext4_tree(
        folder / "linux.tree",
        {
            "usr/lib/os-release": OS_RELEASE,
            "etc/machine-id": MACHINE_ID,
            "etc/ssh/ssh_host_ed25519_key": OPENSSH_KEY,
            "etc/ssh/ssh_host_ed25519_key.pub": "ssh-ed25519 AAAAC3Nza host\n",
            "etc/ssl/private/ssl-cert-snakeoil.key": SNAKEOIL_KEY,
            "etc/ssl/private/app/tls.der": b"\x30\x82\x04\xa2\x02\x01\x00",
            "etc/ssl/certs/ssl-cert-snakeoil.pem": "-----BEGIN CERTIFICATE-----\nMIIC\n",
            "root/.ssh/id_ed25519": OPENSSH_KEY,
            "usr/lib/systemd/system/apt-news.service": "[Unit]\n",
        },
    )
    # Debian and Ubuntu ship /etc/os-release as a link to /usr/lib/os-release.
    (tree / "etc" / "os-release").symlink_to("../usr/lib/os-release")
    out["linux"] = disks.linux_disk(folder / "linux.raw", tree)["path"]
    clean = disks.ext4_tree(
        folder / "clean.tree",
        {
            "etc/os-release": OS_RELEASE.replace("12", "13").replace("bookworm", "trixie"),
            "usr/lib/systemd/system/apt-news.service": "[Unit]\n",
        },
    )
    # Masked the way systemctl mask does it: a link to /dev/null.
    (clean / "etc" / "systemd" / "system").mkdir(parents=True)
    (clean / "etc" / "systemd" / "system" / "apt-news.service").symlink_to("/dev/null")
    out["linux-clean"] = disks.linux_disk(folder / "linux-clean.raw", clean)["path"]
    return out


def verdict(made, case, **options):
    result = seal_cli.verify(str(made[case]), **options)
    text = json.dumps(result)
    for secret in SECRETS:
        assert secret not in text, (secret, case)
    return result


def by_name(result):
    return {c["name"]: c for c in result["checks"]}


def test_a_clean_generalized_disk_is_sealed_with_no_exposure_reason(made):
    result = verdict(made, "clean")
    assert result["sealed"] is True, result["checks"]
    assert result["exposure_reasons"] == []
    facts = result["facts"]
    assert facts["schema_version"] == 1 and facts["os_family"] == "windows" and facts["unreadable"] == []
    assert facts["image_state"] == {"value": image_facts.GENERALIZED, "generalized": True}
    assert facts["edition"] == {
        "edition_id": "EnterpriseEval",
        "product_name": "Windows 10 Enterprise",
        "build": "26100",
        "evaluation": True,
    }
    assert facts["licensing"] == {
        "kms_host": False,
        "kms_port": False,
        "backup_product_key": True,
        "digital_product_id": True,
    }
    assert facts["autologon"] == {
        "auto_admin_logon": None,
        "default_user_name": None,
        "default_password": "absent",
    }
    assert facts["bitlocker"] == {"encrypted": False, "source": "boot sector OEM id"}
    assert facts["software_hive"] == {"dirty": False}
    assert facts["unattend"] == []
    assert "IMAGE_STATE_GENERALIZE_RESEAL_TO_OOBE" in by_name(result)["image_state_generalized"]["evidence"]


def test_leftover_keys_and_credentials_are_flagged_and_the_disk_is_not_sealed(made):
    result = verdict(made, "leftovers")
    assert result["sealed"] is False
    assert result["failed_checks"] == ["credentials_absent"]
    evidence = by_name(result)["credentials_absent"]["evidence"]
    assert "C:\\Windows\\Panther\\unattend.xml holds password" in evidence
    assert "product key specialize/Microsoft-Windows-Shell-Setup/ProductKey" in evidence
    assert "DefaultPassword is set and AutoAdminLogon is 1" in evidence
    facts = result["facts"]
    assert facts["licensing"]["kms_host"] and facts["licensing"]["kms_port"]
    assert facts["autologon"] == {
        "auto_admin_logon": True,
        "default_user_name": "Administrator",
        "default_password": "set",
    }
    [unattend] = facts["unattend"]
    assert unattend["path"] == "C:\\Windows\\Panther\\unattend.xml"
    assert unattend["passwords"][0]["plain_text"] is True
    assert [r.split(":", 1)[0] for r in result["exposure_reasons"]] == [
        "key-bearing",  # KMS
        "key-bearing",  # an installed key of a licensed edition
        "key-bearing",  # the answer file's product key
        "credential-bearing",  # the answer file's password
        "credential-bearing",  # Winlogon
    ]
    assert "KeyManagementServiceName, KeyManagementServicePort" in result["exposure_reasons"][0]


def test_the_reader_interface_on_a_compressed_qcow2(made):
    facts = _disk.read_image_facts(str(made["leftovers-qcow2"]), "windows")
    assert facts == verdict(made, "leftovers")["facts"]
    assert len(image_facts.exposure_reasons(facts)) == 5
    assert not any(secret in json.dumps(facts) for secret in SECRETS)


def test_what_setup_overwrote_is_no_credential(made):
    result = verdict(made, "redacted_by_setup")
    assert result["sealed"] is True and result["exposure_reasons"] == []
    [unattend] = result["facts"]["unattend"]
    assert [p["state"] for p in unattend["passwords"]] == ["deleted by Setup"]


def test_image_state_not_generalized_is_not_sealed_whatever_the_log_says(made):
    result = verdict(made, "not_generalized")
    assert result["failed_checks"] == ["image_state_generalized"]
    checks = by_name(result)
    assert checks["bootstrap_log_final_line"]["passed"]
    assert (
        "IMAGE_STATE_COMPLETE, not IMAGE_STATE_GENERALIZE_RESEAL_TO_OOBE"
        in checks["image_state_generalized"]["evidence"]
    )


def test_no_image_state_leaves_the_log_line_as_proof(made):
    result = verdict(made, "no_image_state")
    assert result["sealed"] is True
    assert "the log line is the only proof" in by_name(result)["image_state_generalized"]["evidence"]


def test_a_software_hive_that_cannot_be_read_is_not_sealed_and_unproven(made):
    result = verdict(made, "broken_software_hive")
    assert result["failed_checks"] == ["image_state_generalized"]
    assert result["facts"]["unreadable"][0]["source"] == "C:\\Windows\\System32\\config\\SOFTWARE"
    assert result["exposure_reasons"][0].startswith("unproven: C:\\Windows\\System32\\config\\SOFTWARE")


def test_a_dirty_software_hive_is_a_fact(made):
    assert verdict(made, "dirty_software_hive")["facts"]["software_hive"] == {"dirty": True}


def test_answer_files_are_found_wherever_setup_reads_them(made):
    result = verdict(made, "answer_files_elsewhere")
    found = {u["path"]: u for u in result["facts"]["unattend"]}
    assert sorted(found) == [
        "C:\\AutoUnattend.xml",
        "C:\\Windows\\Panther\\Unattend\\Build.XML",
        "C:\\Windows\\System32\\Sysprep\\unattend.xml",
    ]
    assert found["C:\\Windows\\Panther\\Unattend\\Build.XML"]["parsed"] is False
    assert (
        found["C:\\Windows\\System32\\Sysprep\\unattend.xml"]["passwords"][0]["where"] == "AutoLogon/Password"
    )
    assert result["failed_checks"] == ["credentials_absent"]
    evidence = by_name(result)["credentials_absent"]["evidence"]
    for path in found:
        assert path in evidence


def test_bitlocker_is_a_fact_and_nothing_is_proven(made):
    result = verdict(made, "bitlocker")
    facts = result["facts"]
    assert facts["bitlocker"]["encrypted"] is True
    assert facts["unreadable"] == [{"source": "partition 3", "error": "the volume is BitLocker-encrypted"}]
    assert "image_state_generalized" in result["failed_checks"]
    assert "credentials_absent" in result["failed_checks"]
    assert any("BitLocker" in r for r in result["exposure_reasons"])


def test_an_echoed_sysprep_line_is_not_a_seal(made):
    result = verdict(made, "echo_sysprep")
    assert result["failed_checks"] == ["bootstrap_log_final_line"]


def test_linux_facts_each_read_each_key_flagged(made):
    result = verdict(made, "linux")
    facts = result["facts"]
    assert facts["os_family"] == "linux" and facts["schema_version"] == 1
    assert facts["os_release"] == {
        "id": "debian",
        "version_id": "12",
        "version_codename": "bookworm",
        "pretty_name": "Debian GNU/Linux 12 (bookworm)",
        "path": "/usr/lib/os-release",
    }
    assert facts["machine_id"] == "set"
    keys = {k["path"]: (k["kind"], k["pem"]) for k in facts["private_keys"]}
    assert keys == {
        "/etc/ssh/ssh_host_ed25519_key": ("ssh_host_key", "OPENSSH PRIVATE KEY"),
        "/etc/ssl/private/ssl-cert-snakeoil.key": ("tls_snakeoil_key", "PRIVATE KEY"),
        "/etc/ssl/private/app/tls.der": ("tls_private_key", None),
        "/root/.ssh/id_ed25519": ("user_ssh_key", "OPENSSH PRIVATE KEY"),
    }
    reasons = result["exposure_reasons"]
    assert len(reasons) == 4 and all(r.startswith("key-bearing: ") for r in reasons)
    for path in keys:
        assert any(path in r for r in reasons)
    text = json.dumps(result)
    assert (
        "BEGIN" not in text
        and "b3BlbnNzaC1rZXkt" not in text
        and "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" not in text
    )
    assert MACHINE_ID.strip() not in json.dumps(facts) + json.dumps(reasons)
    assert _disk.read_image_facts(str(made["linux"])) == facts
    background = by_name(result)["background_apt_disabled"]
    assert not background["passed"] and "apt-news.service (shipped, not masked)" in background["evidence"]


def test_a_clean_linux_image_has_no_exposure_reason(made):
    result = verdict(made, "linux-clean")
    facts = result["facts"]
    assert (
        facts["os_release"]["version_codename"] == "trixie"
        and facts["os_release"]["path"] == "/etc/os-release"
    )
    assert facts["machine_id"] == "empty" and facts["private_keys"] == []
    assert result["exposure_reasons"] == []
    assert by_name(result)["background_apt_disabled"]["passed"]


task = functools.partial(module_task, "goldenimage.pipeline.seal_verify")


def test_the_module_returns_the_facts_and_no_secret(made):
    run = run_playbook(
        play(
            task("clean", path=str(made["clean"])),
            task("leftovers", path=str(made["leftovers"]), ignore_errors=True),
        )
    )
    clean = run["clean"]
    assert clean["sealed"] is True and clean["exposure_reasons"] == []
    assert clean["facts"]["image_state"]["generalized"] is True
    assert run.entry("leftovers")["status"] == "ignored"
    leftovers = run["leftovers"]
    assert leftovers["sealed"] is False and "credentials_absent" in leftovers["msg"]
    assert leftovers["facts"]["autologon"]["default_password"] == "set"
    for secret in SECRETS:
        assert secret not in run.log


def test_windows_private_keys_are_flagged_and_the_disk_is_not_clean(made):
    """OpenSSH for Windows keeps its host keys in C:\\ProgramData\\ssh; a user's keys sit in the profile."""
    facts = _disk.read_image_facts(str(made["windows_keys"]))
    assert [(k["path"], k["kind"]) for k in facts["private_keys"]] == [
        ("C:\\ProgramData\\ssh\\ssh_host_ed25519_key", "ssh_host_key"),
        ("C:\\Users\\Administrator\\.ssh\\id_ed25519", "user_ssh_key"),
    ]
    reasons = image_facts.exposure_reasons(facts)
    assert len([r for r in reasons if r.startswith(image_facts.KEY_BEARING)]) == 2, reasons


def test_a_windows_volume_without_its_software_hive_is_unproven(made):
    facts = _disk.read_image_facts(str(made["no_software_hive"]))
    assert facts["unreadable"] == [{"source": image_facts.SOFTWARE_HIVE, "error": "not found on the volume"}]
    assert any(r.startswith(image_facts.UNPROVEN) for r in image_facts.exposure_reasons(facts))
    assert verdict(made, "no_software_hive")["sealed"] is False
