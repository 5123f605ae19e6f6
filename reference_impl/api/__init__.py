"""The HTTP API: a tenant's few calls (create, read, history, pause/resume, delete, trigger) plus health and metrics.

``create_app`` (app.py) builds it; ``d2kit api`` (cli.py) serves it with uvicorn.
"""
