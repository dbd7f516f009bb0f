"""`kraftsman cluster serve` as a subprocess: start, serve a real client, SIGTERM, checkpoint;
bad --auth files exit 2 naming the field."""

from __future__ import annotations

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


def test_serve_then_sigterm_checkpoints(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert subprocess.run(kraftsman("apply", "-f", str(ROOT / "examples" / "00-cluster.yaml"),
                                    "--state-dir", str(state)),
                          capture_output=True, timeout=120).returncode == 0
    proc = subprocess.Popen(kraftsman("cluster", "serve", "--state-dir", str(state),
                                      "--listen", "127.0.0.1:0", "--time-scale", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        bootstrap = line.split()[-1]
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
