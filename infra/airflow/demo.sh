#!/usr/bin/env bash
# The main job through Airflow on the embedded default (the README's `make demo`): a synthetic KG,
# the whole lokg_build DAG run by `airflow dags test` (Spark stages via spark-submit on local[2],
# training stages, publish — relation knowledge and GAT's gold paths learnt from the generator's
# train/dev questions; each triple's sentence restored from the generator's articles about its
# entities), `lokg store verify`, then the first test question answered from the published
# store with its citations (policy route by default: derived where the routing gate passes,
# else one call to the embedded SmolLM2, llama.cpp in process).
#
#   infra/airflow/demo.sh [WORKDIR]     (default out/demo; dump/ and store/ go there)
# Environment: LOKG_DEMO_TRIPLES (10000), LOKG_DEMO_LLM (local | none | openai), LOKG_DEMO_BUDGET
# (512 tokens of knowledge), LOKG_DEMO_SET (extra space-separated KEY=VALUE build overrides,
# e.g. "transe.epochs=10").
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
source infra/airflow/env.sh
# The demo's Spark stages are short jobs on 10,000 triples, where the JVM's start-up and its JIT
# compilers cost more than the work: the client-mode driver (spark-submit's JVM, executors
# included on local[2]) compiles with C1 only and collects with the serial GC. Roughly halves a
# stage's start-up CPU (docs/BENCHMARKS.md, "Demo and CI"); production keeps the JVM's defaults.
export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
WORK=$(realpath -m "${1:-out/demo}")
TRIPLES=${LOKG_DEMO_TRIPLES:-10000}
mkdir -p "$WORK"

echo "[1/5] Airflow metadata DB in $AIRFLOW_HOME"
bash infra/airflow/init.sh
echo "[2/5] synthetic KG with $TRIPLES triples in $WORK/dump, and an article per entity (linked text)"
lokg synth --triples "$TRIPLES" --seed 0 --out "$WORK/dump" --questions 500 --articles 1.0 >/dev/null
echo "[3/5] airflow dags test lokg_build (output in $WORK/dags_test.log, task logs in $AIRFLOW_HOME/logs)"
conf=$(python - "$WORK" ${LOKG_DEMO_SET:-} <<'PY'
import json, sys
from lokg.pipeline.synth import labelled_overrides, linked_text_overrides
work, overrides = sys.argv[1], sys.argv[2:]
print(json.dumps({"dump": f"{work}/dump", "format": "synth", "store": f"{work}/store",
                  "overrides": [*labelled_overrides(f"{work}/dump"),
                                *linked_text_overrides(f"{work}/dump"), *overrides]}))
PY
)
started=$SECONDS
airflow dags test lokg_build "$(date -u +%Y-%m-%dT%H:%M:%S+00:00)" --conf "$conf" >"$WORK/dags_test.log" 2>&1 \
  || { tail -40 "$WORK/dags_test.log"; echo "lokg_build failed; full output in $WORK/dags_test.log" >&2; exit 1; }
echo "      lokg_build succeeded in $((SECONDS - started)) s"
echo "[4/5] verifying the published store"
lokg store verify --store "$WORK/store"
lokg store show --store "$WORK/store"
echo "[5/5] a question from the published store, reader '${LOKG_DEMO_LLM:-local}'"
python - "$WORK/dump/test.jsonl" >"$WORK/question.txt" <<'PY'
import json, sys
with open(sys.argv[1], encoding="utf-8") as fh:
    first = json.loads(fh.readline())
print(first["question"])
print("; ".join(first["answers"]))
PY
question=$(sed -n 1p "$WORK/question.txt")
echo "Q: $question"
lokg query "$question" --store "$WORK/store" --llm "${LOKG_DEMO_LLM:-local}" --budget "${LOKG_DEMO_BUDGET:-512}"
echo "  gold answer: $(sed -n 2p "$WORK/question.txt")"
echo "demo done in $SECONDS s"
