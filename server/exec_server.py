"""Exec server entry point kept at its old path; the code is `swe_rl.fleet.exec` (needs the package installed)."""

from swe_rl.fleet.exec.app import main

if __name__ == "__main__":
    main()
