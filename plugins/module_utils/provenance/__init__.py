"""Signed provenance: in-toto statements, DSSE envelopes, the trust policy, and signing in-process in the
formats cosign reads.
"""
