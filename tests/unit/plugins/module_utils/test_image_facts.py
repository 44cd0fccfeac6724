"""The image-facts rules: raw reads in, a document without secrets out, and the reasons it may not go public.

The reader is covered on real disks in tests/integration/modules/test_image_facts.py.
"""

from __future__ import annotations

import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import image_facts

PASSWORD = "Adm1n-Pa55-7f3c"
AUTOLOGON_PASSWORD = "L0gon-9b21"
LOCAL_PASSWORD = "L0cal-5e77"
KEY = "VK7JG-NPHTM-C97JM-9MPGT-3V66T"

ANSWER_FILE = f"""<?xml version="1.0" encoding="utf-8"?>
<unattend xmlns="urn:schemas-microsoft-com:unattend" xmlns:wcm="http://schemas.microsoft.com/WMIConfig/2002/State">
  <settings pass="windowsPE">
    <component name="Microsoft-Windows-Setup">
      <UserData><ProductKey><Key>{KEY}</Key><WillShowUI>Never</WillShowUI></ProductKey></UserData>
    </component>
  </settings>
  <settings pass="oobeSystem">
    <component name="Microsoft-Windows-Shell-Setup">
      <UserAccounts>
        <AdministratorPassword><Value>{PASSWORD}</Value><PlainText>true</PlainText></AdministratorPassword>
        <LocalAccounts><LocalAccount wcm:action="add">
          <Password><Value>{LOCAL_PASSWORD}</Value><PlainText>false</PlainText></Password>
          <Name>builder</Name>
        </LocalAccount></LocalAccounts>
      </UserAccounts>
      <AutoLogon><Password><Value>{AUTOLOGON_PASSWORD}</Value><PlainText>true</PlainText></Password>
        <Enabled>true</Enabled><Username>Administrator</Username></AutoLogon>
    </component>
  </settings>
</unattend>
""".encode()


def windows(**facts):
    base = dict(
        bitlocker=image_facts.bitlocker_fact(b"\xebR\x90NTFS    " + b"\0" * 501),
        image_state=image_facts.image_state_fact(image_facts.GENERALIZED),
        edition=image_facts.edition_fact({"EditionID": "EnterpriseEval", "CurrentBuild": "26100"}),
        licensing=image_facts.licensing_fact({"BackupProductKeyDefault": KEY, "DigitalProductId": b"\xa4\0"}),
        autologon=image_facts.autologon_fact({}),
        unattend=[],
    )
    unreadable = facts.pop("unreadable", ())
    base.update(facts)
    return image_facts.document("windows", unreadable, **base)


def linux(**facts):
    base = dict(
        os_release=image_facts.os_release_fact("/etc/os-release", 'ID=debian\nVERSION_ID="12"\n'),
        machine_id="empty",
        private_keys=[],
    )
    base.update(facts)
    return image_facts.document("linux", **base)


def test_document_carries_its_schema_version_and_family():
    doc = windows()
    assert doc["schema_version"] == image_facts.SCHEMA_VERSION == 1
    assert doc["os_family"] == "windows" and doc["unreadable"] == []
    json.dumps(doc)  # plain data, storable as it is


# ImageState -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, sealed",
    [
        ("IMAGE_STATE_GENERALIZE_RESEAL_TO_OOBE", True),
        ("image_state_generalize_reseal_to_oobe ", True),
        ("IMAGE_STATE_COMPLETE", False),
        ("IMAGE_STATE_SPECIALIZE_RESEAL_TO_OOBE", False),
        ("IMAGE_STATE_GENERALIZE_RESEAL_TO_AUDIT", False),
        ("IMAGE_STATE_UNDEPLOYABLE", False),
        (1, None),  # not a string: no word sysprep writes
        (None, None),
    ],
)
def test_sealed_by_image_state(value, sealed):
    facts = windows(image_state=image_facts.image_state_fact(value))
    assert image_facts.sealed_by_image_state(facts) is sealed


def test_sealed_by_image_state_without_facts_is_no_word():
    assert image_facts.sealed_by_image_state(None) is None
    assert image_facts.sealed_by_image_state(windows(image_state=None)) is None


# Registry facts keep presence only -----------------------------------------------------------------


