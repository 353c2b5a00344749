"""The framework ceiling: a bare Flask app with one no-op endpoint.

It is served by exactly the same gunicorn command line as queuelog and hit by
the same client code, so the difference between the two is what queuelog's
own work (auth, validation, database) costs on top of Flask + gunicorn.
"""

from flask import Flask, jsonify, request

app = Flask(__name__)


@app.post("/noop")
def noop():
    # Parse the body like queuelog would, so JSON decoding is in the ceiling too.
    body = request.get_json(silent=True) or {}
    return jsonify({"ok": True, "n": body.get("n")}), 200


@app.get("/")
def index():
    """Readiness probe target for the harness."""
    return jsonify({"ok": True})
