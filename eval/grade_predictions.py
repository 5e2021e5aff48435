"""Runs `swe-grade` (swe_rl.eval.grade_predictions); needs swe-rl installed."""

from swe_rl.eval.grade_predictions import main

raise SystemExit(main())
