"""Kube-DC goldens (seed 001): the golden contract, which golden a (family, mode) serves, who uses a golden,
retention, the Linux producer, DataVolume imports and the clone gate.
"""
