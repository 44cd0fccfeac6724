# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The DBInstance operator's environment: its default OS stream and its backing image replica count.

The operator reads the default OS stream new databases get from ``BACKING_IMAGE_OS_VERSION`` and the
replica count it asks for on each VirtualMachineImage from ``BACKING_IMAGE_REPLICAS``, both environment
variables of its Deployment's container. Flipping the stream is an env change and a rolling restart.

Pure: decisions over a Deployment, the catalog and the Node list already read. The env var may only
point at a stream the catalog's own gate accepts as a default (``catalog.default_candidate``, the rule
``baked_image_stream`` applies to ``default_stream``); a drift between the env var and the catalog's
default stream, and between the replica count and the schedulable nodes, is reported, not hidden.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance

OS_ENV = "BACKING_IMAGE_OS_VERSION"
REPLICAS_ENV = "BACKING_IMAGE_REPLICAS"
BLOCKING_TAINTS = ("NoSchedule", "NoExecute")


def where(namespace, name, container=None):
    text = "Deployment %s/%s" % (namespace, name)
    return "%s container %s" % (text, container) if container else text


def containers(deployment):
    return list(((kinds.spec(deployment).get("template") or {}).get("spec") or {}).get("containers") or [])


def pick_container(deployment, wanted=None):
    """The name of the operator's container: ``wanted``, else the only one; refused when ambiguous."""
    ref = where(kinds.namespace(deployment), kinds.name(deployment))
    names = [c.get("name") for c in containers(deployment)]
    if wanted:
        if wanted not in names:
            raise Refusal(
                ref,
                "it has no container %s (its containers: %s)" % (wanted, ", ".join(names) or "none"),
                "give the operator's container name in container",
            )
        return wanted
    if len(names) != 1:
        raise Refusal(
            ref,
            "it has %d containers (%s), so which one runs the operator is not known"
            % (len(names), ", ".join(names) or "none"),
            "give the operator's container name in container",
        )
    return names[0]


def env_entry(deployment, container, var):
    """The container's env entry for ``var`` (a dict), or None."""
    for item in containers(deployment):
        if item.get("name") == container:
            for entry in item.get("env") or []:
                if entry.get("name") == var:
                    return entry
    return None


def env_value(deployment, container, var):
    """``(value, from_source)``: the literal value (None when unset) and whether it comes from valueFrom."""
    entry = env_entry(deployment, container, var)
    if entry is None:
        return None, False
    if entry.get("valueFrom") is not None:
        return None, True
    return entry.get("value"), False


def default_stream(catalog_default, env_stream):
    """The OS stream of a DBInstance that names none (``spec.osVersion``), as the operator picks it: its
    ``BACKING_IMAGE_OS_VERSION`` when set, else the catalog's default stream. ``dbinstance_repave``
    computes its targets with this rule, so a repave aims where the operator provisions."""
    env_stream = str(env_stream).strip() if env_stream is not None else ""
    return env_stream or catalog_default


def os_version_of(deployment, container):
    """The literal ``BACKING_IMAGE_OS_VERSION`` of the operator's container (None when unset); a value
    read from valueFrom cannot be known here and is refused rather than guessed."""
    value, from_source = env_value(deployment, container, OS_ENV)
    if from_source:
        raise Refusal(
            "%s env %s" % (where(kinds.namespace(deployment), kinds.name(deployment), container), OS_ENV),
            "it is read from valueFrom, so the default OS stream the operator uses cannot be read here",
            "set it as a literal value (goldenimage.pipeline.dbinstance_operator_env os_version), or leave "
            "operator unset to use the catalog's default stream",
        )
    return value


def check_settable(deployment, container, var):
    entry = env_entry(deployment, container, var)
    if entry is not None and entry.get("valueFrom") is not None:
        raise Refusal(
            "%s env %s" % (where(kinds.namespace(deployment), kinds.name(deployment), container), var),
            "it is read from valueFrom (%s), so a value written here would not be the one the operator reads"
            % sorted(entry["valueFrom"]),
            "change it at its source, or remove valueFrom from the Deployment first",
        )


