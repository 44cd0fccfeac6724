"""Loopback S3 endpoint: moto's threaded server bound to 127.0.0.1."""

from __future__ import annotations

import logging
from dataclasses import dataclass


@dataclass
class S3Endpoint:
    endpoint_url: str
    access_key: str = "lab-access-key"
    secret_key: str = "lab-secret-key"
    region: str = "us-east-1"

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "S3_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def client(self):
        return s3_client(self.env())


def s3_client(env: dict[str, str]):
    """A boto3 S3 client (path-style) from AWS_* variables such as S3Endpoint.env() or lab.env() give."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env.get("AWS_DEFAULT_REGION") or "us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


class S3Server:
    def __init__(self, port: int = 0):
        self.port = port
        self._server = None
        self.endpoint: S3Endpoint | None = None

    def start(self) -> S3Endpoint:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per S3 request is noise

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = S3Endpoint(endpoint_url=f"http://{host}:{port}")
        return self.endpoint

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            server = getattr(self._server, "_server", None)
            if server is not None:
                server.server_close()
            self._server = None
