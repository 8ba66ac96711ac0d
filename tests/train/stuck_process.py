"""A process of test_multihost.py's launcher test: process `argv[1]` exits with status
`argv[2]` at once; the others never finish, as processes left waiting in a collective: a
trainer there notes a SIGTERM but never gets back to its loop to act on it."""

import os
import signal
import sys
import time

if __name__ == "__main__":
    failing, status = map(int, sys.argv[1:])
    if int(os.environ["JAX_PROCESS_ID"]) == failing:
        sys.exit(status)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
