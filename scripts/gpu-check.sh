#!/usr/bin/env bash
# One GPU check (issue 26.8): every CUDA path of the toolkit on one GPU, in under 9 minutes on
# an H100, all written to one log file.
#   1. pytest -m cuda tests/cuda: FlexAttention vs the SDPA mask (forward, backward), a compiled
#      bf16 training step per family (hf: families included), DDP and FSDP2 over NCCL on one GPU
#      (world size 1, started through torch.distributed.run), trainer resume on CUDA;
#   2. benchmarks/bench_gpu.py --quick (85M: tokens/s, MFU, peak memory vs a nanoGPT-style step);
#   3. a ~100M (85M preset) AR and CDLM training run through the trainer: tokens/s, MFU, peak memory;
#   4. benchmarks/bench_checkpoint.py over NCCL (one rank per GPU, DCP's own gloo group for the
#      asynchronous writes): full gather vs DCP sync vs DCP async saves of a ~200M FSDP2 model.
# Each stage has its own time limit (GPU_CHECK_TESTS_S, GPU_CHECK_BENCH_S, GPU_CHECK_RUN_S); a
# stage past it is logged as TIMEOUT and the script goes on. Without a GPU it still runs: the
# `cuda` tests skip (their count is printed), the benchmark and the runs take their CPU smoke paths.
# Usage: scripts/gpu-check.sh [LOG]    (default: gpu-check-<UTC time>.log in the working directory)
# Nobody has run this on a GPU yet: when one is available, run it first and put the figures in
# benchmarks/README.md.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${1:-gpu-check-$(date -u +%Y%m%dT%H%M%SZ).log}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
TESTS_S=${GPU_CHECK_TESTS_S:-270}
BENCH_S=${GPU_CHECK_BENCH_S:-90}
RUN_S=${GPU_CHECK_RUN_S:-150}
CKPT_S=${GPU_CHECK_CKPT_S:-120}
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# a private Inductor cache: a stage stopped at its time limit mid-compile can leave a truncated
# kernel behind, which would break every later compile of that graph sharing the cache
INDUCTOR_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-inductor.XXXXXX")
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$INDUCTOR_DIR}
trap 'rm -rf "$INDUCTOR_DIR"' EXIT
exec > >(tee -a "$LOG") 2>&1
START=$(date +%s)
FAILED=()

stage() {  # stage NAME LIMIT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  echo
  echo "== $name (limit ${limit}s) $(date -u +%H:%M:%S)"
  local t0=$(date +%s)
  timeout --signal=INT --kill-after=20 "$limit" "$@"
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "== $name: TIMEOUT after ${limit}s"; FAILED+=("$name (timeout)")
  elif [ $rc -ne 0 ]; then
    echo "== $name: FAILED (exit $rc)"; FAILED+=("$name (exit $rc)")
  fi
  echo "== $name: $(( $(date +%s) - t0 ))s"
}

echo "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), log $LOG, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" - <<'PY'
import torch
print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}"
      + (f", {torch.cuda.get_device_name()} (CUDA {torch.version.cuda})" if torch.cuda.is_available() else
         " -- no GPU: the cuda tests skip, the benchmark and the runs take their CPU smoke paths"))
try:
    import transformers
    print(f"transformers {transformers.__version__}")
except ImportError:
    print("transformers not installed: the hf: tests skip (pip install 'interpscale[hf]')")
PY

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  BENCH_S=${GPU_CHECK_BENCH_S:-600}  # the CPU smoke path compiles on a (possibly busy) CPU: no GPU budget to keep
fi
stage "cuda tests" "$TESTS_S" "$PY" -m pytest tests/cuda -m cuda -q -rs -p no:cacheprovider
stage "bench_gpu --quick" "$BENCH_S" "$PY" benchmarks/bench_gpu.py --quick
stage "~100M AR and CDLM training" "$RUN_S" "$PY" scripts/gpu_check_train.py
if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  NGPU=$("$PY" -c 'import torch; print(min(2, torch.cuda.device_count()))')
  stage "DCP checkpoint saves (NCCL, $NGPU rank(s))" "$CKPT_S" "$PY" benchmarks/bench_checkpoint.py \
    --backend nccl --ranks "$NGPU" --sizes 200
else  # the CPU path: the same saves over gloo, 2 ranks, the small model
  stage "DCP checkpoint saves (gloo, CPU)" "${GPU_CHECK_CKPT_S:-300}" "$PY" benchmarks/bench_checkpoint.py \
    --sizes 50 --modes dcp_sync dcp_async
fi

echo
echo "== gpu-check done in $(( $(date +%s) - START ))s; log: $LOG"
if [ ${#FAILED[@]} -gt 0 ]; then
  printf '== not passed: %s\n' "${FAILED[@]}"
  exit 1
fi
