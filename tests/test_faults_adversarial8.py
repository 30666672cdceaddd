"""Fault injection: hostile inputs, state files and environments given to repro's and trims-tools'
commands, each found by trying them as a careless or hostile user would.

Each ends in one line naming the file, key or flag and what was expected, a non-zero exit, nothing
outside the command's own files written to or deleted, and no unbounded read, wait or process signalled.
"""

import importlib.util
import json

import pytest
from support import run_forked


pytestmark = pytest.mark.fault


@pytest.mark.skipif(importlib.util.find_spec("google.cloud.storage") is None, reason="needs google-cloud-storage")
@pytest.mark.parametrize("content, said", [
    ([], "expected a JSON object (a service account or user credentials JSON file), got an array"),
    (None, "expected a JSON object (a service account or user credentials JSON file), got null"),
    ({"type": "impersonated_service_account", "source_credentials": [],
      "service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/x:generateAccessToken"},
     "not a credentials file Google's libraries can load (AttributeError: 'list' object has no attribute 'get')"),
    ({"type": "external_account", "audience": "a", "token_url": "https://sts.googleapis.com/v1/token",
      "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "credential_source": "file"},
     "not a credentials file Google's libraries can load (AttributeError: 'str' object has no attribute 'get')"),
])
def test_credential_files_of_another_shape_are_named(content, said, tmp_path):
    """GOOGLE_APPLICATION_CREDENTIALS naming a JSON array, null, or an impersonated or external account
    whose source_credentials or credential_source is not an object: `repro doctor --profile P` and
    `repro trace download` (a gs:// store) ended in an AttributeError traceback from google-auth."""
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text("default-storage-provider: gcs\n")
    (tmp_path / "upload.json").write_text('{"store": "gs://bucket/x", "objects": [{"key": "a/t.json", "sha256": "0"}]}')
    (tmp_path / "key.json").write_text(json.dumps(content))
    env = {"GOOGLE_APPLICATION_CREDENTIALS": "key.json", "STORAGE_EMULATOR_HOST": ""}
    code, out, err = run_forked(["doctor", "--profile", "profile"], tmp_path, timeout=60, env=env)
    assert (code, out, err) == (1, "", f"repro: error: profile/config.yaml: GOOGLE_APPLICATION_CREDENTIALS key.json: "
                                       f"{said}\n")
    code, out, err = run_forked(["trace", "download", "upload.json", "-o", "traces"], tmp_path, timeout=60, env=env)
    assert (code, out, err) == (1, "", f"repro: error: GOOGLE_APPLICATION_CREDENTIALS key.json: {said}\n")
    assert not (tmp_path / "traces").exists()