def stream_for_env(doc, deployment, container, os_version):
    """The stream ``BACKING_IMAGE_OS_VERSION`` may be set to; the catalog's default gate decides."""
    try:
        stream, _tip = catalog.default_candidate(doc, os_version)
    except catalog.CatalogError as exc:
        raise PipelineError(
            "%s env %s: refused to point it at stream %s: %s"
            % (
                where(kinds.namespace(deployment), kinds.name(deployment), container),
                OS_ENV,
                os_version,
                exc.msg,
            ),
            refused=True,
            stream=str(os_version),
        ) from None
    return stream


def schedulable(node):
    """Whether a Node takes new Pods: not cordoned, Ready=True, no NoSchedule/NoExecute taint."""
    if kinds.spec(node).get("unschedulable"):
        return False
    if not kinds.condition_true(node, "Ready"):
        return False
    return not any(t.get("effect") in BLOCKING_TAINTS for t in kinds.spec(node).get("taints") or [])


def schedulable_nodes(nodes):
    return sorted(kinds.name(n) for n in nodes or [] if schedulable(n))


def replicas_wanted(value, option="replicas"):
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if isinstance(value, bool) or count < 1 or str(value).strip() != str(count):
        raise PipelineError(
            "%s: %r is not a whole number of at least 1; give the number of nodes that must hold a copy "
            "of each backing image" % (option, value),
            refused=True,
        )
    return count


def check_request(ref, stream, has_catalog, replicas, replicas_from_nodes):
    """The options of a change to the Deployment ``ref``, refused before anything is read: a stream is
    only set with the catalog that validates it, and the replica count is given one way."""
    if stream is not None and not has_catalog:
        raise Refusal(
            ref,
            "os_version %s is given without a catalog" % stream,
            "give catalog, the record whose validated streams it may point at",
        )
    if replicas is not None and replicas_from_nodes:
        raise Refusal(ref, "replicas and replicas_from_nodes are both given", "give one of them")
    if replicas is not None:
        replicas_wanted(replicas)


def require_deployment(ref, deployment):
    """The operator's Deployment as read: absent is refused naming it. Returns it."""
    if deployment is None:
        raise Refusal(ref, "it does not exist", "give the namespace and name of the operator's Deployment")
    return deployment


def replica_count(ref, replicas, replicas_from_nodes, nodes):
    """The replica count to set: ``replicas``, or the number of schedulable ``nodes`` (a list of names)
    with ``replicas_from_nodes``, which finds none at its peril: it is refused rather than set to 0."""
    if not replicas_from_nodes:
        return replicas
    if not nodes:
        raise Refusal(
            ref,
            "replicas_from_nodes found no schedulable Node (none Ready, uncordoned and untainted)",
            "give replicas explicitly",
        )
    return len(nodes)


def with_env(deployment, container, changes):
    """The containers of ``deployment`` with ``changes`` ({var: value}) applied to ``container``'s env."""
    out = copy.deepcopy(containers(deployment))
    for item in out:
        if item.get("name") != container:
            continue
        env = item.setdefault("env", [])
        for var, value in sorted(changes.items()):
            for entry in env:
                if entry.get("name") == var:
                    entry["value"] = value
                    break
            else:
                env.append({"name": var, "value": value})
    return out


def env_patch(deployment, container, changes):
    """The merge patch that sets ``changes`` (a JSON merge patch replaces lists, so all containers are
    sent, guarded by the resourceVersion read), or None when every value is already in place."""
    todo = {k: v for k, v in changes.items() if env_value(deployment, container, k)[0] != v}
    if not todo:
        return None
    return {
        "metadata": {"resourceVersion": kinds.meta(deployment).get("resourceVersion")},
        "spec": {"template": {"spec": {"containers": with_env(deployment, container, todo)}}},
    }


def drift(env_stream, catalog_default, env_replicas, nodes_count):
    """``[{what, operator, expected, move}]``: where the operator's env disagrees with the record."""
    out = []
    if catalog_default is not None and env_stream != catalog_default:
        out.append(
            {
                "what": OS_ENV,
                "operator": env_stream,
                "expected": catalog_default,
                "message": "%s is %s but the catalog's default OS stream is %s"
                % (OS_ENV, env_stream or "unset", catalog_default),
                "move": "set it with goldenimage.pipeline.dbinstance_operator_env os_version, or make %s the "
                "catalog's default with goldenimage.pipeline.baked_image_stream default: true"
                % (env_stream or "the stream"),
            }
        )
    # No schedulable Node at all says nothing about the count the operator should ask for.
    if nodes_count and str(env_replicas) != str(nodes_count):
        out.append(
            {
                "what": REPLICAS_ENV,
                "operator": env_replicas,
                "expected": str(nodes_count),
                "message": "%s is %s but %d nodes are schedulable, so a VM on a node without a copy "
                "waits for one at first boot" % (REPLICAS_ENV, env_replicas or "unset", nodes_count)
                if nodes_count > int(env_replicas or 0)
                else "%s is %s but only %d nodes are schedulable" % (REPLICAS_ENV, env_replicas, nodes_count),
                "move": "set it with goldenimage.pipeline.dbinstance_operator_env replicas_from_nodes: true",
            }
        )
    return out


