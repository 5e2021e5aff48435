"""Runs `swe-compare-runs` (swe_rl.eval.compare_runs); needs swe-rl installed."""

from swe_rl.eval.compare_runs import main

raise SystemExit(main())
