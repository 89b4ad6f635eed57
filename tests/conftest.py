"""Suite-wide test settings: headless plotting, offline hubs, few threads (CI has 2 cores)."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
