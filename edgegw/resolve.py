"""Where a request goes: the one resolver of `?provider=`, the `provider/` model prefix and
local model names, for every route (generation, native APIs, /proxy, /v1/models), with
its refusals and their messages in one place.

The order, for a generation request:
  1. `?provider=ID` wins: the model goes to that provider (a `ID/` prefix on the model is
     removed), even when its name is also a local model's;
  2. a model named exactly like a local model profile is served locally;
  3. `provider/model`, split at the first `/`;
  4. otherwise 400 `unknown_provider`.
(With ROUTING_ENABLED, the generation route first matches a routing alias exactly, after
`?provider=` and before step 2; edgegw.routing. Its allow check is `check_name_allowed`,
on the alias as sent.)
Then the provider must be configured (400 `provider_not_configured` naming the variable to
set) and the model allowed (403 `model_not_allowed`, inference-gateway's messages), where
a local model is `local/<name>` for ALLOWED_MODELS / DISALLOWED_MODELS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from edgegw.errors import fail, shown
from edgegw.local.fleet import LocalRuntime
from edgegw.providers import PROVIDERS, Target, model_allowed
from edgegw.settings import Settings

UNKNOWN_PROVIDER = (
    "Unable to determine provider for model. Please specify a provider using the ?provider= "
    "query parameter or use the provider/model format (e.g., openai/gpt-4)."
)
# Generation requests' resolutions remembered, at most (model names come from clients: the
# table stops growing there rather than grow with them).
REMEMBERED = 256


# Not frozen, as every value a request makes: a frozen dataclass sets each field through
# object.__setattr__, a C call each on CPython 3.11 (bench/README.md).
@dataclass(slots=True)
class Remote:
    target: Target
    # The model as the provider names it (no `provider/` prefix); None where a native API
    # request names none.
    model: str | None


@dataclass(slots=True)
class Local:
    runtime: LocalRuntime


@dataclass(frozen=True, slots=True)
class Resolver:
    settings: Settings
    targets: Mapping[str, Target]
    local_models: Mapping[str, LocalRuntime]
    # (model, provider) -> what `generation` resolved it to: the split, the lookups and the
    # allow check were 2 % of a request's time. Everything they read is fixed at the start.
    _remembered: dict[tuple[str, str | None], Remote | Local] = field(
        default_factory=dict, compare=False
    )

    def generation(self, model: str, provider: str | None) -> Remote | Local:
        """A chat or completions request for `model`, with `?provider=` as `provider`."""
        if (hit := self._remembered.get((model, provider))) is not None:
            return hit
        got: Remote | Local
        if provider is None and (rt := self.local_models.get(model)) is not None:
            self.check_allowed("local", model)
            got = Local(rt)
        else:
            got = self.remote(model, provider)
        if len(self._remembered) < REMEMBERED:
            self._remembered[model, provider] = got
        return got

    def remote(self, model: str, provider: str | None, api: NativeApi | None = None) -> Remote:
        """A remote provider for `model` (also a profile's remote_fallback, resolved with no
        `?provider=`); `api` narrows the providers to those a native API exists on."""
        pid, bare = self._split(model, provider)
        if api is not None:
            api.check(pid)
        target = self.target(pid, param="model")
        if not bare:
            raise fail(
                "invalid_request", "'model' names no model after the provider prefix", param="model"
            )
        self.check_allowed(pid, bare)
        return Remote(target, bare)

    def native(self, model: str | None, provider: str | None, api: NativeApi) -> Remote:
        """A native-API request (/v1/responses, /v1/messages, images): `model` may be absent."""
        if model is not None:
            return self.remote(model, provider, api)
        if provider is None or provider not in PROVIDERS:
            raise fail("unknown_provider", UNKNOWN_PROVIDER, param="model")
        api.check(provider)
        return Remote(self.target(provider, param="model"), None)

    def named(self, pid: str, *, param: str) -> Target:
        """A provider named by id (/proxy/{id}/..., /v1/models?provider=id)."""
        if pid not in PROVIDERS:
            raise fail(
                "unknown_provider",
                f"Unknown provider '{shown(pid)}'; known providers: {', '.join(PROVIDERS)}.",
                param=param,
            )
        return self.target(pid, param=param)

    def target(self, pid: str, *, param: str) -> Target:
        """The configured provider `pid` (a known id), or 400 saying what to set."""
        target = self.targets.get(pid)
        if target is None:
            provider = PROVIDERS[pid]
            need = f"{pid.upper()}_API_URL" if provider.keyless else f"{pid.upper()}_API_KEY"
            raise fail(
                "provider_not_configured",
                f"Provider '{pid}' is not configured on this gateway (set {need}).",
                param=param,
            )
        return target

    def allowed(self, pid: str, model: str) -> bool:
        return self.name_allowed(f"{pid}/{model}")

    def name_allowed(self, name: str) -> bool:
        """`name` as the client sent it: `provider/model`, or a routing alias."""
        s = self.settings
        return model_allowed(s.allowed_models, s.disallowed_models, name)

    def check_allowed(self, pid: str, model: str) -> None:
        self.check_name_allowed(f"{pid}/{model}")

    def check_name_allowed(self, name: str) -> None:
        """ALLOWED_MODELS / DISALLOWED_MODELS: 403 with inference-gateway's messages."""
        if not self.name_allowed(name):
            message = (
                "Model not allowed. Please check the list of allowed models."
                if self.settings.allowed_models
                else "Model is disallowed. Please use a different model."
            )
            raise fail("model_not_allowed", message, param="model")

    @staticmethod
    def _split(model: str, provider: str | None) -> tuple[str, str]:
        """(provider id, model without its prefix)."""
        prefix, sep, rest = model.partition("/")
        if provider is not None:
            if provider not in PROVIDERS:
                raise fail("unknown_provider", UNKNOWN_PROVIDER, param="model")
            return provider, rest if sep and prefix.lower() == provider else model
        if sep and prefix.lower() in PROVIDERS:
            return prefix.lower(), rest
        raise fail("unknown_provider", UNKNOWN_PROVIDER, param="model")


@dataclass(frozen=True, slots=True)
class NativeApi:
    """A provider's own API that edgegw forwards, and the providers that have it
    (inference-gateway's registry)."""

    path: str
    providers: frozenset[str]
    unsupported: str

    def check(self, pid: str) -> None:
        if pid not in self.providers:
            raise fail("unsupported_provider", self.unsupported, param="model")


RESPONSES = NativeApi(
    "/responses",
    frozenset({"openai"}),
    "The Responses API is not supported by this provider yet. Use /v1/chat/completions instead.",
)
MESSAGES = NativeApi(
    "/messages",
    frozenset({"anthropic"}),
    "The Messages API is only supported by the anthropic provider.",
)
MESSAGES_COUNT_TOKENS = NativeApi(
    "/messages/count_tokens",
    frozenset({"anthropic"}),
    "Token counting is only supported by the anthropic provider.",
)
_IMAGES_UNSUPPORTED = "The Images API is not supported by this provider yet."
IMAGES_GENERATIONS = NativeApi("/images/generations", frozenset({"openai"}), _IMAGES_UNSUPPORTED)
IMAGES_EDITS = NativeApi("/images/edits", frozenset({"openai"}), _IMAGES_UNSUPPORTED)
IMAGES_VARIATIONS = NativeApi("/images/variations", frozenset({"openai"}), _IMAGES_UNSUPPORTED)
