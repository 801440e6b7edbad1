"""Local model profiles: the models served by SGLang workers on local GPUs.

Declared in the config file under `local_models`, as a list of profiles or as the path of a
directory of one YAML file per model (relative to the config file); README's "Local models"
has every key with an example. A profile that cannot be used stops the start with a message
naming the file, the model and the key:

    edgegw.yaml: model 'qwen3-8b': workers[0].url: expected an http:// or https:// URL

`triggers` are the local states that send a request to `remote_fallback` (SIE's fallback
reasons; default provisioning and model_loading); `name:local` / `name:remote` (renamed
by `profiles`) pin one side. `served_model_name` is SGLang's `--served-model-name`, which
SIE sets to the profile's name (the default here): a worker that lists another name is not
routed to. `kind` says what the workers serve: `generation` (the default),
`embedding` (/v1/embeddings) or `rerank` (/v1/rerank), both SGLang launched with
`--is-embedding`; another route's request is refused with 400 `unsupported_model`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from edgegw.providers import PROVIDERS

# SIE's pool-name rule: refused, never mangled.
_POOL = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
# A model name is sent as-is in `model`: no provider prefix, no spaces or control bytes.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+@-]{0,127}$")
_URL = re.compile(r"^https?://[^/\s?#]+(/[^\s?#]*)?$")
# SGLang's served name is free text (its default is the model path): printable, no edge spaces.
MAX_SERVED_NAME = 256

# default_sampling keys and their valid ranges (SGLang's SamplingParams.verify).
_SAMPLING: dict[str, tuple[float, float, bool]] = {
    # key: (min, max, integer)
    "temperature": (0.0, math.inf, False),
    "top_p": (1e-12, 1.0, False),
    "top_k": (1, 2**32 - 1, True),
    "min_p": (0.0, 1.0, False),
    "frequency_penalty": (-2.0, 2.0, False),
    "presence_penalty": (-2.0, 2.0, False),
    "repetition_penalty": (1e-12, 2.0, False),
    "min_tokens": (0, 2**32 - 1, True),
}
_MODEL_KEYS = frozenset(
    {
        "name",
        "served_model_name",
        "workers",
        "tokenizer",
        "context_window",
        "max_output_tokens",
        "inputs",
        "chat_template_kwargs",
        "lora_adapters",
        "default_sampling",
        "timeouts",
        "remote_fallback",
        "triggers",
        "profiles",
        "capabilities",
        "stop_tokens",
        "kind",
    }
)
GRAMMARS = ("json_schema", "regex", "ebnf")
# SIE's fallback reasons, and the ones a profile that declares no triggers falls back on.
FALLBACK_REASONS = ("provisioning", "model_loading", "saturated", "unhealthy")
DEFAULT_TRIGGERS = frozenset({"provisioning", "model_loading"})
# What a profile's workers serve, and the routes that reach each kind.
KINDS = ("generation", "embedding", "rerank")


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file, the model and the key."""


@dataclass(frozen=True, slots=True)
class Worker:
    url: str
    pool: str = "default"
    machine_profile: str | None = None


@dataclass(frozen=True, slots=True)
class Timeouts:
    first_chunk_s: float = 90.0
    inter_chunk_s: float = 15.0
    overall_s: float = 600.0


@dataclass(frozen=True, slots=True)
class LocalModel:
    name: str
    workers: tuple[Worker, ...]
    tokenizer: Path | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    image_inputs: bool = False
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    lora_adapters: frozenset[str] = frozenset()
    default_sampling: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    timeouts: Timeouts = Timeouts()
    remote_fallback: str | None = None
    # The fallback reasons that send a request to remote_fallback.
    triggers: frozenset[str] = DEFAULT_TRIGGERS
    # Names of the two profiles for `model:profile`.
    local_profile: str = "local"
    remote_profile: str = "remote"
    tools: bool = True
    grammars: frozenset[str] = frozenset(GRAMMARS)
    stop_tokens: tuple[str, ...] = ()
    # The model's name on its workers (None: `name`, as SIE launches SGLang).
    served_model_name: str | None = None
    kind: str = "generation"

    @property
    def served_name(self) -> str:
        """What the workers list in /v1/models and are sent as `model`."""
        return self.served_model_name or self.name


def parse_gpu_aliases(value: str) -> Mapping[str, str]:
    """SIE_GATEWAY_GPU_ALIASES, `l4=l4-spot,a100=a100-80gb`: X-SIE-MACHINE-PROFILE aliases
    and the workers' machine_profile each stands for."""
    out: dict[str, str] = {}
    for item in value.split(","):
        alias, sep, profile = (part.strip() for part in item.partition("="))
        if not sep or not _POOL.match(alias) or not _POOL.match(profile):
            raise ProfileError(
                "expected alias=profile pairs separated by commas (names of A-Z a-z 0-9 . _ -)"
            )
        out[alias] = profile
    return MappingProxyType(out)


