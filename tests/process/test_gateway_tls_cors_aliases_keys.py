"""Issue 33, the gateway's findings, over real HTTP against the stand-in engine (a real
process): ``/v1/models`` answered from the policy while the engine starts; model
aliases; CORS; TLS with a certificate reloaded from its files; per-key limits and
counters."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import httpx
from prometheus_client import generate_latest

from agent_supervisor.gateway.models import served_names
from tests.helpers.gateway_rig import Rig, engine_saw, start_engine, stop_engine
from tests.helpers.policies import fake_engine_policy

NAMED = [{"name": "fast", "args": {"--served-model-name": "fake-model"}}]


def test_issue_33_served_names_from_the_engine_arguments() -> None:
    assert served_names("vllm", ["serve", "/m/x", "--served-model-name", "a", "b",
                                 "--port", "1"]) == ["a", "b"]
    assert served_names("vllm", ["serve", "/m/x", "--port", "1"]) == ["/m/x"]
    assert served_names("vllm", ["-m", "vllm.entrypoints.openai.api_server",
                                 "--model=/m/y"]) == ["/m/y"]
    assert served_names("llama_cpp", ["-m", "/m/q.gguf", "--alias", "qwen"]) == ["qwen"]
    assert served_names("llama_cpp", ["-m", "/m/q.gguf"]) == ["/m/q.gguf"]
    assert served_names("vllm", ["fake_engine.py", "--port", "1"]) == []


async def test_issue_33_models_answer_at_once_while_the_engine_starts(tmp_path: Path) -> None:
    rig = Rig(tmp_path, modes=NAMED)
    await rig.gw.start()                       # held: the engine is not started yet
    try:
        async with httpx.AsyncClient() as c:
            t0 = time.monotonic()
            r = await c.get(rig.url + "/v1/models", timeout=5)
            took = time.monotonic() - t0
            assert r.status_code == 200 and took < 1.0, (r.status_code, took)
            body = r.json()
            assert [m["id"] for m in body["data"]] == ["fake-model"]
            assert body["data"][0]["supervisor"] == {
                "mode": "fast", "rung": 0, "held": True, "shed": False,
                "engine_ready": False}
            # Serving: the engine's own answer, with the mode as before.
            rig.engine = start_engine(rig.policy.engine.port)
            rig.gw.release(0)
            r = await c.get(rig.url + "/v1/models", timeout=5)
            assert r.json()["data"][0]["supervisor"] == {
                "mode": "fast", "rung": 0, "held": False, "shed": False}
            # Killed and held for the restart: answered from the policy again.
            stop_engine(rig.engine)
            await rig.gw.hold("restart: engine_exited", drain=False)
            t0 = time.monotonic()
            r = await c.get(rig.url + "/v1/models", timeout=5)
            assert r.status_code == 200 and time.monotonic() - t0 < 1.0
            assert r.json()["data"][0]["id"] == "fake-model"
    finally:
        await rig.gw.stop()
        if rig.engine is not None and rig.engine.poll() is None:
            stop_engine(rig.engine)


async def test_issue_33_model_aliases_are_forwarded_as_the_served_name(
        tmp_path: Path) -> None:
    rig = Rig(tmp_path, modes=NAMED, gateway={"model_aliases": {"gpt-4o": "fake-model",
                                                               "ghost": "not-served"}})
    await rig.gw.start()
    try:
        async with httpx.AsyncClient(base_url=rig.url, timeout=5) as c:
            # Starting: the policy's answer lists the alias too (not one whose target
            # is not served).
            ids = [m["id"] for m in (await c.get("/v1/models")).json()["data"]]
            assert ids == ["fake-model", "gpt-4o"]
            rig.engine = start_engine(rig.policy.engine.port)
            rig.gw.release(0)
            msg = [{"role": "user", "content": "hi"}]
            answers = [
                await c.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": msg}),
                await c.post("/v1/completions", json={"model": "gpt-4o", "prompt": "hi"}),
                await c.post("/v1/responses", json={"model": "gpt-4o", "input": "hi"}),
                await c.post("/v1/messages", json={"model": "gpt-4o", "max_tokens": 4,
                                                   "messages": msg}),
                await c.post("/v1/chat/completions", json={"model": "other", "messages": msg}),
                # The token counters name the model too (vLLM answers 404 for an unknown
                # one): Claude Code counts under the name it was configured with.
                await c.post("/tokenize", json={"model": "gpt-4o", "prompt": "hi"}),
                await c.post("/v1/messages/count_tokens", json={"model": "gpt-4o",
                                                                "messages": msg}),
                await c.post("/tokenize", content=b"not json"),  # as sent: the engine says
            ]
            assert [a.status_code for a in answers] == [200, 200, 404, 200, 200, 200, 404, 400]
            seen = httpx.get(f"http://127.0.0.1:{rig.policy.engine.port}/debug/models"
                             ).json()["models"]
            assert seen == [["/v1/chat/completions", "fake-model"],
                            ["/v1/completions", "fake-model"],
                            ["/v1/responses", "fake-model"],
                            ["/v1/messages", "fake-model"],
                            ["/v1/chat/completions", "other"],
                            ["/tokenize", "fake-model"],
                            ["/v1/messages/count_tokens", "fake-model"]]
            # The answer's model is the engine's own.
            assert answers[0].json()["model"] == "fake-model"
            models = (await c.get("/v1/models")).json()["data"]
            assert [m["id"] for m in models] == ["fake-model", "gpt-4o"]
            assert models[1]["supervisor"]["mode"] == "fast"
    finally:
        await rig.gw.stop()
        if rig.engine is not None and rig.engine.poll() is None:
            stop_engine(rig.engine)


async def test_issue_33_cors_preflight_without_a_key_and_allowed_origins_only(
        tmp_path: Path) -> None:
    key = hashlib.sha256(b"agent-a").hexdigest()
    gateway = {"auth": "keys", "api_keys": [{"name": "a", "sha256": key}],
               "cors_allow_origins": ["https://app.example.com"]}
    async with Rig(tmp_path, gateway=gateway) as rig, \
            httpx.AsyncClient(base_url=rig.url, timeout=5) as c:
        asks = {"Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type"}
        r = await c.options("/v1/chat/completions",
                            headers={"Origin": "https://app.example.com", **asks})
        assert r.status_code == 204
        assert r.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "POST" in r.headers["access-control-allow-methods"]
        assert r.headers["access-control-allow-headers"] == "authorization, content-type"
        assert r.headers["vary"] == "Origin"
        # Not listed: no CORS header at all (and the key check as before).
        r = await c.options("/v1/chat/completions",
                            headers={"Origin": "https://evil.example", **asks})
        assert r.status_code == 401
        assert not [h for h in r.headers if h.startswith("access-control-")]
        # The actual request from the allowed origin: its answer says so, and exposes
        # the supervisor's headers; an error from the gateway too.
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
        r = await c.post("/v1/chat/completions", json=body, headers={
            "Origin": "https://app.example.com", "Authorization": "Bearer agent-a"})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "x-supervisor-mode" in r.headers["access-control-expose-headers"]
        r = await c.post("/v1/chat/completions", json=body,
                         headers={"Origin": "https://app.example.com"})
        assert r.status_code == 401
        assert r.headers["access-control-allow-origin"] == "https://app.example.com"
        r = await c.post("/v1/chat/completions", json=body, headers={
            "Origin": "https://evil.example", "Authorization": "Bearer agent-a"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        assert not [p for m, p in engine_saw(rig) if m == "OPTIONS"]


def _certificate(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 made by the openssl command line."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", f"/CN={name}", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


async def _served_by(url: str, trusted: Path) -> int | str:
    """The status of GET /livez over a new connection trusting only ``trusted``, or the
    TLS error's name."""
    context = ssl.create_default_context(cafile=str(trusted))
    async with httpx.AsyncClient(verify=context, timeout=5) as c:
        try:
            return (await c.get(url + "/livez")).status_code
        except httpx.ConnectError as exc:
            return "refused: " + type(exc.__cause__ or exc).__name__


