"""Fault family 8 (issue 33): one strict scalar grammar behind every value, in files and ``key=value`` alike.

YAML 1.1 (PyYAML's default) turned ``out=0123`` into 83, ``out=12:30`` into 750 and ``out=yes`` into True. Now only
YAML 1.2's core scalars change type (true/false, null/~, decimal integers and floats); a ``str`` setting gets the
text as written; typed settings parse strictly; a line break in an override is refused, never folded; a key given
twice in a YAML mapping is one line naming the key and both lines.
"""

from __future__ import annotations

import pytest
from test_faults import assert_one_error, cli, train_argv

from goldfish.config import load_config, load_yaml, parse_override, read_yaml, save_config
from goldfish.errors import ConfigError
from goldfish.train_config import TrainConfig


@pytest.mark.parametrize(
    "text",
    [
        "0123",
        "12:30",
        "yes",
        "no",
        "on",
        "off",
        "2024-01-01",
        "0x1F",
        "0o17",
        "1_000",
        "runs/x #1",
        "a: b",
        "&anchor x",
        "*alias",
        "!!str x",
        "~x",
        "+1x",
        ".5.5",
        "1e-3x",
        "Yes",
        "NULLx",
        "- item",
    ],
)
def test_a_str_setting_gets_the_text_as_typed(text):
    assert load_config(TrainConfig, None, [f"out={text}"]).out == text


@pytest.mark.parametrize(
    "text, value", [("'0123'", "0123"), ('"12:30"', "12:30"), ("'it''s'", "it's"), ('"tab\\there"', "tab\there")]
)
def test_a_quoted_value_is_the_text_inside_the_quotes(text, value):
    assert load_config(TrainConfig, None, [f"out={text}"]).out == value


@pytest.mark.parametrize(
    "text, value", [("1e-3", 1e-3), ("1.0e-3", 1e-3), (".5", 0.5), ("3", 3.0), ("+2.5", 2.5), ("1.", 1.0)]
)
def test_a_float_setting_reads_decimal_numbers(text, value):
    assert load_config(TrainConfig, None, [f"optim.lr={text}"]).optim.lr == value


@pytest.mark.parametrize("text", ["0x10", "0o17", "1_000", "12:30", "1e3x", "yes", "true", "'7'", "1.5", ".inf"])
def test_an_int_setting_parses_strictly(text):
    with pytest.raises(ConfigError, match=r"^seed="):
        load_config(TrainConfig, None, [f"seed={text}"])


def test_an_int_setting_takes_decimal_text_and_integral_floats():
    assert load_config(TrainConfig, None, ["seed=0123"]).seed == 123  # decimal, as YAML 1.2 reads it
    assert load_config(TrainConfig, None, ["schedule.max_steps=1e3"]).schedule.max_steps == 1000


@pytest.mark.parametrize("text", ["true", "True", "null", "~"])
def test_a_bool_or_null_for_a_str_setting_is_refused_not_stringified(text):
    with pytest.raises(ConfigError, match=r"out=.* not a string; quote it"):
        load_config(TrainConfig, None, [f"out={text}"])


@pytest.mark.parametrize("text", ["out=a\nb", "out=a\rb", "out=a\u2028b", "out=a\x85b", "optim\n.lr=0.1"])
def test_a_line_break_in_an_override_is_refused(text):
    with pytest.raises(ConfigError, match="line break"):
        parse_override(text)


def test_a_line_break_in_a_value_on_the_command_line_writes_nothing(data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_one_error(*cli([*train_argv(data, "ok"), "out=a\nb"], capsys), "line break")  # as the shell passes it
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "yaml_text, key, lines",
    [
        ("out: a\nseed: 1\nout: b\n", "out", "lines 1 and 3"),
        ("optim:\n  lr: 0.1\n  eps: 1.0e-8\n  lr: 0.2\n", "lr", "lines 2 and 4"),
        ("a: &x {k: 1}\nb:\n  <<: *x\n  k: 2\nb: 3\n", "b", "lines 2 and 5"),
    ],
)
def test_a_key_given_twice_is_one_error_naming_key_and_lines(tmp_path, yaml_text, key, lines):
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=rf"key '{key}' is given twice \({lines}\)"):
        read_yaml(path)


def test_a_merge_key_overridden_explicitly_is_not_a_duplicate():
    assert load_yaml("base: &b {k: 1, j: 2}\nthis:\n  <<: *b\n  k: 3\n", "t")["this"] == {"k": 3, "j": 2}


@pytest.mark.parametrize("text", ["[a, b", "{a: 1", "'unclosed", "[srun, --nodes={x}]"])
def test_a_malformed_list_mapping_or_quote_is_one_line(text):
    with pytest.raises(ConfigError, match="is not a valid YAML"):
        parse_override(f"tags={text}")


def test_values_keep_their_meaning_through_a_saved_config(tmp_path):
    """A run's config.yaml, read back, is the config it saved -- also for text that looks like a number."""
    cfg = load_config(TrainConfig, None, ["out=0123", "model.name=llama-demo", "data.path=1e-3", "optim.lr=1e-3"])
    save_config(cfg, tmp_path / "config.yaml")
    again = load_config(TrainConfig, tmp_path / "config.yaml")
    assert (again.out, again.data.path, again.optim.lr) == ("0123", "1e-3", 1e-3)
    assert again == cfg


def test_a_number_of_5000_digits_is_refused_before_it_is_converted():
    with pytest.raises(ConfigError, match="a number of 5,000 characters"):
        parse_override("seed=" + "9" * 5000)
    with pytest.raises(ConfigError, match="a number of 5,000 characters"):
        load_yaml("seed: " + "9" * 5000, "f")


def test_a_python_tag_in_a_config_file_constructs_nothing(tmp_path, data, capsys):
    pwned = tmp_path / "PWNED"
    config = tmp_path / "c.yaml"
    config.write_text(f"seed: !!python/object/apply:os.system ['touch {pwned}']\n")
    assert_one_error(*cli(["train", config, f"data.path={data}", f"out={tmp_path / 'run'}"], capsys), str(config))
    assert not pwned.exists() and not (tmp_path / "run").exists()


def test_an_integer_setting_does_not_take_a_boolean():
    from goldfish.config import from_dict
    from goldfish.masks import GoldfishConfig

    assert from_dict(GoldfishConfig, {"k": 4}).k == 4
    with pytest.raises(ConfigError):
        from_dict(GoldfishConfig, {"k": True})
