"""Runs `swe-build-pivots` (swe_rl.data.build_pivot_dataset); needs swe-rl installed."""

from swe_rl.data.build_pivot_dataset import main

raise SystemExit(main())
