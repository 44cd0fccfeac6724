"""The seal rules over an in-memory filesystem view (the disk adapter is covered by the integration tests)."""

from __future__ import annotations

import codecs

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import image_facts, seal

SYSPREP = "C:\\Windows\\System32\\Sysprep\\sysprep.exe /generalize /oobe /shutdown"


class MemoryView:
    """``{"/dir/file": b"..."}``; directories are implied by the paths (or given with a trailing /)."""

    def __init__(self, files, case_insensitive=True):
        self.case_insensitive = case_insensitive
        self.files = {}
        self.dirs = {"/"}
        for path, content in files.items():
            if path.endswith("/"):
                self._add_dirs(path.rstrip("/"))
                continue
            self.files[path] = content.encode() if isinstance(content, str) else content
            self._add_dirs(path.rsplit("/", 1)[0])

    def _add_dirs(self, path):
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            self.dirs.add("/" + "/".join(parts[:i]))

    def _key(self, path, pool):
        path = "/" + path.strip("/")
        if path in pool or not self.case_insensitive:
            return path if path in pool else None
        matches = [p for p in pool if p.casefold() == path.casefold()]
        return matches[0] if matches else None

    def exists(self, path):
        return self._key(path, self.files) is not None or self._key(path, self.dirs) is not None

    def is_dir(self, path):
        return self._key(path, self.dirs) is not None

    def list(self, path):
        key = self._key(path, self.dirs)
        if key is None:
            return None
        prefix = key.rstrip("/") + "/"
        names = {
            p[len(prefix) :].split("/")[0] for p in list(self.files) + list(self.dirs) if p.startswith(prefix)
        }
        return sorted(n for n in names if n)

    def size(self, path):
        key = self._key(path, self.files)
        return None if key is None else len(self.files[key])

    def read(self, path, offset=0, length=-1):
        data = self.files[self._key(path, self.files)]
        return data[offset:] if length < 0 else data[offset : offset + length]


NTFS_BOOT = b"\xebR\x90NTFS    " + b"\0" * 501
GPT = [
    {"number": 1, "offset": 1 << 20, "size": 100 << 20, "type": "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"},
    {"number": 2, "offset": 101 << 20, "size": 16 << 20, "type": "e3c9e316-0b5c-4db8-817d-f92df00215ae"},
    {"number": 3, "offset": 117 << 20, "size": 60 << 30, "type": seal.WINDOWS_DATA_GPT, "filesystem": "ntfs"},
]
RECOVERY = {
    "number": 4,
    "offset": (117 << 20) + (60 << 30),
    "size": 600 << 20,
    "type": seal.WINDOWS_RECOVERY_GPT,
    "type_name": "Windows Recovery Environment",
    "name": "Recovery",
}


def sealed_view(**extra):
    files = {"/bootstrap.log": "started\r\n%s\r\n\r\n" % SYSPREP, "/Windows/System32/": b""}
    files.update(extra)
    return MemoryView(files)


def by_name(checks):
    return {c["name"]: c for c in checks}


RDP_ON = {
    "control_set": "ControlSet001",
    "deny": 0,
    "port_number": 3389,
    "rules": {
        "RemoteDesktop-UserMode-In-TCP": "v2.31|Action=Allow|Active=TRUE|Dir=In|Protocol=6|LPort=3389|"
    },
}


def windows_facts(image_state=image_facts.GENERALIZED, unattend=(), winlogon=None, unreadable=()):
    return image_facts.document(
        "windows",
        unreadable,
        bitlocker=image_facts.bitlocker_fact(NTFS_BOOT),
        image_state=image_facts.image_state_fact(image_state),
        edition=image_facts.edition_fact({"EditionID": "EnterpriseEval"}),
        licensing=image_facts.licensing_fact({}),
        autologon=image_facts.autologon_fact(winlogon or {}),
        unattend=list(unattend),
    )


SEALED_FACTS = windows_facts()


