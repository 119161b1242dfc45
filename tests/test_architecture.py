"""The shape of the code: modules and functions small enough to read, by a rule anyone can check.

No product module over 500 lines and no function over 80. A hot path may be longer when splitting
it would cost measured time: it says so in a comment starting ``# hot path:`` on one of the five
lines above its ``def`` (or on the ``def`` line), with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernel_server", "qonductor_jupyter")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def product_modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def long_functions(path: Path) -> list[tuple[str, int, int]]:
    """(name, first line, length) of each function over the limit without a hot-path note."""
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        length = (node.end_lineno or node.lineno) - first + 1
        if length <= MAX_FUNCTION_LINES:
            continue
        above = lines[max(first - 6, 0) : node.lineno]
        if any("# hot path:" in line for line in above):
            continue
        found.append((node.name, node.lineno, length))
    return found


def test_no_product_module_is_over_500_lines() -> None:
    too_long = {
        str(p.relative_to(ROOT)): n
        for p in product_modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"


def test_no_product_function_is_over_80_lines_unless_a_hot_path_says_why() -> None:
    too_long = [
        f"{p.relative_to(ROOT)}:{line} {name} ({length} lines)"
        for p in product_modules()
        for name, line, length in long_functions(p)
    ]
    assert not too_long, "functions over 80 lines:\n" + "\n".join(too_long)
