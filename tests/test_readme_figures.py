"""docs/FIGURES.md's commands, run as tests/test_readme.py runs the README's, from a module of their own so
that pytest-xdist (a module per worker) runs them beside the README's."""

import pytest
import test_readme

fresh_copy = test_readme.fresh_copy  # the fixture: the repository as a user clones it


@pytest.mark.workflow
def test_the_figures_documents_commands_run_as_written(fresh_copy):
    test_readme.run_documents(fresh_copy, ("docs/FIGURES.md",))
