"""The gateway's request-independent context: built once by the server, handed to every
route. Nothing in it belongs to one request."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgegw.auth.client_keys import ClientKeys
from edgegw.bodies import BufferBudget
from edgegw.exchange import Exchanges
from edgegw.handoff import Handoff
from edgegw.intake import Intake
from edgegw.local.contract import SdkVersionLog
from edgegw.local.fleet import Fleet
from edgegw.models.catalog import ModelCatalog
from edgegw.providers import Target
from edgegw.resolve import Resolver
from edgegw.retry import RetryPolicy
from edgegw.routing.router import Router
from edgegw.settings import Settings, SettingsError
from edgegw.telemetry.recording import Telemetry
from edgegw.tenants.admission import Tenancy
from edgegw.tenants.budgets import Usage, store_path
from edgegw.tenants.pricing import Prices
from edgegw.upstream import UpstreamPool
from edgegw.watch import DisconnectWatch

if TYPE_CHECKING:  # each loaded only when enabled: the MCP SDK takes a second to import,
    # PyJWT and cryptography a quarter of one
    from edgegw.auth.verifier import OidcVerifier
    from edgegw.guardrails.check import Guardrails
    from edgegw.mcp.client import McpClient


class Load:
    """The process's mutable serving state: requests in flight (bounded by
    settings.max_in_flight), whether SIGTERM came (`leaving`: /ready answers 503, requests
    are still served for SERVER_SHUTDOWN_DELAY) and whether the drain has begun (new
    requests then get 503 with Connection: close)."""

    __slots__ = ("in_flight", "leaving", "draining")

    def __init__(self) -> None:
        self.in_flight = 0
        self.leaving = False
        self.draining = False


@dataclass(frozen=True, slots=True)
class Gateway:
    settings: Settings
    exchanges: Exchanges
    resolver: Resolver
    fleet: Fleet
    catalog: ModelCatalog
    telemetry: Telemetry
    sdk_versions: SdkVersionLog
    load: Load
    # Request bodies being read, before they may take an in-flight slot.
    intake: Intake
    # Bearer-token verification when AUTH_ENABLED (started by serve()); None otherwise.
    client_keys: ClientKeys
    # The tenants' limits in this process (edgegw.tenants), checked by each route.
    tenancy: Tenancy
    verifier: OidcVerifier | None = None
    # The MCP servers' client when MCP_ENABLED (started by serve()); None otherwise.
    mcp: McpClient | None = None
    # Model routing's aliases and per-process state when ROUTING_ENABLED; None otherwise.
    router: Router | None = None
    # The guardrails when GUARDRAILS_ENABLED (policy compiled here, at start); None otherwise.
    guardrails: Guardrails | None = None

    @property
    def pool(self) -> UpstreamPool:
        return self.exchanges.pool

    @property
    def watch(self) -> DisconnectWatch:
        return self.exchanges.watch


def build_gateway(
    settings: Settings,
    pool: UpstreamPool,
    watch: DisconnectWatch,
    telemetry: Telemetry,
    handoff: Handoff | None = None,
) -> Gateway:
    targets = {pid: Target(cfg) for pid, cfg in settings.providers.items()}
    fleet = Fleet(settings.local_models, pool)
    retry = RetryPolicy(
        attempts=settings.retry_attempts,
        backoff_s=settings.retry_backoff_s,
        max_backoff_s=settings.retry_max_backoff_s,
        max_retry_after_s=settings.retry_max_retry_after_s,
        deadline_s=settings.retry_deadline_s,
    )
    catalog = ModelCatalog(settings, pool, targets)
    prices = Prices(settings.model_prices, catalog.community)
    tenancy = _tenancy(settings, prices)
    return Gateway(
        settings=settings,
        exchanges=Exchanges(
            pool=pool,
            watch=watch,
            first_byte_timeout_s=settings.first_byte_timeout_s,
            idle_timeout_s=settings.idle_timeout_s,
            max_response_bytes=settings.max_response_bytes,
            budget=BufferBudget(settings.response_buffer_budget_bytes),
            retry=retry,
            # A relayed stream's write blocks at most this long before the connection layer
            # gives the client up, a stream check's external call on top (edgegw.pump).
            write_timeout_s=settings.write_stall_timeout_s
            + (settings.guardrails.external_timeout_s if settings.guardrails.enabled else 0.0),
            handoff=handoff,
        ),
        resolver=Resolver(settings, targets, fleet.models),
        fleet=fleet,
        catalog=catalog,
        telemetry=telemetry,
        sdk_versions=SdkVersionLog(),
        load=Load(),
        intake=Intake(
            settings.max_bodies, settings.max_bodies_per_client, settings.max_body_bytes_in_progress
        ),
        client_keys=ClientKeys(settings, lambda: tenancy.admin_keys),
        tenancy=tenancy,
        verifier=_verifier(settings, pool),
        mcp=_mcp_client(settings),
        router=None if settings.routing is None else Router(settings.routing, telemetry, retry),
        guardrails=_guardrails(settings, pool, telemetry),
    )


def _tenancy(settings: Settings, prices: Prices) -> Tenancy:
    """The tenants' limits and budgets: in this process (usage in SQLite), or through Redis
    with TENANTS_REDIS_URL (which then holds the usage too)."""
    if settings.tenants_redis_url is None:
        path = store_path(settings)  # set with the admin API's key or a budget
        # Without a key file, a tenant or a store, no budget, admin API or restart reads it.
        counted = path is not None or settings.api_keys_file is not None
        counted = counted or settings.key_file.has_tenants
        return Tenancy(Usage(path, time.time), prices, counted=counted)
    from edgegw.settings import parse_redis_url
    from edgegw.tenants.redis_link import RedisLink
    from edgegw.tenants.shared import SharedLimits

    link = RedisLink(parse_redis_url(settings.tenants_redis_url), settings.tenants_redis_timeout_s)
    # Redis holds the usage and the admin API's keys.
    return Tenancy(
        Usage(None, time.time),
        prices,
        shared=SharedLimits(link),
        limits_fail=settings.tenants_redis_limits_fail,
        budgets_fail=settings.tenants_redis_budgets_fail,
    )


def _guardrails(settings: Settings, pool: UpstreamPool, telemetry: Telemetry) -> Guardrails | None:
    """The compiled policy and the external checker when GUARDRAILS_ENABLED; a policy that
    does not compile stops the start (SettingsError: exit 78), naming file and line."""
    gs = settings.guardrails
    if not gs.enabled:
        return None
    from edgegw.guardrails.check import Guardrails
    from edgegw.guardrails.external import ExternalChecker
    from edgegw.guardrails.policy import PolicyLoadError, load_policy

    try:
        policy = load_policy(gs.policy_dir)
    except PolicyLoadError as e:
        raise SettingsError(str(e)) from None
    try:
        external = (
            ExternalChecker(pool, gs.external_url, gs.external_timeout_s)
            if gs.external_url
            else None
        )
    except ValueError:
        raise SettingsError(
            "GUARDRAILS_EXTERNAL_URL: expected an http:// or https:// URL"
        ) from None
    return Guardrails(gs, policy, external, telemetry)


def _mcp_client(settings: Settings) -> McpClient | None:
    if not settings.mcp.enabled:
        return None
    from edgegw.mcp.client import McpClient

    return McpClient(settings.mcp)


def _verifier(settings: Settings, pool: UpstreamPool) -> OidcVerifier | None:
    """OIDC verification when AUTH_ENABLED; imported only then (PyJWT and cryptography are
    a quarter of a second of every start)."""
    if not settings.auth_enabled:
        return None
    from edgegw.auth.verifier import OidcVerifier

    return OidcVerifier.from_settings(settings, pool)
