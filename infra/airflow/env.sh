# Source me: the embedded Airflow default for LOKG on top of infra/env.sh — SQLite metadata DB,
# LocalExecutor with parallelism 2, the repository's dags/, no examples, spark_default = local[2].
# Every value is a default: anything already exported (e.g. AIRFLOW_CONN_SPARK_DEFAULT pointing
# at infra/cluster.sh's spark://127.0.0.1:7077, or AIRFLOW_HOME) wins.
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/env.sh"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$LOKG_ROOT/.cache/airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$LOKG_ROOT/dags}"
export AIRFLOW__CORE__LOAD_EXAMPLES="${AIRFLOW__CORE__LOAD_EXAMPLES:-False}"
export AIRFLOW__CORE__EXECUTOR="${AIRFLOW__CORE__EXECUTOR:-LocalExecutor}"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-2}"
export AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG="${AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG:-2}"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite:///$AIRFLOW_HOME/airflow.db}"
export AIRFLOW__LOGGING__BASE_LOG_FOLDER="${AIRFLOW__LOGGING__BASE_LOG_FOLDER:-$AIRFLOW_HOME/logs}"
# Loopback only: the API server (UI + execution API) listens on 127.0.0.1, everyone is admin.
export AIRFLOW__API__HOST="${AIRFLOW__API__HOST:-127.0.0.1}"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS:-True}"
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-{\"conn_type\": \"spark\", \"host\": \"local[2]\"}}"
# Spark drivers and executors bind to loopback (the standalone cluster listens there too).
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
# `airflow` from its own venv, appended so that `python`/`lokg` stay the project venv's.
case ":$PATH:" in *":$LOKG_ROOT/.venv-airflow/bin:"*) ;; *) export PATH="$PATH:$LOKG_ROOT/.venv-airflow/bin" ;; esac
