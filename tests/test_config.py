"""Build configuration: defaults, file, overrides, and errors that name their source."""

import pytest

from runtime.config import DEFAULTS, ConfigError, load_config


def test_defaults_are_copied_not_shared():
    config = load_config()
    config["ingest"]["languages"].append("fr")
    assert DEFAULTS["ingest"]["languages"] == ["en"]


def test_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("ingest:\n  max_malformed_share: 0.05\nspark:\n  master: spark://h:7077\n")
    config = load_config(path, ["ingest.max_malformed_share=0.2", "ingest.languages=[en, '']",
                                "new.section.value=3"])
    assert config["ingest"]["max_malformed_share"] == 0.2
    assert config["ingest"]["languages"] == ["en", ""]
    assert config["spark"]["master"] == "spark://h:7077"
    assert config["spark"]["shuffle_partitions"] == DEFAULTS["spark"]["shuffle_partitions"]
    assert config["new"]["section"]["value"] == 3


def test_json_config(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"publish": {"keep": 7}}')
    assert load_config(path)["publish"]["keep"] == 7


@pytest.mark.parametrize("text,match", [("- a list\n", "top level must be a mapping"),
                                        ("a: [unclosed\n", "invalid config")])
def test_bad_files_name_the_file(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as err:
        load_config(path)
    assert str(path) in str(err.value)


def test_override_into_a_scalar_is_refused():
    with pytest.raises(ConfigError, match="'master' is not a section"):
        load_config(None, ["spark.master.x=1"])


@pytest.mark.parametrize("override,match", [
    ("scos.enabled=false", "'scos' is called 'scos_merge' now"),
    ("types.rule=x", "'types' is called 'entity_types' now"),
    ("ingest.max_malformed=0.1", r"ingest: unknown config keys \['max_malformed'\]"),
    ("query=3", "section 'query' must be a mapping"),
])
def test_renamed_sections_and_unknown_keys_are_refused_by_name(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])
