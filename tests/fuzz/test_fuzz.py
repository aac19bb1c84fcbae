"""The bad-input fuzzer (tests/fuzz/driver.py, docs/fuzz.md): its fixed-seed
subset must leave no case of a failing class (neuron returns a value CPU
refuses, values differ, crash) outside the documented table of accepted
differences; and the driver must survive a worker that crashes.
"""

import os

from . import driver
from .cases import BAD_CLASSES, CLASSES


def test_accepted_differences_are_documented():
    rows = driver.accepted_table()
    for op_pat, kind_pat, cls, reason in rows:
        assert cls in BAD_CLASSES, f"{op_pat} {kind_pat}: class {cls!r} needs no acceptance"
        assert len(reason) > 20, f"{op_pat} {kind_pat}: give the reason"


def test_fuzz_subset_has_no_unaccepted_difference():
    units = driver.plan(True, None, driver.SUBSET_DTYPES, 1)
    assert len(units) > 150
    results = driver.run_units(units, os.cpu_count() or 2, driver.worker_env(protect=False))
    counts, _, failing, _ = driver.summarize(results, driver.accepted_table())
    assert sum(counts.values()) > 2000, counts
    assert set(counts) <= {*CLASSES, "no_cases"}
    assert not failing, "\n".join(
        f"{r['cls']} {r['id']}: {r.get('detail', '')}" for r in failing[:60]
    )


def test_driver_survives_a_crashing_case():
    units = driver.plan(False, ["abs"], ["float32"], 1)
    env = driver.worker_env(protect=False)
    env["OPENNEURON_FUZZ_CRASH_AT"] = "abs.default-float32#2:*"
    results = driver.run_units(units, 1, env)
    by_id = {r["id"]: r for r in results}
    crashed = [r for r in results if r["cls"] == "crash"]
    assert len(crashed) == 1 and crashed[0]["id"].startswith("abs.default-float32#2:")
    assert "signal" in crashed[0]["detail"]
    # the unit resumed after the crash in a fresh worker
    assert any(i.startswith("abs.default-float32#3:") for i in by_id)
