#!/usr/bin/env bash
# Idempotent: create or upgrade the Airflow metadata DB of the current environment and the
# `gpu` pool the training stages run in (slots = GPUs that may train at once, LOKG_GPU_SLOTS).
# Run after sourcing infra/airflow/env.sh (the embedded default) or your production env.
set -euo pipefail
: "${AIRFLOW_HOME:?source infra/airflow/env.sh first}"
airflow db migrate >/dev/null
airflow pools set "${LOKG_GPU_POOL:-gpu}" "${LOKG_GPU_SLOTS:-1}" "LOKG training stages (TransE, encoder, GAT)" >/dev/null
echo "[airflow] metadata DB and pool '${LOKG_GPU_POOL:-gpu}' ready in $AIRFLOW_HOME"
