"""The plugin's own Python: on session start, `hooks/run.sh` builds a venv in the plugin's
data folder (once, even when sessions start together), in a path with spaces, and the
hooks then run memsift from it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(sys.platform == "win32", reason="the launcher is bash")
def test_session_start_builds_the_venv_once_and_hooks_use_it(tmp_path, memsift_home):
    base = Path(sys.base_prefix) / "bin" / "python3"
    if not base.exists():
        pytest.skip(f"no base interpreter at {base}")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(base)  # a Python without memsift, as on a fresh machine
    data = tmp_path / "plugin data with spaces"
    project = tmp_path / "my project"
    project.mkdir()
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), "CLAUDE_PLUGIN_DATA": str(data),
           "MEMSIFT_HOME": str(memsift_home), "MEMSIFT_SETUP_PIP_ARGS": "--no-deps", "MEMSIFT_SERVER": "off"}
    payload = json.dumps({"session_id": "s1", "cwd": str(project), "transcript_path": "",
                          "hook_event_name": "SessionStart"}).encode()
    starts = [subprocess.Popen(["bash", str(REPO / "hooks" / "run.sh"), "session-start"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env=env) for _ in range(3)]
    for p in starts:
        out, _ = p.communicate(payload, timeout=30)
        assert p.returncode == 0 and out == b""
    deadline = time.time() + 240
    while time.time() < deadline and not (data / "venv-current").exists():
        time.sleep(0.5)
    log = (data / "setup.log").read_text()
    assert (data / "venv-current").exists(), log
    time.sleep(1)
    assert log.count("Z building ") == 1, log  # one build; the other sessions found it under way or done
    venv = Path((data / "venv-current").read_text().strip())
    assert (venv / ".memsift-ready").exists() and venv.parent == data

    prompt = json.dumps({"session_id": "s1", "cwd": str(project), "transcript_path": "", "prompt": "hello",
                         "hook_event_name": "UserPromptSubmit"}).encode()
    done = subprocess.run(["bash", str(REPO / "hooks" / "run.sh"), "user-prompt-submit"], input=prompt,
                          capture_output=True, env=env, timeout=60)
    assert done.returncode == 0
    assert "no memory yet" in (memsift_home / "logs" / "hook.log").read_text()  # memsift ran, from the venv