def test_licensing_keeps_presence_not_values():
    fact = image_facts.licensing_fact(
        {
            "KeyManagementServiceName": "kms.corp.example",
            "KeyManagementServicePort": "1688",
            "BackupProductKeyDefault": KEY,
            "DigitalProductId4": b"\x01\x02",
        }
    )
    assert fact == {
        "kms_host": True,
        "kms_port": True,
        "backup_product_key": True,
        "digital_product_id": True,
    }
    assert image_facts.licensing_fact({"KeyManagementServiceName": " ", "DigitalProductId": b"\0\0"}) == {
        "kms_host": False,
        "kms_port": False,
        "backup_product_key": False,
        "digital_product_id": False,
    }


def test_autologon_records_whether_a_password_is_stored_never_the_password():
    fact = image_facts.autologon_fact(
        {"AutoAdminLogon": "1", "DefaultUserName": "Administrator", "DefaultPassword": PASSWORD}
    )
    assert fact == {"auto_admin_logon": True, "default_user_name": "Administrator", "default_password": "set"}
    assert image_facts.autologon_fact({"DefaultPassword": ""})["default_password"] == "empty"
    assert image_facts.autologon_fact({"AutoAdminLogon": "0"}) == {
        "auto_admin_logon": False,
        "default_user_name": None,
        "default_password": "absent",
    }


def test_edition_says_evaluation():
    assert image_facts.edition_fact({"EditionID": "EnterpriseEval"})["evaluation"] is True
    assert image_facts.edition_fact({"EditionID": "ServerDatacenterEval"})["evaluation"] is True
    assert image_facts.edition_fact({"EditionID": "Enterprise"})["evaluation"] is False
    assert image_facts.edition_fact({})["evaluation"] is False


def test_hive_dirty_when_its_sequence_numbers_differ():
    assert image_facts.hive_fact(b"regf\x05\0\0\0\x05\0\0\0") == {"dirty": False}
    assert image_facts.hive_fact(b"regf\x06\0\0\0\x05\0\0\0") == {"dirty": True}
    assert image_facts.hive_fact(b"\0" * 12) == {"dirty": None}
    assert image_facts.hive_fact(None) is None


def test_bitlocker_from_the_boot_sector():
    assert image_facts.bitlocker_fact(b"\xebX\x90-FVE-FS-" + b"\0" * 501)["encrypted"] is True
    assert image_facts.bitlocker_fact(b"\xebR\x90NTFS    " + b"\0" * 501)["encrypted"] is False


# Answer files -----------------------------------------------------------------------------------


def test_answer_file_secrets_by_place_never_by_value():
    fact = image_facts.unattend_fact("C:\\Windows\\Panther\\unattend.xml", ANSWER_FILE)
    assert fact["parsed"] is True
    assert fact["product_keys"] == [
        {"where": "windowsPE/Microsoft-Windows-Setup/UserData/ProductKey", "state": "set"}
    ]
    assert fact["passwords"] == [
        {
            "where": "oobeSystem/Microsoft-Windows-Shell-Setup/UserAccounts/AdministratorPassword",
            "state": "set",
            "plain_text": True,
        },
        {
            "where": "oobeSystem/Microsoft-Windows-Shell-Setup/UserAccounts/LocalAccounts/LocalAccount/"
            "Password",
            "state": "set",
            "plain_text": False,
        },
        {
            "where": "oobeSystem/Microsoft-Windows-Shell-Setup/AutoLogon/Password",
            "state": "set",
            "plain_text": True,
        },
    ]
    text = json.dumps(fact)
    for secret in (PASSWORD, LOCAL_PASSWORD, AUTOLOGON_PASSWORD, KEY):
        assert secret not in text


def test_a_product_key_given_as_text_counts():
    data = b"<unattend><settings pass='specialize'><component name='Microsoft-Windows-Shell-Setup'>"
    data += b"<ProductKey>" + KEY.encode() + b"</ProductKey></component></settings></unattend>"
    fact = image_facts.unattend_fact("C:\\autounattend.xml", data)
    assert fact["product_keys"] == [
        {"where": "specialize/Microsoft-Windows-Shell-Setup/ProductKey", "state": "set"}
    ]


