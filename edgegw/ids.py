"""Random ids (request ids, trace and span ids): unique, not secret.

One `random.Random` seeded from the OS at start (and again in a forked child, so two
processes never share a sequence), as OpenTelemetry's own id generator does: `os.urandom`
is a system call per id, which costs many times `getrandbits` under load
(bench/README.md, "Figures behind the code").
"""

from __future__ import annotations

import os
import random

_rng = random.Random()
os.register_at_fork(after_in_child=_rng.seed)


# A random integer of so many bits (0 included): the hot paths' way, one call fewer.
getrandbits = _rng.getrandbits


def random_bits(bits: int) -> int:
    """A random integer of `bits` bits, never 0 (0 is an invalid trace or span id)."""
    return _rng.getrandbits(bits) or 1
