"""The SQL engine a build's relational stages run on: DuckDB on one node, Spark SQL on a cluster.

A stage states each rule once, as SQL in DuckDB's dialect over named tables. The engine
registers the stage's Parquet inputs (and small Arrow tables) under those names, runs the
statements, and writes or returns the results. Spark runs the same text through sqlglot's
DuckDB → Spark SQL transpiler (:func:`spark_sql`): the two dialects differ there and nowhere
else. Which engine runs is decided once per build (:func:`resolve`, from ``engine.name`` and
the dump's size), never inside a stage.

DuckDB runs multi-threaded within ``build.memory_gb`` and spills what does not fit to
``engine.spill_dir`` (default: a folder beside the stage's outputs), so a stage's peak memory
is bounded whatever the dump's size.
"""

from __future__ import annotations

import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import pyarrow as pa

from lokg.common.resources import BuildSettings
from lokg.common.stage import StageError
from lokg.runtime.contract import table_files
from lokg.spark_jobs.settings import EngineSettings

#: A DuckDB connection's share of ``build.memory_gb``: the rest is the Python side's (Arrow
#: tables a stage reads back, the interpreter).
DUCKDB_MEMORY_SHARE = 0.75


def dump_gb(dump: str | Path | None) -> float:
    """The size on disk of a dump (a file or every file under a directory), in GB; 0 for none."""
    if dump is None or not Path(dump).exists():
        return 0.0
    root = Path(dump)
    files = [root] if root.is_file() else [f for f in root.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files) / 1e9


def resolve(config: dict, dump: str | Path | None) -> str:
    """The engine of a build: ``engine.name`` when set to one, else (``auto``) DuckDB up to
    ``engine.spark_above_gb`` of dump and Spark above. A function of the config and the dump
    alone, so every stage of a build (each its own process under the DAG) resolves the same."""
    settings = EngineSettings.of(config, StageError)
    if settings.name != "auto":
        return settings.name
    return "spark" if dump_gb(dump) > settings.spark_above_gb else "duckdb"


def with_engine(config: dict, dump: str | Path | None) -> dict:
    """``config`` with ``engine.name`` resolved (:func:`resolve`); the input is not changed."""
    section = dict(config.get("engine") or {})
    section["name"] = resolve(config, dump)
    return {**config, "engine": section}


def spark_sql(sql: str) -> str:
    """One DuckDB-dialect statement in Spark SQL's dialect (sqlglot), with what sqlglot leaves
    untranslated rewritten: ``list_reduce(list, lambda, initial)`` (a left fold) is Spark's
    ``aggregate(list, initial, lambda)``."""
    import sqlglot
    from sqlglot import exp

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.lower() == "list_reduce":
            if len(node.expressions) != 3:
                raise StageError(f"list_reduce needs an initial value on Spark: {node.sql('duckdb')}")
            items, merge, initial = node.expressions
            return exp.Anonymous(this="AGGREGATE", expressions=[items, initial, merge])
        return node

    tree = sqlglot.parse_one(sql, read="duckdb").transform(rewrite)
    return tree.sql(dialect="spark")


def ordered_sum(expr: str) -> str:
    """SQL for the sum of ``expr`` (a double) over a group, nulls skipped, added in ascending
    order: the same bits on either engine and on every run, whatever order the rows come in
    (a plain ``sum`` of doubles adds them in the order threads and partitions meet them)."""
    return (f"list_reduce(list_sort(list_filter(list({expr}), lambda x: x IS NOT NULL)), "
            "lambda a, b: a + b, 0.0::DOUBLE)")


def parquet_files(path: Path) -> list[Path]:
    """The Parquet files of a table written as one file or as a directory of part files."""
    path = Path(path)
    files = table_files(path) if path.exists() else []
    if not files:
        raise StageError(f"table has no Parquet files: {path}")
    return files


