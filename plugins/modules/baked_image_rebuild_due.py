#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: baked_image_rebuild_due
short_description: Tell, for every OS stream of the catalog, whether the APT repositories make a rebuild due
version_added: 0.1.0
description:
  - Reads the APT metadata of the configured repositories (the Ubuntu archive with its C(-security) pocket,
    PGDG, or any mirror of them) and compares it with the package manifest of the tip of every stream of
    the catalog (not only the default one), so a calendar build that would change nothing is not run and a
    security update is known the day it is published.
  - Each tip's manifest is the one its catalog entry records (the build records it when the revision is
    published), so the module runs from the catalog alone, unattended. A manifest file (O(manifest)) stands
    in for a tip published before builds recorded one.
  - Each stream is compared with the suites of its own release, its codename from the entry's facts
    (os-release's C(VERSION_CODENAME)) or C(22.04=jammy), C(24.04=noble). C({codename}) in a suite name
    stands for it (C({codename}-security)); a literal suite (C(jammy-security)) is read for the stream of
    that release only. A suite that belongs to no stream compared nor to a known Ubuntu release is refused.
  - For each suite it fetches C(InRelease) (or C(Release) and C(Release.gpg)), has C(gpgv) check the signature
    against the repository's O(repositories[].keyring), and reads only the text C(gpgv) vouches for. An
    unsigned or unverifiable Release is refused unless O(repositories[].allow_unsigned=true).
  - Each C(Packages) index (C(.xz), C(.gz) or plain, as the Release file lists them) must match the SHA256 and
    size the Release file gives for it; a mismatch is refused, and so is a Release past its C(Valid-Until).
  - A rebuild is due for a newer PostgreSQL minor of a baked major (C(postgresql-<major>)), a security update
    of an installed package, or a new Ubuntu point release (a newer C(base-files)). Versions are ordered as
    dpkg orders them (epochs, C(~), revisions).
  - A security update is a newer version from a security archive, decided from the signed Release file as
    apt's origin pinning does (unattended-upgrades' C(archive=jammy-security)); its C(Suite) or C(Codename)
    ends in C(-security) (Ubuntu C(jammy-security), ESM C(jammy-infra-security), Debian
    C(bookworm-security)), or its C(Label) names a security archive (C(Debian-Security)). The directory the
    suite is fetched from counts only when the Release names neither.
  - A stream whose tip has no manifest (neither recorded nor given) fails the task after every other
    stream is compared, its verdicts in RV(streams), so a scheduled run never reports "nothing due" for a
    stream it could not check.
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
        description:
          - Suites to read, for example C(["{codename}", "{codename}-updates", "{codename}-security"]) or
            C(["{codename}-pgdg"]); C({codename}) is each stream's release codename.
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
      - Build manifests (the JSON C(packer_build) writes next to the artifact), for tips whose catalog entry
        records none. With O(catalog) each must name (C(revision)) the tip of a stream; a recorded manifest
        wins over a file. Without O(catalog) each file is compared, with the stream its C(os_version) names.
    type: list
    elements: path
    default: []
  http_timeout:
    description: Seconds per HTTP request.
    type: int
    default: 60
  apt_validate_certs:
    description:
      - Verify the TLS certificates of the APT repositories (their Release files are verified with C(gpgv)
        whatever this says). The Kubernetes API's are O(validate_certs), which also reads
        C(K8S_AUTH_VERIFY_SSL) as an AWX Kubernetes credential sets it.
    type: bool
    default: true
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
  - The C(baked_image_rebuild_due) playbook runs it, and the AWX schedule of C(awx/controller/goldenimage.yml)
    runs that playbook daily.
seealso:
  - module: goldenimage.pipeline.baked_image_stream
  - module: goldenimage.pipeline.baked_image
