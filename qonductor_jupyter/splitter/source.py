"""The cell's text: parsed, and sliced into each step's own source.

A step ships as source text, and a failure in it must point at the cell's own line, so a step's
text is cut out of the cell exactly, from its first statement's start (decorators included) to its
last statement's end, and the step records the cell lines it spans. The AST counts lines as the
tokenizer does (LF, CR LF or a lone CR) and columns in UTF-8 bytes, so the slicing counts the
same way.
"""

from __future__ import annotations

import ast

from .errors import CELL_FILENAME, CellSyntaxError


def parse_cell(source: str) -> ast.Module:
    """The cell's AST; CellSyntaxError (with the cell's line and a caret) where it is not Python."""
    return _parse(source)


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source, filename=CELL_FILENAME)
    except SyntaxError as err:
        raise CellSyntaxError.from_syntax_error(err) from None
    except ValueError as err:  # e.g. null bytes on Python < 3.12
        raise CellSyntaxError(str(err)) from None


def _split_lines(source: str) -> list[str]:
    """Split like the tokenizer (\\n, \\r\\n, \\r), keeping line endings."""
    lines: list[str] = []
    start = 0
    index = 0
    while index < len(source):
        char = source[index]
        if char == "\r" and source[index + 1 : index + 2] == "\n":
            index += 1
        if char in "\r\n":
            lines.append(source[start : index + 1])
            start = index + 1
        index += 1
    if start < len(source):
        lines.append(source[start:])
    return lines


def _start(stmt: ast.stmt) -> tuple[int, int]:
    decorators = getattr(stmt, "decorator_list", None)
    if decorators:
        # Top-level decorators start in column 0 (a compound statement can't follow ``;``).
        return min(decorator.lineno for decorator in decorators), 0
    return stmt.lineno, stmt.col_offset


def _segment(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    # AST column offsets are UTF-8 byte offsets, hence the encode/decode.
    (lineno, col), (end_lineno, end_col) = start, end
    if lineno == end_lineno:
        return lines[lineno - 1].encode()[col:end_col].decode()
    first = lines[lineno - 1].encode()[col:].decode()
    middle = "".join(lines[lineno : end_lineno - 1])
    last = lines[end_lineno - 1].encode()[:end_col].decode()
    return first + middle + last


def _step_source(lines: list[str], first: ast.stmt, last: ast.stmt) -> tuple[str, int, int]:
    """The source of the statements ``first`` to ``last``, its first line and its last line."""
    start = _start(first)
    end_lineno = last.end_lineno or last.lineno
    end = (end_lineno, last.end_col_offset or 0)
    return _segment(lines, start, end), start[0], end_lineno
