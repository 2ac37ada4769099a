"""The run inspector: behest's HTTP side, server-rendered pages over `Operations`.

Off unless `http_listen` is set. app.py composes it (Starlette on uvicorn, in the server's
event loop); auth.py signs in with a bearer token (checked by api/auth.py's Authenticator on
every request) and guards each POST with a CSRF token; pages.py and actions.py are the pages
and the forms; live.py the server-sent events of a run's log; views.py turns events into the
timeline; dashboard.py sums runs up. Nothing below web/ imports it. docs/INSPECTOR.md.
"""
