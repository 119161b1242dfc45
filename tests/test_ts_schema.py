"""The lab extension's TypeScript types (labextension/src/schema.ts) are generated from the JSON
Schema of kernel_server/core/status.py by tools/gen_ts_types.py: the committed file is current,
and the generator translates what it knows and refuses what it does not."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def _load_generator() -> ModuleType:
    # tools/ is no package on the test path: load the script by its path.
    spec = importlib.util.spec_from_file_location(
        "gen_ts_types", ROOT / "tools" / "gen_ts_types.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def declarations(defs: dict[str, Any]) -> str:
    """The generated text for ``defs``, without the header."""
    return gen.render({"$defs": defs}).removeprefix(gen.HEADER + "\n")


def test_committed_schema_ts_is_current() -> None:
    committed = (ROOT / "labextension" / "src" / "schema.ts").read_text()
    assert committed == gen.render(), (
        "labextension/src/schema.ts differs from kernel_server/core/status.py's schema: "
        "run `python tools/gen_ts_types.py`"
    )


def test_string_enum_is_a_union_of_literals() -> None:
    text = declarations({"Color": {"title": "Color", "enum": ["red", "it's"]}})
    assert text == "export type Color = 'red' | 'it\\'s';\n"


def test_long_union_is_one_member_a_line() -> None:
    names = [f"state-number-{i}" for i in range(6)]
    text = declarations({"State": {"enum": names}})
    assert text.splitlines() == ["export type State ="] + [f"  | '{n}'" for n in names[:-1]] + [
        f"  | '{names[-1]}';"
    ]


def test_interface_nullable_optional_and_array_of_union() -> None:
    defs = {
        "Job": {
            "title": "Job",
            "description": "A job.",
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "The job's id."},
                "queue_position": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "parts": {
                    "type": "array",
                    "items": {"anyOf": [{"$ref": "#/$defs/Part"}, {"type": "string"}]},
                },
                "kind": {"enum": ["a", "b"], "default": "a"},
                "extra": {"type": "object", "additionalProperties": {"type": "number"}},
                "config": {"type": "object"},
                "ready": {"type": "boolean", "default": False},
            },
            "required": ["id", "queue_position", "parts", "kind", "extra", "config"],
        },
    }
    assert declarations(defs) == (
        "/** A job. */\n"
        "export interface Job {\n"
        "  /** The job's id. */\n"
        "  id: string;\n"
        "  queue_position: number | null;\n"
        "  parts: (Part | string)[];\n"
        "  kind: 'a' | 'b';\n"
        "  extra: Record<string, number>;\n"
        "  config: Record<string, unknown>;\n"
        "  ready?: boolean;\n"
        "}\n"
    )


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "format": "date-time"},  # a key it does not know
        {"type": ["string", "null"]},
        {"enum": [1, 2]},
        {"$ref": "#/components/schemas/Other"},
        {"type": "array"},  # items of no type
        {"type": "object", "properties": {"x": {"type": "string"}}},  # an object not in $defs
        {"type": "object", "additionalProperties": False},
        {},
    ],
)
def test_unknown_construct_raises(schema: dict[str, Any]) -> None:
    defs = {"Thing": {"type": "object", "properties": {"field": schema}}}
    with pytest.raises(gen.SchemaError, match=r"Thing\.field"):
        gen.render({"$defs": defs})


def test_check_names_the_command_and_writing_fixes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gen, "REPO", tmp_path)
    monkeypatch.setattr(gen, "OUTPUT", tmp_path / "schema.ts")
    gen.OUTPUT.write_text("// stale\n")
    assert gen.main(["--check"]) == 1
    assert "run `python tools/gen_ts_types.py`" in capsys.readouterr().err
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0
    assert gen.OUTPUT.read_text() == gen.render()
