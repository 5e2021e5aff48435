"""Runs `swe-certify` (swe_rl.eval.certify); needs swe-rl installed."""

from swe_rl.eval.certify import main

raise SystemExit(main())
