"""The page every view shares: inline CSS, the filter form, and the script that reloads the page
when new episodes match its filter (a run still training)."""

from __future__ import annotations

import json
from html import escape
from urllib.parse import urlencode

from corral.client.run_index import EpisodeFilter

FILTERS = ("task", "split", "status", "cause", "min_reward", "max_reward", "min_step", "max_step", "flagged")

_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}a{color:#1d4ed8}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
.flag{background:#fde68a;border-radius:3px;padding:0 4px;margin-right:2px}.zero{background:#fee2e2}
.members{display:flex;gap:1em;align-items:flex-start}.member{flex:1;min-width:0;border:1px solid #ccc;padding:.5em}
.msg{white-space:pre-wrap;border-left:3px solid #ccc;margin:.3em 0;padding:.2em .5em;font-family:monospace;font-size:12px}
.differs{border-left-color:#dc2626;background:#fef2f2}.tok{display:inline-block;font-family:monospace;font-size:11px;padding:0 1px;margin:0 1px 1px 0}
.sampled{background:#dbeafe}.env{background:#e5e7eb;color:#666}.prompt{background:#fef3c7}form.filters input{width:7em}
.timeline{display:flex;height:18px;width:480px}.timeline div{font-size:10px;color:#fff;overflow:hidden}
"""

_POLL = """
<script>
(function(){var seen=null;function poll(){fetch(%s).then(function(r){return r.json()})
.then(function(d){if(seen!==null&&d.episodes!==seen){location.reload()}seen=d.episodes})
.catch(function(){});}poll();setInterval(poll,3000);})();
</script>
"""


def page(title: str, body: str, *, live: EpisodeFilter | None = None) -> str:
    """A page; with `live`, it reloads itself when the number of episodes that filter matches changes."""
    poll = "" if live is None else _POLL % json.dumps(f"/api/count?{query(live)}")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<link rel='icon' href='data:,'><style>{_STYLE}</style></head><body><p><a href='/'>runs</a></p><h1>{escape(title)}</h1>{body}"
        f"{poll}</body></html>"
    )


def filter_form(where: EpisodeFilter, action: str) -> str:
    fields = []
    for name in FILTERS:
        value = getattr(where, name)
        if name == "flagged":
            checked = " checked" if value else ""
            fields.append(f"<label>flagged <input type='checkbox' name='flagged' value='1'{checked}></label>")
        else:
            shown = "" if value is None else escape(str(value))
            fields.append(f"<label>{name} <input name='{name}' value='{shown}'></label>")
    return (
        f"<form class='filters' method='get' action='{escape(action)}'>{' '.join(fields)} "
        "<button type='submit'>filter</button></form>"
    )


def query(where: EpisodeFilter, *, run: bool = True) -> str:
    """The filter as a URL query (with its run, unless the run is in the page's path)."""
    pairs = {name: getattr(where, name) for name in (("run",) if run else ()) + FILTERS}
    return urlencode({k: ("1" if v is True else v) for k, v in pairs.items() if v not in (None, False)})


def number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def flags(text: str) -> str:
    return "".join(f"<span class='flag'>{escape(flag)}</span>" for flag in text.split(",") if flag)