def load_local_models(value: Any, base_dir: Path, source: str) -> tuple[LocalModel, ...]:
    """The `local_models` entry of a config file: a list of profiles, or a directory path."""
    if isinstance(value, str):
        directory = (base_dir / value).resolve()
        if not directory.is_dir():
            raise ProfileError(f"{source}: local_models: {value!r} is not a directory")
        models: list[LocalModel] = []
        for path in sorted(directory.glob("*.y*ml")):
            models.append(_from_file(path))
        return _unique(models, source)
    if not isinstance(value, list):
        raise ProfileError(f"{source}: local_models: expected a list of models or a directory")
    return _unique(
        [parse_profile(item, base_dir, source, i) for i, item in enumerate(value)], source
    )


def _from_file(path: Path) -> LocalModel:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ProfileError(f"{path}: cannot read ({type(e).__name__})") from None
    return parse_profile(data, path.parent, str(path), None)


def _unique(models: list[LocalModel], source: str) -> tuple[LocalModel, ...]:
    seen: set[str] = set()
    for m in models:
        if m.name in seen:
            raise ProfileError(f"{source}: model {m.name!r}: name: declared twice")
        seen.add(m.name)
    return tuple(models)


def parse_profile(data: Any, base_dir: Path, source: str, index: int | None) -> LocalModel:
    where = f"{source}: local_models[{index}]" if index is not None else source
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: expected a mapping")
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ProfileError(f"{where}: name: expected a model name (letters, digits, . _ : + @ -)")
    at = f"{source}: model {name!r}"

    def fail(key: str, message: str) -> ProfileError:
        return ProfileError(f"{at}: {key}: {message}")

    for key in data:
        if key not in _MODEL_KEYS:
            raise fail(str(key), "unknown key")

    served = data.get("served_model_name")
    if served is not None and (
        not isinstance(served, str)
        or not 0 < len(served) <= MAX_SERVED_NAME
        or not served.isprintable()
        or served != served.strip()
    ):
        raise fail(
            "served_model_name",
            f"expected the name the workers serve the model as (1-{MAX_SERVED_NAME} printable "
            "characters, as SGLang's --served-model-name)",
        )

    workers_raw = data.get("workers")
    if not isinstance(workers_raw, list) or not (workers_raw or data.get("remote_fallback")):
        raise fail("workers", "expected a non-empty list (empty only with a remote_fallback)")
    workers = []
    for i, w in enumerate(workers_raw):
        if not isinstance(w, dict):
            raise fail(f"workers[{i}]", "expected a mapping with a url")
        for key in w:
            if key not in ("url", "pool", "machine_profile"):
                raise fail(f"workers[{i}].{key}", "unknown key")
        url = w.get("url")
        if not isinstance(url, str) or not _URL.match(url):
            raise fail(f"workers[{i}].url", "expected an http:// or https:// URL")
        pool = w.get("pool", "default")
        if not isinstance(pool, str) or not _POOL.match(pool):
            raise fail(f"workers[{i}].pool", "expected 1-128 characters of A-Z a-z 0-9 . _ -")
        profile = w.get("machine_profile")
        if profile is not None and (not isinstance(profile, str) or not _POOL.match(profile)):
            raise fail(
                f"workers[{i}].machine_profile", "expected 1-128 characters of A-Z a-z 0-9 . _ -"
            )
        workers.append(Worker(url.rstrip("/"), pool, profile))

    tokenizer = None
    if (tok := data.get("tokenizer")) is not None:
        if not isinstance(tok, str) or not tok:
            raise fail("tokenizer", "expected the path of a tokenizer.json")
        tokenizer = (base_dir / tok).resolve()
        if not tokenizer.is_file():
            raise fail("tokenizer", f"no such file: {tokenizer}")

    def positive_int(key: str) -> int | None:
        v = data.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise fail(key, "expected a positive integer")
        return v

    context_window = positive_int("context_window")
    max_output_tokens = positive_int("max_output_tokens")
    if context_window and max_output_tokens and max_output_tokens > context_window:
        raise fail("max_output_tokens", "larger than context_window")

    inputs = data.get("inputs") or {}
    if not isinstance(inputs, dict) or any(k not in ("text", "image") for k in inputs):
        raise fail("inputs", "expected a mapping of text/image to true or false")
    image = inputs.get("image", False)
    if not isinstance(image, bool):
        raise fail("inputs.image", "expected true or false")

    kwargs = data.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise fail("chat_template_kwargs", "expected a mapping")

    adapters = data.get("lora_adapters") or []
    if not isinstance(adapters, list) or not all(isinstance(a, str) and a for a in adapters):
        raise fail("lora_adapters", "expected a list of adapter names")

    sampling = data.get("default_sampling") or {}
    if not isinstance(sampling, dict):
        raise fail("default_sampling", "expected a mapping")
    for key, v in sampling.items():
        rule = _SAMPLING.get(key)
        if rule is None:
            raise fail(f"default_sampling.{key}", f"unknown; one of {', '.join(_SAMPLING)}")
        lo, hi, integer = rule
        ok = not isinstance(v, bool) and isinstance(v, int if integer else (int, float))
        if not ok or not math.isfinite(v) or not lo <= v <= hi:
            raise fail(f"default_sampling.{key}", "out of range")

    timeouts_raw = data.get("timeouts") or {}
    if not isinstance(timeouts_raw, dict):
        raise fail("timeouts", "expected a mapping")
    values = {}
    for key, v in timeouts_raw.items():
        if key not in ("first_chunk_s", "inter_chunk_s", "overall_s"):
            raise fail(f"timeouts.{key}", "unknown key")
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
            raise fail(f"timeouts.{key}", "expected a positive number of seconds")
        values[key] = float(v)
    timeouts = Timeouts(**values)
    # SIE clamps the first-chunk timeout to the overall one.
    if timeouts.first_chunk_s > timeouts.overall_s:
        timeouts = Timeouts(timeouts.overall_s, timeouts.inter_chunk_s, timeouts.overall_s)

    fallback = data.get("remote_fallback")
    if fallback is not None and (not isinstance(fallback, str) or "/" not in fallback):
        raise fail("remote_fallback", "expected provider/model")
    triggers = DEFAULT_TRIGGERS
    if (raw_triggers := data.get("triggers")) is not None:
        if fallback is None:
            raise fail("triggers", "needs a remote_fallback")
        if (
            not isinstance(raw_triggers, list)
            or not raw_triggers
            or any(t not in FALLBACK_REASONS for t in raw_triggers)
        ):
            raise fail("triggers", f"expected a non-empty list of {', '.join(FALLBACK_REASONS)}")
        triggers = frozenset(raw_triggers)

    names = data.get("profiles") or {}
    if (
        not isinstance(names, dict)
        or any(k not in ("local", "remote") for k in names)
        or not all(isinstance(v, str) and _POOL.match(v) for v in names.values())
        or len(set(names.values())) < len(names)
    ):
        raise fail("profiles", "expected {local: <name>, remote: <name>}, two different names")
    local_name, remote_name = names.get("local", "local"), names.get("remote", "remote")
    if local_name == remote_name:
        raise fail("profiles", "the local and remote profiles need different names")

    caps = data.get("capabilities") or {}
    if not isinstance(caps, dict) or any(k not in ("tools", "grammar") for k in caps):
        raise fail("capabilities", "expected a mapping of tools and grammar")
    tools = caps.get("tools", True)
    if not isinstance(tools, bool):
        raise fail("capabilities.tools", "expected true or false")
    grammars = caps.get("grammar", list(GRAMMARS))
    if not isinstance(grammars, list) or any(g not in GRAMMARS for g in grammars):
        raise fail("capabilities.grammar", f"expected a list of {', '.join(GRAMMARS)}")

    stop_tokens = data.get("stop_tokens") or []
    if not isinstance(stop_tokens, list) or not all(isinstance(t, str) and t for t in stop_tokens):
        raise fail("stop_tokens", "expected a list of strings")

    kind = data.get("kind", "generation")
    if kind not in KINDS:
        raise fail("kind", f"expected one of {', '.join(KINDS)}")
    if fallback is not None and kind != "generation":
        # A fallback that could never answer the route is refused now, not per request.
        provider = PROVIDERS.get(fallback.partition("/")[0].lower())
        path = (
            None
            if provider is None
            else provider.rerank_path
            if kind == "rerank"
            else provider.embeddings_path
        )
        if provider is not None and path is None:
            raise fail("remote_fallback", f"provider '{provider.id}' has no {kind} API")

    return LocalModel(
        name=name,
        workers=tuple(workers),
        tokenizer=tokenizer,
        context_window=context_window,
        max_output_tokens=max_output_tokens,
        image_inputs=image,
        chat_template_kwargs=MappingProxyType(dict(kwargs)),
        lora_adapters=frozenset(adapters),
        default_sampling=MappingProxyType(dict(sampling)),
        timeouts=timeouts,
        remote_fallback=fallback,
        triggers=triggers,
        local_profile=local_name,
        remote_profile=remote_name,
        tools=tools,
        grammars=frozenset(grammars),
        stop_tokens=tuple(dict.fromkeys(stop_tokens)),
        served_model_name=served,
        kind=kind,
    )
