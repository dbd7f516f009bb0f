"""`kraftsman cluster serve` as a subprocess: start, serve a real client, SIGTERM, checkpoint;
bad --auth files exit 2 naming the field."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as KTP

from kraftsman.cli import main

ROOT = Path(__file__).resolve().parents[2]


def kraftsman(*args: str) -> list[str]:
    return [sys.executable, "-c", "from kraftsman.cli import main; raise SystemExit(main())",
            *args]


def serve(state: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """The example cluster created in ``state`` and served by a subprocess: (it, bootstrap)."""
    assert subprocess.run(kraftsman("apply", "-f", str(ROOT / "examples" / "00-cluster.yaml"),
                                    "--state-dir", str(state)),
                          capture_output=True, timeout=120).returncode == 0
    proc = subprocess.Popen(kraftsman("cluster", "serve", "--state-dir", str(state),
                                      "--listen", "127.0.0.1:0", *flags),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise AssertionError(f"cluster serve did not start: {line}{proc.communicate()[1]}")
    return proc, line.split()[-1]


def test_serve_then_sigterm_checkpoints(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc, bootstrap = serve(state, "--time-scale", "0")
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        topic = admin.list_topics()[0]
        target = [b["broker_id"] for b in admin.describe_cluster()["brokers"]][-1:]
        admin.alter_partition_reassignments({KTP(topic, 0): target})
        admin.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "OPEN" in err and "checkpointing" in err
    listed = subprocess.run(kraftsman("reassignments", "list", "--state-dir", str(state)),
                            capture_output=True, text=True, timeout=60)
    assert f"{topic}-0" in listed.stdout  # the change survived the shutdown


def test_a_clock_that_stops_stops_the_server_with_one_line(tmp_path: Path) -> None:
    """The state directory removed under a running server (`rm -rf .kraftsman`, which the
    README gives as the way to start over): its next checkpoint fails, the simulated clock
    stops, and a server that no longer advances its cluster would leave every client
    waiting forever. So `cluster serve` exits 1 with one line naming the failure."""
    state = tmp_path / "state"
    proc, _ = serve(state, "--checkpoint-every", "0.2")
    try:
        shutil.rmtree(state)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert [x for x in lines if x.startswith("error:")] == lines[-1:], err
    assert lines[-1].startswith(
        "error: the embedded cluster's clock stopped (FileNotFoundError: [Errno 2] No such "
        f"file or directory: '{state / 'clusters' / 'demo' / 'dataplane.json.tmp'}'); it no "
        "longer advances, so the server stopped"), lines[-1]
    assert lines[-1].endswith("start `kraftsman cluster serve` again")


def test_checkpoint_every_must_be_positive(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cluster", "serve", "--state-dir", str(tmp_path), "--checkpoint-every", "0"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --checkpoint-every: must be a positive number of seconds")


@pytest.mark.parametrize(("text", "field"), [
    ("users: []\n", "users"),
    ("users:\n  - {name: a, password: p}\nacls:\n  - {principal: 'User:b', operations: [ALTER]}\n",
     "acls[0].principal"),
    ("users:\n  - {name: a, password: p}\nacls:\n  - {principal: 'User:a', operations: [FLY]}\n",
     "acls[0].operations[0]"),
    ("users:\n  - {name: a}\n", "users[0].password"),
    ("- just a list\n", "mapping"),
    ("users: [\n", "not valid YAML"),
])
def test_bad_auth_file_exits_2_naming_the_field(tmp_path: Path, text: str, field: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "auth.yaml"
    f.write_text(text)
    rc = main(["cluster", "serve", "--state-dir", str(tmp_path / "s"), "--auth", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and field in err and "Traceback" not in err


def test_bad_listen_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "serve", "--state-dir", str(tmp_path), "--listen", "nope"]) == 2
    assert "--listen" in capsys.readouterr().err
    assert main(["cluster", "serve", "--state-dir", str(tmp_path), "--listen",
                 "127.0.0.1:\u00b9"]) == 2  # '¹': str.isdigit, but int() raises
    assert "--listen '127.0.0.1:\u00b9': expected HOST:PORT" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "named"), [
    (["--tls-cert", "{pki}/server.pem"], "--tls-key"),
    (["--tls-client-ca", "{pki}/ca.pem"], "--tls-client-ca"),
    (["--tls-cert", "{pki}/server.pem", "--tls-key", "{pki}/missing.key"], "--tls-key"),
    (["--tls-cert", "{pki}/server.pem", "--tls-key", "{pki}/client.key"], "--tls-cert/--tls-key"),
    (["--tls-cert", "{pki}/server.pem", "--tls-key", "{pki}/server.key",
      "--tls-client-ca", "{pki}/server.key"], "--tls-client-ca"),
])
def test_bad_tls_flags_exit_2_naming_the_flag(tmp_path: Path, flags: list[str], named: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from tests.tls_certs import make_pki
    make_pki(tmp_path / "pki")
    args = [f.format(pki=tmp_path / "pki") for f in flags]
    rc = main(["cluster", "serve", "--state-dir", str(tmp_path / "s"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and named in err and "Traceback" not in err, err


def test_auth_file_mechanisms_and_iterations_are_validated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "auth.yaml"
    f.write_text("mechanisms: [GSSAPI]\nusers:\n  - {name: a, password: p}\n")
    assert main(["cluster", "serve", "--state-dir", str(tmp_path), "--auth", str(f)]) == 2
    assert "mechanisms[0]" in capsys.readouterr().err
    f.write_text("scramIterations: 10\nusers:\n  - {name: a, password: p}\n")
    assert main(["cluster", "serve", "--state-dir", str(tmp_path), "--auth", str(f)]) == 2
    assert "scramIterations" in capsys.readouterr().err
