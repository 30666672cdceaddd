"""How long one run of the cluster model may be: the check a config gets as it is loaded, and a run's
settings given by hand (`repro cluster run --settings`) as the run starts."""

from repro.errors import ReproError

# What one run of the cluster model may cost: its policy windows and its log's lines (each a
# Python object while the run lasts: 10^5 take about 1 GB and write about 550 MB). The configured
# experiments need a few hundred per run.
MAX_RUN_WINDOWS = 100_000


def check_run_size(where, model, mode_name, mode, cluster):
    """ReproError naming `where` (the experiment's key) and the setting at fault where a run of
    `mode_name` takes more than MAX_RUN_WINDOWS policy windows or log lines."""
    steps = model["steps_per_epoch"] * mode["epochs"]
    for count, what in ((steps // cluster["decision_steps"], "policy windows (pecan.cluster.decision_steps)"),
                        (steps // mode["steps_per_loop"], f"log lines (pecan.modes.{mode_name}.steps_per_loop)")):
        if count > MAX_RUN_WINDOWS:
            raise ReproError(f"{where}.modes: mode {mode_name!r} runs {steps} steps, {count} {what}; "
                             f"expected at most {MAX_RUN_WINDOWS}")
