"""Fading: captured context and incident notes lose weight with age; the rest never fade."""

from __future__ import annotations

import datetime as dt

import pytest

from memsift.config import Settings
from memsift.fading import weight
from memsift.notes import Note, NoteStore
from memsift.recall import Recaller

TODAY = dt.date(2026, 12, 2)


def days_ago(n: int) -> str:
    return (TODAY - dt.timedelta(days=n)).isoformat()


def test_weight_halves_each_half_life_for_captured_context_and_incidents_only():
    old = days_ago(180)
    assert weight(Note("N1", old, "context", "x", session="s1"), TODAY, 180) == pytest.approx(0.5)
    assert weight(Note("N1", days_ago(360), "incident", "x", session="s1"), TODAY, 180) == pytest.approx(0.25)
    for kind in ("decision", "constraint", "convention"):
        assert weight(Note("N1", days_ago(3000), kind, "x", session="s1"), TODAY, 180) == 1.0
    assert weight(Note("N1", days_ago(3000), "context", "x"), TODAY, 180) == 1.0  # written by hand
    assert weight(Note("N1", (TODAY + dt.timedelta(days=5)).isoformat(), "context", "x", session="s"), TODAY, 180) == 1.0


@pytest.fixture
def store(tmp_path, encoder):
    store = NoteStore(tmp_path / "notes", "shop", encoder=encoder)
    store.add([
        Note("N1", days_ago(400), "context", "Staging database runs PostgreSQL 14 on a shared host.", session="s1"),
        Note("N2", days_ago(400), "decision", "Staging database: PostgreSQL chosen over MySQL for JSONB.", session="s1"),
        Note("N3", days_ago(400), "context", "Staging database backups run nightly at 02:00 UTC."),
        Note("N4", days_ago(30), "incident", "Staging database ran out of disk; raised the volume to 50 GB.",
             session="s2"),
    ], link_supersession=False)
    return store


def test_a_faded_note_is_not_pasted_but_stays_in_the_file(store, encoder, scripted):
    model = scripted(answers={"N1": 0.95})
    result = Recaller(model, encoder, store, None, today=TODAY).recall("which postgres version does staging run?")
    assert result.items == []
    assert {"id": "N1", "weight": pytest.approx(0.214, abs=1e-3)} in next(
        s for s in result.trace if s["step"] == "faded")["notes"]
    assert "N1" in {n.id for n in store.notes()}
    # the same note a year earlier is pasted
    young = Recaller(model, encoder, store, None, today=TODAY - dt.timedelta(days=365))
    assert [i.id for i in young.recall("which postgres version does staging run?").items] == ["N1"]


def test_decisions_and_hand_written_notes_never_fade(store, encoder, scripted):
    for nid in ("N2", "N3"):
        model = scripted(answers={nid: 0.9})
        result = Recaller(model, encoder, store, None, today=TODAY).recall("what about the staging database?")
        assert [i.id for i in result.items] == [nid]


def test_weight_orders_the_notes_that_pass(store, encoder, scripted):
    # N1 (400 days) answers a little better than N4 (30 days) but weighs far less
    settings = Settings(fade_floor=0.1)
    model = scripted(answers={"N1": 0.9, "N4": 0.8})
    result = Recaller(model, encoder, store, None, settings, today=TODAY).recall("staging database trouble?")
    assert [i.id for i in result.items] == ["N4"]


def test_the_half_life_and_floor_are_settings_of_the_user(tmp_path):
    from memsift.config import Settings, environment

    assert Settings.from_env({}) == Settings()
    assert Settings.from_env({"MEMSIFT_FADE_HALF_LIFE_DAYS": "30", "MEMSIFT_FADE_FLOOR": "0.5"}).fade_half_life_days == 30
    bad = Settings.from_env({"MEMSIFT_FADE_HALF_LIFE_DAYS": "soon", "MEMSIFT_FADE_FLOOR": "2"})
    assert (bad.fade_half_life_days, bad.fade_floor) == (Settings().fade_half_life_days, Settings().fade_floor)
    (tmp_path / "config.toml").write_text("[fade]\nhalf_life_days = 90\n")
    assert Settings.from_env(environment({"MEMSIFT_HOME": str(tmp_path)})).fade_half_life_days == 90
