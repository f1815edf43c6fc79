"""`python -m mobius ARGS` (and the `mobius` command pip installs): the mobius CLI that ships
inside this package, with the same arguments."""

import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "mobius")
    if not os.access(exe, os.X_OK):
        sys.exit(f"mobius: the command-line program is missing from the package ({exe})")
    os.execv(exe, ["mobius"] + sys.argv[1:])


if __name__ == "__main__":
    main()
