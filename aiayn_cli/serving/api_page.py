"""The server's `/docs`: its API as one self-contained HTML page, drawn from its own OpenAPI schema.

FastAPI's Swagger UI and ReDoc pages load their scripts from a CDN and are blank offline; this page
needs nothing but the server (no script, no stylesheet from elsewhere) and links the schema itself,
`/openapi.json`, for tools that read it.
"""

from __future__ import annotations

from html import escape

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h2 { margin-top: 2rem; border-bottom: 1px solid #ddd; }
code, .path { font-family: ui-monospace, monospace; }
.method { display: inline-block; min-width: 4rem; font-weight: bold; color: #fff; background: #2a6f97;
          border-radius: 3px; padding: 0 .4rem; text-align: center; }
.post { background: #3a7d44; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; }
td, th { border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
"""


def install_api_page(app: FastAPI) -> None:
    """Serve the page at `/docs` (the app is made with `docs_url=None`, `redoc_url=None`)."""

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(api_page(app.openapi()))


def api_page(schema: dict) -> str:
    """The HTML page of an OpenAPI schema: each route with its summary, request fields and answers."""
    info = schema.get("info", {})
    title = escape(info.get("title", "API"))
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{title}: API</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{title}: API</h1><p>{escape(info.get('summary') or info.get('description') or '')}</p>",
        "<p>The machine-readable schema: <a href='/openapi.json'>/openapi.json</a> (OpenAPI "
        f"{escape(schema.get('openapi', ''))}). A page to try it: <a href='/'>/</a>.</p>",
    ]
    components = schema.get("components", {}).get("schemas", {})
    for path, methods in schema.get("paths", {}).items():
        for method, route in methods.items():
            parts.append(
                f"<h2><span class='method {method}'>{method.upper()}</span> <span class='path'>{escape(path)}</span></h2>"
                f"<p>{escape(route.get('description') or route.get('summary') or '')}</p>"
            )
            body = route.get("requestBody", {}).get("content", {})
            for content_type, content in body.items():
                parts.append(f"<p>Body ({escape(content_type)}):</p>")
                parts.append(_fields(_resolve(content.get("schema", {}), components), components))
            params = route.get("parameters", [])
            if params:
                parts.append(_fields({"properties": {p["name"]: p.get("schema", {}) | p for p in params}}, components))
            answers = ", ".join(
                f"{escape(code)} {escape(answer.get('description', ''))}"
                for code, answer in route.get("responses", {}).items()
            )
            parts.append(f"<p>Answers: {answers}.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _resolve(schema: dict, components: dict) -> dict:
    ref = schema.get("$ref", "")
    return components.get(ref.rsplit("/", 1)[-1], {}) if ref else schema


def _type(schema: dict, components: dict) -> str:
    """A field's type in a few words: `integer (1-32)`, `string | array of string`, `gnmt | hf`."""
    if "anyOf" in schema:
        return " | ".join(_type(s, components) for s in schema["anyOf"] if s.get("type") != "null")
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "enum" in schema:
        return " | ".join(map(str, schema["enum"]))
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}), components)}"
    low, high = schema.get("minimum", schema.get("exclusiveMinimum")), schema.get("maximum")
    if low is not None and high is not None:
        return f"{kind} ({low:g} to {high:g})"
    return kind


def _fields(schema: dict, components: dict) -> str:
    rows = [
        f"<tr><td><code>{escape(name)}</code>{' (required)' if name in schema.get('required', []) else ''}</td>"
        f"<td>{escape(_type(field, components))}</td><td>{escape(str(field.get('default', '')))}</td>"
        f"<td>{escape(field.get('description', ''))}</td></tr>"
        for name, field in schema.get("properties", {}).items()
    ]
    head = "<tr><th>field</th><th>type</th><th>default</th><th>what it is</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"
