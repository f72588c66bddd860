# Every target sets itself up first (infra/setup.sh is idempotent and fast when up to date).
SHELL := /bin/bash
ENV := source infra/env.sh &&

.PHONY: setup demo airflow-demo test test-slow test-all bench clean

setup:
	bash infra/setup.sh

## The main job on the embedded default: synthetic KG -> Spark build -> published store -> summary.
demo: setup
	$(ENV) lokg demo --workdir out/demo

## The same build driven by Airflow (`airflow dags test lokg_build`), then a query (docs/OPERATIONS.md).
airflow-demo: setup
	bash infra/airflow/demo.sh

## The CI test suite (slow cases excluded; see test-slow).
test: setup
	$(ENV) python -m pytest -m "not slow" -q

test-slow: setup
	$(ENV) python -m pytest -m slow -q

test-all: setup
	$(ENV) python -m pytest -q

bench: setup
	$(ENV) python bench/synth_throughput.py

clean:
	rm -rf out .pytest_cache .hypothesis
