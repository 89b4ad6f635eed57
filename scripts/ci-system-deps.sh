#!/usr/bin/env bash
# Called by .ci/run before the tests: system packages + a running single-node SLURM cluster
# (with accounting) so the @pytest.mark.slurm integration tests run for real.  Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "ci-system-deps: not root; skipping the local SLURM cluster (slurm tests will skip)" >&2
  exit 0
fi
# Debian's Chromium and its ChromeDriver: the browser test of report.html (tests/analysis/test_report.py)
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
if ! scripts/local-slurm.sh start; then
  # The rest of the suite must still run; the slurm tests skip with the reason.
  echo "ci-system-deps: local SLURM failed to start; slurm-marked tests will be skipped" >&2
fi
