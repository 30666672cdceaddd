"""The Snakefile's config check reuses a validated config only while nothing validation reads changes."""

import copy
import json
from pathlib import Path

import pytest
import yaml

from repro import checkedconfig, config as config_module
from repro.checkedconfig import checked_config
from repro.config import validate_config
from repro.errors import ReproError

REPO = Path(__file__).resolve().parents[1]
RAW = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def raw():
    return copy.deepcopy(RAW)


def refuse_validation(monkeypatch):
    def validate(config, source="config"):
        raise AssertionError("validated again")

    monkeypatch.setattr(config_module, "validate_config", validate)


def test_the_first_check_validates_and_the_next_reuses_the_same_result(tmp_path, monkeypatch):
    first = checked_config(raw(), "config", tmp_path)
    assert json.dumps(first) == json.dumps(validate_config(raw()))
    assert len(list(tmp_path.glob("config-*.json"))) == 1
    refuse_validation(monkeypatch)
    again = raw()
    assert checked_config(again, "config", tmp_path) is again
    assert json.dumps(again) == json.dumps(first)  # the key order too: the rules' params compare it


def test_a_changed_config_is_validated_afresh_and_an_invalid_one_refused(tmp_path):
    checked_config(raw(), "config", tmp_path)
    bad = raw()
    bad["pecan"]["prices"]["worker"] = -0.1
    with pytest.raises(ReproError, match="pecan.prices.worker"):
        checked_config(bad, "config", tmp_path)
    changed = raw()
    changed["seed"] = 7
    assert checked_config(changed, "config", tmp_path)["seed"] == 7
    assert len(list(tmp_path.glob("config-*.json"))) == 1  # the older result is dropped


def test_an_environment_variable_a_path_names_is_part_of_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_TEST_STORE", str(tmp_path / "a"))
    with_var = raw()
    with_var["trace_store"] = "$REPRO_TEST_STORE/traces"
    assert checked_config(copy.deepcopy(with_var), "config", tmp_path)["trace_store"] == f"{tmp_path}/a/traces"
    monkeypatch.setenv("REPRO_TEST_STORE", str(tmp_path / "b"))
    assert checked_config(copy.deepcopy(with_var), "config", tmp_path)["trace_store"] == f"{tmp_path}/b/traces"
    monkeypatch.delenv("REPRO_TEST_STORE")
    with pytest.raises(ReproError, match=r"trace_store: environment variable \$REPRO_TEST_STORE is not set"):
        checked_config(copy.deepcopy(with_var), "config", tmp_path)


def test_a_changed_package_file_is_validated_afresh(tmp_path, monkeypatch):
    package = tmp_path / "package"
    package.mkdir()
    (package / "schema.yaml").write_text("a")
    monkeypatch.setattr(checkedconfig, "_PACKAGE", package)
    checked_config(raw(), "config", tmp_path / "kept")
    (package / "schema.yaml").write_text("ab")
    refuse_validation(monkeypatch)
    with pytest.raises(AssertionError, match="validated again"):
        checked_config(raw(), "config", tmp_path / "kept")


def test_the_extras_a_reused_config_needs_are_checked_at_every_start(tmp_path, monkeypatch):
    in_gcs = raw()
    in_gcs["trace_store"] = "gs://bucket/traces"
    real_find_spec = config_module.importlib.util.find_spec
    monkeypatch.setattr(config_module.importlib.util, "find_spec",
                        lambda name, package=None: object() if name == "google.cloud.storage" else real_find_spec(name, package))
    checked_config(copy.deepcopy(in_gcs), "config", tmp_path)
    monkeypatch.setattr(config_module.importlib.util, "find_spec",
                        lambda name, package=None: None if name == "google.cloud.storage" else real_find_spec(name, package))
    refuse_validation(monkeypatch)
    with pytest.raises(ReproError, match=r"config: trace_store: needs the 'gcs' extra"):
        checked_config(copy.deepcopy(in_gcs), "config", tmp_path)


def test_a_damaged_or_unwritable_keep_only_means_validating_again(tmp_path):
    checked_config(raw(), "config", tmp_path)
    (kept,) = tmp_path.glob("config-*.json")
    for damaged in ("{not json", '{"config": [], "extras": []}', '{"config": {}}'):
        kept.write_text(damaged)
        assert checked_config(raw(), "config", tmp_path) == validate_config(raw())
    (tmp_path / "a-file").write_text("")
    assert checked_config(raw(), "config", tmp_path / "a-file" / "kept") == validate_config(raw())


def test_a_config_error_names_the_files_in_the_order_they_were_merged():
    """As Snakemake lists them the command line's --configfile comes first and the Snakefile's own
    last; the error names the Snakefile's, then each --configfile, then --config where it set
    anything: a typo in `--configfile mine.yaml` was named "config: (top level): ..."."""
    from repro.checkedconfig import config_source

    files = [Path("/home/u/mine.yaml"), "other.yaml", "config/config.yaml"]
    assert config_source(files, [Path("/home/u/mine.yaml"), "other.yaml"], {"repeats": 0}) == (
        "config/config.yaml + /home/u/mine.yaml + other.yaml + --config")
    assert config_source(["config/config.yaml"], [], {}) == "config/config.yaml"
    assert config_source([Path("config/config.yaml").absolute(), "config/config.yaml"],
                         [Path("config/config.yaml").absolute()], {}) == str(Path("config/config.yaml").absolute())
    assert config_source([], [], None) == "config"


