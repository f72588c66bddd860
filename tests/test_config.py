"""Build configuration: defaults, file, overrides, and errors that name their source; every
key validated against its declaration (a table of bad values, and a fuzz test of the loader);
the typed sections and the generated reference page."""

import json
import math
import re
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lokg.pipeline import config as build_config
from lokg.pipeline.config import BUILD, DEFAULTS, check_config, load_config
from lokg.runtime.config import ConfigError
from lokg.training.settings import GatSettings

SCHEMA = {declared.section: declared.rules() for declared in BUILD.sections}
RENAMED_SECTIONS = BUILD.renamed


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
    ("query=3", "section 'query' must be a mapping"),
])
def test_renamed_sections_and_non_mapping_sections_are_refused_by_name(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])


def test_every_default_satisfies_its_own_rule():
    check_config(DEFAULTS)
    for declared in BUILD.sections:
        assert declared.problem(declared.defaults()) is None, declared.section


def test_a_section_reads_as_typed_values_and_as_its_mapping():
    cfg = GatSettings.of(load_config(None, ["gat.hidden=12", "gat.heads=3"]))
    assert (cfg.hidden, cfg.heads, cfg.questions) == (12, 3, None)
    assert dict(cfg) == {**DEFAULTS["gat"], "hidden": 12, "heads": 3}
    with pytest.raises(KeyError):
        cfg["colour"]


class _StageFailure(Exception):
    pass


def test_a_section_read_by_a_stage_is_checked_with_the_stages_error():
    with pytest.raises(_StageFailure, match=r"gat: unknown config key 'hiden' \(did you mean "
                                            r"'hidden'\?\)"):
        GatSettings.of({"gat": {"hiden": 3}}, _StageFailure)
    with pytest.raises(_StageFailure, match="gat.hidden: 130 is not a multiple of gat.heads=4"):
        GatSettings.of({"gat": {"hidden": 130}}, _StageFailure)


def test_the_configuration_page_is_the_generated_one():
    """docs/CONFIGURATION.md is written by ``python -m lokg.pipeline.config``: run it after
    changing a declaration."""
    assert build_config.REFERENCE.read_text(encoding="utf-8") == build_config.reference()
    for declared in BUILD.sections:
        for name in declared.rules():
            assert f"| `{name}` |" in build_config.reference(), (declared.section, name)