def test_sealed_windows_disk_passes_every_check():
    checks = seal.windows_checks(
        NTFS_BOOT, sealed_view(), GPT, GPT[2], remote_desktop=RDP_ON, facts=SEALED_FACTS
    )
    assert [c["name"] for c in checks] == list(seal.WINDOWS_CHECKS)
    assert seal.verdict(checks) == (True, [])


def test_without_image_facts_a_windows_disk_is_not_sealed():
    checks = by_name(seal.windows_checks(NTFS_BOOT, sealed_view(), GPT, GPT[2], remote_desktop=RDP_ON))
    assert not checks["image_state_generalized"]["passed"]
    assert not checks["credentials_absent"]["passed"]


@pytest.mark.parametrize("state", ["IMAGE_STATE_COMPLETE", "IMAGE_STATE_SPECIALIZE_RESEAL_TO_OOBE", "junk"])
def test_image_state_other_than_generalized_fails_whatever_the_log_says(state):
    checks = by_name(
        seal.windows_checks(
            NTFS_BOOT,
            sealed_view(),
            GPT,
            GPT[2],
            remote_desktop=RDP_ON,
            facts=windows_facts(image_state=state),
        )
    )
    assert checks["bootstrap_log_final_line"]["passed"]
    assert not checks["image_state_generalized"]["passed"]
    assert state in checks["image_state_generalized"]["evidence"]


def test_image_state_absent_leaves_the_log_line_as_proof_and_an_unreadable_hive_fails():
    absent = seal.check_image_state(windows_facts(image_state=None))
    assert absent["passed"] and "the log line is the only proof" in absent["evidence"]
    broken = windows_facts(unreadable=[image_facts.unreadable(image_facts.SOFTWARE_HIVE, "bad hbin")])
    check = seal.check_image_state(broken)
    assert not check["passed"] and "bad hbin" in check["evidence"]


def test_credentials_left_in_an_answer_file_or_winlogon_fail_naming_the_file():
    unattend = image_facts.unattend_fact(
        "C:\\Windows\\Panther\\unattend.xml",
        b"<unattend><UserAccounts><AdministratorPassword><Value>pw</Value></AdministratorPassword>"
        b"</UserAccounts></unattend>",
    )
    check = seal.check_credentials(windows_facts(unattend=[unattend]))
    assert not check["passed"]
    assert "C:\\Windows\\Panther\\unattend.xml holds password" in check["evidence"]
    check = seal.check_credentials(windows_facts(winlogon={"DefaultPassword": "pw", "AutoAdminLogon": "1"}))
    assert not check["passed"] and "DefaultPassword is set and AutoAdminLogon is 1" in check["evidence"]
    assert "pw" not in check["evidence"].replace("DefaultPassword", "")
    redacted = image_facts.unattend_fact(
        "C:\\Windows\\Panther\\unattend.xml",
        b"<unattend><AdministratorPassword><Value>*SENSITIVE*DATA*DELETED*</Value></AdministratorPassword>"
        b"</unattend>",
    )
    assert seal.check_credentials(windows_facts(unattend=[redacted]))["passed"]


def test_bitlocker_boot_sector_fails_and_the_files_cannot_be_checked():
    boot = b"\xebX\x90-FVE-FS-" + b"\0" * 501
    checks = seal.windows_checks(boot, None, GPT, GPT[2], unreadable="the volume is BitLocker-encrypted")
    sealed, failed = seal.verdict(checks)
    assert not sealed
    assert failed == [
        "ntfs_boot_sector",
        "build_failed_absent",
        "bootstrap_script_absent",
        "bootstrap_log_final_line",
        "image_state_generalized",
        "credentials_absent",
        "remote_desktop_enabled",
    ]
    assert "-FVE-FS-" in checks[0]["evidence"]
    assert "BitLocker-encrypted" in checks[1]["evidence"]


def test_other_boot_sector_is_named():
    check = seal.check_boot_sector(b"\xeb<\x90MSDOS5.0" + b"\0" * 501)
    assert not check["passed"] and "MSDOS5.0" in check["evidence"]


