"""flintlock micro-VM images (seed 003): kernel, modules and root filesystem as three OCI images, and the
registry they go to.
"""