async def test_issue_33_tls_serves_and_a_reload_reads_the_new_certificate(
        tmp_path: Path) -> None:
    made = tmp_path / "made"
    made.mkdir()
    old_cert, old_key = _certificate(made, "first")
    new_cert, new_key = _certificate(made, "second")
    cert, key = tmp_path / "gateway.crt", tmp_path / "gateway.key"
    shutil.copy(old_cert, cert)
    shutil.copy(old_key, key)
    tls = {"certificate_file": "gateway.crt", "key_file": "gateway.key"}  # policy-relative
    async with Rig(tmp_path, gateway={"tls": tls}) as rig:
        url = rig.url.replace("http://", "https://")
        assert await _served_by(url, old_cert) == 200
        context = ssl.create_default_context(cafile=str(old_cert))
        async with httpx.AsyncClient(verify=context, timeout=5) as c:
            r = await c.post(url + "/v1/completions", json={"model": "fake-model",
                                                            "prompt": "hi"})
            assert r.status_code == 200 and r.json()["choices"][0]["text"] == "!"
        # The files swapped (a renewal), then the policy reloaded: new connections get
        # the new certificate.
        shutil.copy(new_cert, cert)
        shutil.copy(new_key, key)
        assert await _served_by(url, old_cert) == 200        # not re-read on its own
        rig.gw.apply_policy(rig.policy, 0)
        assert await _served_by(url, new_cert) == 200
        assert str(await _served_by(url, old_cert)).startswith("refused")
        # A bad pair is refused with the reason; the certificate in use stays.
        key.write_text("not a key")
        assert "gateway.tls" in (rig.gw.reload_tls(rig.policy) or "")
        assert await _served_by(url, new_cert) == 200


