"""The whole happy path through the API, as the README walks it."""


def test_a_job_goes_from_enqueue_to_completed(client, producer, worker, enqueue, claim):
    job = enqueue(type="email", payload={"to": "a@example.com"}, priority="medium")
    claimed = claim()
    assert claimed["id"] == job["id"] and claimed["status"] == "running"
    done = client.post(
        f"/jobs/{job['id']}/complete",
        json={"claim_token": claimed["claim_token"], "result": {"sent": True}},
        headers=worker,
    )
    assert done.status_code == 200
    assert done.get_json()["status"] == "completed"
    assert client.get(f"/jobs/{job['id']}", headers=producer).get_json()["result"] == {"sent": True}
