"""Cozystack worker images (seed 002): one golden per (schematicID, version), cloned by every pool."""