def test_what_setup_deleted_and_empty_values_are_no_secret():
    data = (
        b"<unattend><AdministratorPassword><Value>*SENSITIVE*DATA*DELETED*</Value></AdministratorPassword>"
        b"<AutoLogon><Password><Value></Value></Password></AutoLogon>"
        b"<ProductKey><Key>*SENSITIVE*DATA*DELETED*</Key></ProductKey><ProductKey></ProductKey></unattend>"
    )
    fact = image_facts.unattend_fact("C:\\Windows\\Panther\\unattend.xml", data)
    assert [p["state"] for p in fact["passwords"]] == ["deleted by Setup", "empty"]
    assert [k["state"] for k in fact["product_keys"]] == ["deleted by Setup"]
    assert image_facts.exposure_reasons(windows(unattend=[fact])) == []


def test_a_boolean_ending_in_password_is_not_a_password():
    data = b"<unattend><DisablePassword>true</DisablePassword>"
    data += b"<PasswordExpires>false</PasswordExpires></unattend>"
    assert image_facts.unattend_fact("C:\\unattend.xml", data)["passwords"] == []


def test_an_answer_file_that_cannot_be_parsed_is_unproven():
    fact = image_facts.unattend_fact("C:\\unattend.xml", b"<unattend><AdministratorPassword><Value>" + b"pw")
    assert fact["parsed"] is False and "not well-formed" in fact["error"]
    reasons = image_facts.exposure_reasons(windows(unattend=[fact]))
    assert reasons == [
        "unproven: C:\\unattend.xml cannot be parsed (%s); it may hold keys or passwords" % fact["error"]
    ]
    assert image_facts.leftover_credentials(windows(unattend=[fact]))
    big = image_facts.unattend_fact("C:\\unattend.xml", b" " * (image_facts.MAX_UNATTEND_BYTES + 1))
    assert big["parsed"] is False and "larger than" in big["error"]


# Linux ------------------------------------------------------------------------------------------


def test_os_release_fields():
    text = (
        '# comment\nPRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n'
    )
    assert image_facts.os_release_fact("/usr/lib/os-release", text) == {
        "id": "ubuntu",
        "version_id": "24.04",
        "version_codename": "noble",
        "pretty_name": "Ubuntu 24.04.1 LTS",
        "path": "/usr/lib/os-release",
    }
    assert image_facts.os_release_fact(None, None) is None


@pytest.mark.parametrize(
    "data, state",
    [
        (None, "absent"),
        (b"", "empty"),
        (b"\n", "empty"),
        (b"uninitialized\n", "uninitialized"),
        (b"4b1d" * 8, "set"),
    ],
)
def test_machine_id_state_only(data, state):
    assert image_facts.machine_id_fact(data) == state


def test_a_machine_id_link_is_not_followed_nor_called_absent():
    assert image_facts.machine_id_fact(b"", regular=False) == "not a regular file"