def test_issue_33_a_reload_cannot_turn_tls_on_or_off(tmp_path: Path) -> None:
    from agent_supervisor.policy.gateway import GatewayTls
    from agent_supervisor.runtime.reload import fixed_sections
    plain = fake_engine_policy(tmp_path)
    tls = GatewayTls(certificate_file="c.pem", key_file="k.pem")
    secure = plain.model_copy(update={"gateway": plain.gateway.model_copy(
        update={"tls": tls})})
    assert fixed_sections(plain, secure) == ["gateway.tls on/off"]
    assert fixed_sections(secure, secure) == []


async def test_issue_33_per_key_limits_and_counters(tmp_path: Path) -> None:
    def digest(key: bytes) -> str:
        return hashlib.sha256(key).hexdigest()
    keys = [{"name": "alpha", "sha256": digest(b"key-a"), "max_concurrency": 1},
            {"name": "beta", "sha256": digest(b"key-b")},
            {"name": "gamma", "sha256": digest(b"key-c"), "requests_per_minute": 2}]
    modes = [{"name": "fast", "gateway": {"max_concurrency": 4}}]
    async with Rig(tmp_path, engine_args=("--tokens", "10", "--token-delay", "0.05"),
                   modes=modes, gateway={"auth": "keys", "api_keys": keys}) as rig, \
            httpx.AsyncClient(base_url=rig.url, timeout=10) as c:
        def chat_as(key: str):
            return c.post("/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                          json={"model": "fake-model",
                                "messages": [{"role": "user", "content": "hi"}]})
        slow = asyncio.ensure_future(chat_as("key-a"))          # takes about 0.5 s
        while rig.metric('supervisor_gateway_key_requests_in_flight{key="alpha"}') < 1:
            await asyncio.sleep(0.02)
        second = await chat_as("key-a")
        assert second.status_code == 429 and second.headers["retry-after"] == "1"
        assert second.json()["error"]["code"] == "key_concurrency"
        anthropic_shape = await c.post("/v1/messages", headers={"x-api-key": "key-a"}, json={
            "model": "fake-model", "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}]})
        assert anthropic_shape.status_code == 429
        assert anthropic_shape.json()["error"]["type"] == "rate_limit_error"
        assert (await chat_as("key-b")).status_code == 200     # the other key is served
        assert (await slow).status_code == 200
        assert (await chat_as("key-a")).status_code == 200     # its place came back
        # A rate: the third request within the minute waits for the oldest to leave it.
        assert [(await chat_as("key-c")).status_code for _ in range(2)] == [200, 200]
        third = await chat_as("key-c")
        assert third.status_code == 429 and third.json()["error"]["code"] == "key_rate"
        assert 1 <= int(third.headers["retry-after"]) <= 60
        # Counters by the key's name (never the key), in-flight back to 0.
        assert rig.metric('supervisor_gateway_key_requests_total{key="alpha"}') == 4
        assert rig.metric('supervisor_gateway_key_requests_total{key="beta"}') == 1
        assert rig.metric('supervisor_gateway_key_requests_total{key="gamma"}') == 3
        assert rig.metric('supervisor_gateway_key_rejections_total'
                          '{key="alpha",reason="key_concurrency"}') == 2
        assert rig.metric('supervisor_gateway_key_requests_in_flight{key="alpha"}') == 0
        text = generate_latest(rig.registry).decode()
        assert "key-a" not in text and digest(b"key-a") not in text


async def test_issue_33_the_supervisor_reaches_its_tls_gateway_over_https(
        tmp_path: Path) -> None:
    """``calibrate --profiles fleet`` reads ``/gateway/shapes`` and ``supervisor status``
    shows the gateway's URL: both said http:// to a gateway serving TLS only (the
    request failed at the handshake; the URL shown could not be used)."""
    import asyncio

    import pytest

    from agent_supervisor.load.fleet_shapes import fetch_shapes
    from agent_supervisor.policy.urls import gateway_url
    cert, _key = _certificate(tmp_path, "gateway")
    _certificate(tmp_path, "other")
    tls = {"certificate_file": "gateway.crt", "key_file": "gateway.key"}
    async with Rig(tmp_path, gateway={"tls": tls, "sample_request_shapes": 4}) as rig:
        port = rig.policy.gateway.port
        assert gateway_url(rig.policy, "/v1") == f"https://127.0.0.1:{port}/v1"
        context = ssl.create_default_context(cafile=str(cert))
        async with httpx.AsyncClient(verify=context, timeout=5) as c:
            r = await c.post(f"https://127.0.0.1:{port}/v1/chat/completions", json={
                "model": "fake-model", "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200
        shapes = await asyncio.to_thread(fetch_shapes, rig.policy)
        assert [s["max_tokens"] for s in shapes] == [5]
        # Only the certificate the policy names is trusted.
        other = rig.policy.model_copy(update={"gateway": rig.policy.gateway.model_copy(
            update={"tls": rig.policy.gateway.tls.model_copy(
                update={"certificate_file": str(tmp_path / "other.crt")})})})
        with pytest.raises(ValueError, match="needs the running gateway at https://"):
            await asyncio.to_thread(fetch_shapes, other)
    plain = Rig(tmp_path / "plain").policy
    assert gateway_url(plain, "/v1") == f"http://127.0.0.1:{plain.gateway.port}/v1"