class Engine(ABC):
    """Named tables in, SQL over them, Parquet or Arrow out."""

    name: ClassVar[str]

    @abstractmethod
    def register(self, name: str, path: str | Path) -> None:
        """The Parquet table at ``path`` (a file or a directory of parts) as table ``name``."""

    @abstractmethod
    def register_arrow(self, name: str, table: pa.Table) -> None:
        """A small Arrow table built on the driver as table ``name``."""

    @abstractmethod
    def function(self, name: str, fn: Callable, arg_types: Sequence[str], returns: str, *,
                 vectorised: bool = False) -> None:
        """A Python scalar function callable from SQL; types in DuckDB's names (VARCHAR …).
        ``vectorised``: ``fn`` maps numpy arrays (one per argument) to a numpy array, called
        on batches of rows — numpy's arithmetic, bit for bit, on either engine."""

    @abstractmethod
    def view(self, name: str, sql: str, *, materialise: bool = False) -> None:
        """Table ``name`` defined by ``sql``; ``materialise``: computed once now (a result the
        later statements read more than once)."""

    @abstractmethod
    def fetch(self, sql: str) -> pa.Table:
        """The (small) result of ``sql`` as an Arrow table on the driver."""

    @abstractmethod
    def write(self, sql: str, out: Path, *, order_by: Sequence[str] = (),
              single_file: bool = True, schema: pa.Schema | None = None,
              drop: Sequence[str] = ()) -> None:
        """The result of ``sql`` written as Parquet part files under the directory ``out``;
        ``order_by``: the rows in that order (within the one file, or across the parts in
        their names' order); ``schema``: the files' Arrow schema, nullability included (a
        contract table's), the columns taken by name — a field declared not null must come
        from an expression that cannot be null (``coalesce``); None: the engine's own;
        ``drop``: columns of the result left out of the files (an order key not kept)."""

    def close(self) -> None:
        """Release what the engine holds (a connection, spilled files)."""


class DuckDBEngine(Engine):
    """One in-process DuckDB connection, bounded in memory, spilling to disk."""

    name = "duckdb"

    def __init__(self, config: dict, work_dir: Path | None = None) -> None:
        import duckdb

        build, settings = BuildSettings.of(config, StageError), EngineSettings.of(config, StageError)
        spill_root = settings.spill_dir or (str(work_dir) if work_dir else None)
        self._spill = Path(tempfile.mkdtemp(prefix="duckdb-spill-", dir=spill_root))
        self.con = duckdb.connect(config={
            "memory_limit": f"{build.memory_gb * DUCKDB_MEMORY_SHARE:.2f}GB",
            "temp_directory": str(self._spill),
            "preserve_insertion_order": False,
        })
        if build.threads:
            self.con.execute(f"SET threads = {int(build.threads)}")

    def register(self, name: str, path: str | Path) -> None:
        files = ", ".join(literal(str(f)) for f in parquet_files(Path(path)))
        self.con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet([{files}])")

    def register_arrow(self, name: str, table: pa.Table) -> None:
        self.con.register(f"_arrow_{name}", table)
        self.con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM _arrow_{name}")
        self.con.unregister(f"_arrow_{name}")

    def function(self, name: str, fn: Callable, arg_types: Sequence[str], returns: str, *,
                 vectorised: bool = False) -> None:
        if vectorised:
            self.con.create_function(name, _on_arrays(fn), list(arg_types), returns, type="arrow",
                                     side_effects=False)
        else:
            self.con.create_function(name, fn, list(arg_types), returns, side_effects=False)

    def view(self, name: str, sql: str, *, materialise: bool = False) -> None:
        kind = "TABLE" if materialise else "VIEW"
        self.con.execute(f"CREATE OR REPLACE {kind} {name} AS {sql}")

    def fetch(self, sql: str) -> pa.Table:
        return self.con.sql(sql).to_arrow_table()

    def write(self, sql: str, out: Path, *, order_by: Sequence[str] = (),
              single_file: bool = True, schema: pa.Schema | None = None,
              drop: Sequence[str] = ()) -> None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        columns = f"* EXCLUDE ({', '.join(drop)})" if drop else "*"
        ordered = f"SELECT {columns} FROM ({sql})"
        ordered += f" ORDER BY {', '.join(order_by)}" if order_by else ""
        if schema is not None:  # COPY writes every column nullable: Arrow batches, streamed
            _write_batches(self.con.sql(ordered).to_arrow_reader(WRITE_BATCH_ROWS), schema,
                           out / "part-00000.parquet")
            return
        if single_file or order_by:  # DuckDB writes one ordered file; parts would not keep it
            target, options = literal(str(out / "part-00000.parquet")), ""
        else:
            target, options = literal(str(out)), ", PER_THREAD_OUTPUT true, OVERWRITE true"
        self.con.execute(f"COPY ({ordered}) TO {target} (FORMAT parquet{options})")

    def close(self) -> None:
        self.con.close()
        shutil.rmtree(self._spill, ignore_errors=True)


