"""A test CA's certificate for the gateway's HTTPS listener, and a client that trusts it."""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme


def cert_env(ca: trustme.CA, where: Path, *names: str) -> dict[str, str]:
    """SERVER_TLS_CERT_PATH / SERVER_TLS_KEY_PATH of a leaf for `names`, written in `where`."""
    leaf = ca.issue_cert(*(names or ("127.0.0.1",)))
    cert, key = where / "cert.pem", where / "key.pem"
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    key.write_bytes(leaf.private_key_pem.bytes())
    return {"SERVER_TLS_CERT_PATH": str(cert), "SERVER_TLS_KEY_PATH": str(key)}


def trusting(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx
