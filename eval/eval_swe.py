"""Runs `swe-eval` (swe_rl.eval.eval_swe); needs swe-rl installed."""

from swe_rl.eval.eval_swe import main

raise SystemExit(main())
