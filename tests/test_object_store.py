"""Stores on object storage against a real S3-protocol server on loopback (moto in server mode,
started and stopped here, credentials checked): publish, open, verify, rollback, retention, hot
reload, a publisher killed mid-upload, a corrupted object, races, bad credentials and endpoints
(lokg/testing/s3.py starts the server)."""

from __future__ import annotations

import multiprocessing
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3  # the extras (infra/setup.sh --extras, as make test installs them): never skipped
import pytest
from click.testing import CliRunner

from bench.load import run_load
from lokg.runtime.cli import cli
from lokg.runtime.contract import Store, StoreError
from lokg.runtime import object_store
from lokg.runtime.object_store import RemoteStore
from lokg.runtime.query import Runtime
from lokg.testing.cli import assert_clean_error
from lokg.testing.s3 import loopback_s3, read_only_user
from lokg.testing.serving import QUESTION, free_port, serving, wait_for
from lokg.testing.stores import make_store
from lokg.testing.stores import publish_stage_tables as _publish


BUCKET = "lokg-test"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def s3():
    """An S3 endpoint on loopback (moto_server, credentials checked) for this module."""
    with loopback_s3(BUCKET) as env:
        yield env


@pytest.fixture
def url(s3, monkeypatch, tmp_path):
    """A fresh store prefix; the S3 settings in the environment; a cache of this test's own."""
    for name, value in {**s3, "LOKG_CACHE_DIR": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(name, value)
    return f"s3://{BUCKET}/stores/{secrets.token_hex(4)}"


@pytest.fixture
def client(s3):
    return boto3.client("s3", endpoint_url=s3["LOKG_S3_ENDPOINT"], region_name="us-east-1",
                        aws_access_key_id=s3["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=s3["AWS_SECRET_ACCESS_KEY"])


def _local(tmp_path: Path, build_id: str) -> Store:
    return make_store(tmp_path / f"local-{build_id}", build_id=build_id)


def _push(tmp_path: Path, url: str, build_id: str, **kw) -> None:
    RemoteStore(url).publish(_local(tmp_path, build_id).build(), **kw)


def _key(url: str, rel: str) -> str:
    return url.removeprefix(f"s3://{BUCKET}/") + "/" + rel


def _corrupt(client, url: str, build_id: str) -> str:
    """Flip one byte of an object in place (same size: only the sha256 can tell)."""
    rel = f"builds/{build_id}/entities.parquet"
    data = bytearray(client.get_object(Bucket=BUCKET, Key=_key(url, rel))["Body"].read())
    data[len(data) // 2] ^= 0xFF
    client.put_object(Bucket=BUCKET, Key=_key(url, rel), Body=bytes(data))
    return rel


def _lokg(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_publish_open_verify_and_reuse_the_cache(url, tmp_path, monkeypatch):
    _push(tmp_path, url, "b1")
    remote = RemoteStore(url)
    assert remote.current_id() == "b1" and remote.build_ids() == ["b1"]
    assert remote.build(verify=True).build_id == "b1"
    with Runtime.open(url) as rt:
        assert rt.build_id == "b1" and rt.ask(QUESTION, llm="none").answers
        cached = rt.build.path
    assert cached.is_relative_to(tmp_path / "cache") and (cached / "manifest.json").is_file()
    downloads = []
    monkeypatch.setattr("lokg.runtime.object_store.Bucket.download",
                        lambda *a: downloads.append(a))
    with Runtime.open(url) as rt:  # intact copy reused: nothing downloaded
        assert rt.build.path == cached
    assert downloads == []
    result = _lokg("store", "verify", "--store", url)
    assert result.exit_code == 0 and "ok: build b1" in result.output


def test_rollback_and_retention_keep_current_and_pinned_builds(url, tmp_path):
    for build_id in ("b1", "b2", "b3"):
        _push(tmp_path, url, build_id, keep=5)
    remote = RemoteStore(url)
    assert _lokg("store", "rollback", "b1", "--store", url).exit_code == 0
    assert remote.current_id() == "b1"
    with Runtime.open(url, build_id="b3"):  # a reader elsewhere pins b3 (an object pin)
        result = _lokg("store", "gc", "--keep", "0", "--store", url)
        assert result.exit_code == 0, result.output
        assert "removed build b2" in result.output and remote.build_ids() == ["b1", "b3"]
    assert remote.collect_garbage(0) == ["b3"]
    assert remote.build_ids() == ["b1"] and remote.build(verify=True).build_id == "b1"
    result = _lokg("store", "rollback", "b2", "--store", url)
    assert_clean_error(result.output, result.exit_code, 1, "b2", "does not exist")


def test_two_publishers_racing_cannot_both_win(url, tmp_path):
    _push(tmp_path, url, "base")
    late, early = _local(tmp_path, "late").build(), _local(tmp_path, "early")

    def other_publisher_wins(step: str) -> None:
        if step == "manifest":  # "late" uploaded, "early" publishes before late's swap
            RemoteStore(url).publish(early.build())

    with pytest.raises(StoreError, match="CURRENT moved from base to early"):
        RemoteStore(url).publish(late, hook=other_publisher_wins)
    assert RemoteStore(url).current_id() == "early"


def test_a_publisher_killed_mid_upload_leaves_no_torn_build(url, tmp_path):
    _push(tmp_path, url, "old")
    local = _local(tmp_path, "torn")
    code = ("import os, signal, sys; from runtime.contract import Store; "
            "from runtime.object_store import RemoteStore; "
            "kill = lambda step: step.startswith('uploaded') and os.kill(os.getpid(), 9); "
            "RemoteStore(sys.argv[1]).publish(Store(sys.argv[2]).build(), hook=kill)")
    proc = subprocess.run([sys.executable, "-c", code, url, str(local.root)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == -9
    remote = RemoteStore(url)
    assert remote.current_id() == "old" and remote.build_ids() == ["old"]
    assert _lokg("store", "verify", "--store", url).exit_code == 0
    with Runtime.open(url) as rt:
        assert rt.build_id == "old"
    remote.collect_garbage(3)  # the dead publisher's pin does not protect its upload
    assert not remote.bucket.listing("builds/torn")


def test_a_corrupted_object_is_refused_naming_it(url, tmp_path, client):
    _push(tmp_path, url, "b1")
    rel = _corrupt(client, url, "b1")
    with pytest.raises(StoreError, match="entities.parquet") as err:
        Runtime.open(url)
    assert _key(url, rel) in str(err.value)
    result = _lokg("store", "verify", "--store", url)
    assert_clean_error(result.output, result.exit_code, 1, "verify failed", rel)


def test_push_and_pull_through_the_cli(url, tmp_path):
    local = _local(tmp_path, "b1")
    result = _lokg("store", "push", str(local.root), url)
    assert result.exit_code == 0, result.output
    pulled = tmp_path / "pulled"
    result = _lokg("store", "pull", url, str(pulled))
    assert result.exit_code == 0, result.output
    assert Store(pulled).build(verify=True).build_id == "b1"
    result = _lokg("store", "push", str(local.root), url)  # a retry: the same build, fine
    assert result.exit_code == 0, result.output
    other = Store(tmp_path / "other")  # another build under the same id: refused
    _publish(other, tmp_path, "b1")
    result = _lokg("store", "push", str(other.root), url)
    assert_clean_error(result.output, result.exit_code, 1, "builds/b1", "different content")


def test_serve_hot_reloads_and_refuses_a_corrupt_build(url, tmp_path, client, caplog):
    _push(tmp_path, url, "b1")
    with serving(url, llm_backends=("none",), poll=0.1) as http, \
            caplog.at_level("ERROR", "lokg.server"):
        assert http.ask(llm="none")[2]["build_id"] == "b1"
        _push(tmp_path, url, "b2")
        wait_for(lambda: http.call("GET", "/readyz")[2]["build_id"] == "b2", what="reload b2")
        _push(tmp_path, url, "b3", hook=lambda step: step == "manifest" and
              _corrupt(client, url, "b3"))
        failed = wait_for(lambda: http.call("GET", "/readyz")[2]["failed_builds"],
                          what="b3 refused")
        assert failed[-1]["build_id"] == "b3" and "b3/entities.parquet" in caplog.text
        assert http.ask(llm="none")[2]["build_id"] == "b2"


def test_wrong_credentials_fail_clearly_and_publish_nothing(url, tmp_path, monkeypatch, s3):
    _push(tmp_path, url, "b1")
    local = _local(tmp_path, "b2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    started = time.monotonic()
    result = _lokg("store", "push", str(local.root), url)
    assert_clean_error(result.output, result.exit_code, 1, "push refused", url)
    assert time.monotonic() - started < 30
    with pytest.raises(StoreError, match=url):
        Runtime.open(url)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3["AWS_SECRET_ACCESS_KEY"])
    assert RemoteStore(url).build_ids() == ["b1"] and RemoteStore(url).current_id() == "b1"


def test_an_unreachable_endpoint_fails_within_the_timeout(url, tmp_path, monkeypatch):
    local = _local(tmp_path, "b1")
    monkeypatch.setenv("LOKG_S3_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("LOKG_S3_TIMEOUT", "2")
    started = time.monotonic()
    with pytest.raises(StoreError, match="127.0.0.1") as err:
        Runtime.open(url)
    assert url in str(err.value)
    result = _lokg("store", "push", str(local.root), url)
    assert_clean_error(result.output, result.exit_code, 1, "push refused", url)
    assert time.monotonic() - started < 30


def test_hot_reload_under_load_from_the_object_store(url, tmp_path):
    _push(tmp_path, url, "b1")
    local = _local(tmp_path, "b2").build()
    with serving(url, llm_backends=("none",), poll=0.1) as http:
        report = run_load(f"http://127.0.0.1:{http.port}", [QUESTION], requests=400,
                          concurrency=3, options={"llm": "none"}, publish_after=100,
                          publish=lambda: RemoteStore(url).publish(local).build_id)
    assert report["errors"] == 0 and report["statuses"] == {"200": 400}
    assert report["published"]["first_response_after_s"] is not None
    assert report["published"]["flaps"] == 0 and set(report["builds"]) == {"b1", "b2"}


def test_a_build_losing_objects_during_its_upload_is_not_made_current(url, tmp_path, client):
    _push(tmp_path, url, "b1")

    def retention_elsewhere(step: str) -> None:
        if step == "manifest":
            client.delete_object(Bucket=BUCKET, Key=_key(url, "builds/b2/entities.parquet"))

    with pytest.raises(StoreError, match="entities.parquet"):
        _push(tmp_path, url, "b2", hook=retention_elsewhere)
    assert RemoteStore(url).current_id() == "b1"


def _tombstone_during_upload(client, url: str, build_id: str, withdraw_after_s: float | None):
    """A publish hook: a retention run elsewhere tombstones the build once it is uploaded,
    and withdraws the tombstone after ``withdraw_after_s`` (None: it goes on deleting).
    Returns the hook and the withdrawal's timer (to join before the server stops)."""
    key = _key(url, f"builds/{build_id}/.doomed")
    withdraw = threading.Timer(withdraw_after_s or 0, client.delete_object,
                               kwargs={"Bucket": BUCKET, "Key": key})

    def hook(step: str) -> None:
        if step == "manifest":
            client.put_object(Bucket=BUCKET, Key=key, Body=b"")
            if withdraw_after_s is not None:
                withdraw.start()
    return hook, withdraw


def test_a_tombstone_withdrawn_during_the_upload_does_not_refuse_the_publish(url, tmp_path,
                                                                            client):
    """A racing publisher's retention sees this publisher's pin and withdraws its tombstone:
    the publish goes on (CI once refused it here, naming retention instead of CURRENT)."""
    _push(tmp_path, url, "b1")
    hook, withdraw = _tombstone_during_upload(client, url, "b2", 0.5)
    try:
        _push(tmp_path, url, "b2", hook=hook)
    finally:
        withdraw.join()
    assert RemoteStore(url).build(verify=True).build_id == "b2"


def test_a_tombstone_that_stays_refuses_the_publish(url, tmp_path, client, monkeypatch):
    monkeypatch.setattr(object_store, "TOMBSTONE_SETTLE_S", 0.5)
    _push(tmp_path, url, "b1")
    hook, _ = _tombstone_during_upload(client, url, "b2", None)
    with pytest.raises(StoreError, match="retention deleted it"):
        _push(tmp_path, url, "b2", hook=hook)
    assert RemoteStore(url).current_id() == "b1"


def test_the_cache_evicts_unused_builds_above_its_cap(url, tmp_path):
    _push(tmp_path, url, "b1")
    remote = RemoteStore(url)
    cache, _, held = remote.sync()
    object_store.release(*held)
    _push(tmp_path, url, "b2")
    cache, _, held = remote.sync(cap_bytes=1)  # b1 unused: evicted; b2 in use: kept
    assert cache.build_ids() == ["b2"]
    object_store.release(*held)
    assert not remote._live_pins("b2")


def test_a_process_exiting_with_a_runtime_open_releases_its_pin(url, tmp_path):
    _push(tmp_path, url, "b1")
    code = ("import sys; from runtime.query import Runtime; "
            "rt = Runtime.open(sys.argv[1]); print(rt.build_id)")
    proc = subprocess.run([sys.executable, "-c", code, url], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "b1", proc.stderr
    assert "Error" not in proc.stderr, proc.stderr
    assert not RemoteStore(url).bucket.listing("pins/b1")


def test_building_or_publishing_into_a_url_is_refused_with_the_way_to_push(tmp_path,
                                                                          monkeypatch):
    from lokg.cli import cli as lokg

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(lokg, ["publish", "--store", "s3://b/p", "--build-id", "b1"])
    assert_clean_error(result.output, result.exit_code, 1, "s3://b/p", "lokg store push")
    assert list(tmp_path.iterdir()) == []  # no local directory "s3:" made


def test_an_s3_store_without_boto3_names_the_extra_to_install(tmp_path, monkeypatch):
    """boto3 is an optional extra: where it is missing, push (and every s3:// command) says
    what to install instead of failing with an ImportError mid-transfer."""
    monkeypatch.setitem(sys.modules, "boto3", None)  # import boto3 raises ImportError
    url = f"s3://{BUCKET}/no-boto3"
    result = _lokg("store", "push", str(_local(tmp_path, "b1").root), url)
    assert_clean_error(result.output, result.exit_code, 1, url, "lokg[s3]", "--extras")
    with pytest.raises(StoreError, match="lokg\\[s3\\]"):
        Runtime.open(url)


def _push_in_process(url: str, local: str, env: dict, barrier, results) -> None:
    os.environ.update(env)
    build = Store(local).build()
    barrier.wait()
    try:
        RemoteStore(url).publish(build, keep=0, expect_current="base")
        results[build.build_id] = "ok"
    except StoreError as exc:
        results[build.build_id] = str(exc)


def test_two_processes_pushing_at_once_exactly_one_wins(url, tmp_path, s3):
    _push(tmp_path, url, "base")
    env = {**s3, "LOKG_CACHE_DIR": str(tmp_path / "cache")}
    locals_ = [str(_local(tmp_path, b).root) for b in ("p1", "p2")]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier, results = manager.Barrier(2), manager.dict()
        procs = [ctx.Process(target=_push_in_process, args=(url, local, env, barrier, results))
                 for local in locals_]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=120)
        results = dict(results)
    assert [p.exitcode for p in procs] == [0, 0]
    won = [b for b, r in results.items() if r == "ok"]
    assert len(won) == 1, results  # both started from "base": the other is refused, saying so
    assert all(r == "ok" or "CURRENT" in r for r in results.values()), results
    remote = RemoteStore(url)
    assert remote.current_id() == won[0] and remote.build(verify=True).build_id == won[0]


# ------------------------------------------------------------------------------ read-only replicas

def _pins(client, url: str) -> list[str]:
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=_key(url, "pins/"))
    return [o["Key"] for o in listed.get("Contents", [])]


def test_read_only_credentials_open_verify_and_answer_when_pins_are_optional(
        url, tmp_path, s3, client, monkeypatch, caplog):
    """Credentials that can only read (moto enforces the user's policy): a pin is required by
    default, so the open fails naming it; with pins optional it opens unpinned, logged once."""
    _push(tmp_path, url, "b1")
    for name, value in read_only_user(s3).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # it keeps the credentials it read
    with pytest.raises(StoreError, match="pins/b1"):
        Runtime.open(url)
    with caplog.at_level("WARNING", logger="lokg.object_store"):
        for _ in range(2):
            with Runtime.open(url, pins_required=False) as rt:
                assert not rt.pinned and rt.ask(QUESTION, llm="none").answers
    assert len([r for r in caplog.records if "pins off" in r.getMessage()]) == 1
    result = _lokg("store", "verify", "--store", url)
    assert result.exit_code == 0, result.output
    assert _pins(client, url) == []


def test_a_read_only_replica_serves_and_hot_reloads(url, tmp_path, s3, client):
    """`lokg serve --read-only` with credentials that cannot write: opens, verifies, answers,
    follows a new CURRENT; /readyz reports pins off."""
    from bench.load import wait_ready
    from lokg.testing.serving import Client

    _push(tmp_path, url, "b1")
    port = free_port()
    env = {**os.environ, **read_only_user(s3), "LOKG_CACHE_DIR": str(tmp_path / "replica")}
    proc = subprocess.Popen([sys.executable, "-m", "lokg.runtime.server", "--store", url,
                             "--read-only", "--port", str(port), "--poll-interval", "0.1",
                             "--llm-backend", "none", "--log-level", "warning"],
                            cwd=REPO, env=env)
    try:
        ready = wait_ready(f"http://127.0.0.1:{port}", 120, proc)
        assert ready["build_id"] == "b1" and ready["pins"] == "off" and ready["read_only"]
        http = Client(port)
        assert http.ask(llm="none")[2]["answers"]
        _push(tmp_path, url, "b2")
        wait_for(lambda: http.call("GET", "/readyz")[2]["build_id"] == "b2", timeout=60,
                 what="reload b2")
        assert http.ask(llm="none")[2]["build_id"] == "b2"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert _pins(client, url) == []


def test_one_service_serves_an_object_store_beside_a_local_one(url, tmp_path):
    _push(tmp_path, url, "b1")
    local = make_store(tmp_path / "beside", build_id="l1").root
    with serving({"remote": url, "local": local}, llm_backends=("none",), poll=0.1) as http:
        for name, build in (("remote", "b1"), ("local", "l1")):
            status, _, body = http.call("POST", f"/v1/stores/{name}/ask",
                                        {"question": QUESTION, "llm": "none"})
            assert status == 200 and body["build_id"] == build
        _push(tmp_path, url, "b2")
        wait_for(lambda: http.call("GET", "/v1/stores/remote/readyz")[2]["build_id"] == "b2",
                 what="remote reload b2")
        assert http.call("GET", "/v1/stores/local/readyz")[2]["build_id"] == "l1"