def revision_provenance(doc, prove):
    """Per registered revision of the catalog ``doc``: who signed it, from what inputs, whether the facts
    recorded now are the ones its signed statement names (``provenance.signed_report``, the rule golden_info
    reads as well), and ``holds``/``problem``: whether its recorded verdict holds under the catalog's trust
    policy today, its evidence verified again by ``prove`` (``_signing.record_proof``), and is bound to its
    own artifact and checksum (what a repave checks before any step)."""
    rows = []
    for name, entry in sorted(catalog.normalize(doc)["images"].items()):
        found = catalog.signature_problem(doc, name, prove)
        row = provenance.signed_report(entry.get(catalog.SIGNATURE), entry.get("facts"))
        row.update(
            revision=name,
            os_version=entry["os_version"],
            artifact=(entry.get(catalog.SIGNATURE) or {}).get("artifact"),
            holds=found is None,
            problem=found[0] if found else None,
            move=found[1] if found else None,
        )
        rows.append(row)
    return rows


def provenance_drift(rows):
    """The drift entries of revisions whose recorded signature no longer holds (``revision_provenance``):
    the operator would repave onto them, and a repave refuses them (UntrustedImage)."""
    return [
        {
            "what": "signature",
            "revision": row["revision"],
            "operator": row["verdict"],
            "expected": provenance.VERIFIED,
            "message": row["problem"],
            "move": row["move"],
        }
        for row in rows
        if not row["holds"]
    ]


# ------------------------------------------------------------------------------------ rollout


def rollout(deployment):
    """What a rollout wait reads: generation, observed generation and the replica counts."""
    status = kinds.status(deployment) if deployment else {}
    spec = kinds.spec(deployment) if deployment else {}
    return {
        "generation": int(kinds.meta(deployment).get("generation") or 0) if deployment else 0,
        "observed": int(status.get("observedGeneration") or 0),
        "wanted": int(spec.get("replicas", 1)),
        "replicas": int(status.get("replicas") or 0),
        "updated": int(status.get("updatedReplicas") or 0),
        "ready": int(status.get("readyReplicas") or 0),
        "available": int(status.get("availableReplicas") or 0),
    }


def rollout_verdict(deployment):
    """``(done, failure)`` of a Deployment's rollout, as ``kubectl rollout status`` decides it."""
    if deployment is None:
        return False, "the Deployment is gone"
    state = rollout(deployment)
    if state["observed"] < state["generation"]:
        return False, None
    progressing = kinds.condition(deployment, "Progressing") or {}
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        return False, "its progress deadline was exceeded: %s" % progressing.get("message", "")
    done = (
        state["updated"] >= state["wanted"]
        and state["replicas"] <= state["updated"]
        and state["available"] >= state["updated"]
    )
    return done, None


def rollout_state(deployment):
    """One line of a rollout's progress (also the state a wait compares between polls)."""
    if deployment is None:
        return "not found"
    s = rollout(deployment)
    if s["observed"] < s["generation"]:
        return "generation %d not observed yet (observed %d)" % (s["generation"], s["observed"])
    return "%d of %d replicas updated, %d ready, %d available" % (
        s["updated"],
        s["wanted"],
        s["ready"],
        s["available"],
    )


def rollout_failed_message(ref, what, failure, state):
    return "%s: the rollout of %s failed: %s; last observed: %s" % (ref, what, failure, state)


def rollout_timeout_message(ref, what, timeout, words, state):
    """A rollout wait that ran out: what it waited for, for how long, and the replicas still pending."""
    return (
        "%s: timed out after %ds waiting for the rollout of %s (%s); still pending: every replica updated "
        "and available; last observed: %s" % (ref, timeout, what, words, state)
    )
