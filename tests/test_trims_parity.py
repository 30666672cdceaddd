"""trims-tools where the original has a defined behaviour: `info config`'s key list, `--simulate_run`
(nothing runs), the hour's runs sharing one trace directory, and its own one-line usage errors."""

import socket
import time

import yaml

from repro.trims.originals import main as tools_main


def _config(tmp_path, models):
    config = tmp_path / "carml.yml"
    config.write_text(f"micro18:\n  base_path: {models}\n  profile_output_directory: {tmp_path / 'p'}\n"
                      "  client_run_cmd: ./mine\n")
    return config


def test_info_config_prints_the_originals_keys(models, tmp_path, capsys):
    assert tools_main(["info", "config", f"--config={_config(tmp_path, models)}"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert list(printed)[:3] == ["micro18.visible_devices", "micro18.build_timeout", "micro18.polling_interval"]
    assert printed["micro18.client_run_cmd"] == "./mine" and printed["micro18.base_path"] == str(models)
    assert printed["serverinfopath"].endswith(".micro18_server.json")


def test_simulate_run_runs_and_writes_nothing(models, tmp_path, capsys):
    assert tools_main(["client", "run", "--original", "-n", "3", "--simulate_run", f"--config={_config(tmp_path, models)}",
                       "--models=squeezenet_1.1"]) == 0
    assert "simulated: 3 request(s)" in capsys.readouterr().out
    assert not (tmp_path / "p").exists()


def test_runs_within_the_hour_share_its_directory(models, tmp_path, capsys):
    config = _config(tmp_path, models)
    for _ in range(2):
        assert tools_main(["client", "run", "--original", "-n", "1", f"--config={config}", "--models=squeezenet_1.1"]) == 0
    host = tmp_path / "p" / socket.gethostname()
    hours = sorted(p.name for p in host.iterdir())
    assert len(hours) == 1 or hours[1] == time.strftime("%Y-%m-%d-%H")  # two only across an hour's turn
    assert len(list((host / hours[-1]).glob("squeezenet_1.1_*.json"))) >= 1
    assert not any(name.endswith("-2") for name in hours)
    capsys.readouterr()


def test_usage_errors_are_one_trims_tools_line(models, tmp_path, capsys):
    assert tools_main(["client", "run", "--original", "--distribution=foo", f"--config={_config(tmp_path, models)}"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note: ")]
    assert len(err) == 1 and err[0].startswith("trims-tools: error: --distribution") and "usage:" not in err[0], err
