"""Generate the lab extension's TypeScript types for the lab server's replies
(``labextension/src/schema.ts``) from the JSON Schema of ``kernel_server/core/status.py``.

Usage: ``python tools/gen_ts_types.py`` writes the file; with ``--check`` it exits 1 when the
committed file differs (tests/test_ts_schema.py checks the same).

Each entry of the schema's ``$defs`` becomes one declaration, in their order: an object with
properties an interface, anything else a type alias. A construct not translated here raises
:class:`SchemaError` rather than becoming ``any``. The output is as prettier writes it (2 spaces,
single quotes, 80 columns).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "labextension" / "src" / "schema.ts"
COMMAND = "python tools/gen_ts_types.py"
HEADER = (
    "// Generated from kernel_server/core/status.py (json_schema()) by tools/gen_ts_types.py.\n"
    f"// Do not edit: change the Python schema and regenerate with `{COMMAND}`.\n"
)
WIDTH = 80  # prettier's printWidth: a longer union is written one member a line
# Keys that document a schema without changing its TypeScript type.
NOTES = {"title", "description", "default", "examples"}
SCALARS = {"integer": "number", **{t: t for t in ("string", "number", "boolean", "null")}}
IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")


class SchemaError(ValueError):
    """A schema construct the generator does not translate."""


def _fail(where: str, schema: dict[str, Any]) -> SchemaError:
    return SchemaError(f"{where}: no TypeScript for the schema {json.dumps(schema)}")


def _only(schema: dict[str, Any], where: str, *keys: str) -> None:
    if set(schema) - NOTES - set(keys):
        raise _fail(where, schema)


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def members(schema: dict[str, Any], where: str) -> list[str]:
    """The TypeScript type of ``schema`` as the members of a union (one for a plain type)."""
    if "$ref" in schema:
        _only(schema, where, "$ref")
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise _fail(where, schema)
        return [ref.removeprefix("#/$defs/")]
    if "enum" in schema:
        _only(schema, where, "enum")
        if not all(isinstance(v, str) for v in schema["enum"]):
            raise _fail(where, schema)
        return [_literal(v) for v in schema["enum"]]
    if "anyOf" in schema:
        _only(schema, where, "anyOf")
        out = [m for option in schema["anyOf"] for m in members(option, where)]
        return list(dict.fromkeys(out))
    kind = schema.get("type")
    if kind == "array":
        _only(schema, where, "type", "items")
        if "items" not in schema:
            raise _fail(where, schema)
        item = members(schema["items"], f"{where}[]")
        return [f"({' | '.join(item)})[]" if len(item) > 1 else f"{item[0]}[]"]
    if kind == "object":
        _only(schema, where, "type", "additionalProperties")
        extra = schema.get("additionalProperties", True)
        if extra is True:
            return ["Record<string, unknown>"]
        if isinstance(extra, dict):
            return [f"Record<string, {' | '.join(members(extra, f'{where}{{}}'))}>"]
        raise _fail(where, schema)
    if isinstance(kind, str) and kind in SCALARS:
        _only(schema, where, "type")
        return [SCALARS[kind]]
    raise _fail(where, schema)


def _typed(head: str, union: list[str], indent: str) -> list[str]:
    """``head T;`` on one line, or, past the width, one union member a line as prettier does."""
    line = f"{indent}{head} {' | '.join(union)};"
    if len(line) <= WIDTH or len(union) == 1:
        return [line]
    wrapped = [f"{indent}  | {m}" for m in union]
    return [f"{indent}{head}", *wrapped[:-1], wrapped[-1] + ";"]


def _doc(description: str | None, indent: str = "") -> list[str]:
    """A JSDoc comment of the description, if any."""
    if not description:
        return []
    lines = description.replace("*/", "*\\/").splitlines()
    if len(lines) == 1 and len(indent) + len(lines[0]) <= WIDTH - 7:
        return [f"{indent}/** {lines[0]} */"]
    return [f"{indent}/**"] + [f"{indent} * {line}".rstrip() for line in lines] + [f"{indent} */"]


def declaration(name: str, schema: dict[str, Any]) -> list[str]:
    """The lines declaring one ``$defs`` entry."""
    lines = _doc(schema.get("description"))
    if schema.get("type") != "object" or "properties" not in schema:
        return lines + _typed(f"export type {name} =", members(schema, name), "")
    _only(schema, name, "type", "properties", "required", "additionalProperties")
    if schema.get("additionalProperties", False) is not False:
        raise _fail(name, schema)  # an interface with further keys of some type
    required = set(schema.get("required", ()))
    body = []
    for prop, sub in schema["properties"].items():
        key = prop if IDENTIFIER.fullmatch(prop) else _literal(prop)
        mark = "" if prop in required else "?"
        body += _doc(sub.get("description"), "  ")
        body += _typed(f"{key}{mark}:", members(sub, f"{name}.{prop}"), "  ")
    if not body:
        return lines + [f"export interface {name} {{}}"]
    return lines + [f"export interface {name} {{"] + body + ["}"]


def render(schema: dict[str, Any] | None = None) -> str:
    """The text of schema.ts for ``schema`` (by default the lab server's, ``json_schema()``)."""
    if schema is None:
        from kernel_server.core.status import json_schema

        schema = json_schema()
    blocks = ["\n".join(declaration(name, sub)) for name, sub in schema["$defs"].items()]
    return HEADER + "\n" + "\n\n".join(blocks) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=f"Write {OUTPUT.relative_to(REPO)}.")
    parser.add_argument("--check", action="store_true", help="exit 1 if it differs; write nothing")
    args = parser.parse_args(argv)
    text = render()
    shown = OUTPUT.relative_to(REPO)
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(
                f"{shown} is out of date with kernel_server/core/status.py: run `{COMMAND}`",
                file=sys.stderr,
            )
            return 1
        print(f"{shown} is up to date")
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
