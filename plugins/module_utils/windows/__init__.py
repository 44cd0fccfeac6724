"""The Windows producer (seed 001): the installer ISO remaster, the unattended bake watched on its console,
and the export of a sealed disk to a bucket.
"""
