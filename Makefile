# Every target sets itself up first (infra/setup.sh is idempotent and fast when up to date).
SHELL := /bin/bash
ENV := source infra/env.sh &&

.PHONY: setup demo demo-inprocess test test-slow test-all bench clean

setup:
	bash infra/setup.sh

## The main job through Airflow: synthetic KG -> `airflow dags test lokg_build` (Spark stages,
## training stages, publish) -> verified store -> a question answered by the local model.
demo: setup
	bash infra/airflow/demo.sh out/demo

## The same build in one process without Airflow (`lokg demo`).
demo-inprocess: setup
	$(ENV) lokg demo --workdir out/demo-inprocess

## The CI test suite (slow cases excluded; see test-slow), with the extras the documents and
## object-store tests need (spaCy + model, boto3, moto; `make demo` skips them). Two workers,
## each taking whole files (module fixtures such as the Airflow runs are built once): much of
## the suite is single-threaded Python or waits on a JVM or Airflow subprocess.
test:
	bash infra/setup.sh --extras
	$(ENV) python -m pytest -m "not slow" -q -n 2 --dist loadfile --durations=30

## The slow cases, the audit page's headless-browser test among them (setup --browser).
test-slow:
	bash infra/setup.sh --extras --browser
	$(ENV) python -m pytest -m slow -q

test-all:
	bash infra/setup.sh --extras --browser
	$(ENV) python -m pytest -q

bench: setup
	$(ENV) python -m bench.synth_throughput

clean:
	rm -rf out .pytest_cache .hypothesis