@pytest.mark.parametrize("name", ["BUILD_FAILED", "build_failed", "Build_Failed"])
def test_build_failed_matches_in_any_case(name):
    check = by_name(seal.windows_checks(NTFS_BOOT, sealed_view(**{"/" + name: "x"}), GPT, GPT[2]))
    assert check["build_failed_absent"]["passed"] is False
    assert "C:\\%s" % name in check["build_failed_absent"]["evidence"]


def test_case_sensitive_view_does_not_fold_names():
    view = MemoryView({"/build_failed": "x"}, case_insensitive=False)
    assert seal.find(view, "/BUILD_FAILED") is None
    assert seal.find(view, "/build_failed") == "/build_failed"


def test_bootstrap_script_left_behind():
    view = sealed_view(**{"/KUBE-DC-BOOTSTRAP.PS1": "Restart-Computer"})
    check = by_name(seal.windows_checks(NTFS_BOOT, view, GPT, GPT[2]))["bootstrap_script_absent"]
    assert not check["passed"] and "must not ship" in check["evidence"]


def test_paths_are_options():
    view = sealed_view(**{"/Setup/FAILED.txt": "x"})
    checks = seal.windows_checks(NTFS_BOOT, view, GPT, GPT[2], build_failed="C:\\Setup\\failed.TXT")
    assert by_name(checks)["build_failed_absent"]["passed"] is False
    assert seal.volume_path("C:\\kube-dc-bootstrap.ps1") == "/kube-dc-bootstrap.ps1"
    assert seal.volume_path("d:/x/y") == "/x/y"


def test_recovery_partition_after_c_is_named_with_its_size():
    check = seal.check_nothing_after(GPT + [RECOVERY], GPT[2])
    assert not check["passed"]
    assert "partition 4 'Recovery'" in check["evidence"] and "600.0 MiB" in check["evidence"]
    assert "reagentc /disable" in check["evidence"]
    assert seal.check_nothing_after(GPT, GPT[2])["passed"]


def test_partition_before_c_is_fine():
    recovery_first = dict(RECOVERY, number=5, offset=1 << 19)
    assert seal.check_nothing_after([recovery_first] + GPT, GPT[2])["passed"]


# The log's last line ----------------------------------------------------------------------------


def log_check(content, expected=seal.DEFAULT_FINAL_LINE):
    return seal.check_log_final_line(MemoryView({"/bootstrap.log": content}), "C:\\bootstrap.log", expected)


@pytest.mark.parametrize(
    "encode",
    [
        lambda t: codecs.BOM_UTF16_LE + t.encode("utf-16-le"),
        lambda t: codecs.BOM_UTF16_BE + t.encode("utf-16-be"),
        lambda t: t.encode("utf-16-le"),
        lambda t: codecs.BOM_UTF8 + t.encode("utf-8"),
        lambda t: t.encode("utf-8"),
    ],
    ids=["utf16le-bom", "utf16be-bom", "utf16le-no-bom", "utf8-bom", "utf8"],
)
@pytest.mark.parametrize("ending", ["\r\n", "\n", "\r\n\r\n  \r\n", "\n\n\n", ""])
def test_log_encodings_and_line_ends(encode, ending):
    assert log_check(encode("first line\r\n" + SYSPREP + ending))["passed"]
    other = log_check(encode(SYSPREP + "\r\nRestart-Computer -Force" + ending))
    assert not other["passed"] and "Restart-Computer -Force" in other["evidence"]


def test_long_log_reads_only_its_tail():
    body = ("x" * 100 + "\r\n") * 2000 + SYSPREP + "\r\n"
    data = codecs.BOM_UTF16_LE + body.encode("utf-16-le")
    assert len(data) > seal.LOG_TAIL_BYTES
    assert log_check(data)["passed"]


def test_missing_and_empty_log_fail():
    missing = seal.check_log_final_line(MemoryView({}), "C:\\bootstrap.log", seal.DEFAULT_FINAL_LINE)
    assert not missing["passed"] and "absent" in missing["evidence"]
    assert "empty" in log_check(b"\r\n\r\n")["evidence"]


