"""The web inspector's page (SPEC G6): ``index.html``, ``app.js``, ``app.css``.

Static files, served by :mod:`mongomem.service.inspector` at ``/ui``; no build
step and nothing loaded from another origin.
"""
