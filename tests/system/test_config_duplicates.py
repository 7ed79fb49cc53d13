"""A key written twice in a scenario file is refused with both line numbers (YAML and JSON keep
the last silently; TOML refuses it itself), and so is a dotted key that a table sets again."""

from __future__ import annotations

import pytest

from multispin.errors import ConfigError
from multispin.system.config_file import expand_dotted, parse_text


def test_a_yaml_key_written_twice_names_both_lines():
    text = "preset: paper-qwen\nradio:\n  p_dl_dbm: 30\n  p_ul_dbm: 20\n  p_dl_dbm: 33\n"
    with pytest.raises(ConfigError, match=r"k.yaml.*p_dl_dbm: duplicate key at lines 3 and 5"):
        parse_text(text, ".yaml", "k.yaml")
    # negative control: the same key in two different tables is no duplicate
    assert parse_text("a:\n  x: 1\nb:\n  x: 2\n", ".yaml", "k.yaml") == {"a": {"x": 1}, "b": {"x": 2}}


def test_a_json_key_written_twice_names_both_lines():
    with pytest.raises(ConfigError, match=r"seed: duplicate key at lines 2 and 3"):
        parse_text('{"preset": "paper-qwen",\n "seed": 1,\n "seed": 2}', ".json", "k.json")
    assert parse_text('{"a": {"seed": 1}, "seed": 2}', ".json", "k.json") == {"a": {"seed": 1}, "seed": 2}


def test_a_toml_key_written_twice_is_refused():
    with pytest.raises(ConfigError, match="cannot parse"):
        parse_text("seed = 1\nseed = 2\n", ".toml", "k.toml")


def test_a_dotted_key_set_again_by_a_table_is_refused():
    with pytest.raises(ConfigError, match=r"radio.p_dl_dbm: set twice"):
        expand_dotted({"radio.p_dl_dbm": 30, "radio": {"p_dl_dbm": 33}})
    assert expand_dotted({"radio.p_dl_dbm": 30, "radio": {"p_ul_dbm": 20}}) == {
        "radio": {"p_dl_dbm": 30, "p_ul_dbm": 20}
    }