def test_config_files_merge_over_the_base_as_snakemake_merges_them(tmp_path):
    from snakemake.utils import update_config

    from repro.config import check_config_files, merge_over

    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text("seed: 9\npecan:\n  experiments:\n    Getting_started:\n      modes: [short]\n")
    second.write_text("repeats: 3\npecan:\n  prices: {}\n")
    expected = raw()
    for path in (first, second):
        update_config(expected, yaml.safe_load(path.read_text()))
    merged = raw()
    for path in (first, second):
        merged = merge_over(merged, yaml.safe_load(path.read_text()))
    assert merged == expected
    assert merged["pecan"]["experiments"]["Getting_started"]["modes"] == ["short"]  # a list is replaced
    assert merged["pecan"]["experiments"]["Getting_started"]["model"] == RAW["pecan"]["experiments"]["Getting_started"]["model"]
    checked = check_config_files([first, second], REPO / "config" / "config.yaml")
    assert checked == validate_config(copy.deepcopy(expected))
    assert merge_over(RAW, {}) == RAW and merged is not RAW


def test_a_commands_config_flag_reads_an_overlay_as_the_workflow_does(tmp_path, monkeypatch, capsys):
    """`--config config/examples/tfdata.yaml` (an overlay, as the README passes it to --configfile) was
    refused by the commands, which wanted a whole config: "'trims' is a required property"."""
    from repro.cli import main
    from repro.config import check_config_files, load_config

    overlay = Path("config") / "examples" / "tfdata.yaml"
    monkeypatch.chdir(REPO)
    assert load_config(overlay) == check_config_files([overlay]) and load_config(overlay)["pecan"]["engine"] == "tfdata"
    assert load_config("config/config.yaml") == load_config(REPO / "config" / "config.yaml") == validate_config(raw())
    whole = raw()  # a whole config is read as it is: what it leaves out of a section is not taken from the base
    whole["pecan"]["experiments"] = {"Getting_started": whole["pecan"]["experiments"]["Getting_started"]}
    whole["plots"]["figures"] = {"Getting_started": whole["plots"]["figures"]["Getting_started"]}
    whole["plots"]["comparisons"] = {}
    whole["reproducibility"]["figures"] = ["Getting_started"]
    (tmp_path / "whole.yaml").write_text(yaml.safe_dump(whole))
    assert list(load_config(tmp_path / "whole.yaml")["pecan"]["experiments"]) == ["Getting_started"]
    with pytest.raises(ReproError, match="'trims' is a required property; as an overlay it would be merged over "
                                         ".*none.yaml, which is not a file here"):  # no base here: the file alone
        load_config(overlay, base=tmp_path / "none.yaml")
    both = tmp_path / "both.yaml"  # an overlay of both required sections: still not whole
    both.write_text("pecan: {engine: tfdata}\ntrims: {seed: 5}\n")
    assert load_config(both)["pecan"]["engine"] == "tfdata" and load_config(both)["trims"]["seed"] == 5
    # read, the sweep's own check comes next
    assert main(["pecan", "tfdata", "sweep", "--config", str(overlay), "--experiment", "ResNet50_v2-8", "--counts", "99999",
                 "--out", str(tmp_path / "sweep")]) == 1
    assert capsys.readouterr().err.startswith("repro: error: --counts: 99999 remote worker(s)")


def test_a_link_made_since_the_check_validates_afresh(tmp_path, monkeypatch):
    """The checks resolve paths (a trace store that leads to results/ is refused): a link made at the
    store's path after its config was checked and kept must not pass on the kept result."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    linked = raw()
    linked["trace_store"] = "store"
    checked_config(copy.deepcopy(linked), "config", tmp_path / "keep")
    (tmp_path / "store").symlink_to("results")
    with pytest.raises(ReproError, match="trace_store: 'store' keeps the store's traces in results/traces"):
        checked_config(copy.deepcopy(linked), "config", tmp_path / "keep")


def _damage_pecan(kept):
    del kept["config"]["pecan"]


def _damage_extras(kept):
    kept["extras"] = [1]


def _damage_repeats(kept):
    kept["config"]["repeats"] = -5


def _damage_plots(kept):
    kept["config"]["plots"] = None


@pytest.mark.parametrize("damage", [_damage_pecan, _damage_extras, _damage_repeats, _damage_plots],
                         ids=["pecan-removed", "extras-not-triples", "repeats-of-minus-5", "plots-null"])
def test_a_kept_config_damaged_since_is_validated_afresh(tmp_path, damage):
    """A kept config edited since (valid JSON, a key removed or a value no check would pass) was used
    as it was: a KeyError or TypeError traceback from the rules, or repeats: -5 reaching them."""
    first = checked_config(raw(), "config", tmp_path)
    (path,) = tmp_path.glob("config-*.json")
    kept = json.loads(path.read_text())
    damage(kept)
    path.write_text(json.dumps(kept))
    assert json.dumps(checked_config(raw(), "config", tmp_path)) == json.dumps(first)
    assert json.loads(path.read_text())["config"] == first  # kept again, as validated


def test_a_kept_config_of_another_key_is_not_reused(tmp_path):
    checked_config(raw(), "config", tmp_path)
    (other,) = tmp_path.glob("config-*.json")
    changed = raw()
    changed["seed"] = 7
    first = checked_config(copy.deepcopy(changed), "config", tmp_path)
    (path,) = tmp_path.glob("config-*.json")
    path.write_text(other.read_text() if other.exists() else json.dumps(
        {**json.loads(path.read_text()), "config": validate_config(raw())}))
    assert checked_config(copy.deepcopy(changed), "config", tmp_path)["seed"] == 7 == first["seed"]
