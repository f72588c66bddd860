#!/usr/bin/env bash
# A real Spark standalone cluster on loopback: one master and two workers started with the
# spark-class of the project venv's pyspark (the pip package has no sbin/start-*.sh scripts).
#
#   infra/cluster.sh start    start master + workers, wait until both workers registered
#   infra/cluster.sh status   print the master URL and each daemon's pid (exit 1 if any is down)
#   infra/cluster.sh stop     stop every daemon (TERM, then KILL after 10 s), by process group
#
# Environment (all optional):
#   LOKG_CLUSTER_DIR     pid files, logs, worker dirs     (default .cache/spark-cluster)
#   LOKG_MASTER_PORT     master RPC port                  (default 7077)
#   LOKG_MASTER_UI_PORT  master web UI port               (default 8090)
#   LOKG_WORKERS         number of workers                (default 2)
#   LOKG_WORKER_CORES / LOKG_WORKER_MEMORY   per worker   (default 1 / 1g)
# Point Airflow at it with:
#   export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"spark://127.0.0.1","port":7077}'
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${LOKG_CLUSTER_DIR:-$ROOT/.cache/spark-cluster}
PORT=${LOKG_MASTER_PORT:-7077}
UI_PORT=${LOKG_MASTER_UI_PORT:-8090}
WORKERS=${LOKG_WORKERS:-2}
CORES=${LOKG_WORKER_CORES:-1}
MEMORY=${LOKG_WORKER_MEMORY:-1g}
PYTHON=${LOKG_VENV:-$ROOT/.venv}/bin/python
MASTER_URL="spark://127.0.0.1:$PORT"

# Everything binds to loopback; executors run the project venv's Python.
export SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost
export PYSPARK_PYTHON=$PYTHON PYSPARK_DRIVER_PYTHON=$PYTHON
export SPARK_HOME=${SPARK_HOME:-$("$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}
export SPARK_LOG_DIR=$DIR/logs SPARK_PID_DIR=$DIR/pids

log() { printf '[cluster] %s\n' "$*"; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
daemons() { echo master; for i in $(seq 1 "$WORKERS"); do echo "worker-$i"; done; }

# Start one daemon in its own session (its pid is its process group id) with its own log file.
launch() {
  local name=$1; shift
  if alive "$DIR/pids/$name.pid"; then log "$name already running (pid $(cat "$DIR/pids/$name.pid"))"; return; fi
  setsid "$SPARK_HOME/bin/spark-class" "$@" >"$DIR/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$DIR/pids/$name.pid"
}

wait_for() {  # wait_for FILE PATTERN SECONDS WHAT
  local deadline=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then log "timed out waiting for $4; see $1"; tail -20 "$1" >&2; return 1; fi
    sleep 0.5
  done
}

start() {
  mkdir -p "$DIR/logs" "$DIR/pids"
  launch master org.apache.spark.deploy.master.Master \
    --host 127.0.0.1 --port "$PORT" --webui-port "$UI_PORT"
  wait_for "$DIR/logs/master.log" "I have been elected leader" 60 "the master" || { stop; exit 1; }
  for i in $(seq 1 "$WORKERS"); do
    mkdir -p "$DIR/work-$i"
    launch "worker-$i" org.apache.spark.deploy.worker.Worker "$MASTER_URL" \
      --host 127.0.0.1 --cores "$CORES" --memory "$MEMORY" --work-dir "$DIR/work-$i" --webui-port 0
  done
  for i in $(seq 1 "$WORKERS"); do
    wait_for "$DIR/logs/worker-$i.log" "Successfully registered with master" 60 "worker-$i" || { stop; exit 1; }
  done
  log "up: $MASTER_URL ($WORKERS workers x $CORES core, $MEMORY), UI http://127.0.0.1:$UI_PORT, logs $DIR/logs"
}

stop() {
  local name pidfile pid
  for name in $(daemons | tac); do
    pidfile=$DIR/pids/$name.pid
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM -- "-$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL -- "-$pid" 2>/dev/null || true
      log "stopped $name (pid $pid)"
    fi
    rm -f "$pidfile"
  done
}

status() {
  local name down=0
  echo "master $MASTER_URL"
  for name in $(daemons); do
    if alive "$DIR/pids/$name.pid"; then echo "$name running pid $(cat "$DIR/pids/$name.pid")"
    else echo "$name down"; down=1; fi
  done
  return $down
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
