"""GET /health (liveness: the process serves) and GET /ready (readiness: send it traffic).

/ready answers 503 with the reasons while the gateway should get no new requests, from
cached state only (it never calls a provider or a worker):
  - `draining`: SIGTERM came (requests are still served for SERVER_SHUTDOWN_DELAY, then
    running ones finish);
  - `no_upstream`: nothing configured can serve: no remote provider configured and no
    local worker routable (healthy and serving its model, as the fleet's last check found).
Before start-up is done (OIDC keys loaded, routing read, the first worker checks made) the
port does not listen, so a probe fails then too. The body says what it found:
`{"status": "ready"|"not_ready", "reasons": [...], "providers": [...], "local_models":
{name: routable workers}}`. Both routes skip client authentication and the in-flight
bound: probes carry no key, and a busy gateway is still alive and ready.
"""

from __future__ import annotations

import orjson

from edgegw.asgi import Call
from edgegw.gateway import Gateway

HEALTH_BODY = b'{"message":"OK"}'


async def health(gw: Gateway, call: Call) -> None:
    await call.respond_json(200, HEALTH_BODY)


async def ready(gw: Gateway, call: Call) -> None:
    reasons = []
    if gw.load.leaving or gw.load.draining:
        reasons.append("draining")
    providers = sorted(gw.settings.providers)
    local = {
        name: sum(w.routable for w in rt.workers) for name, rt in sorted(gw.fleet.models.items())
    }
    if not providers and not any(local.values()):
        reasons.append("no_upstream")
    body = orjson.dumps(
        {
            "status": "not_ready" if reasons else "ready",
            "reasons": reasons,
            "providers": providers,
            "local_models": local,
        }
    )
    extra = ((b"retry-after", b"5"),) if reasons else ()
    await call.respond_json(503 if reasons else 200, body, extra)
