"""Local fleet entry point kept at its old path; the code is `swe_rl.fleet.local` (needs the package installed)."""

from swe_rl.fleet.local import main

if __name__ == "__main__":
    main()
