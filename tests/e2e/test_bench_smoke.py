"""`python -m bench --quick` runs end to end and its JSON has every item (issues 6 and 12).

The figures of a quick run mean nothing (tiny sizes, and CI machines are noisy), so only the
shape is checked: every item measured, or items 7 and 9 recorded as skipped when no PostgreSQL
URL is set, and no errors in the many-runs item. The bench starts its own child processes
(behest servers, the floor server); pytest runs tests one at a time, so nothing heavy runs
beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ITEMS = {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"}
POSTGRES = any(os.environ.get(k) for k in ("BEHEST_BENCH_POSTGRES_URL", "BEHEST_TEST_POSTGRES_URL"))


@pytest.mark.timeout(180)
def test_quick_bench_writes_every_item(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == os.EX_OK, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    report = json.loads(out.read_text())
    assert report["mode"] == "quick"
    found = report["items"]
    assert set(found) == ITEMS
    for key in ITEMS - {"7"}:
        assert "error" not in found[key], (key, found[key])
    floors = found["1"]
    for figure in ("one_stream_msgs_per_s", "streams_msgs_per_s", "unary_rtt_median_ms"):
        assert floors[figure] > 0
    assert found["2"]["events"] > found["2"]["deltas"]
    assert found["2"]["text_delta_events"] == found["2"]["deltas"]
    joined = found["2"]["joined"]
    assert "error" not in joined, joined
    assert joined["deltas_per_s"] > 0
    assert joined["text_delta_events"] < found["2"]["deltas"]
    assert found["3"]["errors"] == 0
    assert found["3"]["joined"]["errors"] == 0
    assert found["3"]["first_event_p99_ms"] > 0
    assert found["4"]["median_ms"] > 0
    assert found["10"]["worker"]["p50_ms"] > 0 and found["10"]["worker_calls_per_s"] > 0
    assert found["5"]["events_per_s"] > 0
    assert found["6"]["watchers"] > 0
    assert isinstance(found["6"]["growth_mb"], float)
    assert found["8"]["off_runs_per_s"] > 0 and found["8"]["on_runs_per_s"] > 0
    assert found["8"]["ratio"] > 0
    assert found["12"]["bytes_per_turn"] > 0 and 1.0 <= found["12"]["forks_ratio"] < 1.5
    if POSTGRES:
        assert "error" not in found["7"], found["7"]
        assert set(found["7"]["items"]) == {"2", "3", "4", "5"}
        for key, item in found["7"]["items"].items():
            assert item["store"] == "postgresql", key
            assert "error" not in item, (key, item)
        assert found["7"]["items"]["3"]["errors"] == 0
        assert "error" not in found["9"], found["9"]
        assert found["9"]["watch"]["errors"] == 0, found["9"]["watch"]
        assert found["9"]["failover"]["errors"] == 0, found["9"]["failover"]
    else:
        assert "skipped" in found["7"]
        assert "skipped" in found["9"]
    # Every measured item has its row in the table.
    assert {row["item"].split(".")[0] for row in report["table"]} == ITEMS
    assert "item  measure" in done.stdout
