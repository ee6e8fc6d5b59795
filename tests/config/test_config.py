"""Settings from file, environment and command line; invalid config names the key, exit 2."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.cli import announce_start, main
from proxy.config import ConfigError, load_settings, without_retired

ROOT = Path(__file__).resolve().parents[2]


def test_example_config_is_valid_and_complete() -> None:
    settings = load_settings(ROOT / "config.example.yaml", environ={})
    assert settings.upstream.base_url == "http://127.0.0.1:8080"
    text = (ROOT / "config.example.yaml").read_text()
    # Every key of every section is shown (and explained) in the example.
    for section, model in settings:
        if section == "models":
            continue
        for key in type(model).model_fields:
            assert f"{key}:" in text, f"{section}.{key} missing from config.example.yaml"


def test_environment_overrides_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("upstream:\n  base_url: http://a:1\nserver:\n  port: 9000\n")
    settings = load_settings(
        path,
        environ={
            "PROXY__UPSTREAM__BASE_URL": "http://b:2/",
            "PROXY__SERVER__API_KEYS": "[key-one-0123456789, key-two-0123456789]",
            "PROXY__RETRIEVAL__LIMIT": "5",
            "PROXY__MODELS__MY-MODEL__CONTEXT_LENGTH": "8192",
        },
    )
    assert settings.upstream.base_url == "http://b:2"
    assert settings.server.port == 9000
    assert [k.key for k in settings.server.api_keys] == ["key-one-0123456789", "key-two-0123456789"]
    assert settings.retrieval.limit == 5
    assert settings.model_settings("my-model").context_length == 8192


def test_model_globs() -> None:
    settings = load_settings(
        None, environ={}, overrides={"models": {"base-*": {"adapter": "text", "format": "alpaca"}}}
    )
    assert settings.model_settings("base-7b").adapter == "text"
    assert settings.model_settings("chat-7b").adapter == "chat"


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("upstream:\n  base_url: ftp://x\n", "upstream.base_url"),
        ("server:\n  port: -1\n", "server.port"),
        ("retrieval:\n  limit: 11\n", "retrieval.limit"),
        ("server:\n  colour: red\n", "server.colour"),
        ("vector_store:\n  mode: cloud\n", "vector_store.mode"),
    ],
)
def test_invalid_config_names_the_key(tmp_path: Path, yaml_text: str, key: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=f"config key {key}"):
        load_settings(path, environ={})


def test_cli_exit_code_2_on_invalid_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server:\n  port: nope\n")
    assert main(["--config", str(path)]) == 2
    assert "config key server.port" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2


def test_several_workers_refuse_an_embedded_store(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workers", "2"]) == 2
    assert "vector_store.mode: server" in capsys.readouterr().err


def test_help_explains_everything() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    for flag in ("--config", "--host", "--port", "--upstream", "--workers", "PROXY__"):
        assert flag in result.stdout


def test_a_bad_custom_format_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(
        "PROXY__FORMATS__CUSTOM", "{evil: {templates: {user: '{{ content.__class__ }}'}}}"
    )
    assert main([]) == 2
    assert "config key formats" in capsys.readouterr().err


def test_keys_have_names_and_plain_keys_are_named_by_their_digest() -> None:
    settings = load_settings(
        None,
        environ={},
        overrides={
            "server": {
                "api_keys": [
                    "plain-secret-0001",
                    {"name": "team-a", "key": "secret-a-0123456789"},
                    {"name": "ops", "key": "secret-ops-0123456789", "admin": True},
                ]
            }
        },
    )
    plain, team, ops = settings.server.api_keys
    digest = hashlib.sha256(b"plain-secret-0001").hexdigest()[:12]
    assert (plain.name, plain.key, plain.admin) == (f"key-{digest}", "plain-secret-0001", False)
    assert (team.name, team.admin) == ("team-a", False)
    assert (ops.name, ops.admin) == ("ops", True)
    # The same plain key keeps its identity wherever it stands in the list.
    keys = ["other-key-0123456789", "plain-secret-0001"]
    again = load_settings(None, environ={}, overrides={"server": {"api_keys": keys}})
    assert again.server.api_keys[1].name == plain.name


def test_a_key_name_must_be_a_plain_identifier() -> None:
    with pytest.raises(ConfigError, match=r"server\.api_keys\.0\.name"):
        keys = [{"name": "a b/c", "key": "k" * 20}]
        load_settings(None, environ={}, overrides={"server": {"api_keys": keys}})


@pytest.mark.parametrize("bad", ["", "short"])
def test_empty_or_short_keys_stop_the_proxy(
    bad: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROXY__SERVER__API_KEYS", json.dumps(["a-long-enough-key-0001", bad]))
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "config key server.api_keys.1.key" in err  # the position of the bad key
    assert "at least 16 characters" in err


def test_a_key_with_surrounding_spaces_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"server\.api_keys\.0\.key"):
        load_settings(None, environ={}, overrides={"server": {"api_keys": [" " * 20]}})


def test_the_compose_replica_config_is_valid_and_shares_files_and_index() -> None:
    settings = load_settings(ROOT / "deploy" / "replica.yaml", environ={})
    assert (settings.files.backend, settings.vector_store.mode) == ("s3", "server")


def test_files_s3_needs_a_bucket_and_a_plain_prefix() -> None:
    with pytest.raises(ConfigError, match=r"files\.bucket is required"):
        load_settings(None, environ={"PROXY__FILES__BACKEND": "s3"})
    with pytest.raises(ConfigError, match=r"files\.prefix"):
        load_settings(None, environ={"PROXY__FILES__PREFIX": "a/../b"})
    settings = load_settings(
        None,
        environ={
            "PROXY__FILES__BACKEND": "s3",
            "PROXY__FILES__BUCKET": "b",
            "PROXY__FILES__PREFIX": "/team/proxy/",
        },
    )
    assert settings.files.prefix == "team/proxy"


def test_a_retired_key_is_ignored_and_named_while_an_unknown_one_is_still_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A config copied from an older config.example.yaml still sets the removed experiments.
    path = tmp_path / "c.yaml"
    path.write_text(
        "retrieval:\n  history:\n    region: 0.0\n    terms_by_meaning: false\n    turns: 3\n"
        "  rewrite:\n    check: false\n"
    )
    settings = load_settings(path)
    assert settings.retrieval.history.turns == 3  # the rest of the section still counts
    assert settings.retired == [
        "config key retrieval.history.region is ignored: an experiment measured as losing,"
        " removed (2026-12-04)",
        "config key retrieval.history.terms_by_meaning is ignored: an experiment measured as"
        " losing, removed (2026-12-04)",
        "config key retrieval.rewrite.check is ignored: an experiment measured as losing,"
        " removed (2026-12-04)",
    ]
    announce_start(settings)
    assert "retrieval.history.region is ignored" in capsys.readouterr().err
    assert load_settings().retired == []
    path.write_text("retrieval:\n  history:\n    regoin: 0.0\n")
    with pytest.raises(ConfigError, match=r"retrieval\.history\.regoin: unknown key"):
        load_settings(path)


def test_dropping_a_retired_key_leaves_the_data_as_it_was() -> None:
    data = {"retrieval": {"history": {"both": 1.0, "turns": 2}}, "server": {"port": 1}}
    kept, notes = without_retired(data)
    assert kept == {"retrieval": {"history": {"turns": 2}}, "server": {"port": 1}}
    assert data["retrieval"]["history"] == {"both": 1.0, "turns": 2}
    assert len(notes) == 1 and "retrieval.history.both" in notes[0]