#: override → what the one-line message must say (the key path and the value are checked too).
BAD = [
    ("ingest.max_malformed_share=abc", "'abc' has the wrong type (expected a number in [0, 1])"),
    ("ingest.max_malformed_share=-1", "-1 is out of range (expected a number in [0, 1])"),
    ("ingest.max_malformed_share=.nan", "nan is out of range"),
    ("path_cache.lambda_topo=.inf", "inf is out of range (expected a number >= 0)"),
    ("transe.margin=.nan", "nan is out of range (expected a number > 0)"),
    ("publish.keep=-1", "-1 is out of range (expected an integer >= 0)"),
    ("publish.keep=1.5", "1.5 has the wrong type (expected an integer >= 0)"),
    ("gat.epochs=true", "True has the wrong type (expected an integer >= 1)"),
    ("transe.scoring_norm=true", "True has the wrong type (expected one of 1 | 2)"),
    ("transe.scoring_norm=3", "3 is not one of the choices"),
    ("transe.learning_rate=0", "0 is out of range (expected a number > 0)"),
    ("transe.eval_share=1", "1 is out of range (expected a number in (0, 1))"),
    ("gat.dropout=1.0", "1.0 is out of range (expected a number in [0, 1))"),
    ("gat.device=gpu", "'gpu' is not allowed (expected auto, cpu or cuda[:N])"),
    ("gat.threads=0", "0 is out of range (expected null or an integer >= 1)"),
    ("ingest.format=ntt", "'ntt' is not one of the choices (expected one of auto | nt"),
    ("relation_stats.type_rule=mean", "expected one of spread | min"),
    ("scos_merge.missing_embeddings=renormalize", "(did you mean 'renormalise'?)"),
    ("scos_merge.weights=[0.5, 0.5]", "[0.5, 0.5] is out of range (expected a list of 3 numbers"),
    ("scos_merge.weights=[0, 0, 0]", "with a positive sum"),
    ("ingest.languages=en", "'en' has the wrong type (expected a list of strings)"),
    ("ingest.literals_as_edges=1", "1 has the wrong type (expected true or false)"),
    ("spark.driver_memory=lots", "'lots' is not allowed (expected a Spark memory size"),
    ("spark.log_level=LOUD", "'LOUD' is not allowed"),
    ("gat.questions=3", "3 has the wrong type (expected null or a file path)"),
    ("path_cache.heads=''",
     "'' is not allowed (expected all, degree, mu, query_log or a file of entity keys)"),
    ("path_cache.hot_share=0", "0 is out of range (expected null or a number in (0, 1])"),
    ("path_cache.hot_share=1.5", "1.5 is out of range (expected null or a number in (0, 1])"),
    ("path_cache.hot_share=10%", "'10%' has the wrong type (expected null or a number in (0, 1])"),
    ("path_cache.hot_count=0", "0 is out of range (expected null or an integer >= 1)"),
    ("path_cache.hot_count=0.5", "0.5 has the wrong type (expected null or an integer >= 1)"),
    ("query.encoder_backend=tensorrt", "expected one of auto | onnx | torch"),
    ("entity_encode.encoder=numpy", "expected one of auto | onnx | torch"),
    ("query.min_link_cosine=2", "2 is out of range (expected a number in [-1, 1])"),
    ("query.choice_check=chain", "'chain' is not one of the choices (expected one of derivation"),
]


@pytest.mark.parametrize("override,says", BAD, ids=[o for o, _ in BAD])
def test_bad_values_are_refused_naming_key_value_and_what_is_allowed(override, says):
    key = override.partition("=")[0]
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    message = str(err.value)
    assert message.startswith(f"{key}: ") and says in message, message
    assert "\n" not in message


@pytest.mark.parametrize("override,says", [
    ("ingest.max_malformed_shar=0.1", "ingest: unknown config key 'max_malformed_shar' "
                                      "(did you mean 'max_malformed_share'?)"),
    ("transe.learning_rat=0.1", "(did you mean 'learning_rate'?)"),
    ("publish.colour=red", "publish: unknown config key 'colour' (known: keep)"),
])
def test_unknown_keys_are_refused_with_the_nearest_key(override, says):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert says in str(err.value)


def test_gat_hidden_must_be_a_multiple_of_heads():
    with pytest.raises(ConfigError, match=r"gat.hidden: 130 is not a multiple of gat.heads=4"):
        load_config(None, ["gat.hidden=130"])
    assert load_config(None, ["gat.hidden=12", "gat.heads=3"])["gat"]["hidden"] == 12


@pytest.mark.parametrize("overrides,says", [
    (["path_cache.heads=degree"], "path_cache.heads: 'degree' needs the hot set's size: "
                                  "path_cache.hot_share (a share of all heads, 0 < x <= 1) or "
                                  "path_cache.hot_count (a number of heads >= 1)"),
    (["path_cache.heads=mu", "path_cache.hot_share=0.1", "path_cache.hot_count=5"],
     "path_cache.hot_count: 5 and path_cache.hot_share=0.1 are both set (set one of the two)"),
    (["path_cache.hot_count=5"], "path_cache.hot_count: 5 applies only to path_cache.heads "
                                 "degree | mu | query_log (heads is 'all')"),
    (["path_cache.heads=query_log", "path_cache.hot_share=0.5"],
     "path_cache.heads: 'query_log' needs path_cache.query_log"),
    (["path_cache.heads=hot.txt", "path_cache.query_log=log.jsonl"],
     "path_cache.query_log: 'log.jsonl' applies only to path_cache.heads=query_log "
     "(heads is 'hot.txt')"),
])
def test_hot_set_keys_must_fit_together(overrides, says):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert str(err.value).startswith(says), str(err.value)