@pytest.mark.parametrize(
    "line, passed",
    [
        ("sysprep /generalize /oobe /shutdown", True),
        ("SYSPREP.EXE /Generalize /OOBE /Shutdown", True),
        (
            '"C:\\Windows\\System32\\Sysprep\\sysprep.exe" /generalize /oobe /shutdown /unattend:C:\\u.xml',
            True,
        ),
        ("10:03:02 running sysprep /generalize  /oobe /shutdown", True),
        ("2026-08-09T10:03:02 sysprep /generalize /oobe /shutdown", True),
        ("[2026-08-09 10:03:02] [INFO] bootstrap: running sysprep.exe /generalize /oobe /shutdown", True),
        ("& C:\\Windows\\System32\\Sysprep\\sysprep.exe /generalize /oobe /shutdown", True),
        ("echo sysprep /generalize /oobe /shutdown", False),
        ("2026-08-09T10:03:02 echo sysprep /generalize /oobe /shutdown", False),
        ("Write-Host sysprep /generalize /oobe /shutdown", False),
        ("rem sysprep /generalize /oobe /shutdown", False),
        ("# sysprep /generalize /oobe /shutdown", False),
        ("echo: sysprep /generalize /oobe /shutdown", False),
        ("would run sysprep /generalize /oobe /shutdown", False),
        ("2026-08-09T10:03:02 FAILED: sysprep /generalize /oobe /shutdown", False),
        ("[ERROR] error: sysprep /generalize /oobe /shutdown", False),
        ("sysprep /generalize /oobe /shutdown failed", False),
        ("sysprep /oobe /generalize /shutdown", False),
        ("sysprep /generalize /oobe /reboot", False),
        ("", False),
    ],
)
def test_final_line_match(line, passed):
    assert seal.ends_on(line, seal.DEFAULT_FINAL_LINE) is passed


# Picking the partition --------------------------------------------------------------------------


def test_windows_partition_by_type_and_size_or_index():
    small = dict(GPT[2], number=5, offset=1 << 40, size=1 << 20)
    assert seal.pick_windows_partition(GPT + [small])["number"] == 3
    assert seal.pick_windows_partition(GPT, 2)["number"] == 2
    mbr = [{"number": 1, "offset": 1 << 20, "size": 1 << 30, "type": "0x07"}]
    assert seal.pick_windows_partition(mbr)["number"] == 1
    with pytest.raises(seal.SealError, match="no partition 7"):
        seal.pick_windows_partition(GPT, 7)
    with pytest.raises(seal.SealError, match="no Windows partition"):
        seal.pick_windows_partition(GPT[:2])


def test_detect_os_and_linux_partition():
    linux = [
        {"number": 1, "offset": 1 << 20, "size": 8 << 20, "type": "x", "filesystem": None},
        {"number": 2, "offset": 9 << 20, "size": 2 << 30, "type": "y", "filesystem": "ext"},
    ]
    assert seal.detect_os(GPT) == "windows"
    assert seal.detect_os([dict(GPT[2], filesystem="bitlocker")]) == "windows"
    assert seal.detect_os(linux) == "linux"
    assert seal.detect_os(GPT[:2]) is None
    assert seal.pick_linux_partition(linux)["number"] == 2
    with pytest.raises(seal.SealError, match="no ext2/3/4"):
        seal.pick_linux_partition(linux[:1])


# Linux hygiene ----------------------------------------------------------------------------------


def linux_view(**extra):
    files = {
        "/etc/machine-id": b"",
        "/etc/ssh/sshd_config": "x",
        "/var/lib/cloud/": b"",
        "/var/log/apt/history.log": "x" * 100,
        "/root/.ssh/": b"",
        "/home/debian/.bashrc": "x",
        "/etc/postgresql/16/main/start.conf": "# auto, manual or disabled\nmanual\n",
        "/etc/postgresql/17/main/start.conf": "manual\n",
        "/etc/systemd/system/multi-user.target.wants/ssh.service": "",
        "/etc/systemd/system/timers.target.wants/fstrim.timer": "",
    }
    files.update({k.replace("__", "/"): v for k, v in extra.items()})
    return MemoryView(files, case_insensitive=False)


