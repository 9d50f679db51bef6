"""confide serve with long answers: the reply's `confide` object lists the claims."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from faultserver import running  # noqa: E402

from confide.decisions import Calibrator  # noqa: E402
from confide.runs.claims import ClaimConfig
from confide.serve.app import create_app  # noqa: E402


@pytest.mark.model
def test_serve_returns_each_claim_with_its_confidences(hf_model):
    config = ClaimConfig(grader=None, scorers=("claim_mean_logprob", "claim_ccp"),
                         threshold=0.5)
    calibrator = Calibrator("claim_mean_logprob", "platt", {"a": 2.0, "b": 1.0}, n_fit=10)
    app = create_app(hf_model, model_name="smollm2", scorers=("mean_logprob",), claims=config,
                     claims_calibrator=calibrator)
    with running(app) as url:
        reply = httpx.post(f"{url}/chat/completions", timeout=300, json={
            "model": "smollm2", "max_tokens": 32,
            "messages": [{"role": "user", "content": "Describe Paris in two sentences."}]})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    answer = body["choices"][0]["message"]["content"]
    claims = body["confide"]["claims"]
    assert claims, answer
    for claim in claims:
        assert answer[claim["start"]:claim["end"]] == claim["text"]
        assert set(claim["confidences"]) == {"claim_mean_logprob", "claim_ccp"}
        raw = claim["confidences"]["claim_mean_logprob"]
        assert claim["calibrated"] == pytest.approx(float(calibrator.predict(raw)))
        assert claim["kept"] == (claim["calibrated"] >= 0.5)
