"""The two ways a cell can fail to split, each told the way Python tells a SyntaxError.

``CellSyntaxError`` (the cell is not Python) and ``UnsupportedCellError`` (Python the splitter
cannot cut safely, such as a star import) carry the cell's line and column, so that the notebook
shows the offending line with a caret, as the interpreter would. Both pickle, because errors cross
process boundaries.
"""

from __future__ import annotations

# The file name the cell's code has in tracebacks and error messages.
CELL_FILENAME = "<cell>"


def _location(lineno: int | None, offset: int | None) -> str:
    if lineno is None:
        return ""
    if offset:
        return f" (line {lineno}, column {offset})"
    return f" (line {lineno})"


def _pretty(
    kind: str,
    msg: str,
    lineno: int | None,
    offset: int | None,
    text: str | None,
    end_lineno: int | None = None,
    end_offset: int | None = None,
) -> str:
    """Format an error the way the Python interpreter prints a SyntaxError."""
    out: list[str] = []
    if lineno is not None:
        out.append(f'  File "{CELL_FILENAME}", line {lineno}')
    line = text.splitlines()[0] if text and text.splitlines() else ""
    if line.strip():
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        stripped = stripped.rstrip()
        out.append("    " + stripped)
        if offset is not None and offset >= 1:
            column = min(max(offset - 1 - indent, 0), len(stripped))
            width = 1
            if end_lineno in (None, lineno) and end_offset and end_offset > offset:
                width = end_offset - offset
            width = max(1, min(width, len(stripped) - column))
            out.append("    " + " " * column + "^" * width)
    out.append(f"{kind}: {msg}")
    return "\n".join(out)


class CellSyntaxError(SyntaxError):
    """The cell is not valid Python; carries the location for a friendly notebook message."""

    def __init__(
        self,
        msg: str,
        lineno: int | None = None,
        offset: int | None = None,
        text: str | None = None,
        end_lineno: int | None = None,
        end_offset: int | None = None,
    ) -> None:
        super().__init__(msg, (CELL_FILENAME, lineno, offset, text, end_lineno, end_offset))

    @classmethod
    def from_syntax_error(cls, err: SyntaxError) -> CellSyntaxError:
        end_offset = getattr(err, "end_offset", None)
        return cls(
            err.msg or "invalid syntax",
            err.lineno,
            err.offset,
            err.text,
            getattr(err, "end_lineno", None),
            end_offset if end_offset and end_offset > 0 else None,
        )

    def __str__(self) -> str:
        return f"{self.msg}{_location(self.lineno, self.offset)}"

    def __reduce__(self) -> tuple[object, ...]:
        # The default reduce would call __init__ with SyntaxError's (msg, details) signature;
        # errors may cross process boundaries, so keep them picklable.
        args = (self.msg, self.lineno, self.offset, self.text, self.end_lineno, self.end_offset)
        return (type(self), args)

    def pretty(self) -> str:
        return _pretty(
            "SyntaxError",
            self.msg,
            self.lineno,
            self.offset,
            self.text,
            self.end_lineno,
            self.end_offset,
        )


class UnsupportedCellError(ValueError):
    """Valid Python that cannot be split safely (currently: star imports)."""

    def __init__(
        self,
        msg: str,
        lineno: int | None = None,
        offset: int | None = None,
        text: str | None = None,
    ) -> None:
        super().__init__(msg)
        self.msg = msg
        self.lineno = lineno
        self.offset = offset
        self.text = text

    def __str__(self) -> str:
        return f"{self.msg}{_location(self.lineno, self.offset)}"

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.msg, self.lineno, self.offset, self.text))

    def pretty(self) -> str:
        return _pretty("UnsupportedCellError", self.msg, self.lineno, self.offset, self.text)
