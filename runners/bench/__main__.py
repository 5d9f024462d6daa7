"""`python -m runners.bench --out results/bench.json`."""

from runners.bench.suite import main

raise SystemExit(main())
