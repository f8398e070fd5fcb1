import sys

if len(sys.argv) == 3 and sys.argv[1] == "hook":  # the hosts' hot path: no argparse, no CLI module
    if sys.argv[2] == "user-prompt-submit":  # the warm server answers, if one runs: standard library only
        from .client import serve_hook

        try:
            raw = sys.stdin.buffer.read()
        except (OSError, ValueError):
            raw = b""
        out, why = serve_hook(sys.argv[2], raw)
        if out is not None:
            try:
                sys.stdout.buffer.write(out)
                sys.stdout.buffer.flush()
            except OSError:
                pass
            sys.exit(0)
        from .hook import run

        sys.exit(run(sys.argv[2], stdin=raw, server=why))
    from .hook import run

    sys.exit(run(sys.argv[2]))

from .cli import main

sys.exit(main())
