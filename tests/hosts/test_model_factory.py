"""``--model-factory`` / ``SHIPAGENT_MODEL_FACTORY``: the one hook ``serve`` and ``worker`` share."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.models.function import FunctionModel

from shipagent.errors import ConfigError
from shipagent.hosts.cli._model_factory import ENV, load_model_factory


def test_a_module_beside_ship_json_a_callable_or_a_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    (tmp_path / "mymodels_mf.py").write_text(
        "from pydantic_ai.models.test import TestModel\n"
        "MODEL = TestModel(custom_output_text='as an object')\n"
        "def build():\n    return TestModel(custom_output_text='from a function')\n",
        encoding="utf-8",
    )
    built = load_model_factory("mymodels_mf:build", tmp_path)
    assert built is not None and built.custom_output_text == "from a function"  # type: ignore[attr-defined]
    given = load_model_factory("mymodels_mf:MODEL", tmp_path)
    assert given is not None and given.custom_output_text == "as an object"  # type: ignore[attr-defined]
    assert load_model_factory(None, tmp_path) is None  # no spec, no variable: ship.json's llm


def test_the_environment_variable_names_it_for_every_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "tests.support.durable_worker:scripted_model")
    model = load_model_factory(None, tmp_path)
    assert isinstance(model, FunctionModel) and model.model_name == "durable-scripted"
    assert load_model_factory(None, tmp_path, use_env=False) is None  # serve -m MODEL wins over it


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("no_colon", "--model-factory 'no_colon': expected MODULE:ATTR (e.g. mymodels:build)"),
        ("no_such_module_mf:x", "--model-factory 'no_such_module_mf:x': ModuleNotFoundError: "),
        ("json:dumps", "--model-factory 'json:dumps' failed: TypeError: dumps() missing 1 required"),
        ("json:__name__", "--model-factory 'json:__name__' gave a str, not a pydantic-ai Model"),
    ],
)
def test_bad_specs_say_what_is_wrong(tmp_path: Path, spec: str, error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_model_factory(spec, tmp_path)
    assert str(caught.value).startswith(error)
