"""Reading the previous turns and memsift's own pastes from a Claude Code transcript."""

from __future__ import annotations

import json

from memsift.transcript import Turn, read_transcript


def test_reads_turns_and_pasted_ids(tmp_path):
    path = tmp_path / "s.jsonl"
    lines = [
        {"type": "user", "message": {"role": "user", "content": "which payment provider?"}},
        {"type": "attachment", "attachment": {"type": "hook_additional_context",
                                              "content": ["memsift recall: ...\n[memsift note N07 · 2026-08-14 · decision] Adyen"]}},
        {"type": "assistant", "message": {"id": "m1", "content": [{"type": "thinking", "thinking": "hmm"},
                                                                  {"type": "text", "text": "Adyen."}]}},
        {"type": "assistant", "message": {"id": "m1", "content": [{"type": "tool_use", "name": "Bash"}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": "ok"}]}},
        {"type": "user", "isMeta": True, "message": {"content": "<command-name>/clear</command-name>"}},
        {"type": "user", "message": {"content": [{"type": "text", "text": "thanks <system-reminder>x</system-reminder>"}]}},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n{partial", encoding="utf-8")
    turns, pasted = read_transcript(path, max_turns=10)
    assert turns == [Turn("which payment provider?", "Adyen."), Turn("thanks")]
    assert pasted == {"N07"}


def test_missing_transcript_is_no_context(tmp_path):
    assert read_transcript(tmp_path / "nope.jsonl", 5) == ([], set())
    assert read_transcript("", 5) == ([], set())
