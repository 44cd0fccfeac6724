#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: baked_image_rebuild_due
short_description: Tell whether the APT repositories offer what makes a baked image rebuild due
version_added: 0.1.0
description:
  - Reads the APT metadata of the configured repositories (the Ubuntu archive with its C(-security) pocket,
    PGDG, or any mirror of them) and compares it with the package list of the default stream's tip (its
    build manifest), so a calendar build that would change nothing is not run.
  - For each suite it fetches C(InRelease) (or C(Release) and C(Release.gpg)), has C(gpgv) check the signature
    against the repository's O(repositories[].keyring), and reads only the text C(gpgv) vouches for. An
    unsigned or unverifiable Release is refused unless O(repositories[].allow_unsigned=true).
  - Each C(Packages) index (C(.xz), C(.gz) or plain, as the Release file lists them) must match the SHA256 and
    size the Release file gives for it; a mismatch is refused, and so is a Release past its C(Valid-Until).
  - A rebuild is due for a newer PostgreSQL minor of a baked major (C(postgresql-<major>)), a security update
    of an installed package (a newer version in a C(-security) suite), or a new Ubuntu point release (a newer
    C(base-files)). Versions are ordered as dpkg orders them (epochs, C(~), revisions).
  - Reads only; never changes anything.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  repositories:
    description: The APT repositories to read.
    type: list
    elements: dict
    required: true
    suboptions:
      url:
        description:
          - Base URL of the repository (the directory holding C(dists/)), for example
            C(http://archive.ubuntu.com/ubuntu) or C(https://apt.postgresql.org/pub/repos/apt).
        type: str
        required: true
      suites:
        description: Suites to read, for example C([jammy, jammy-updates, jammy-security]) or C([jammy-pgdg]).
        type: list
        elements: str
        required: true
      components:
        description: Components to read.
        type: list
        elements: str
        default: [main]
      architectures:
        description: Architectures to read.
        type: list
        elements: str
        default: [amd64]
      keyring:
        description:
          - The keyring the Release is signed by (a binary OpenPGP keyring file, as C(gpg --dearmor) writes).
        type: path
      allow_unsigned:
        description:
          - Accept a Release with no signature, or without O(repositories[].keyring).
          - Only for a mirror trusted otherwise.
        type: bool
        default: false
  manifest:
    description:
      - The build manifest of the tip (the JSON C(packer_build) writes next to the artifact), used when the
        catalog entry carries no C(manifest) (or without O(catalog)). With O(catalog) its C(revision) must be
        the default stream's tip.
    type: path
  http_timeout:
    description: Seconds per HTTP request.
    type: int
    default: 60
  validate_certs:
    description: Verify TLS certificates, of the apt repositories and of the Kubernetes API.
    type: bool
    default: true
    aliases: [verify_ssl]
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.catalog
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
    details: It only reads.
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts. Needs C(gpgv)."
seealso:
  - module: goldenimage.pipeline.baked_image_stream
"""

EXAMPLES = r"""
- name: Is a rebuild of the default stream's tip due?
  goldenimage.pipeline.baked_image_rebuild_due:
    catalog: {namespace: dbaas-system, name: baked-image-catalog}
    manifest: /srv/baked-images/ubuntu-2204-postgres-v20260615.manifest.json
    repositories:
      - url: http://archive.ubuntu.com/ubuntu
        suites: [jammy, jammy-updates, jammy-security]
        keyring: /usr/share/keyrings/ubuntu-archive-keyring.gpg
      - url: https://apt.postgresql.org/pub/repos/apt
        suites: [jammy-pgdg]
        keyring: /usr/share/keyrings/postgresql.gpg
  register: due

- name: Say why
  ansible.builtin.debug:
    msg: "{{ due.lines }}"
"""

RETURN = r"""
changed:
  description: Always false; the module only reads.
  returned: always
  type: bool
rebuild_due:
  description: Whether a rebuild is due.
  returned: success
  type: bool
reasons:
  description: What makes it due, one per package and kind.
  returned: success
  type: list
  elements: dict
  sample:
    - kind: security
      package: openssl
      manifest_version: 3.0.2-0ubuntu1.15
      available_version: 3.0.2-0ubuntu1.16
      pocket: security
      suite: jammy-security
      repository: http://archive.ubuntu.com/ubuntu
lines:
  description: The reasons as lines, or one line saying no rebuild is due.
  returned: success
  type: list
  elements: str
revision:
  description: The revision whose manifest was compared (the default stream's tip with O(catalog)).
  returned: success
  type: str
other_updates:
  description: Installed packages with a newer version that does not make a rebuild due, and that version.
  returned: success
  type: dict
indexes:
  description: Every index read, with how its Release was verified.
  returned: success
  type: list
  elements: dict
  sample:
    - repository: http://archive.ubuntu.com/ubuntu
      suite: jammy-security
      path: main/binary-amd64/Packages.xz
      verified: InRelease
      packages: 5120
"""

import datetime
import json

from ansible_collections.goldenimage.pipeline.plugins.module_utils import apt_release, catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils import _apt_fetch
from ansible_collections.goldenimage.pipeline.plugins.module_utils._catalog_store import (
    CatalogStore,
    catalog_options,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils._kube import KubeModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError, run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.inputs import positive
from ansible_collections.goldenimage.pipeline.plugins.module_utils.redact import redact_url

REPOSITORY_SPEC = dict(
    url=dict(type="str", required=True),
    suites=dict(type="list", elements="str", required=True),
    components=dict(type="list", elements="str", default=["main"]),
    architectures=dict(type="list", elements="str", default=["amd64"]),
    keyring=dict(type="path", no_log=False),
    allow_unsigned=dict(type="bool", default=False),
)


def argument_spec():
    return dict(
        repositories=dict(type="list", elements="dict", required=True, options=REPOSITORY_SPEC),
        manifest=dict(type="path"),
        http_timeout=dict(type="int", default=60),
        validate_certs=dict(type="bool", default=True, aliases=["verify_ssl"]),
        catalog=catalog_options(),
    )


class RebuildDue(object):
    def __init__(self, module, fetch=_apt_fetch):
        self.module = module
        self.p = module.params
        self.io = fetch

    def manifest(self):
        """``(revision, manifest)``: the catalog tip's recorded manifest, else the file given."""
        p = self.p
        revision, entry = None, {}
        if p["catalog"]:
            store = CatalogStore(self.module, p["catalog"])
            try:
                _stream, revision, entry = catalog.default_tip(store.read())
            except catalog.CatalogError as exc:
                raise PipelineError("%s: %s" % (store.where, exc.msg), refused=True) from None
            if entry.get("manifest"):
                return revision, entry["manifest"]
        apt_release.need_manifest_file(revision, p["manifest"])
        try:
            with open(p["manifest"]) as handle:
                data = json.load(handle)
        except (OSError, ValueError) as exc:
            raise PipelineError(
                "manifest %s cannot be read: %s" % (p["manifest"], exc), refused=True
            ) from None
        return apt_release.manifest_revision(p["manifest"], data, revision), data

    def offers(self):
        p = self.p
        offers, indexes = [], []
        for repo in p["repositories"]:
            base = repo["url"]
            shown = redact_url(base)
            for suite in repo["suites"]:
                where = "%s %s" % (shown, suite)
                text, how = self.io.release(
                    base,
                    suite,
                    repo["keyring"],
                    repo["allow_unsigned"],
                    p["http_timeout"],
                    p["validate_certs"],
                )
                release = apt_release.parse_release(text, where)
                apt_release.check_fresh(release, datetime.datetime.now(datetime.timezone.utc), where)
                for component in repo["components"]:
                    for arch in repo["architectures"]:
                        path, digest, size = apt_release.pick_index(release, component, arch, where)
                        got, got_size, body = self.io.index(
                            base, suite, path, p["http_timeout"], p["validate_certs"]
                        )
                        apt_release.check_index(where, path, digest, size, got, got_size)
                        found = apt_release.packages(body)
                        indexes.append(
                            {
                                "repository": shown,
                                "suite": suite,
                                "path": path,
                                "verified": how,
                                "packages": len(found),
                            }
                        )
                        offers.extend(
                            {"package": name, "version": version, "suite": suite, "repository": shown}
                            for name, version in found.items()
                        )
        return offers, indexes

    def run(self):
        positive(self.p["http_timeout"], "http_timeout")
        revision, manifest = self.manifest()
        where = "revision %s's manifest" % revision
        installed = apt_release.manifest_packages(manifest, where)
        majors = apt_release.baked_majors(manifest)
        offers, indexes = self.offers()
        reasons, others = apt_release.decide(installed, majors, offers)
        lines = [apt_release.reason_line(r) for r in reasons] or [
            "no rebuild due: %s has every PostgreSQL minor, security update and point release the "
            "repositories offer" % revision
        ]
        return {
            "changed": False,
            "rebuild_due": bool(reasons),
            "reasons": reasons,
            "lines": lines,
            "revision": revision,
            "other_updates": others,
            "indexes": indexes,
        }


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: RebuildDue(module).run())


if __name__ == "__main__":
    main()
