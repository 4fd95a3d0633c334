"""``GET /docs``: the API's routes as one self-contained HTML page, made from the app's own OpenAPI schema.

FastAPI's Swagger UI loads its scripts from a CDN, so on a machine without internet it is a blank page.
This page needs nothing but the daemon: every route with its method, summary, parameters, request body and
answers, and a link to ``/openapi.json`` for tools. Every text from the schema is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

__all__ = ["add_docs_route", "api_page"]

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 60em; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.1em; margin: 1.6em 0 .3em; font-family: ui-monospace, monospace; }
.method { display: inline-block; min-width: 4.5em; font-weight: 600; }
p.summary { margin: .2em 0 .4em; } table { border-collapse: collapse; margin: .3em 0; }
td, th { border: 1px solid #ccc; padding: .2em .5em; text-align: left; vertical-align: top; }
code { font-family: ui-monospace, monospace; } .muted { color: #666; }
"""


def api_page(schema: Mapping[str, Any]) -> str:
    """The HTML page of ``schema`` (an OpenAPI document)."""
    info = schema.get("info", {})
    title = f"{info.get('title', 'API')} {info.get('version', '')}".strip()
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{_e(title)}: API</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{_e(info.get('summary') or info.get('description') or '')}</p>",
        "<p class='muted'>Every route of this daemon. The machine-readable schema: "
        "<a href='/openapi.json'><code>/openapi.json</code></a>.</p>",
    ]
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            parts.append(_operation(path, method, operation))
    parts.append("</body></html>")
    return "\n".join(parts)


def add_docs_route(app: FastAPI) -> None:
    """Serve :func:`api_page` of ``app``'s schema at ``GET /docs`` (made once, on the first request)."""
    made: list[str] = []

    @app.get("/docs", include_in_schema=False, response_class=HTMLResponse)
    async def docs() -> HTMLResponse:
        if not made:
            made.append(api_page(app.openapi()))
        return HTMLResponse(made[0])


def _operation(path: str, method: str, op: Mapping[str, Any]) -> str:
    rows = [f"<h2><span class='method'>{_e(method.upper())}</span> {_e(path)}</h2>"]
    if op.get("summary"):
        rows.append(f"<p class='summary'>{_e(op['summary'])}</p>")
    if op.get("description"):
        rows.append(f"<p>{_e(op['description'])}</p>")
    params = op.get("parameters", [])
    if params:
        rows.append("<table><tr><th>parameter</th><th>in</th><th>required</th><th>description</th></tr>")
        for param in params:
            said = param.get("description") or param.get("schema", {}).get("description", "")
            rows.append(
                f"<tr><td><code>{_e(param.get('name', ''))}</code></td><td>{_e(param.get('in', ''))}</td>"
                f"<td>{'yes' if param.get('required') else 'no'}</td>"
                f"<td>{_e(said)}</td></tr>"
            )
        rows.append("</table>")
    body = op.get("requestBody", {}).get("content", {})
    for kind, content in body.items():
        rows.append(f"<p>Body: <code>{_e(kind)}</code> {_e(_schema_name(content.get('schema', {})))}</p>")
    answers = op.get("responses", {})
    if answers:
        listed = ", ".join(f"{_e(code)} {_e(a.get('description', ''))}" for code, a in answers.items())
        rows.append(f"<p class='muted'>Answers: {listed}</p>")
    return "\n".join(rows)


def _schema_name(schema: Mapping[str, Any]) -> str:
    ref = schema.get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref else str(schema.get("type", ""))


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)
