"""``bert-compress serve`` as a user runs it: a real server in a child process on a free loopback port, where torch,
transformers and the rest of the training stack cannot be imported, talked to over real HTTP.

Tiny ONNX artifacts of each task (a classifier, a tagger trained on the toy NER task, a reader trained on the
synthetic SQuAD files) are served; every answer is compared with the in-process ``Predictor`` on the same inputs.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from benchmarks.http_server import ServerProcess
from compress.runtime.predictor import Predictor
from tests.conftest import make_bert
from tests.support.paths import ROOT
from tests.support.serving_env import BLOCKER, TRAINING_STACK, blocked_env

#: The server's Python: the training stack unimportable (tests/support/serving_env.py), then ``python -m compress``.
LAUNCHER = [sys.executable, "-c", BLOCKER + "import runpy\nrunpy.run_module('compress', run_name='__main__')\n",
            ",".join(TRAINING_STACK)]
TEXTS = ["a wonderful and charming film", "bad", "the plot was dull, the acting weak " * 30, "", "Café naïve — “ok”"]


def serve(model: Path, *flags: str) -> ServerProcess:
    return ServerProcess(model, [*flags, "--threads", "1"], launcher=LAUNCHER, env=blocked_env(), cwd=ROOT,
                         start_timeout=90)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve")


@pytest.fixture(scope="module")
def artifacts(root):
    """ONNX artifacts exported from tiny BERTs, each built when a test first asks for it."""
    from compress.stages.export import export_onnx

    def build(name: str) -> Path:
        from tests.support.squad import squad_splits, train_tiny_reader
        from tests.support.toy_ner import toy_tagger

        if name == "openvino":  # an OpenVINO IR of the classifier's model (the same seed)
            from compress.stages.quantize import quantize

            return quantize(make_bert(root / "ov-bert", layers=2, head=True, seed=3), root / "ov", method="openvino-fp32")
        if name == "classifier":
            folder = make_bert(root / "classifier", layers=2, head=True, seed=3)
        elif name == "tagger":
            (root / "ner").mkdir()
            folder = toy_tagger(root / "ner")[1]
        else:
            folder = train_tiny_reader(root / "qa", squad_splits(root / "squad"), make_bert(root / "encoder", layers=2))
        return export_onnx(folder, root / f"{name}-onnx")

    class Built(dict):
        def __missing__(self, name: str) -> Path:
            self[name] = build(name)
            return self[name]

    return Built()


@pytest.fixture(scope="module")
def classifier(artifacts):
    with serve(artifacts["classifier"], "--max-batch", "8", "--max-body-bytes", "4096") as server:
        yield server


def post(server: ServerProcess, body, **kwargs) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.url}/predict", content=content, headers={"Content-Type": "application/json"},
                      timeout=30, **kwargs)


def test_classifier_answers_as_the_pipeline_does_with_the_predictors_scores(classifier, artifacts):
    predictor = Predictor.load(artifacts["classifier"])
    labels, probs = predictor.predict(TEXTS)
    one = post(classifier, {"inputs": TEXTS[0]})
    assert one.status_code == 200 and one.headers["X-Batch-Size"] == "1"
    assert one.json() == [{"label": labels[0], "score": pytest.approx(float(probs[0].max()), abs=1e-5)}]
    many = post(classifier, {"inputs": TEXTS}).json()
    assert [r["label"] for r in many] == labels
    assert [r["score"] for r in many] == pytest.approx([float(p.max()) for p in probs], abs=1e-5)
    every = post(classifier, {"inputs": TEXTS[:2], "parameters": {"top_k": None}}).json()
    assert [[s["label"] for s in r] for r in every] == [sorted(predictor.label_names, key=lambda n: -p[
        predictor.label_names.index(n)]) for p in probs[:2]]
    assert post(classifier, {"inputs": "bad", "parameters": {"top_k": 1}}).json() == [
        {"label": labels[1], "score": pytest.approx(float(probs[1].max()), abs=1e-5)}]
    legacy = post(classifier, {"inputs": "bad", "parameters": {"return_all_scores": True}}).json()
    assert len(legacy) == 1 and len(legacy[0]) == predictor.num_labels
    pair = ("A man is playing a guitar.", "Someone plays an instrument.")
    _, pair_probs = predictor.predict([pair])
    answer = post(classifier, {"inputs": {"text": pair[0], "text_pair": pair[1]}}).json()
    assert answer[0]["score"] == pytest.approx(float(pair_probs[0].max()), abs=1e-5)


def test_an_openvino_artifact_serves_the_predictors_answers(artifacts):
    labels, probs = Predictor.load(artifacts["openvino"]).predict(TEXTS)
    with serve(artifacts["openvino"]) as server:
        got = post(server, {"inputs": TEXTS}).json()
    assert [r["label"] for r in got] == labels
    assert [r["score"] for r in got] == pytest.approx([float(p.max()) for p in probs], abs=1e-5)


def test_tagger_answers_entity_groups_with_character_offsets(artifacts):
    texts = ["yesterday we visited New York with Alice", "the film", ""]
    expected = Predictor.load(artifacts["tagger"]).predict(texts, aggregation="max")
    with serve(artifacts["tagger"]) as server:
        got = post(server, {"inputs": texts, "parameters": {"aggregation_strategy": "max"}}).json()
        one = post(server, {"inputs": texts[0]}).json()
    assert got == [[{"entity_group": e["type"], "score": pytest.approx(e["score"], abs=1e-5), "word": e["text"],
                     "start": e["start"], "end": e["end"]} for e in r["entities"]] for r in expected]
    assert {"entity_group": "LOC", "word": "New York", "start": 21, "end": 29}.items() <= one[0].items()
    assert got[2] == []


def test_reader_answers_spans_of_the_context(artifacts):
    questions = [("what is the key ?", "the film was long the key is blue . the music was good"),
                 ("what is the key ?", "night city the key is gold . river " * 20)]
    expected = Predictor.load(artifacts["reader"]).predict(questions)
    with serve(artifacts["reader"]) as server:
        got = post(server, {"inputs": [{"question": q, "context": c} for q, c in questions]}).json()
        one = post(server, {"inputs": {"question": questions[0][0], "context": questions[0][1]}}).json()
        missing = post(server, {"inputs": {"question": "what is the key ?"}})
        empty = post(server, {"inputs": {"question": "", "context": ""}})
        unknown = post(server, {"inputs": {"question": "q", "context": "c"}, "parameters": {"top_k": 2}})
    assert [(r["answer"], r["start"], r["end"]) for r in got] == [(e["answer"], e["start"], e["end"]) for e in expected]
    assert got[0]["score"] == pytest.approx(expected[0]["score"], abs=1e-5) and one == got[0]
    assert one["answer"] == "blue" and questions[0][1][one["start"]:one["end"]] == "blue"
    assert missing.status_code == 422 and missing.json()["field"] == "inputs.context"
    assert empty.status_code == 422 and empty.json()["field"] == "inputs.question"
    assert unknown.status_code == 422 and unknown.json()["field"] == "parameters.top_k"


@pytest.mark.parametrize("body, status, field", [
    (b'{"inputs": "unterminated', 400, "body"),
    (b'{"inputs": "caf\xe9"}', 400, "body"),  # Latin-1, not UTF-8
    (b"[" * 3000, 400, "body"),  # nested past json's recursion limit
    (b'["a list"]', 422, "body"),
    (b'{"text": "no inputs"}', 422, "text"),
    (b'{"parameters": {}}', 422, "inputs"),
    (b'{"inputs": 3}', 422, "inputs"),
    (b'{"inputs": ["ok", 3]}', 422, "inputs[1]"),
    (b'{"inputs": []}', 422, "inputs"),
    (b'{"inputs": {"text": "a"}}', 422, "inputs"),
    (b'{"inputs": "a", "parameters": {"top_k": 0}}', 422, "parameters.top_k"),
    (b'{"inputs": "a", "parameters": {"aggregation_strategy": "max"}}', 422, "parameters.aggregation_strategy"),
    (b'{"inputs": "a", "parameters": []}', 422, "parameters"),
    (b'{"inputs": "\\ud800"}', 422, "inputs"),  # a lone surrogate: valid JSON, not text
    (json.dumps({"inputs": ["x"] * 9}).encode(), 413, "inputs"),  # over --max-batch 8
    (json.dumps({"inputs": "x" * 5000}).encode(), 413, "body"),  # over --max-body-bytes 4096
])
def test_bad_input_is_a_status_naming_the_field(classifier, body, status, field):
    answer = post(classifier, body)
    assert (answer.status_code, answer.json()["field"]) == (status, field), answer.text
    assert answer.json()["error"]


def test_a_chunked_body_over_the_limit_is_413(classifier):
    answer = httpx.post(f"{classifier.url}/predict", content=iter([b'{"inputs": "', b"x" * 3000, b"y" * 3000, b'"}']),
                        timeout=30)
    assert answer.status_code == 413


def test_clients_that_disconnect_leave_the_server_serving(classifier):
    host, port = classifier.url.rsplit("/", 1)[1].split(":")
    request = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    body = json.dumps({"inputs": TEXTS}).encode()
    for sent in (body[:10], body):  # gone mid-body, and gone before the answer
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(request % len(body) + sent)
    time.sleep(0.3)
    assert post(classifier, {"inputs": "still here"}).status_code == 200
    assert httpx.get(f"{classifier.url}/health").text == "ok\n"
    assert "Traceback" not in classifier.log()
    # At least the one gone mid-body; the other may have been answered before its close was read.
    assert 'bert_compress_errors_total{reason="disconnected"}' in httpx.get(f"{classifier.url}/metrics").text


def test_health_ready_metrics_and_openapi(classifier):
    assert httpx.get(f"{classifier.url}/ready").status_code == 200
    post(classifier, {"inputs": ["a", "b"]})
    metrics = httpx.get(f"{classifier.url}/metrics").text
    for name in ("bert_compress_requests_total{status=\"200\"}", "bert_compress_request_latency_seconds_bucket",
                 "bert_compress_batch_size_bucket", "bert_compress_queue_depth", "bert_compress_errors_total"):
        assert name in metrics, name
    schema = httpx.get(f"{classifier.url}/openapi.json").json()
    assert schema["openapi"].startswith("3.") and set(schema["paths"]) >= {"/predict", "/health", "/ready", "/metrics"}
    assert schema["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]["required"] \
        == ["inputs"]


def _metric(server: ServerProcess, name: str) -> float:
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_concurrent_requests_are_answered_in_one_batch_as_the_predictor_answers(artifacts):
    texts = [f"the film was {w}" for w in ("good", "bad", "dull", "fine", "great", "weak", "superb", "long")]
    labels, probs = Predictor.load(artifacts["classifier"]).predict(texts)
    with serve(artifacts["classifier"], "--max-batch", "8", "--max-wait-ms", "3000") as server:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda t: post(server, {"inputs": t}), texts))
        batches = _metric(server, "bert_compress_batch_size_count")
    assert [a.headers["X-Batch-Size"] for a in answers] == ["8"] * 8  # all eight in one batch: full before the wait
    assert [a.json()[0]["label"] for a in answers] == labels
    assert [a.json()[0]["score"] for a in answers] == pytest.approx([float(p.max()) for p in probs], abs=1e-5)
    assert batches == 1  # this one: the warm-up batches are not traffic


def test_a_full_queue_answers_503_with_retry_after_and_then_serves(artifacts):
    with serve(artifacts["classifier"], "--max-batch", "4", "--queue-size", "4", "--max-wait-ms", "1500") as server:
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(post, server, {"inputs": ["a", "b", "c"]})  # 3 of 4: held for the batch to fill
            deadline = time.monotonic() + 10
            while _metric(server, "bert_compress_queue_depth") < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            full = post(server, {"inputs": ["d", "e"]})
            assert full.status_code == 503 and full.headers["Retry-After"] == "1", full.text
            assert waiting.result(30).status_code == 200
        assert post(server, {"inputs": ["d", "e"]}).status_code == 200


def test_a_request_past_the_timeout_is_504_and_leaves_the_queue(artifacts):
    with serve(artifacts["classifier"], "--max-wait-ms", "3000", "--request-timeout", "0.3") as server:
        started = time.monotonic()
        late = post(server, {"inputs": "slow"})
        assert late.status_code == 504 and time.monotonic() - started < 2.5
        assert _metric(server, "bert_compress_queue_depth") == 0


@pytest.mark.parametrize("kind", ["classifier", "openvino"])
def test_sigterm_finishes_the_requests_in_flight_and_exits_0(artifacts, kind):
    server = serve(artifacts[kind], "--max-batch", "8", "--max-wait-ms", "1500")
    with server, ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(post, server, {"inputs": f"text {i}"}) for i in range(3)]
        deadline = time.monotonic() + 10
        while _metric(server, "bert_compress_queue_depth") < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        code = server.stop(timeout=30)
        answers = [f.result(30) for f in futures]
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/health", timeout=2)
        log = server.log()
    assert code == 0, log[-2000:]
    assert [a.status_code for a in answers] == [200] * 3 and {a.headers["X-Batch-Size"] for a in answers} == {"3"}
    assert "Traceback" not in log and "Application shutdown complete" in log


def test_workers_each_serve_and_stop_with_the_parent(artifacts):
    with serve(artifacts["classifier"], "--workers", "2") as server:
        answers = [post(server, {"inputs": t}) for t in TEXTS]
        assert [a.status_code for a in answers] == [200] * len(TEXTS), [a.text for a in answers]
        code = server.stop(timeout=30)
        log = server.log()
    assert code == 0 and log.count("Application shutdown complete") == 2, log[-2000:]


def _docker_usable() -> bool:
    import shutil
    import subprocess

    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _docker_usable(), reason="no usable docker here (no client, or no daemon it can reach)")
def test_the_dockerfile_builds_a_slim_image_without_torch():
    import subprocess

    tag = "bert-compress-serve:test"
    built = subprocess.run(["docker", "build", "-t", tag, str(ROOT)], capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stderr[-3000:]
    listed = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "pip", tag, "list",
                             "--format=freeze"], capture_output=True, text=True, timeout=300)
    names = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert {"onnxruntime", "uvicorn", "starlette", "bert-compress"} <= names and "torch" not in names
