"""Runs `swe-clean-image-history` (swe_rl.data.clean_image_history); needs swe-rl installed."""

from swe_rl.data.clean_image_history import main

raise SystemExit(main())
