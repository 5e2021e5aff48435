"""Pool server entry point kept at its old path; the code is `swe_rl.fleet.pool` (needs the package installed)."""

from swe_rl.fleet.pool.app import main

if __name__ == "__main__":
    main()
