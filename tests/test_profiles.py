"""Local model profiles: the documented example loads; every bad profile stops the start
with a message naming the file, the model and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgegw.local.profiles import Timeouts
from edgegw.settings import Settings, SettingsError

EXAMPLE = """
SERVER_PORT: 8081
local_models:
  - name: qwen3-8b
    workers:
      - {url: "http://10.0.0.5:30000", pool: default, machine_profile: h100}
      - {url: "http://10.0.0.6:30000/", pool: batch}
    tokenizer: tokenizers/qwen3.json
    context_window: 32768
    max_output_tokens: 8192
    inputs: {image: false}
    chat_template_kwargs: {enable_thinking: false}
    lora_adapters: [sql-lora]
    default_sampling: {temperature: 0.7}
    timeouts: {first_chunk_s: 90, inter_chunk_s: 15, overall_s: 600}
    remote_fallback: openai/gpt-4o-mini
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "tokenizers").mkdir(exist_ok=True)
    (tmp_path / "tokenizers" / "qwen3.json").write_text("{}")
    path = tmp_path / "edgegw.yaml"
    path.write_text(text)
    return path


def test_documented_example_loads(tmp_path: Path) -> None:
    s = Settings.load(environ={}, config_file=write(tmp_path, EXAMPLE))
    assert s.port == 8081
    (m,) = s.local_models
    assert m.name == "qwen3-8b"
    assert [(w.url, w.pool, w.machine_profile) for w in m.workers] == [
        ("http://10.0.0.5:30000", "default", "h100"),
        ("http://10.0.0.6:30000", "batch", None),
    ]
    assert m.tokenizer == (tmp_path / "tokenizers" / "qwen3.json").resolve()
    assert (m.context_window, m.max_output_tokens, m.image_inputs) == (32768, 8192, False)
    assert dict(m.chat_template_kwargs) == {"enable_thinking": False}
    assert m.lora_adapters == {"sql-lora"}
    assert dict(m.default_sampling) == {"temperature": 0.7}
    assert m.timeouts == Timeouts(90, 15, 600)
    assert m.remote_fallback == "openai/gpt-4o-mini"


def test_directory_of_profiles(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "a.yaml").write_text("name: model-a\nworkers: [{url: 'http://127.0.0.1:30000'}]\n")
    (models / "b.yml").write_text("name: model-b\nworkers: [{url: 'http://127.0.0.1:30001'}]\n")
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text("local_models: models\n")
    s = Settings.load(environ={}, config_file=cfg)
    assert [m.name for m in s.local_models] == ["model-a", "model-b"]


def test_first_chunk_timeout_clamped_to_overall(tmp_path: Path) -> None:
    text = EXAMPLE.replace("first_chunk_s: 90", "first_chunk_s: 900")
    (m,) = Settings.load(environ={}, config_file=write(tmp_path, text)).local_models
    assert m.timeouts.first_chunk_s == 600


BASE = "local_models:\n  - name: m1\n    workers: [{url: 'http://127.0.0.1:30000'}]\n"


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("    colour: blue\n", "colour: unknown key"),
        ("    context_window: -5\n", "context_window:"),
        ("    context_window: 100\n    max_output_tokens: 200\n", "max_output_tokens:"),
        ("    tokenizer: missing.json\n", "tokenizer:"),
        ("    inputs: {image: 'yes'}\n", "inputs.image:"),
        ("    lora_adapters: sql\n", "lora_adapters:"),
        ("    default_sampling: {temperature: -1}\n", "default_sampling.temperature:"),
        ("    default_sampling: {mirostat: 1}\n", "default_sampling.mirostat:"),
        ("    timeouts: {overall_s: 0}\n", "timeouts.overall_s:"),
        ("    timeouts: {idle_s: 3}\n", "timeouts.idle_s:"),
        ("    remote_fallback: gpt-4o\n", "remote_fallback:"),
        ("    chat_template_kwargs: [1]\n", "chat_template_kwargs:"),
    ],
)
def test_bad_profile_names_file_model_and_key(tmp_path: Path, extra: str, key: str) -> None:
    path = write(tmp_path, BASE + extra)
    with pytest.raises(SettingsError) as info:
        Settings.load(environ={}, config_file=path)
    message = str(info.value)
    assert message.startswith(f"{path}: model 'm1': ")
    assert key in message


@pytest.mark.parametrize(
    ("workers", "key"),
    [
        ("[]", "workers:"),
        ("[{url: 'ftp://x'}]", "workers[0].url:"),
        ("[{url: 'http://x', pool: 'bad pool'}]", "workers[0].pool:"),
        ("[{url: 'http://x', machine_profile: 'a/b'}]", "workers[0].machine_profile:"),
        ("[{url: 'http://x', gpu: 1}]", "workers[0].gpu:"),
    ],
)
def test_bad_workers(tmp_path: Path, workers: str, key: str) -> None:
    path = write(tmp_path, f"local_models:\n  - name: m1\n    workers: {workers}\n")
    with pytest.raises(SettingsError) as info:
        Settings.load(environ={}, config_file=path)
    assert key in str(info.value) and "model 'm1'" in str(info.value)


def test_bad_names_and_duplicates(tmp_path: Path) -> None:
    path = write(
        tmp_path, "local_models:\n  - name: 'openai/x'\n    workers: [{url: 'http://x'}]\n"
    )
    with pytest.raises(SettingsError, match=r"local_models\[0\]: name:"):
        Settings.load(environ={}, config_file=path)
    path = write(tmp_path, BASE + BASE.split("\n", 1)[1])
    with pytest.raises(SettingsError, match="model 'm1': name: declared twice"):
        Settings.load(environ={}, config_file=path)
    path = write(tmp_path, "local_models: {name: m1}\n")
    with pytest.raises(SettingsError, match="local_models: expected a list"):
        Settings.load(environ={}, config_file=path)
