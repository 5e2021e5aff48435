"""Runs `swe-preprocess` (swe_rl.data.preprocess_swe_dataset); needs swe-rl installed."""

from swe_rl.data.preprocess_swe_dataset import main

raise SystemExit(main())
