"""What a request cost: its usage times its model's per-token prices, in nano-USD (exact
whole numbers: edgegw.keyfile.NANO_USD).

A model's price is MODEL_PRICES' when it names the model (remote `provider/model`, a local
model's name, an alias), else the community table's (edgegw.models.community), once that
table is loaded (by /v1/models or, with tenants, at start): no request waits for it. Cached
tokens are charged at the input rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from edgegw.keyfile import NANO_USD

# The usage members of each API: (input, output).
INPUT_MEMBERS = ("prompt_tokens", "input_tokens")
OUTPUT_MEMBERS = ("completion_tokens", "output_tokens")
# Models whose price was looked up in the loaded community table, remembered (a price
# missing too).
MAX_CACHED = 4096


# A request's cost is counted in femto-USD a token (10^-15: any price a table writes per
# million tokens is whole there), in integers: Decimal arithmetic was half of its pricing.
FEMTO_PER_NANO = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """USD per token, and the same in whole femto-USD."""

    input: Decimal
    output: Decimal
    input_femto: int = field(init=False)
    output_femto: int = field(init=False)

    def __post_init__(self) -> None:
        scale = NANO_USD * FEMTO_PER_NANO
        object.__setattr__(self, "input_femto", int(self.input * scale))
        object.__setattr__(self, "output_femto", int(self.output * scale))


class PriceTable(Protocol):
    """The community table as pricing reads it (edgegw.models.community.CommunityTable)."""

    # An attribute, not a call: every unpriced request reads it.
    loaded: bool

    def find(self, model_id: str, field: str) -> Any: ...


class _NoTable:
    loaded = True

    def find(self, model_id: str, field: str) -> Any:
        return None


NO_TABLE = _NoTable()


class Prices:
    def __init__(
        self, overrides: Mapping[str, tuple[Decimal, Decimal]], community: PriceTable = NO_TABLE
    ) -> None:
        self._overrides = {m: Price(i, o) for m, (i, o) in overrides.items()}
        self._community = community
        self._cache: dict[str, Price | None] = {}

    def of(self, model: str) -> Price | None:
        low = model.lower()
        if low in self._overrides:
            return self._overrides[low]
        if low in self._cache:
            return self._cache[low]
        if not self._community.loaded:  # nothing else prices it yet (0.6 % of a request)
            return None
        found = _price(self._community.find(model, "pricing"))
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        self._cache[low] = found  # the loaded table is the one for good
        return found

    def cost_nano(self, model: str, usage: Mapping[str, Any] | None) -> int | None:
        """The cost of `usage` on `model` in nano-USD; None when the model has no price or
        the answer no usage."""
        if not usage:
            return None
        price = self.of(model)
        if price is None:
            return None
        # Chat's names first, without a call: every priced answer comes here.
        inputs, outputs = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if type(inputs) is not int or inputs < 0:
            inputs = _tokens(usage, INPUT_MEMBERS)
        if type(outputs) is not int or outputs < 0:
            outputs = _tokens(usage, OUTPUT_MEMBERS)
        return (inputs * price.input_femto + outputs * price.output_femto) // FEMTO_PER_NANO


def usd_text(nano: int) -> str:
    """Nano-USD as a plain decimal string (`0.000123`), in integers (a Decimal division
    was a third of a request's pricing)."""
    whole, part = divmod(nano, 1_000_000_000)
    return f"{whole}.{part:09d}".rstrip("0") if part else str(whole)  # a digit ends it


def _tokens(usage: Mapping[str, Any], members: tuple[str, ...]) -> int:
    for name in members:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


def _price(pricing: Mapping[str, Any] | None) -> Price | None:
    if not pricing:
        return None
    try:
        return Price(Decimal(pricing["input_per_token"]), Decimal(pricing["output_per_token"]))
    except (KeyError, TypeError, InvalidOperation):
        return None
