"""The rollout half of the deployment controller, as an operator's Deployment needs it.

kube-controller-manager runs without its deployment controller in the lab (no ReplicaSets, no Pods for
Deployments), so this controller moves a Deployment's status the way a rolling update does: when the
pod template changes (``metadata.generation`` moves past ``status.observedGeneration``) it records the
new generation at once, then brings one replica at a time to the new template (``updatedReplicas``,
``readyReplicas``, ``availableReplicas``), each after ``LAB_DEPLOYMENT_STEP_SECONDS`` (default 0.2), and
sets the ``Progressing`` (NewReplicaSetAvailable) and ``Available`` conditions as the real one does.

A Deployment annotated ``lab.goldenimage.io/rollout-hold: "true"`` records its generation but never
brings a replica up: the rollout that does not complete, for the callers' timeouts.
"""

from __future__ import annotations

import os

from ..objects import ApiError, ResourceType
from . import Controller, LabContext
from .harvester import set_condition as _condition
from .kit import modify

GROUP = "apps"
PLURAL = "deployments"
STEP_ENV = "LAB_DEPLOYMENT_STEP_SECONDS"
DEFAULT_STEP_SECONDS = 0.2
HOLD = "lab.goldenimage.io/rollout-hold"


def _step_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get(STEP_ENV) or DEFAULT_STEP_SECONDS))
    except ValueError:
        return DEFAULT_STEP_SECONDS


class DeploymentRollout(Controller):
    name = "deployment-rollout"
    watches = ((GROUP, PLURAL),)
    resync_seconds = 2.0

    def __init__(self, lab: LabContext):
        super().__init__(lab)

    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None
        generation = int(meta.get("generation") or 1)
        wanted = int((obj.get("spec") or {}).get("replicas", 1))
        status = obj.get("status") or {}
        held = (meta.get("annotations") or {}).get(HOLD) == "true"
        observed = int(status.get("observedGeneration") or 0)
        updated = int(status.get("updatedReplicas") or 0)
        if observed == generation and (held or updated == wanted) and status.get("replicas") == wanted:
            return None
        name = "%s/%s" % (meta.get("namespace"), meta.get("name"))

        def roll(current: dict) -> bool | None:
            cur_meta = current["metadata"]
            gen = int(cur_meta.get("generation") or 1)
            want = int((current.get("spec") or {}).get("replicas", 1))
            st = current.setdefault("status", {})
            if int(st.get("observedGeneration") or 0) != gen:
                # A new template: no replica runs it yet; the old ones keep serving.
                st["observedGeneration"] = gen
                st["updatedReplicas"] = 0
                st["replicas"] = want
                st.setdefault("readyReplicas", 0)
                st.setdefault("availableReplicas", 0)
                _condition(
                    st, "Progressing", "True", "ReplicaSetUpdated", 'Deployment "%s" is progressing.' % name
                )
                return True
            if (cur_meta.get("annotations") or {}).get(HOLD) == "true":
                return False
            done = min(int(st.get("updatedReplicas") or 0) + 1, want)
            st["replicas"] = want
            st["updatedReplicas"] = done
            st["readyReplicas"] = max(done, min(int(st.get("readyReplicas") or 0), want))
            st["availableReplicas"] = st["readyReplicas"]
            st["unavailableReplicas"] = want - st["availableReplicas"]
            if done == want:
                _condition(
                    st,
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    'Deployment "%s" has successfully progressed.' % name,
                )
                _condition(
                    st,
                    "Available",
                    "True",
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.",
                )
            return True

        try:
            modify(self.lab.store, rt, meta.get("namespace"), meta.get("name"), roll, status=True)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise
        return _step_seconds()
