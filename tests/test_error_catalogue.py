"""The error catalogue is whole and is the one way errors are built: every code the Rust
core raises is in `CATALOGUE` with the status it is answered with, every code a module of
edgegw names where it raises or answers an error is catalogued, and `GatewayError` is built
through `fail()` (or `GatewayError.replace`) everywhere but errors.py itself."""

from __future__ import annotations

import ast
from pathlib import Path

from edgegw._core import error_codes
from edgegw.errors import CATALOGUE

PACKAGE = Path(__file__).resolve().parent.parent / "edgegw"
# Functions whose first argument (or second, after a status) is an error code.
CODE_TAKERS = {"fail", "refuse", "_fail"}


def _sources() -> list[tuple[Path, ast.AST]]:
    return [
        (p, ast.parse(p.read_text(), str(p)))
        for p in PACKAGE.rglob("*.py")
        if "bench" not in p.relative_to(PACKAGE).parts
    ]


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def test_the_cores_codes_are_catalogued_with_their_status() -> None:
    codes = error_codes()
    assert codes and codes == sorted(codes)
    assert [c for c, status in codes if CATALOGUE.get(c, (None,))[0] != status] == []


def test_every_code_edgegw_names_is_catalogued() -> None:
    named: dict[str, str] = {}
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _name(node) in CODE_TAKERS):
                continue
            args = node.args
            if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, int):
                args = args[1:]  # refuse(status, code, ...)
            if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
                named.setdefault(args[0].value, f"{path.name}:{node.lineno}")
    # local/profiles.py's `fail` is its own (a profile's field names, not codes).
    assert len(named) > 40
    missing = {
        code: where
        for code, where in named.items()
        if code not in CATALOGUE and not where.startswith("profiles.py")
    }
    assert missing == {}


def test_gateway_errors_are_built_through_the_catalogue() -> None:
    built = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _name(node) == "GatewayError" and path.name != "errors.py"
    ]
    assert built == []