"""

EXAMPLES = r"""
- name: Is a rebuild of any stream's tip due? (from the catalog alone)
  goldenimage.pipeline.baked_image_rebuild_due:
    catalog: {namespace: dbaas-system, name: baked-image-catalog}
    repositories:
      - url: http://archive.ubuntu.com/ubuntu
        suites: ["{codename}", "{codename}-updates", "{codename}-security"]
        keyring: /usr/share/keyrings/ubuntu-archive-keyring.gpg
      - url: https://apt.postgresql.org/pub/repos/apt
        suites: ["{codename}-pgdg"]
        keyring: /usr/share/keyrings/postgresql.gpg
  register: due

- name: Say why
  ansible.builtin.debug:
    msg: "{{ due.lines }}"

- name: A tip published before builds recorded their manifest, with its manifest file
  goldenimage.pipeline.baked_image_rebuild_due:
    catalog: {namespace: dbaas-system, name: baked-image-catalog}
    manifest: [/srv/baked-images/ubuntu-2204-postgres-v20260615.manifest.json]
    repositories:
      - url: http://archive.ubuntu.com/ubuntu
        suites: [jammy-security]
        keyring: /usr/share/keyrings/ubuntu-archive-keyring.gpg
"""

RETURN = r"""
changed:
  description: Always false; the module only reads.
  returned: always
  type: bool
rebuild_due:
  description: Whether a rebuild of any stream is due.
  returned: success
  type: bool
security_due:
  description: Whether any stream's tip lacks a security update.
  returned: success
  type: bool