class SparkEngine(Engine):
    """The build's Spark session (spark_jobs/session.py): local or a cluster."""

    name = "spark"

    def __init__(self, config: dict, work_dir: Path | None = None) -> None:
        from lokg.spark_jobs.session import get_spark

        self.spark = get_spark(config, "lokg-sql")

    def register(self, name: str, path: str | Path) -> None:
        self.spark.read.parquet(str(path)).createOrReplaceTempView(name)

    def register_arrow(self, name: str, table: pa.Table) -> None:
        from pyspark.sql.pandas.types import from_arrow_schema

        self.spark.createDataFrame(table.to_pandas(), schema=from_arrow_schema(table.schema)) \
            .createOrReplaceTempView(name)

    def function(self, name: str, fn: Callable, arg_types: Sequence[str], returns: str, *,
                 vectorised: bool = False) -> None:
        if vectorised:
            from pyspark.sql.functions import pandas_udf

            fn = pandas_udf(_on_series(fn), _SPARK_TYPES[returns])
            self.spark.udf.register(name, fn)
        else:
            self.spark.udf.register(name, fn, _SPARK_TYPES[returns])

    def view(self, name: str, sql: str, *, materialise: bool = False) -> None:
        frame = self.spark.sql(spark_sql(sql))
        if materialise:
            frame = frame.localCheckpoint()
        frame.createOrReplaceTempView(name)

    def fetch(self, sql: str) -> pa.Table:
        return self.spark.sql(spark_sql(sql)).toArrow()

    def write(self, sql: str, out: Path, *, order_by: Sequence[str] = (),
              single_file: bool = True, schema: pa.Schema | None = None,
              drop: Sequence[str] = ()) -> None:
        frame = self.spark.sql(spark_sql(sql))
        if single_file:
            frame = frame.coalesce(1)
            frame = frame.sortWithinPartitions(*order_by) if order_by else frame
        elif order_by:
            frame = frame.orderBy(*order_by)
        frame = frame.drop(*drop)
        if schema is not None:
            from pyspark.sql.pandas.types import from_arrow_schema

            frame = frame.to(from_arrow_schema(schema))
        frame.write.mode("overwrite").parquet(str(out))


#: Rows per Arrow batch where DuckDB's result is written through Arrow (one row group each).
WRITE_BATCH_ROWS = 1 << 20


def _write_batches(batches: pa.RecordBatchReader, schema: pa.Schema, path: Path) -> None:
    """Stream record batches into one Parquet file of ``schema`` (columns by name)."""
    import pyarrow.parquet as pq

    with pq.ParquetWriter(path, schema) as writer:
        for batch in batches:
            writer.write_batch(batch.select(schema.names).cast(schema))


#: The engines by ``engine.name``.
ENGINE_CLASSES: dict[str, type[Engine]] = {cls.name: cls for cls in (DuckDBEngine, SparkEngine)}

_SPARK_TYPES = {"VARCHAR": "string", "BIGINT": "bigint", "INTEGER": "int", "DOUBLE": "double",
                "BOOLEAN": "boolean"}


@contextmanager
def open_engine(config: dict, work_dir: Path | None = None) -> Iterator[Engine]:
    """The build's engine (``engine.name``, resolved: :func:`with_engine`), closed on exit."""
    name = EngineSettings.of(config, StageError).name
    if name not in ENGINE_CLASSES:
        raise StageError(f"engine.name: '{name}' is not resolved to one of {' | '.join(ENGINE_CLASSES)} "
                         "(the build resolves auto from the dump's size)")
    engine = ENGINE_CLASSES[name](config, work_dir)
    try:
        yield engine
    finally:
        engine.close()


def _on_arrays(fn: Callable) -> Callable:
    """A numpy function as a DuckDB Arrow function (Arrow arrays in, an Arrow array out)."""
    return lambda *columns: pa.array(fn(*(c.to_numpy(zero_copy_only=False) for c in columns)))


def _on_series(fn: Callable) -> Callable:
    """A numpy function as a pandas UDF's body (pandas Series in, a Series out)."""
    import pandas as pd

    return lambda *columns: pd.Series(fn(*(c.to_numpy() for c in columns)))


def literal(text: str) -> str:
    """A SQL string literal (either dialect)."""
    return "'" + text.replace("'", "''") + "'"


def literal_list(values) -> str:
    """A parenthesised list of SQL string literals, for ``IN``."""
    return "(" + ", ".join(literal(v) for v in values) + ")"
