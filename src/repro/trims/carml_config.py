"""The original TRIMS tools' config file (`~/.carml_config.yml`, section `micro18`), as data.

Source: rai-project/trims-tools, pkg/config/config.go (keys and defaults), README.md (the default
`micro18` section), and rai-project/config (where the file is searched for). Keys that configure
the original's MXNet fork (its source checkout, build and run commands) have no meaning here:
they load, and are reported once as unused.
"""

import os
from pathlib import Path

# key -> why it has no effect here
UNUSED_KEYS = {
    "src_path": "the checkout of the original's MXNet fork; models run on onnxruntime here",
    "server_relative_path": "a path inside the MXNet fork",
    "server_build_cmd": "builds the MXNet fork's server",
    "server_run_cmd": "the MXNet fork's server binary; the store here is `repro trims server run`",
    "client_relative_path": "a path inside the MXNet fork",
    "client_build_cmd": "builds the MXNet fork's client",
    "client_run_cmd": "the MXNet fork's client binary; the client here runs in-process",
    "build_timeout": "build commands are not part of this project",
    "polling_interval": "file watching (build on change) is not part of this project",
    "visible_devices": "the original overrides it with --visible_devices on every run",
}

# Keys whose values are paths or URLs: `~` and `$NAME` are expanded (the original leaves `$HOME` literal).
EXPANDED_KEYS = ("base_path", "profile_output_directory", "server_socket", "base_bucket_url", "server_info_path")


def original_defaults():
    """The original's defaults for the keys that take effect here (pkg/config/config.go)."""
    home = Path.home()
    return {
        "base_path": os.environ.get("UPR_BASE_DIR") or str(home / "carml" / "data" / "mxnet"),
        "profile_output_directory": str(home / "micro18_profiles"),
        "base_bucket_url": "http://s3.amazonaws.com/micro18profiles",
        "upload_bucket_name": "traces",
        "server_info_path": str(home / ".micro18_server.json"),
    }


def find_config(explicit=None):
    """The config file the original would read: --config (if it exists), $CARML_CONFIG_FILE,
    ./.carml_config.yml, ~/.carml_config.yml, ../.carml_config.yml; None if there is none."""
    candidates = [explicit and os.path.expanduser(explicit), os.environ.get("CARML_CONFIG_FILE"),
                  ".carml_config.yml", Path.home() / ".carml_config.yml", "../.carml_config.yml"]
    return next((str(Path(c).resolve()) for c in candidates if c and Path(c).is_file()), None)
