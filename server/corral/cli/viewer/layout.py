"""The page every view shares: inline CSS, the filter form, sortable and searchable tables, and the
script that swaps in a page's changed parts when new episodes match its filter (a run still training)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from urllib.parse import quote, urlencode

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
table.sortable th{cursor:pointer}th[data-dir=asc]:after{content:' \\25b2'}th[data-dir=desc]:after{content:' \\25bc'}
"""

# Sortable tables (click a heading; numbers as numbers, dashes last) and search boxes that hide the
# rows of their table without the text; their state lives in the URL's fragment, so a link shares
# it, and corralTables applies it again to the tables a live page swaps in.
_TABLES = """
<script>
(function(){var state={};try{state=JSON.parse(decodeURIComponent(location.hash.slice(1)))||{}}catch(e){}
function body(t){return Array.prototype.slice.call(t.rows,1)}
function key(r,i){var t=(r.cells[i]||{}).textContent||'';t=t.trim();
return /^-?[0-9.]+(e-?[0-9]+)?$/.test(t)?[0,parseFloat(t)]:t==='-'||t===''?[2,'']:[1,t.toLowerCase()]}
function sort(t,i,dir){var head=t.rows[0];Array.prototype.forEach.call(head.cells,function(h){h.removeAttribute('data-dir')});
head.cells[i].setAttribute('data-dir',dir);body(t).sort(function(a,b){var x=key(a,i),y=key(b,i);
if(x[0]!==y[0])return x[0]-y[0];var c=x[1]<y[1]?-1:x[1]>y[1]?1:0;return dir==='asc'?c:-c})
.forEach(function(r){r.parentNode.appendChild(r)})}
function search(t,q){q=q.toLowerCase();body(t).forEach(function(r){r.style.display=r.textContent.toLowerCase().indexOf(q)<0?'none':''})}
function save(){history.replaceState(null,'','#'+encodeURIComponent(JSON.stringify(state)))}
window.corralTables=function(){document.querySelectorAll('table.sortable').forEach(function(t){var s=state[t.id]||{};
Array.prototype.forEach.call(t.rows[0].cells,function(h,i){h.onclick=function(){
var dir=h.getAttribute('data-dir')==='asc'?'desc':'asc';sort(t,i,dir);s.sort=i;s.dir=dir;state[t.id]=s;save()}});
if(s.sort!==undefined)sort(t,s.sort,s.dir)});
document.querySelectorAll('input.search').forEach(function(box){var t=document.getElementById(box.dataset.table),s=state[t.id]||{};
box.oninput=function(){search(t,box.value);s.q=box.value;state[t.id]=s;save()};if(s.q){box.value=s.q;search(t,s.q)}})};
corralTables()})();
</script>
"""

# A live page polls the count of episodes its filter matches; when it changes, it fetches itself
# and swaps in the parts that change (the [data-live] elements and sortable tables, by id), keeping
# the scroll, the ticks, the search boxes and the sort: no reload.
_POLL = """
<script>
(function(){var seen=null,parts='[data-live],table.sortable';function swap(){fetch(location.href).then(function(r){return r.text()})
.then(function(t){var d=new DOMParser().parseFromString(t,'text/html'),y=window.scrollY,
ticked=Array.prototype.map.call(document.querySelectorAll('input:checked'),function(i){return i.name+'='+i.value});
document.querySelectorAll(parts).forEach(function(e){var n=d.getElementById(e.id);if(n)e.replaceWith(document.importNode(n,true))});
document.querySelectorAll('input[type=checkbox]').forEach(function(i){if(ticked.indexOf(i.name+'='+i.value)>=0)i.checked=true});
corralTables();window.scrollTo(0,y)})}
function poll(){fetch(%s).then(function(r){return r.json()})
.then(function(d){if(seen!==null&&d.episodes!==seen){swap()}seen=d.episodes})
.catch(function(){});}poll();setInterval(poll,3000);})();
</script>
"""


def page(title: str, body: str, *, live: EpisodeFilter | None = None, crumbs: Crumbs = ()) -> str:
    """A page under its breadcrumbs; with `live`, it swaps in its changed parts when the number of
    episodes that filter matches changes."""
    poll = "" if live is None else _POLL % json.dumps(f"/api/count?{query(live)}")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<link rel='icon' href='data:,'><style>{_STYLE}</style></head><body>{breadcrumbs(crumbs)}<h1>{escape(title)}</h1>{body}"
        f"{_TABLES}{poll}</body></html>"
    )


Crumbs = Sequence[tuple[str, str, str]]  # (kind, label, link) from the run down to the page itself


def place(run: str, step: int | None = None, group: int | None = None) -> list[tuple[str, str, str]]:
    """The crumbs of a place in a run: the run, its step and the step's group, as far as known."""
    at = f"/runs/{quote(run)}"
    crumbs = [("run", run, at)]
    if step is not None:
        crumbs.append(("step", str(step), f"{at}/steps/{step}"))
        if group is not None:
            crumbs.append(("group", str(group), f"{at}/steps/{step}/groups/{group}"))
    return crumbs


def breadcrumbs(crumbs: Crumbs) -> str:
    """runs / run R / step S / group G / episode E, each a link to its page."""
    links = [("runs", "runs", "/"), *crumbs]
    return (
        "<nav id='crumbs'>"
        + " / ".join(
            f"<a class='crumb' data-kind='{kind}' href='{escape(link)}'>{escape(kind if kind == label else f'{kind} {label}')}</a>"
            for kind, label, link in links
        )
        + "</nav>"
    )


def search_box(table: str, placeholder: str) -> str:
    """A box that hides the rows of the sortable table `table` (its id) that do not hold its text."""
    return f"<p><input class='search' type='search' data-table='{table}' placeholder='{escape(placeholder)}'></p>"


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
