"""Runs `swe-eval-report` (swe_rl.eval.report); needs swe-rl installed."""

from swe_rl.eval.report import main

raise SystemExit(main())
