"""Entry point for `flask --app app …` and `gunicorn app:app`."""

from queuelog import create_app

app = create_app()
