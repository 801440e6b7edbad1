"""Loading GUARDRAILS_POLICY_DIR: every `*.rego` file of the directory (not of its
subdirectories, as the reference), read and compiled once by the Rust core
(`_core.GuardPolicy`, regorus) for the query `data.guardrails.main`.

An empty or missing directory is no policy (everything it would decide is allowed), as in
the reference; that is said in one warning at start, since an operator who enabled
guardrails and mistyped the directory would otherwise run unguarded. A file that cannot be
read, or a module that does not compile, stops the start with regorus's message, which
names the file, the line and the column.
"""

from __future__ import annotations

import logging
from pathlib import Path

from edgegw._core import GuardPolicy, PolicyError

log = logging.getLogger("edgegw.guardrails")

# A policy directory is configuration, not data: a bound that no real policy set reaches,
# so that a wrong directory (a home directory, a data volume) is refused, not slurped.
MAX_POLICY_FILES = 256
MAX_POLICY_BYTES = 4 * 1024 * 1024


class PolicyLoadError(ValueError):
    """The policy directory cannot be used; the message names the file (and line)."""


def load_policy(policy_dir: str) -> GuardPolicy:
    modules = read_modules(policy_dir)
    if not modules:
        log.warning(
            "guardrails: no *.rego file in GUARDRAILS_POLICY_DIR=%r: no policy is applied "
            "(the external checker, if set, still is)",
            policy_dir,
        )
    try:
        return GuardPolicy(modules)
    except PolicyError as e:
        raise PolicyLoadError(f"GUARDRAILS_POLICY_DIR: {e}") from None


def read_modules(policy_dir: str) -> list[tuple[str, str]]:
    """(file name, source) of every *.rego file, by name; [] for no directory."""
    if not policy_dir:
        return []
    root = Path(policy_dir)
    if not root.is_dir():
        if root.exists():
            raise PolicyLoadError(f"GUARDRAILS_POLICY_DIR: {policy_dir} is not a directory")
        return []
    files = sorted(p for p in root.iterdir() if p.suffix == ".rego" and p.is_file())
    if len(files) > MAX_POLICY_FILES:
        raise PolicyLoadError(
            f"GUARDRAILS_POLICY_DIR: more than {MAX_POLICY_FILES} .rego files in {policy_dir}"
        )
    modules: list[tuple[str, str]] = []
    total = 0
    for path in files:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise PolicyLoadError(f"{path}: cannot read ({e.strerror})") from None
        total += len(data)
        if total > MAX_POLICY_BYTES:
            raise PolicyLoadError(
                f"GUARDRAILS_POLICY_DIR: the .rego files are larger than {MAX_POLICY_BYTES} bytes"
            )
        try:
            modules.append((path.name, data.decode("utf-8")))
        except UnicodeDecodeError:
            raise PolicyLoadError(f"{path}: not UTF-8") from None
    return modules