def test_sealed_linux_root_passes():
    checks = seal.linux_checks(linux_view())
    assert [c["name"] for c in checks] == list(seal.LINUX_CHECKS)
    assert seal.verdict(checks) == (True, [])
    assert seal.check_machine_id(MemoryView({}, case_insensitive=False))["passed"]
    assert seal.check_machine_id(linux_view(**{"/etc/machine-id": "uninitialized\n"}))["passed"]


@pytest.mark.parametrize(
    "extra, failing, word",
    [
        ({"/etc/machine-id": "0123456789abcdef0123456789abcdef\n"}, "machine_id_empty", "0123456789abcdef"),
        ({"/etc/ssh/ssh_host_rsa_key": "k"}, "ssh_host_keys_absent", "ssh_host_rsa_key"),
        ({"/var/lib/cloud/data/instance-id": "i-1"}, "cloud_init_instance_absent", "instance-id"),
        ({"/var/lib/cloud/instances/i-1/": b""}, "cloud_init_instance_absent", "instances/i-1"),
        ({"/root/.ssh/authorized_keys": "ssh-ed25519 AAAA"}, "build_authorized_keys_absent", "/root/.ssh"),
        ({"/home/debian/.ssh/authorized_keys": "ssh-ed25519 AAAA"}, "build_authorized_keys_absent", "debian"),
        ({"/var/lib/systemd/coredump/core.1": "x"}, "core_dumps_absent", "core.1"),
        ({"/var/log/journal/a/system.journal": b"x" * (2 << 20)}, "var_log_small", "2.0 MiB"),
        (
            {"/etc/systemd/system/timers.target.wants/apt-daily.timer": ""},
            "background_apt_disabled",
            "/etc/systemd/system/timers.target.wants/apt-daily.timer",
        ),
        (
            {"/etc/systemd/system/multi-user.target.wants/unattended-upgrades.service": ""},
            "background_apt_disabled",
            "unattended-upgrades.service",
        ),
        (
            {"/etc/systemd/system/timers.target.wants/apt-daily-upgrade.timer": ""},
            "background_apt_disabled",
            "apt-daily-upgrade.timer",
        ),
        (
            {"/etc/systemd/system/timers.target.wants/ua-timer.timer": ""},
            "background_apt_disabled",
            "ua-timer.timer",
        ),
        (
            {"/etc/systemd/system/timers.target.wants/snapd.snap-repair.timer": ""},
            "background_apt_disabled",
            "snapd.snap-repair.timer",
        ),
        (
            {"/usr/lib/systemd/system/apt-news.service": "[Unit]\n"},
            "background_apt_disabled",
            "apt-news.service (shipped, not masked)",
        ),
        (
            {
                "/lib/systemd/system/esm-cache.service": "[Unit]\n",
                "/etc/systemd/system/esm-cache.service": "x",
            },
            "background_apt_disabled",
            "esm-cache.service (shipped, not masked)",
        ),
        (
            {"/etc/postgresql/16/main/start.conf": "# comment\n auto \n"},
            "postgresql_clusters_at_boot",
            "16/main (/etc/postgresql/16/main/start.conf says auto)",
        ),
        (
            {"/etc/systemd/system/multi-user.target.wants/postgresql@17-main.service": ""},
            "postgresql_clusters_at_boot",
            "17/main (/etc/systemd/system/multi-user.target.wants/postgresql@17-main.service is enabled)",
        ),
    ],
)
def test_linux_hygiene_failures(extra, failing, word):
    checks = seal.linux_checks(linux_view(**extra))
    sealed, failed = seal.verdict(checks)
    assert not sealed and failed == [failing]
    assert word in by_name(checks)[failing]["evidence"]


