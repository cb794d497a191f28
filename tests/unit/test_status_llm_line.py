"""`mongomem status` names the LLM endpoint and model, never the key, and the stand-in."""

from __future__ import annotations

from mongomem.cli.operate import llm_line
from mongomem.settings import LLMSettings, load_settings


def test_llm_line_names_endpoint_model_and_stand_in_but_not_the_key() -> None:
    real = load_settings(
        llm=LLMSettings(base_url="https://llm.example/v1", api_key="sk-secret", model="m-1")
    )
    assert llm_line(real) == "LLM: https://llm.example/v1  model m-1  stand-in: no"
    stand_in = load_settings(
        llm=LLMSettings(base_url="http://127.0.0.1:9/v1", api_key="stand-in", use_stand_in=True)
    )
    assert "stand-in: yes: a rule-based STAND-IN, NOT A MODEL" in llm_line(stand_in)
    assert "sk-secret" not in llm_line(real)
    assert "none configured" in llm_line(load_settings(llm=LLMSettings(base_url=None)))
