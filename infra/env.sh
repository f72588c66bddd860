# Source me: the environment every LOKG command runs in (offline, local Spark, seeded tokenizer).
LOKG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export LOKG_ROOT
export PATH="$LOKG_ROOT/.venv/bin:$PATH"
export TIKTOKEN_CACHE_DIR="$LOKG_ROOT/.cache/tiktoken"
export PYSPARK_PYTHON="$LOKG_ROOT/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$LOKG_ROOT/.venv/bin/python"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# pip installs with --no-compile, so Python must write each module's bytecode on its first import;
# a host that sets PYTHONDONTWRITEBYTECODE (these do) would recompile every module in every process
unset PYTHONDONTWRITEBYTECODE