streams:
  description:
    - The verdict of each stream compared, by stream, each with its C(revision) (the tip), C(default),
      C(validated), C(rebuild_due), C(reasons) (as RV(reasons)), C(security_updates) (C(package version)
      of each update a security archive offers), C(other_updates) and C(lines).
    - On a failure for a tip without a manifest, the streams that could be compared.
  returned: always
  type: dict
  sample:
    "22.04":
      revision: v20261129
      default: true
      validated: true
      rebuild_due: true
      security_updates: [openssl 3.0.2-0ubuntu1.16]
      reasons: []
      other_updates: {curl: 7.81.0-1ubuntu1.18}
      lines: ["22.04 v20261129 (default stream): security: openssl 3.0.2-0ubuntu1.15 -> 3.0.2-0ubuntu1.16
        (jammy-security, http://archive.ubuntu.com/ubuntu)"]
reasons:
  description: What makes a rebuild due, one per stream, package and kind.
  returned: success
  type: list
  elements: dict
  sample:
    - stream: "22.04"
      revision: v20261129
      kind: security
      security: true
      package: openssl
      manifest_version: 3.0.2-0ubuntu1.15
      available_version: 3.0.2-0ubuntu1.16
      pocket: security
      suite: jammy-security
      repository: http://archive.ubuntu.com/ubuntu
lines:
  description: Every stream's reasons as lines, or a line per stream saying no rebuild is due.
  returned: success
  type: list
  elements: str
revision:
  description: The tip of the default stream (without O(catalog), of the first manifest).
  returned: success
  type: str
missing:
  description: Streams whose tip has no manifest, each with C(stream), C(revision) and C(default).
  returned: when a tip has no manifest
  type: list
  elements: dict
indexes:
  description: Every index read, with how its Release was verified and whether it is a security archive.
  returned: success
  type: list
  elements: dict
  sample:
    - repository: http://archive.ubuntu.com/ubuntu
      suite: jammy-security
      path: main/binary-amd64/Packages.xz
      verified: InRelease
      security: true
      packages: 5120
"""

import datetime
import json

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import (
    _apt_fetch,
    apt_release,
    catalog,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked._catalog_store import (
    CatalogStore,
    catalog_options,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.inputs import positive
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.redact import redact_url
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule

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
        manifest=dict(type="list", elements="path", default=[]),
        http_timeout=dict(type="int", default=60),
        apt_validate_certs=dict(type="bool", default=True),
        catalog=catalog_options(),
    )


class RebuildDue(object):
    def __init__(self, module, fetch=_apt_fetch):
        self.module = module
        self.p = module.params
        self.io = fetch
        self.fetched = {}
        self.indexes = []

    def files(self):
        out = []
        for path in self.p["manifest"] or []:
            try:
                with open(path) as handle:
                    out.append((path, json.load(handle)))
            except (OSError, ValueError) as exc:
                raise PipelineError("manifest %s cannot be read: %s" % (path, exc), refused=True) from None
        return out

    def tips(self):
        """Every stream's tip from the catalog, or None without one."""
        if not self.p["catalog"]:
            return None
        store = CatalogStore(self.module, self.p["catalog"])
        try:
            return catalog.stream_tips(store.read())
        except catalog.CatalogError as exc:
            raise PipelineError("%s: %s" % (store.where, exc.msg), refused=True) from None

    def suite_offers(self, repo, suite):
        """The offers of one suite of one repository, fetched once however many streams read it."""
        key = (repo["url"], suite)
        if key in self.fetched:
            return self.fetched[key]
        p = self.p
        base = repo["url"]
        shown = redact_url(base)
        where = "%s %s" % (shown, suite)
        text, how = self.io.release(
            base, suite, repo["keyring"], repo["allow_unsigned"], p["http_timeout"], p["apt_validate_certs"]
        )
        release = apt_release.parse_release(text, where)
        apt_release.check_fresh(release, datetime.datetime.now(datetime.timezone.utc), where)
        secure = apt_release.security_archive(release["fields"], suite)
        offers = []
        for component in repo["components"]:
            for arch in repo["architectures"]:
                path, digest, size = apt_release.pick_index(release, component, arch, where)
                got, got_size, body = self.io.index(
                    base, suite, path, p["http_timeout"], p["apt_validate_certs"]
                )
                apt_release.check_index(where, path, digest, size, got, got_size)
                found = apt_release.packages(body)
                self.indexes.append(
                    {
                        "repository": shown,
                        "suite": suite,
                        "path": path,
                        "verified": how,
                        "security": secure,
                        "packages": len(found),
                    }
                )
                offers.extend(
                    {
                        "package": name,
                        "version": version,
                        "suite": suite,
                        "repository": shown,
                        "security": secure,
                    }
                    for name, version in found.items()
                )
        self.fetched[key] = offers
        return offers

    def verdict(self, compared):
        where = "revision %s's manifest" % compared["revision"]
        installed = apt_release.manifest_packages(compared["manifest"], where)
        offers = []
        for repo in self.p["repositories"]:
            for suite in apt_release.suites_for(repo["suites"], compared["codename"]):
                offers.extend(self.suite_offers(repo, suite))
        reasons, others = apt_release.decide(installed, compared["majors"], offers)
        return {
            "revision": compared["revision"],
            "default": compared["default"],
            "validated": compared["validated"],
            "rebuild_due": bool(reasons),
            "reasons": reasons,
            "security_updates": apt_release.security_updates(reasons),
            "other_updates": others,
            "lines": apt_release.stream_lines(compared, reasons),
        }

    def run(self):
        positive(self.p["http_timeout"], "http_timeout")
        files = self.files()
        tips = self.tips()
        compared, missing = apt_release.comparisons(tips, files)
        apt_release.check_suites(self.p["repositories"], [c["codename"] for c in compared])
        streams, reasons, lines = {}, [], []
        for item in compared:
            verdict = self.verdict(item)
            streams[item["stream"] or item["revision"]] = verdict
            reasons.extend(
                dict(r, stream=item["stream"], revision=item["revision"]) for r in verdict["reasons"]
            )
            lines.extend(verdict["lines"])
        if missing:
            raise PipelineError(
                "; ".join(apt_release.missing_line(m) for m in missing),
                refused=True,
                missing=missing,
                streams=streams,
                lines=lines,
            )
        return {
            "changed": False,
            "rebuild_due": bool(reasons),
            "security_due": any(r["security"] for r in reasons),
            "streams": streams,
            "reasons": reasons,
            "lines": lines,
            "revision": next((c["revision"] for c in compared if c["default"]), None)
            or (compared[0]["revision"] if compared else None),
            "indexes": self.indexes,
        }


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: RebuildDue(module).run())


if __name__ == "__main__":
    main()