def test_only_the_requested_postgresql_cluster_starts_at_boot():
    auto = {"/etc/postgresql/17/main/start.conf": "auto\n"}
    check = seal.check_postgresql_clusters(linux_view(**auto), ["17/main"])
    assert check["passed"] and "17/main" in check["evidence"]
    # The same cluster in the unit's spelling; a cluster enabled by its unit counts as starting.
    unit = {"/etc/systemd/system/multi-user.target.wants/postgresql@17-main.service": ""}
    assert seal.check_postgresql_clusters(linux_view(**unit), ["17-main"])["passed"]
    # Requested but left manual: the clone's database would not come up.
    missing = seal.check_postgresql_clusters(linux_view(), ["17/main"])
    assert not missing["passed"] and "17/main is requested but does not start" in missing["evidence"]
    # Another major starting next to the requested one.
    both = dict(auto, **{"/etc/postgresql/16/main/start.conf": "auto\n"})
    extra = seal.check_postgresql_clusters(linux_view(**both), ["17/main"])
    assert not extra["passed"] and extra["evidence"].startswith("16/main (")
    checks = seal.linux_checks(linux_view(**auto), postgresql_clusters=["17/main"])
    assert seal.verdict(checks) == (True, [])
    with pytest.raises(seal.SealError, match="<major>/<cluster>"):
        seal.check_postgresql_clusters(linux_view(), ["17"])


def test_disabled_units_and_other_targets_pass():
    view = linux_view(
        **{
            "/etc/systemd/system/apt-daily.timer": "",
            "/etc/systemd/system/foo.target/x": "",
            # Masked (an empty file, as a link to /dev/null reads): shipped but stopped.
            "/usr/lib/systemd/system/apt-news.service": "[Unit]\n",
            "/etc/systemd/system/apt-news.service": "",
        }
    )
    assert seal.check_background_apt(view)["passed"]
    assert sorted(seal.enablement_links(view)) == ["fstrim.timer", "ssh.service"]


def test_empty_authorized_keys_and_log_budget():
    assert seal.check_authorized_keys(linux_view(**{"/root/.ssh/authorized_keys": b""}))["passed"]
    view = linux_view(**{"/var/log/big": b"x" * (2 << 20)})
    assert seal.check_var_log(view, 4 << 20)["passed"]
    assert seal.tree_size(view, "/var/log") == (2 << 20) + 100


def test_no_checks_is_not_sealed():
    assert seal.verdict([]) == (False, [])
    assert seal.human_size(0) == "0 B" and seal.human_size(1536) == "1.5 KiB"


def test_an_unsealed_verdict_is_refused_naming_each_failed_check():
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

    result = {
        "sealed": False,
        "checks": [
            seal.check("ntfs_boot_sector", True, "ok"),
            seal.check("build_failed_absent", False, "C:\\BUILD_FAILED exists (12 bytes)"),
        ],
    }
    with pytest.raises(Refusal) as err:
        seal.refuse_unsealed(result, "PersistentVolumeClaim ns/golden")
    assert err.value.msg.startswith(
        "PersistentVolumeClaim ns/golden: is not sealed: build_failed_absent: C:\\BUILD_FAILED exists"
    )
    assert "ntfs_boot_sector" not in err.value.msg
    assert err.value.fields["sealed"] is False and err.value.fields["refused"] is True
    assert seal.refuse_unsealed(result, "x", fail_on_unsealed=False) is result
    assert seal.refuse_unsealed({"sealed": True, "checks": []}, "x")["sealed"] is True


def test_check_mode_does_not_verify_a_claim():
    result = seal.check_mode_skip("PersistentVolumeClaim ns/golden")
    assert result["skipped"] is True and result["changed"] is False
    assert "PersistentVolumeClaim ns/golden was not verified" in result["msg"]


def test_absence_passes_on_nothing_found_and_names_what_was_found():
    assert seal.absence("x_absent", [], "left: %s", "none") == {
        "name": "x_absent",
        "passed": True,
        "evidence": "none",
    }
    assert seal.absence("x_absent", ["/a", "/b"], "left: %s", "none") == {
        "name": "x_absent",
        "passed": False,
        "evidence": "left: /a, /b",
    }


# Remote Desktop: the golden answers where the clone gate probes -----------------------------------

RDP_TCP = "v2.31|Action=Allow|Active=TRUE|Dir=In|Protocol=6|LPort=3389|EmbedCtxt=@FirewallAPI.dll,-28752|"


