# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # Every module of this collection runs on the controller and declares these three.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode; it then sends no mutating request and reports what would change.
  diff_mode:
    description: Reports what changed (or, in check mode, what would change) when run with C(--diff).
  idempotent:
    description: A second run with the same arguments and unchanged cluster state reports C(changed=false).
"""

    # Cluster-facing modules: they need the Kubernetes client on the controller, and their auth options can
    # be set once for the whole group.
    ACTIONGROUP_K8S = r"""
options: {}
requirements:
  - kubernetes >= 24.2.0 (on the controller)
  - msgspec >= 0.18 (optional, on the controller) parses large lists in about a third of the CPU; without it
    the standard json module gives the same result
attributes:
  action_group:
    description:
      - Use C(group/goldenimage.pipeline.k8s) in C(module_defaults) to set the Kubernetes auth options once.
      - The group extends C(kubernetes.core.k8s), so the same entry sets them for kubernetes.core's modules.
    support: full
    membership:
      - goldenimage.pipeline.k8s
"""

    # Bucket modules: their endpoint and credentials can be set once for the whole group.
    ACTIONGROUP_S3 = r"""
options: {}
attributes:
  action_group:
    description:
      - Use C(group/goldenimage.pipeline.s3) in C(module_defaults) to set the endpoint and credentials once.
    support: full
    membership:
      - goldenimage.pipeline.s3
"""

    # Read-only modules.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This module never changes anything, so it behaves the same in check mode.
  diff_mode:
    support: N/A
    details: This module never changes anything.
  idempotent:
    support: full
"""

    # Modules that only wait for an object and read it; they never change anything.
    WAIT_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: In check mode the object waited for is read once and nothing is waited for.
  diff_mode:
    support: N/A
    details: This module only reads what it waits for; nothing is changed.
  idempotent:
    support: full
"""

    # Modules that work in rounds: the action plugin of the same name calls them again and prints a line.
    ROUNDS = r"""
options: {}
attributes:
  action:
    description: An action plugin of the same name runs on the controller around the module.
    support: full
    details: The action plugin calls the module round after round and prints each round's line as it comes.
"""