def test_private_keys_by_kind_and_pem_label():
    pem = (
        b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    host = image_facts.private_key_fact("/etc/ssh/ssh_host_ed25519_key", len(pem), pem)
    assert host == {
        "path": "/etc/ssh/ssh_host_ed25519_key",
        "kind": "ssh_host_key",
        "pem": "OPENSSH PRIVATE KEY",
        "size": len(pem),
    }
    snake = image_facts.private_key_fact(image_facts.SNAKEOIL_KEY, 1704, b"-----BEGIN PRIVATE KEY-----\nMIIE")
    assert snake["kind"] == "tls_snakeoil_key" and snake["pem"] == "PRIVATE KEY"
    der = image_facts.private_key_fact("/etc/ssl/private/web.der", 1190, b"\x30\x82\x04\xa2")
    assert der["kind"] == "tls_private_key" and der["pem"] is None
    assert image_facts.private_key_fact("/etc/ssh/ssh_host_rsa_key", 0, b"") is None
    user = image_facts.private_key_fact("/home/debian/.ssh/id_ed25519", len(pem), pem)
    assert user["kind"] == "user_ssh_key"
    assert image_facts.private_key_fact("/home/debian/.ssh/id_ed25519", 3, b"abc") is None
    assert "BEGIN" not in json.dumps([host, snake, der, user])


def test_key_candidates():
    assert image_facts.is_key_candidate("/etc/ssh/ssh_host_rsa_key")
    assert not image_facts.is_key_candidate("/etc/ssh/ssh_host_rsa_key.pub")
    assert not image_facts.is_key_candidate("/etc/ssh/sshd_config")
    assert image_facts.is_key_candidate("/etc/ssl/private/anything")
    assert image_facts.is_key_candidate("/root/.ssh/id_rsa")
    assert not image_facts.is_key_candidate("/root/.ssh/authorized_keys")


# Exposure ---------------------------------------------------------------------------------------


def test_a_clean_evaluation_image_has_no_exposure_reason():
    assert image_facts.exposure_reasons(windows()) == []
    assert image_facts.exposure_reasons(linux()) == []


def test_kms_settings_are_key_bearing():
    facts = windows(licensing=image_facts.licensing_fact({"KeyManagementServiceName": "kms.corp.example"}))
    [reason] = image_facts.exposure_reasons(facts)
    assert reason.startswith("key-bearing: KMS is configured (KeyManagementServiceName")
    assert "kms.corp.example" not in json.dumps(facts)


def test_an_installed_key_of_a_licensed_edition_is_key_bearing_not_of_an_evaluation_one():
    licensed = windows(edition=image_facts.edition_fact({"EditionID": "Enterprise"}))
    [reason] = image_facts.exposure_reasons(licensed)
    assert "product key is installed (BackupProductKeyDefault, DigitalProductId)" in reason
    assert "'Enterprise' is not an evaluation edition" in reason
    assert image_facts.exposure_reasons(windows()) == []


def test_answer_file_and_winlogon_secrets_are_reasons_and_never_in_the_document():
    unattend = image_facts.unattend_fact("C:\\Windows\\Panther\\unattend.xml", ANSWER_FILE)
    logon = image_facts.autologon_fact({"AutoAdminLogon": "1", "DefaultPassword": PASSWORD})
    facts = windows(unattend=[unattend], autologon=logon)
    reasons = image_facts.exposure_reasons(facts)
    assert [r.split(":", 1)[0] for r in reasons] == [
        "key-bearing",
        "credential-bearing",
        "credential-bearing",
    ]
    assert "C:\\Windows\\Panther\\unattend.xml holds a product key" in reasons[0]
    assert "C:\\Windows\\Panther\\unattend.xml holds passwords" in reasons[1]
    assert "DefaultPassword is set" in reasons[2]
    text = json.dumps(facts) + json.dumps(reasons)
    for secret in (PASSWORD, LOCAL_PASSWORD, AUTOLOGON_PASSWORD, KEY):
        assert secret not in text


def test_private_keys_are_key_bearing():
    key = image_facts.private_key_fact(image_facts.SNAKEOIL_KEY, 1704, b"-----BEGIN PRIVATE KEY-----")
    assert image_facts.exposure_reasons(linux(private_keys=[key])) == [
        "key-bearing: /etc/ssl/private/ssl-cert-snakeoil.key is left in the image "
        "(tls_snakeoil_key, PRIVATE KEY)"
    ]


@pytest.mark.parametrize(
    "facts, words",
    [
        (None, "no image facts were read"),
        ({}, "no image facts were read"),
        ({"schema_version": 99, "os_family": "linux"}, "schema version 99"),
        ({"schema_version": 1, "os_family": "plan9"}, "unknown OS family"),
    ],
)
def test_no_facts_or_facts_not_understood_are_unproven(facts, words):
    [reason] = image_facts.exposure_reasons(facts)
    assert reason.startswith("unproven: ") and words in reason


def test_what_could_not_be_read_is_unproven():
    facts = windows(unreadable=[image_facts.unreadable(image_facts.SOFTWARE_HIVE, "bad hbin")])
    assert image_facts.exposure_reasons(facts) == [
        "unproven: C:\\Windows\\System32\\config\\SOFTWARE could not be read (bad hbin)"
    ]
    encrypted = windows(bitlocker=image_facts.bitlocker_fact(b"\xebX\x90-FVE-FS-" + b"\0" * 501))
    assert image_facts.exposure_reasons(encrypted) == [
        "unproven: the volume is BitLocker-encrypted, so nothing on it was read"
    ]


# PostgreSQL facts and the declaration of a baked image ---------------------------------------------

UBUNTU_2204 = {
    "id": "ubuntu",
    "version_id": "22.04",
    "version_codename": "jammy",
    "pretty_name": "Ubuntu 22.04.5 LTS",
    "path": "/etc/os-release",
}


DEFAULT_RELEASE = "ubuntu 22.04"  # stands for UBUNTU_2204: a dict is no default value


def baked_facts(release=DEFAULT_RELEASE, majors=("15", "16", "17"), clusters=None, keys=()):
    return image_facts.document(
        "linux",
        os_release=UBUNTU_2204 if release == DEFAULT_RELEASE else release,
        machine_id="empty",
        private_keys=[
            {"path": path, "kind": image_facts.private_key_kind(path), "pem": None, "size": 9}
            for path in keys
        ],
        postgresql=image_facts.postgresql_fact({m: True for m in majors}, [], clusters or {}),
    )


def test_majors_are_the_servers_installed_and_clusters_say_whether_they_are_initialized():
    fact = image_facts.postgresql_fact(
        {"15": True, "16": True, "17": False, "lib": True, "017": True},
        [("16", "main"), ("17", "main"), ("conf", "x")],
        {("16", "main"): "16\n", ("17", "main"): None},
    )
    # 17 has only a client (no bin/postgres), and neither "lib" nor "017" is a major.
    assert fact["majors"] == ["15", "16"]
    assert fact["clusters"] == [
        {
            "major": "16",
            "name": "main",
            "configured": True,
            "initialized": True,
            "pg_version": "16",
            "data_directory": "/var/lib/postgresql/16/main",
        },
        {"major": "17", "name": "main", "configured": True, "initialized": False},
    ]


def test_a_baked_image_that_agrees_with_its_declaration_has_no_problem():
    assert image_facts.declaration_problems(baked_facts(), "22.04", ["17", "15", "16"]) == []


def test_a_2204_image_declared_2404_is_a_problem_with_both_sides():
    (problem,) = image_facts.declaration_problems(baked_facts(), "24.04", ["15", "16", "17"])
    assert problem["fact"] == "os_release" and (problem["read"], problem["declared"]) == ("22.04", "24.04")
    assert "VERSION_ID=22.04" in problem["message"] and "says 24.04" in problem["message"]


def test_majors_missing_or_extra_are_a_problem():
    (problem,) = image_facts.declaration_problems(
        baked_facts(majors=("16", "17")), "22.04", ["15", "16", "17"]
    )
    assert problem["fact"] == "pg_majors" and problem["read"] == ["16", "17"]
    assert problem["declared"] == ["15", "16", "17"]


def test_no_os_release_is_a_problem():
    (problem,) = image_facts.declaration_problems(baked_facts(release=None), "22.04", ["15", "16", "17"])
    assert problem["fact"] == "os_release" and "no os-release" in problem["message"]


def test_a_shared_snakeoil_key_and_an_initialized_cluster_are_problems():
    facts = baked_facts(keys=["/etc/ssl/private/ssl-cert-snakeoil.key"], clusters={("16", "main"): "16"})
    problems = image_facts.declaration_problems(facts, "22.04", ["15", "16", "17"])
    assert [p["fact"] for p in problems] == ["initialized_cluster", "private_key"]
    assert "database system identifier" in problems[0]["message"]
    assert "tls_snakeoil_key" in problems[1]["message"]
    kept = image_facts.catalog_facts(facts)
    assert kept["private_keys"] == ["/etc/ssl/private/ssl-cert-snakeoil.key"]
    assert kept["initialized_clusters"] == ["16/main"] and kept["pg_majors"] == ["15", "16", "17"]


def test_the_refusal_names_the_subject_and_carries_the_problems():
    facts = baked_facts()
    problems = image_facts.declaration_problems(facts, "24.04", ["15", "16", "17"])
    with pytest.raises(image_facts.Refusal) as caught:
        image_facts.refuse_contradicted("revision v20261201-2404", problems, facts)
    assert caught.value.msg.startswith("revision v20261201-2404: the bytes are not what is declared")
    assert caught.value.fields["problems"] == problems and caught.value.fields["refused"]
    image_facts.refuse_contradicted("revision v20261201-2404", [], facts)
