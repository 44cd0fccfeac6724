"""Role defaults that the Kube-DC guide (seed 001) fixes: the Windows golden's family id, and the
cloudbase-init plugins a tenant's clone needs to log in with its own user, password and SSH keys and to
apply its own licence. Each is read from the role's defaults and its argument spec, which must agree."""

from __future__ import annotations

import pathlib

import pytest
import yaml

ROLES = pathlib.Path(__file__).resolve().parents[2] / "roles"


def default(role: str, name: str):
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())[name]


def spec_defaults(role: str, name: str) -> list:
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return [entry["options"][name]["default"] for entry in specs.values() if name in entry.get("options", {})]


def test_the_windows_export_family_is_the_guides_windows_11_golden():
    assert default("windows_export", "windows_export_family") == "windows-11-golden"
    assert spec_defaults("windows_export", "windows_export_family") == ["windows-11-golden"] * 2
    readme = (ROLES / "windows_export" / "README.md").read_text()
    assert '| `windows_export_family` | str | `"windows-11-golden"` |' in readme


@pytest.mark.parametrize(
    "plugin",
    [
        "cloudbaseinit.plugins.windows.createuser.CreateUserPlugin",
        "cloudbaseinit.plugins.common.setuserpassword.SetUserPasswordPlugin",
        "cloudbaseinit.plugins.common.sshpublickeys.SetUserSSHPublicKeysPlugin",
        "cloudbaseinit.plugins.windows.licensing.WindowsLicensingPlugin",
        "cloudbaseinit.plugins.windows.extendvolumes.ExtendVolumesPlugin",
    ],
)
def test_the_bakes_cloudbase_init_plugins_let_a_tenant_log_in_and_license(plugin):
    plugins = default("windows_bake", "windows_bake_cloudbase_plugins")
    assert plugin in plugins
    assert spec_defaults("windows_bake", "windows_bake_cloudbase_plugins") == [plugins]


def test_the_user_is_created_before_its_password_and_keys_are_set():
    plugins = [p.rsplit(".", 1)[1] for p in default("windows_bake", "windows_bake_cloudbase_plugins")]
    assert plugins.index("CreateUserPlugin") < plugins.index("SetUserPasswordPlugin")
    assert plugins.index("CreateUserPlugin") < plugins.index("SetUserSSHPublicKeysPlugin")
