"""Fixtures the module runner tests share: the lab's loopback S3 (see _bucket_lab.py)."""

from tests.unit.plugins.modules._bucket_lab import s3_fixture

__all__ = ["s3_fixture"]
