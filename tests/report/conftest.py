"""Stored runs shared by the report tests (built once per session, no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report.runs import make_records, store_run


@pytest.fixture(scope="session")
def big_run(tmp_path_factory) -> Path:
    """A stored run of 5,000 items, each with token statistics and two samples."""
    return store_run(tmp_path_factory.mktemp("big") / "run", make_records(5000, n_samples=2))
