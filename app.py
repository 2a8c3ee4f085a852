"""WSGI entry point: ``gunicorn 'app:app'`` or ``flask --app app``."""
from queuelog import create_app

app = create_app()
