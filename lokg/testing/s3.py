"""An S3-protocol server on loopback for tests and benchmarks: moto in server mode.

``loopback_s3(bucket)`` starts ``python -m moto.server`` on a free 127.0.0.1 port with IAM
authentication on, creates one user (its key is the only one accepted: a wrong secret is
refused like on AWS) and ``bucket``, and yields the environment a client needs
(``LOKG_S3_ENDPOINT``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``). The
server stops when the block ends. ``read_only_user(env)``: the same with a user that can only
read and list (moto enforces the user's IAM policy).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

from lokg.testing.serving import free_port

#: moto serves these first calls unauthenticated: create the user, its key and its policy.
_SETUP_CALLS = 3


def _wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with code {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"moto_server not listening on 127.0.0.1:{port} after {timeout} s")


def _user(endpoint: str) -> dict:
    """The one IAM user the server accepts, with every permission; its credentials."""
    import boto3

    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="setup", aws_secret_access_key="setup")
    iam.create_user(UserName="lokg")
    key = iam.create_access_key(UserName="lokg")["AccessKey"]
    iam.put_user_policy(UserName="lokg", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}


def read_only_user(env: dict) -> dict:
    """``env`` (from :func:`loopback_s3`) with the credentials of a new user allowed only to
    read and list (s3:GetObject, s3:ListBucket): every write, pins/ included, is AccessDenied,
    as for a replica's read-only credentials on AWS."""
    import boto3

    iam = boto3.client("iam", endpoint_url=env["LOKG_S3_ENDPOINT"], region_name="us-east-1",
                       aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                       aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    name = f"reader-{os.urandom(4).hex()}"
    iam.create_user(UserName=name)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    iam.put_user_policy(UserName=name, PolicyName="read", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*",
                                                  "Action": ["s3:GetObject", "s3:ListBucket"]}]}))
    return {**env, "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}


@contextmanager
def loopback_s3(bucket: str):
    """moto on a free loopback port with ``bucket``; the client's environment (module doc)."""
    import boto3

    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_CALLS)}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_listening(port, proc)
        creds = _user(endpoint)
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"]
                     ).create_bucket(Bucket=bucket)
        yield {"LOKG_S3_ENDPOINT": endpoint, "AWS_REGION": "us-east-1", **creds}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
