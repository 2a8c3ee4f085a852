"""A first end-to-end pass through the API on each backend."""
from __future__ import annotations


def test_enqueue_claim_complete(client, producer, worker, admin):
    created = client.post("/jobs", json={"type": "email", "payload": {"to": "a@b.c"}},
                          headers=producer)
    assert created.status_code == 201
    assert created.headers["Location"] == f"/jobs/{created.json['id']}"
    claimed = client.post("/jobs/claim", headers=worker)
    assert claimed.status_code == 200
    assert claimed.json["worker_id"] == "mailer-1" and claimed.json["attempt"] == 1
    done = client.post(f"/jobs/{claimed.json['id']}/complete",
                       json={"attempt": 1, "result": {"ok": True}}, headers=worker)
    assert done.status_code == 200 and done.json["status"] == "completed"
    assert client.post("/jobs/claim", headers=worker).status_code == 204
    got = client.get(f"/jobs/{created.json['id']}", headers=admin).json
    assert [a["outcome"] for a in got["attempts"]] == ["completed"]


def test_a_serving_app_is_warm_before_its_first_request(tmp_path, monkeypatch):
    """Issue 15: a server's first request compiled every validator (~90 ms of its time)."""
    import gc

    import fastjsonschema

    from queuelog import create_app
    from queuelog.server.requests.check import validate
    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))  # not the test process's
    app = create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3", "SECRET_KEY": "x",
                      "BOOTSTRAP_ADMIN": False})
    try:
        def compile_(*_: object, **__: object) -> None:
            raise AssertionError("a request compiled a validator")
        monkeypatch.setattr(fastjsonschema, "compile", compile_)
        with app.app_context():
            assert validate("NewJob", {"type": "email"}) == {"type": "email"}
        assert frozen == [True]  # the start-up heap is out of the collector's full walks
    finally:
        app.extensions["queuelog.store"].close()
