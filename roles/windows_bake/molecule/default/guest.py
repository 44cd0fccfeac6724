"""Plays the guest of the lab's build VM: once the VM runs and the role has read it running, leave a
real sealed NTFS disk on the build claim and end the VMI, as sysprep's shutdown does.

Usage: guest.py NAMESPACE VM SEALED_DISK TIMEOUT (the kubeconfig comes from K8S_AUTH_KUBECONFIG).
"""

import os
import pathlib
import subprocess
import sys
import time

from kubernetes import client, config


def main(namespace, name, disk, timeout):
    config.load_kube_config(os.environ.get("K8S_AUTH_KUBECONFIG"))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    deadline = time.monotonic() + float(timeout)
    while time.monotonic() < deadline:
        try:
            vm = custom.get_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachines", name)
        except client.rest.ApiException as exc:
            if exc.status != 404:
                raise
            vm = {}
        if (vm.get("status") or {}).get("printableStatus") == "Running":
            break
        time.sleep(0.5)
    else:
        sys.exit("VM %s/%s never ran" % (namespace, name))
    # Give the role's wait a poll or two of the running VM before it stops.
    time.sleep(3)
    claim = core.read_namespaced_persistent_volume_claim(name + "-disk", namespace)
    volume = core.read_persistent_volume(claim.spec.volume_name)
    # A CSI volume says nothing of where its bytes are: the lab keeps them in its state directory (the
    # kubeconfig's), as tests/lab/controllers/volumes.py names them; the guest writes there as a node would.
    state = pathlib.Path(os.environ["K8S_AUTH_KUBECONFIG"]).parent
    suffix = ".img" if volume.spec.volume_mode == "Block" else ""
    path = state / "volumes" / (volume.metadata.name + suffix)
    target = path / "disk.img" if path.is_dir() else path
    subprocess.run(["cp", "--sparse=always", disk, str(target)], check=True)
    custom.patch_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachineinstances", name, {"status": {"phase": "Succeeded"}}
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