@pytest.mark.parametrize("overrides", [
    ["path_cache.heads=degree", "path_cache.hot_share=0.1"],
    ["path_cache.heads=mu", "path_cache.hot_count=1000"],
    ["path_cache.heads=degree", "path_cache.hot_share=1"],  # 1 is a share of 100 % here
    ["path_cache.heads=query_log", "path_cache.hot_share=0.2", "path_cache.query_log=log/"],
    ["path_cache.heads=hot.txt"],
])
def test_hot_set_settings_accepted(overrides):
    load_config(None, overrides)


def test_a_bad_value_from_a_file_names_the_file_and_an_override_can_fix_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("publish:\n  keep: -1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: publish.keep: -1 is out of range (expected an integer >= 0)"
    assert load_config(path, ["publish.keep=0"])["publish"]["keep"] == 0
    with pytest.raises(ConfigError) as err:
        load_config(path, ["publish.keep=x"])
    assert str(err.value).startswith("publish.keep: 'x'")  # the override's value, not the file's


def test_yaml_reads_exponents_as_numbers_and_dates_as_text(tmp_path):
    config = load_config(None, ["transe.learning_rate=1e-3", "gat.learning_rate=5E-4",
                                "mine.when=2026-01-01"])
    assert config["transe"]["learning_rate"] == 0.001 and config["gat"]["learning_rate"] == 0.0005
    assert config["mine"]["when"] == "2026-01-01"


def test_a_config_the_manifest_cannot_store_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not JSON-serialisable"):
        load_config(None, ["mine.tags=!!set {a: null}"])
    with pytest.raises(ConfigError, match="not JSON-serialisable"):
        check_config({"mine": {float("nan"): 1, "x": {1, 2}}})


# ---- fuzz: the loader returns a config satisfying the schema, or raises ConfigError -------------
def satisfies(value, expected: str, default) -> bool:
    """An oracle independent of the schema's predicates: it reads the rule's own words
    (``expected``), so a rule that accepts more than it says is caught too."""
    if expected.startswith("null or "):
        if value is None:
            return True
        expected = expected.removeprefix("null or ")
    number = type(value) in (int, float) and (type(value) is int or math.isfinite(value))
    if expected == "true or false":
        return type(value) is bool
    if m := re.fullmatch(r"an integer >= (-?\d+)", expected):
        return type(value) is int and value >= int(m[1])
    if m := re.fullmatch(r"a number (>=?) (\S+)", expected):
        low = float(m[2])
        return number and (value >= low if m[1] == ">=" else value > low)
    if m := re.fullmatch(r"a number in ([\[(])(\S+), (\S+)([\])])", expected):
        low, high = float(m[2]), float(m[3])
        return number and (low <= value if m[1] == "[" else low < value) and (
            value <= high if m[4] == "]" else value < high)
    if m := re.fullmatch(r"one of (.*)", expected):
        options = {o.upper() for o in m[1].split(" | ")}
        return type(value) is type(default) and str(value).upper() in options
    if expected == "a list of strings":
        return type(value) is list and all(type(t) is str for t in value)
    if expected.startswith("a list of 3 numbers"):
        return (type(value) is list and len(value) == 3 and sum(value) > 0
                and all(type(w) in (int, float) and 0 <= w < math.inf for w in value))
    return type(value) is str


def assert_satisfies_schema(config: dict) -> None:
    for name, rules in SCHEMA.items():
        assert config[name].keys() <= rules.keys(), name
        for key, value in config[name].items():
            assert satisfies(value, rules[key].expected, DEFAULTS[name][key]), (name, key, value)
    assert config["gat"]["hidden"] % config["gat"]["heads"] == 0
    assert not set(config) & set(RENAMED_SECTIONS)
    json.dumps(config)


KEYS = [f"{name}.{key}" for name, rules in SCHEMA.items() for key in rules]
#: YAML texts at the edges of the rules, by the type of a key's default: bools for ints, NaN,
#: infinities, zero sums, wrong lengths, near-miss choices.
EDGES = {
    int: ["true", "false", "0", "1", "-1", "2", "3", "12", "1.5", ".nan"],
    float: ["0", "1", "0.5", "1e-3", "-0.5", "1.0", "2", ".nan", ".inf", "-.inf", "true"],
    bool: ["true", "false", "0", "1", "yes", "null"],
    str: ["auto", "cpu", "cuda:0", "cuda", "gpu", "all", "spread", "min", "zero", "renormalise",
          "nt", "synth", "numpy", "WARN", "warn", "4g", "local[2]", "name", "''", "x", "1", "null"],
    list: ["[0.4, 0.3, 0.3]", "[0, 0, 0]", "[1, 2]", "[true, 1, 1]", "[.nan, 1, 1]", "[en, '']",
           "[1]", "[]", "en"],
    type(None): ["null", "train.txt", "''", "1", "true"],
}
ALL_EDGES = sorted({e for edges in EDGES.values() for e in edges})


def near(key: str):
    """A key's default, the edges of its type, or any edge, as YAML text."""
    name, _, leaf = key.partition(".")
    default = DEFAULTS[name][leaf]
    return (st.just(json.dumps(default)) | st.sampled_from(EDGES[type(default)])
            | st.sampled_from(ALL_EDGES)).map(lambda raw: f"{key}={raw}")


SCALARS = (st.none() | st.booleans() | st.integers(-5, 100) | st.integers()
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(ALL_EDGES).map(yaml.safe_load))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
NAMES = st.sampled_from([*SCHEMA, *RENAMED_SECTIONS]) | st.text(max_size=8)
#: Mostly schema keys with edge values (so that many configs pass and their values are
#: checked), some junk: unknown keys, unknown or renamed sections, any text.
PLAUSIBLE = st.sampled_from(KEYS).flatmap(near)
JUNK = st.builds(lambda key, raw: f"{key}={raw}",
                 st.builds(lambda n, k: f"{n}.{k}", NAMES, st.text(max_size=8))
                 | st.text(max_size=10), VALUES.map(lambda v: yaml.safe_dump(v).strip())
                 | st.text(max_size=20)) | st.text(max_size=20)
OVERRIDES = st.lists(st.one_of(PLAUSIBLE, PLAUSIBLE, PLAUSIBLE, JUNK), max_size=3)
SECTION = st.dictionaries(st.sampled_from(sorted({k for r in SCHEMA.values() for k in r})),
                          SCALARS, max_size=4)
FILES = st.none() | st.dictionaries(st.sampled_from(list(SCHEMA)), SECTION, max_size=3) \
    | st.dictionaries(NAMES, SECTION | VALUES, max_size=3)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(file=FILES, as_json=st.booleans(), overrides=OVERRIDES)
def test_fuzz_load_config_returns_a_valid_config_or_raises_config_error(file, as_json, overrides):
    with tempfile.TemporaryDirectory() as tmp:
        path = None
        if file is not None:
            path = Path(tmp, "c.json" if as_json else "c.yaml")
            path.write_text(json.dumps(file) if as_json else yaml.safe_dump(file))
        try:
            config = load_config(path, overrides)
        except ConfigError as exc:
            assert "\n" not in str(exc)
            return
    assert_satisfies_schema(config)


@pytest.mark.parametrize("override,near", [("ingst.format=nt", "ingest"),
                                           ("publsh.keep=1", "publish"), ("gat_.epochs=2", "gat")])
def test_a_section_name_one_typo_away_is_refused_with_the_known_one(override, near):
    with pytest.raises(ConfigError, match=rf"unknown config section '.*' \(did you mean '{near}'"):
        load_config(None, [override])
    assert load_config(None, ["my_team.owner=data"])["my_team"] == {"owner": "data"}
