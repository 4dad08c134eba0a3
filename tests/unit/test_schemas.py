"""The shipped JSON Schemas: valid Draft 2020-12, versioned, and strict enough to catch drift."""

from __future__ import annotations

import copy

import pytest
from jsonschema import Draft202012Validator

from crawler.schemas import SCHEMA_NAMES, SCHEMA_VERSION, load_schema, versioned


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_schema_is_valid_and_pins_the_version(name):
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"] == {
        "const": SCHEMA_VERSION,
        "description": schema["properties"]["schema_version"]["description"],
    }
    assert "schema_version" in schema["required"]
    assert schema["additionalProperties"] is False
    assert schema["$id"] == f"urn:quants:schema:{name}:v{SCHEMA_VERSION}"


def _compare_doc():
    return versioned(
        {
            "base_model": "Qwen/Qwen3.6-27B",
            "quants": [
                {
                    "repo": "a/b",
                    "author": "a",
                    "path": "b-Q4_K_M.gguf",
                    "quant_label": "Q4_K_M",
                    "size_bytes": 10,
                    "groups": {"attn": {"bpw": 4.5, "min_bits": 4, "max_bits": 6}},
                    "mtp": {
                        "present": False,
                        "state": "absent",
                        "preserved": None,
                        "min_bits": None,
                    },
                    "attention": {"min_bits": 4, "preserved": False},
                    "loadable_by_mainline": True,
                }
            ],
        }
    )


def _errors(name, doc):
    return list(Draft202012Validator(load_schema(name)).iter_errors(doc))


def test_a_document_that_drifts_is_rejected():
    good = _compare_doc()
    assert not _errors("compare", good)
    for breaks in (
        lambda d: d.pop("schema_version"),
        lambda d: d.update(schema_version=2),
        lambda d: d.update(extra=1),  # an undocumented key
        lambda d: d["quants"][0].pop("size_bytes"),
        lambda d: d["quants"][0].update(size_bytes="10"),
        lambda d: d["quants"][0]["mtp"].update(state="maybe"),
    ):
        bad = copy.deepcopy(good)
        breaks(bad)
        assert _errors("compare", bad), bad


def test_unknown_schema_names_what_exists():
    with pytest.raises(KeyError, match="search"):
        load_schema("nope")
