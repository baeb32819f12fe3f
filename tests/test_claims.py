"""The lecture figures' claims: the measured ratio is printed, found again, and a contradiction is flagged."""

import pytest

from mlsys_lib.viz.claims import claim, median_time, parse_claims


def test_claim_prints_the_ratio_and_whether_it_holds(capsys):
    assert claim("fused is faster", 3.0, at_least=2.0).holds
    assert not claim("tiled beats naive", 0.8).holds
    assert claim("exactly at the bar", 2.0, at_least=2.0).holds
    found = parse_claims("k = 1: unfused 3 ms\n" + capsys.readouterr().out)
    assert [holds for holds, _ in found] == [True, False, True]
    assert "fused is faster" in found[0][1] and "3x" in found[0][1]
    assert "0.8x" in found[1][1] and found[1][1].startswith("claim does not hold: tiled beats naive: measured 0.8x")


def test_a_percentage_claim_names_its_unit(capsys):
    assert not claim("matmul at its bound", 39.5, at_least=40, unit="% of bound").holds
    line = capsys.readouterr().out.strip()
    assert line == "claim does not hold: matmul at its bound: measured 39.5% of bound (the text needs >= 40% of bound)"
    assert parse_claims(line) == [(False, line)]


def test_median_time_warms_up_once_and_takes_the_median(monkeypatch):
    calls = []
    clock = iter([0.0, 1.0, 10.0, 10.5, 20.0, 29.0])  # three runs of 1 s, 0.5 s and 9 s
    monkeypatch.setattr("mlsys_lib.viz.claims.time.perf_counter", lambda: next(clock))
    assert median_time(lambda x: calls.append(x), 7, repeats=3) == 1.0
    assert calls == [7] * 4, "one warm-up call, then the timed ones"
    with pytest.raises(ValueError, match="repeats"):
        median_time(lambda: None, repeats=0)
