#!/usr/bin/env bash
# The main job through Airflow on the embedded default: a synthetic KG, the whole lokg_build DAG
# run by `airflow dags test` (Spark stages via spark-submit on local[2], training stages, publish),
# `lokg store verify`, then one of the generated questions answered from the published store.
#
#   infra/airflow/demo.sh [WORKDIR]     (default out/airflow-demo; dump/ and store/ go there)
# Environment: LOKG_DEMO_TRIPLES (20000), LOKG_DEMO_LLM (none | local | openai), LOKG_DEMO_SET
# (extra space-separated KEY=VALUE build overrides, e.g. "transe.epochs=10").
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
source infra/airflow/env.sh
WORK=$(realpath -m "${1:-out/airflow-demo}")

echo "[1/4] Airflow metadata DB in $AIRFLOW_HOME"
bash infra/airflow/init.sh
echo "[2/4] synthetic KG with ${LOKG_DEMO_TRIPLES:-20000} triples in $WORK/dump"
lokg synth --triples "${LOKG_DEMO_TRIPLES:-20000}" --seed 0 --out "$WORK/dump" --questions 100 >/dev/null
echo "[3/4] airflow dags test lokg_build (task logs in $AIRFLOW_HOME/logs)"
conf=$(python - "$WORK" ${LOKG_DEMO_SET:-} <<'PY'
import json, sys
work, overrides = sys.argv[1], sys.argv[2:]
print(json.dumps({"dump": f"{work}/dump", "format": "synth", "store": f"{work}/store",
                  "overrides": overrides}))
PY
)
airflow dags test lokg_build "$(date -u +%Y-%m-%dT%H:%M:%S+00:00)" --conf "$conf" >"$WORK/dags_test.log" 2>&1 \
  || { tail -40 "$WORK/dags_test.log"; echo "lokg_build failed; full output in $WORK/dags_test.log" >&2; exit 1; }
lokg store verify --store "$WORK/store"
lokg store show --store "$WORK/store"
echo "[4/4] a question from the published store"
question=$(python -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["question"])' "$WORK/dump/questions.jsonl")
echo "Q: $question"
lokg query "$question" --store "$WORK/store" --llm "${LOKG_DEMO_LLM:-none}"
