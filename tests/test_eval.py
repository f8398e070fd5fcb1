"""`memsift eval`: the replay file's format (eval/FORMAT.md) and the printed table."""

from __future__ import annotations

import json
from pathlib import Path

from memsift.eval.replay import Figures, load_conversation, score

from .conftest import run_memsift

TINY = Path(__file__).parent / "data" / "tiny-en.json"


def test_eval_prints_both_pipelines_and_writes_the_replay(tmp_path):
    replay = tmp_path / "replay.jsonl"
    report = tmp_path / "report.html"
    done = run_memsift("eval", str(TINY), "--replay", str(replay), "--report", str(report), timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "tiny-en memsift" in out and "TOTAL memsift" in out and "TOTAL origin" in out
    lines = [json.loads(x) for x in replay.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 12  # 6 turns x 2 pipelines
    for line in lines:
        assert {"conversation", "n", "genre", "injected", "chars", "ms"} <= set(line)
        assert line["conversation"] == "tiny-en"
        assert all(set(i) == {"id", "chars"} for i in line["injected"])
        assert line["chars"] >= sum(i["chars"] for i in line["injected"])
        assert (line["chars"] == 0) == (line["injected"] == [])
    origin = [x for x in lines if x["pipeline"] == "origin"]
    assert all(x["genre"] is None and len(x["injected"]) == 5 for x in origin)
    memsift = [x for x in lines if x["pipeline"] == "memsift"]
    assert all(x["genre"] is not None for x in memsift)
    page = report.read_text(encoding="utf-8")
    assert page.count("<svg") == 4 and "tiny-en" in page and "Recall turns found" in page


def test_score_counts_as_format_md_says():
    conv = load_conversation(TINY)
    lines = [{"genre": t.genre, "injected": [], "chars": 0, "ms": 1.0} for t in conv.turns]
    lines[0] = {"genre": "past_choice", "injected": [{"id": "N01", "chars": 10}], "chars": 40, "ms": 1.0}
    lines[1] = {"genre": "past_choice", "injected": [{"id": "N02", "chars": 10}], "chars": 40, "ms": 1.0}
    lines[3] = {"genre": "past_choice", "injected": [{"id": "N03", "chars": 10}], "chars": 40, "ms": 1.0}
    f = score(conv, lines, "x")
    assert (f.pasted, f.chars, f.found, f.recall_turns, f.wrong, f.pasted_for_nothing, f.quiet) == (3, 120, 1, 3, 1, 1, 3)
    assert (f.genre_right, f.genre_known) == (5, 6)
    total = Figures("t")
    total.add(f)
    assert "found  1/3" in total.row()


def test_bad_conversation_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "memsift-conversation/1", "id": "x"}), encoding="utf-8")
    done = run_memsift("eval", str(bad))
    assert done.returncode == 1
    assert "bad.json" in done.stderr.decode() and "language" in done.stderr.decode()
