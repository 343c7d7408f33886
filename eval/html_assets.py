"""The style sheet and script every ``report.html`` carries inline (:mod:`goldfish.eval.html_report`).

The script reads the page's data from ``<script type="application/json" id="gf-data">`` and builds every table row
and document view with ``createElement`` / ``textContent`` only: no text of a document ever reaches the HTML parser,
so markup in a document (``<script>``, ``<img onerror>``) shows as text and runs nothing. The table is sorted by a
click on a column's header (again: the other direction), filtered by a text box (id or title) and by the
columns the page offers a choice of (split, verdict; arm), and shown 100 rows a page, so a page of 10,000
documents opens as fast as one of 100.
"""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:12px 20px 40px}
h1{font-size:20px;margin:6px 0 2px}h2{font-size:17px;margin:22px 0 6px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:14px 0 4px}
.verdict{font-size:15px;margin:4px 0}.verdict b{color:#8a1c1c}
table{border-collapse:collapse;font-size:13px;margin:4px 0 8px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f0f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
#docs th{cursor:pointer;user-select:none;white-space:nowrap}#docs th[aria-sort=ascending]::after{content:" \\25B2"}
#docs th[aria-sort=descending]::after{content:" \\25BC"}
#docs tr.doc{cursor:pointer}#docs tr.doc:hover{background:#eef3fb}
.prov{display:grid;grid-template-columns:max-content 1fr;gap:1px 12px;font-size:12.5px;margin:6px 0}
.prov dt{color:#666}.prov dd{margin:0;font-family:ui-monospace,Menlo,monospace;word-break:break-all}
.controls{margin:6px 0;display:flex;gap:10px;flex-wrap:wrap;align-items:center}
.doctext{white-space:pre-wrap;font-family:ui-monospace,Menlo,monospace;font-size:12.5px;background:#fff;
 border:1px solid #ddd;padding:8px;max-height:420px;overflow:auto}
.seg-p{background:#e4e4ea;color:#444}.seg-s{}.seg-r{background:#ffd54a}
.legend span{padding:0 4px;margin-right:8px}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:6px}.pair div{white-space:pre-wrap;font-family:ui-monospace,
 Menlo,monospace;font-size:12px;background:#fff;border:1px solid #ddd;padding:4px}
figure{display:inline-block;margin:6px;vertical-align:top}figure img{max-width:520px;border:1px solid #eee}
details{margin:6px 0}summary{cursor:pointer;color:#1a4f9c}
.small{font-size:12px;color:#555}.md pre{background:#f3f3f3;padding:6px;overflow:auto}
"""

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("gf-data").textContent);
  var cols = data.columns, rows = data.rows, details = data.details || [];
  var PAGE = data.page_size || 100;
  var state = {key: null, dir: 1, page: 0, text: "", only: {}};
  var table = document.getElementById("docs");
  if (!table) { window.GF_READY = true; return; }
  var tbody = table.querySelector("tbody");
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function shown(v, c) {
    if (v === null || v === undefined) return "\u2013";
    if (c.num && typeof v === "number" && (c.float || !Number.isInteger(v))) {
      return v.toFixed(c.digits === undefined ? 3 : c.digits);
    }
    return String(v);
  }
  var head = table.querySelector("thead tr");
  cols.forEach(function (c, i) {
    if (c.hidden) return;
    var th = el("th", c.label);
    th.dataset.key = c.key;
    th.title = c.help || "";
    th.addEventListener("click", function () {
      state.dir = state.key === i ? -state.dir : (c.num ? -1 : 1);
      state.key = i; state.page = 0;
      head.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
      draw();
    });
    head.appendChild(th);
  });
  function idx(key) { for (var i = 0; i < cols.length; i++) if (cols[i].key === key) return i; return -1; }
  var iId = idx("doc_id"), iTitle = idx("title"), iDetail = idx("detail");
  function compare(a, b) {
    var x = a[state.key], y = b[state.key];
    if (x === null || x === undefined) return (y === null || y === undefined) ? 0 : 1;  // missing values last
    if (y === null || y === undefined) return -1;
    if (typeof x === "number" && typeof y === "number") return state.dir * (x - y);
    return state.dir * String(x).localeCompare(String(y), undefined, {numeric: true});
  }
  function selected() {
    var t = state.text.toLowerCase();
    var out = rows.filter(function (r) {
      for (var k in state.only) if (state.only[k] && String(r[idx(k)]) !== state.only[k]) return false;
      if (!t) return true;
      return String(r[iId]).toLowerCase().indexOf(t) >= 0 || String(r[iTitle] || "").toLowerCase().indexOf(t) >= 0;
    });
    if (state.key !== null) {
      out = out.map(function (r, k) { return [r, k]; });
      out.sort(function (a, b) { return compare(a[0], b[0]) || a[1] - b[1]; });  // stable
      out = out.map(function (p) { return p[0]; });
    }
    return out;
  }
  function profile(points, n) {  // per-window one-pass top-1 accuracy along the document (an SVG of numbers only)
    var NS = "http://www.w3.org/2000/svg", W = 560, H = 70;
    var svg = document.createElementNS(NS, "svg");
    svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("class", "profile");
    var axis = document.createElementNS(NS, "rect");
    axis.setAttribute("x", 0); axis.setAttribute("y", 0); axis.setAttribute("width", W); axis.setAttribute("height", H);
    axis.setAttribute("fill", "#fff"); axis.setAttribute("stroke", "#ccc"); svg.appendChild(axis);
    points.forEach(function (p) {
      var r = document.createElementNS(NS, "rect");
      var x0 = W * p[0] / Math.max(n, 1), x1 = W * p[1] / Math.max(n, 1), h = (H - 4) * p[2];
      r.setAttribute("x", x0); r.setAttribute("width", Math.max(x1 - x0 - 0.5, 1));
      r.setAttribute("y", H - 2 - h); r.setAttribute("height", h);
      r.setAttribute("fill", p[3] ? "#d08a00" : "#5b8bd0");
      var t = document.createElementNS(NS, "title");
      t.textContent = "tokens " + p[0] + "-" + p[1] + ": top-1 accuracy " + p[2].toFixed(2);
      r.appendChild(t); svg.appendChild(r);
    });
    return svg;
  }
  function detail(d) {
    var box = el("div");
    if (d.segments && d.segments.length) {
      var legend = el("div", null, "legend small");
      legend.appendChild(el("span", "prompt (never a suffix)", "seg-p"));
      legend.appendChild(el("span", "reproduced by greedy decoding", "seg-r"));
      legend.appendChild(el("span", "evaluated, not reproduced", "seg-s"));
      box.appendChild(legend);
      var text = el("div", null, "doctext");
      d.segments.forEach(function (s) {
        var span = el(s[2] === "r" ? "mark" : "span", s[3], "seg-" + s[2]);
        span.dataset.start = s[0]; span.dataset.end = s[1]; span.dataset.kind = s[2];
        text.appendChild(span);
      });
      box.appendChild(text);
    } else {
      box.appendChild(el("p", "The document's text is not in these results (older results, or no tokenizer).",
                         "small"));
    }
    if (d.profile && d.profile.length) {
      box.appendChild(el("h3", "One-pass top-1 accuracy along the document (orange: reproduced by greedy decoding)"));
      box.appendChild(profile(d.profile, d.n_tokens || 1));
    }
    if (d.pairs && d.pairs.length) {
      box.appendChild(el("h3", "Where the model's continuation diverges from the truth"));
      d.pairs.forEach(function (p) {
        if (p[0] !== null) box.appendChild(el("div", "window at token " + p[0] + ": " + p[1] + " of " + p[2] +
                                              " suffix tokens reproduced before the first mistake", "small"));
        var pair = el("div", null, "pair");
        var a = el("div"); a.appendChild(el("b", "truth: ")); a.appendChild(document.createTextNode(p[3]));
        var b = el("div"); b.appendChild(el("b", "model: ")); b.appendChild(document.createTextNode(p[4]));
        pair.appendChild(a); pair.appendChild(b); box.appendChild(pair);
      });
    }
    return box;
  }
  function toggle(tr, r) {
    var next = tr.nextSibling;
    if (next && next.className === "detail") { next.remove(); return; }
    var row = el("tr", null, "detail"), td = el("td");
    td.colSpan = head.children.length;
    td.appendChild(detail(details[r[iDetail]] || {}));
    row.appendChild(td);
    tr.parentNode.insertBefore(row, tr.nextSibling);
  }
  function draw() {
    var list = selected(), pages = Math.max(1, Math.ceil(list.length / PAGE));
    state.page = Math.min(state.page, pages - 1);
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    list.slice(state.page * PAGE, (state.page + 1) * PAGE).forEach(function (r) {
      var tr = el("tr", null, "doc");
      tr.dataset.doc = r[iId];
      cols.forEach(function (c, i) { if (!c.hidden) tr.appendChild(el("td", shown(r[i], c), c.num ? "n" : "")); });
      tr.addEventListener("click", function () { toggle(tr, r); });
      tbody.appendChild(tr);
    });
    document.getElementById("pageinfo").textContent =
      list.length + " of " + rows.length + " documents; page " + (state.page + 1) + " of " + pages;
  }
  function on(id, ev, f) { var e = document.getElementById(id); if (e) e.addEventListener(ev, f); }
  on("q", "input", function (e) { state.text = e.target.value; state.page = 0; draw(); });
  document.querySelectorAll("select[data-key]").forEach(function (s) {
    s.addEventListener("change", function () { state.only[s.dataset.key] = s.value; state.page = 0; draw(); });
  });
  on("prev", "click", function () { state.page = Math.max(0, state.page - 1); draw(); });
  on("next", "click", function () { state.page += 1; draw(); });
  draw();
  window.GF_READY = true;
})();
"""
