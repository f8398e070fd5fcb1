import sys

if len(sys.argv) == 3 and sys.argv[1] == "hook":  # the hosts' hot path: no argparse, no CLI module
    from .hook import run

    sys.exit(run(sys.argv[2]))

from .cli import main

sys.exit(main())
