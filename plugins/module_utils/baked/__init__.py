"""Baked PostgreSQL images (seed 000): revisions, the catalog and its store, end of life, APT rebuild
triggers, Packer, the published artifact, Harvester images and their copies, the operator's environment.
"""
