#!/usr/bin/env bash
# Called by .ci/run before the tests: system packages + a running single-node SLURM cluster
# (with accounting) so the @pytest.mark.slurm integration tests run for real.  Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "ci-system-deps: not root; skipping the local SLURM cluster (slurm tests will skip)" >&2
  exit 0
fi
if ! scripts/local-slurm.sh start; then
  # The rest of the suite must still run; the slurm tests skip with the reason.
  echo "ci-system-deps: local SLURM failed to start; slurm-marked tests will be skipped" >&2
fi
