"""Disk images read offline: partition tables, NTFS and ext4, qemu-img, what an image holds (its facts) and
whether it is sealed, the seal verifier's process and its Job.
"""