def rdp(**changes):
    settings = {"control_set": "ControlSet001", "deny": 0, "port_number": None, "rules": {"rdp": RDP_TCP}}
    settings.update(changes)
    return seal.check_remote_desktop(settings)


def test_remote_desktop_enabled_and_let_in():
    result = rdp()
    assert result["passed"], result
    assert "ControlSet001" in result["evidence"] and "rdp" in result["evidence"]


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"deny": 1}, "fDenyTSConnections is 1"),
        ({"deny": None}, "fDenyTSConnections is not set"),
        ({"port_number": 3390}, "port 3390, not on 3389"),
        ({"rules": {}}, "no enabled inbound firewall rule allows TCP 3389"),
        ({"rules": {"r": RDP_TCP.replace("Active=TRUE", "Active=FALSE")}}, "no enabled inbound"),
        ({"rules": {"r": RDP_TCP.replace("Dir=In", "Dir=Out")}}, "no enabled inbound"),
        ({"rules": {"r": RDP_TCP.replace("Protocol=6", "Protocol=17")}}, "no enabled inbound"),
        ({"rules": {"r": RDP_TCP.replace("Action=Allow", "Action=Block")}}, "no enabled inbound"),
        ({"rules": {"r": RDP_TCP.replace("LPort=3389", "LPort=3390")}}, "no enabled inbound"),
        ({"error": "the hive is not on the volume"}, "cannot be read: the hive is not on the volume"),
    ],
)
def test_remote_desktop_refused(changes, words):
    result = rdp(**changes)
    assert not result["passed"]
    assert words in result["evidence"]


def test_firewall_rule_ports_ranges_and_lists():
    assert seal.rule_opens(seal.firewall_rule(RDP_TCP.replace("LPort=3389", "LPort=3000-4000")), 3389)
    assert seal.rule_opens(seal.firewall_rule(RDP_TCP.replace("LPort=3389", "LPort=22|LPort=3389")), 3389)
    assert not seal.rule_opens(seal.firewall_rule(RDP_TCP.replace("LPort=3389", "LPort=RPC")), 3389)
    assert seal.rule_opens(seal.firewall_rule(RDP_TCP.lower()), 3389)


def test_windows_checks_carry_remote_desktop_unless_left_out():
    names = [c["name"] for c in seal.windows_checks(b"\0" * 512, None, [], {"number": 3}, unreadable="x")]
    assert names[-1] == "remote_desktop_enabled"
    off = seal.windows_checks(b"\0" * 512, None, [], {"number": 3}, unreadable="x", remote_desktop_port=0)
    assert "remote_desktop_enabled" not in [c["name"] for c in off]


def test_a_claim_needs_a_verifier_image_named():
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

    with pytest.raises(Refusal, match=r"option verifier_image: .*PersistentVolumeClaim ns/golden"):
        seal.refuse_without_verifier_image("", "PersistentVolumeClaim ns/golden")
    assert seal.refuse_without_verifier_image("seal-verifier:1", "PersistentVolumeClaim ns/golden") is None


def test_the_gpt_header_is_the_primary_then_the_backup_as_sgdisk_reads_it():
    assert seal.gpt_header_choice("d.raw", None, "never read", 8191) == ("primary", None)
    assert seal.gpt_header_choice("d.raw", "its header checksum does not match", None, 8191, False) == (
        None,
        "d.raw: the primary GPT header at LBA 1 is damaged (its header checksum does not match); rewrite it "
        "from the backup (sgdisk -e) and judge the disk again",
    )
    which, note = seal.gpt_header_choice("d.raw", "its header checksum does not match", None, 8191)
    assert which == "backup"
    assert note.startswith(
        "d.raw: the primary GPT header at LBA 1 is damaged (its header checksum does not match); the "
        "partitions were read from the backup header at LBA 8191"
    )
    which, message = seal.gpt_header_choice("d.raw", seal.GPT_MISSING, "its header size 9 is not valid", 8191)
    assert which is None
    assert message == (
        "d.raw: the primary GPT header at LBA 1 is damaged (no GPT header) and so is the backup at LBA 8191 "
        "(its header size 9 is not valid)"
    )
