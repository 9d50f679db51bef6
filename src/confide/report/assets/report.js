// confide report: legend toggles and the item explorer.
// Every piece of run data is written with textContent or setAttribute, never parsed as HTML.
(function () {
  "use strict";

  var DATA = JSON.parse(document.getElementById("confide-data").textContent);

  // ------------------------------------------------------------------ helpers
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "text") node.textContent = attrs[k];
        else if (k === "cls") node.className = attrs[k];
        else node.setAttribute(k, attrs[k]);
      });
    }
    (children || []).forEach(function (c) {
      if (c !== null && c !== undefined) node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }
  function fmt(x, digits) {
    if (x === null || x === undefined || Number.isNaN(x)) return "–";
    var d = digits === undefined ? 3 : digits;
    var a = Math.abs(x);
    if (a !== 0 && (a >= 1e4 || a < 1e-3)) return x.toExponential(2);
    return x.toFixed(d);
  }
  function option(value, label, selected) {
    var o = el("option", { value: value, text: label });
    if (selected) o.selected = true;
    return o;
  }

  // ------------------------------------------------------------------ legend toggles
  Array.prototype.forEach.call(document.querySelectorAll(".series-toggle"), function (btn) {
    btn.addEventListener("click", function () {
      var on = btn.getAttribute("aria-pressed") !== "true";
      btn.setAttribute("aria-pressed", on ? "true" : "false");
      var run = btn.closest(".run");
      var key = btn.getAttribute("data-series");
      Array.prototype.forEach.call(run.querySelectorAll(".series"), function (line) {
        if (line.getAttribute("data-series") === key) line.classList.toggle("hidden", !on);
      });
    });
  });

  // ------------------------------------------------------------------ explorer state
  var root = document.getElementById("explorer");
  if (!root || !DATA.runs.length) return;

  function defaultScorer(run) {
    for (var i = 0; i < run.scorers.length; i++) if (run.scorers[i].name !== "length") return run.scorers[i].name;
    return run.scorers.length ? run.scorers[0].name : "";
  }
  function hasEntropy(run) {
    for (var i = 0; i < run.items.length && i < 50; i++) {
      var t = run.items[i].tok;
      if (t && t.length && t[0][2] !== null) return true;
    }
    return false;
  }

  var state = { run: 0, q: "", filter: "all", grader: DATA.runs[0].grader, scorer: defaultScorer(DATA.runs[0]),
    min: "", max: "", sort: "position", colour: hasEntropy(DATA.runs[0]) ? "entropy" : "logprob",
    page: 0, pageSize: 50, open: {} };
  var haystacks = {};

  function currentRun() { return DATA.runs[state.run]; }
  function haystack(runIndex) {
    if (!haystacks[runIndex]) {
      haystacks[runIndex] = DATA.runs[runIndex].items.map(function (it) {
        return (it.id + "\n" + it.q + "\n" + it.a + "\n" + it.refs.join("\n")).toLowerCase();
      });
    }
    return haystacks[runIndex];
  }
  function gradeOf(it) {
    var g = it.g[state.grader];
    return g === undefined || g === null ? null : g;
  }

  // ------------------------------------------------------------------ controls
  var controls = el("div", { cls: "controls", role: "search" });
  var runSelect = el("select", { id: "explorer-run" });
  DATA.runs.forEach(function (r, i) { runSelect.appendChild(option(String(i), r.name, i === 0)); });
  if (DATA.runs.length > 1) controls.appendChild(el("label", null, ["run", runSelect]));

  var search = el("input", { type: "search", id: "explorer-search", placeholder: "question, answer, reference, id" });
  controls.appendChild(el("label", null, ["search", search]));

  var filter = el("select", { id: "explorer-filter" });
  [["all", "all"], ["correct", "correct"], ["wrong", "wrong"], ["ungraded", "ungraded"]].forEach(function (f) {
    filter.appendChild(option(f[0], f[1], f[0] === "all"));
  });
  controls.appendChild(el("label", null, ["answers", filter]));

  var graderSelect = el("select", { id: "explorer-grader" });
  controls.appendChild(el("label", null, ["grader", graderSelect]));

  var scorerSelect = el("select", { id: "explorer-scorer" });
  controls.appendChild(el("label", null, ["confidence of", scorerSelect]));

  var minInput = el("input", { type: "number", step: "any", id: "explorer-min" });
  var maxInput = el("input", { type: "number", step: "any", id: "explorer-max" });
  controls.appendChild(el("label", null, ["confidence ≥", minInput]));
  controls.appendChild(el("label", null, ["confidence ≤", maxInput]));

  var sortSelect = el("select", { id: "explorer-sort" });
  [["position", "run order"], ["conf-desc", "confidence, high first"], ["conf-asc", "confidence, low first"],
    ["wrong-first", "wrong first"], ["length", "answer length"]].forEach(function (s) {
    sortSelect.appendChild(option(s[0], s[1], s[0] === "position"));
  });
  controls.appendChild(el("label", null, ["sort", sortSelect]));

  var colourSelect = el("select", { id: "explorer-colour" });
  controls.appendChild(el("label", null, ["colour tokens by", colourSelect]));

  var sizeSelect = el("select", { id: "explorer-size" });
  [25, 50, 100, 200].forEach(function (n) { sizeSelect.appendChild(option(String(n), String(n), n === 50)); });
  controls.appendChild(el("label", null, ["per page", sizeSelect]));
  root.appendChild(controls);

  var scaleNote = el("div", { cls: "scale" });
  root.appendChild(scaleNote);

  var count = el("p", { id: "explorer-count", "aria-live": "polite" });
  var prev = el("button", { type: "button", id: "explorer-prev", text: "‹ previous" });
  var next = el("button", { type: "button", id: "explorer-next", text: "next ›" });
  var pageLabel = el("span", { id: "explorer-page" });
  root.appendChild(el("div", { cls: "pager" }, [prev, pageLabel, next, count]));

  var table = el("table", { cls: "items", id: "explorer-table" });
  table.appendChild(el("colgroup", null, [el("col", { cls: "c-pos" }), el("col"), el("col"),
    el("col", { cls: "c-grade" }), el("col", { cls: "c-score" })]));
  var scoreHead = el("th", { text: "confidence" });
  table.appendChild(el("thead", null, [el("tr", null, [el("th", { text: "#" }), el("th", { text: "question" }),
    el("th", { text: "answer" }), el("th", { text: "grade" }), scoreHead])]));
  var tbody = el("tbody");
  table.appendChild(tbody);
  root.appendChild(table);

  function fillRunControls() {
    var run = currentRun();
    graderSelect.textContent = "";
    run.graders.forEach(function (g) { graderSelect.appendChild(option(g, g, g === state.grader)); });
    if (!run.graders.length) graderSelect.appendChild(option(run.grader, run.grader, true));
    scorerSelect.textContent = "";
    run.scorers.forEach(function (s) {
      var o = option(s.name, s.name, s.name === state.scorer);
      if (s.summary) o.title = s.summary;
      scorerSelect.appendChild(o);
    });
    colourSelect.textContent = "";
    if (hasEntropy(run)) colourSelect.appendChild(option("entropy", "entropy", state.colour === "entropy"));
    colourSelect.appendChild(option("logprob", "log-probability", state.colour === "logprob"));
    var values = run.items.map(function (it) { return it.s[state.scorer]; })
      .filter(function (v) { return v !== null && v !== undefined; });
    var lo = values.length ? Math.min.apply(null, values) : null;
    var hi = values.length ? Math.max.apply(null, values) : null;
    minInput.placeholder = lo === null ? "" : fmt(lo);
    maxInput.placeholder = hi === null ? "" : fmt(hi);
    scoreHead.textContent = state.scorer;
  }

  function tokenAlpha(tok) {
    if (state.colour === "entropy") {
      if (tok[2] === null) return 0;
      return Math.min(1, Math.max(0, tok[2] / currentRun().entropyScale));
    }
    if (tok[1] === null) return 0;
    return Math.min(1, Math.max(0, 1 - Math.exp(tok[1])));
  }
  function tokenTitle(tok) {
    var lines = ["token " + JSON.stringify(tok[0])];
    if (tok[1] !== null) lines.push("p = " + fmt(Math.exp(tok[1])) + " (log p = " + fmt(tok[1]) + ")");
    if (tok[2] !== null) lines.push("entropy = " + fmt(tok[2]) + " nats");
    if (tok[3] && tok[3].length) {
      lines.push("alternatives:");
      tok[3].forEach(function (alt) {
        lines.push("  " + JSON.stringify(alt[0]) + "  p = " + (alt[1] === null ? "–" : fmt(Math.exp(alt[1]))));
      });
    }
    return lines.join("\n");
  }
  function answerNode(it) {
    var box = el("span", { cls: "answer" });
    if (!it.tok || !it.tok.length) {
      box.appendChild(el("span", { cls: "plain", text: it.a }));
      return box;
    }
    it.tok.forEach(function (tok) {
      var span = el("span", { cls: "tok", text: tok[0], title: tokenTitle(tok) });
      span.style.backgroundColor = "rgba(213, 94, 0, " + (0.75 * tokenAlpha(tok)).toFixed(3) + ")";
      box.appendChild(span);
    });
    return box;
  }
  function gradeNode(g) {
    if (g === null) return el("span", { cls: "grade none", text: "–" });
    return el("span", { cls: "grade " + (g >= 0.5 ? "right" : "wrong"), text: (g >= 0.5 ? "✓ " : "✗ ") + fmt(g, 2) });
  }

  // ------------------------------------------------------------------ filtering
  function matching() {
    var run = currentRun();
    var hay = haystack(state.run);
    var q = state.q.trim().toLowerCase();
    var lo = state.min === "" ? -Infinity : Number(state.min);
    var hi = state.max === "" ? Infinity : Number(state.max);
    var ranged = state.min !== "" || state.max !== "";
    var out = [];
    for (var i = 0; i < run.items.length; i++) {
      var it = run.items[i];
      if (q && hay[i].indexOf(q) === -1) continue;
      var g = gradeOf(it);
      if (state.filter === "correct" && !(g !== null && g >= 0.5)) continue;
      if (state.filter === "wrong" && !(g !== null && g < 0.5)) continue;
      if (state.filter === "ungraded" && g !== null) continue;
      var c = it.s[state.scorer];
      if (ranged && (c === null || c === undefined || c < lo || c > hi)) continue;
      out.push(it);
    }
    var conf = function (it) { var c = it.s[state.scorer]; return c === null || c === undefined ? NaN : c; };
    var byPos = function (a, b) { return a.i - b.i; };
    var nanLast = function (x, y, dir) {
      if (Number.isNaN(x) && Number.isNaN(y)) return 0;
      if (Number.isNaN(x)) return 1;
      if (Number.isNaN(y)) return -1;
      return dir * (x - y);
    };
    if (state.sort === "conf-desc") out.sort(function (a, b) { return nanLast(conf(a), conf(b), -1) || byPos(a, b); });
    else if (state.sort === "conf-asc") out.sort(function (a, b) { return nanLast(conf(a), conf(b), 1) || byPos(a, b); });
    else if (state.sort === "wrong-first") out.sort(function (a, b) {
      var ga = gradeOf(a), gb = gradeOf(b);
      return nanLast(ga === null ? NaN : ga, gb === null ? NaN : gb, 1) || byPos(a, b);
    });
    else if (state.sort === "length") out.sort(function (a, b) { return (b.len - a.len) || byPos(a, b); });
    else out.sort(byPos);
    return out;
  }

  // ------------------------------------------------------------------ claims (long answers)
  function claimColour(v, range) {
    if (v === null || v === undefined) return "#dddddd";
    var span = range[1] - range[0];
    var x = span > 0 ? Math.min(1, Math.max(0, (v - range[0]) / span)) : 0.5;
    return "hsl(" + Math.round(120 * x) + ", 70%, 82%)";
  }
  function claimsNode(it, run) {
    var box = el("div", { cls: "claims" });
    var text = el("div", { cls: "plain claim-text" });
    var pos = 0;
    it.claims.forEach(function (c, n) {
      if (c.s > pos) text.appendChild(document.createTextNode(it.a.slice(pos, c.s)));
      if (c.e > pos) {
        var mark = el("mark", { cls: "claim", "data-claim": String(n), text: it.a.slice(Math.max(c.s, pos), c.e), title: c.t });
        mark.style.backgroundColor = claimColour(c.c[run.claimScorer], run.claimRange);
        text.appendChild(mark);
        pos = c.e;
      }
    });
    if (pos < it.a.length) text.appendChild(document.createTextNode(it.a.slice(pos)));
    box.appendChild(text);
    var names = Object.keys(it.claims[0].c);
    var table = el("table", { cls: "claims-table" });
    var grades = Object.keys(it.claims.reduce(function (acc, c) { Object.keys(c.g).forEach(function (g) { acc[g] = 1; }); return acc; }, {}));
    table.appendChild(el("thead", null, [el("tr", null, [el("th", { text: "claim" })].concat(
      grades.map(function (g) { return el("th", { text: g }); }),
      names.map(function (s) { return el("th", { text: s }); })))]));
    var body = el("tbody");
    it.claims.forEach(function (c) {
      var cells = [el("td", { cls: "plain", text: c.t })];
      grades.forEach(function (g) { cells.push(el("td", null, [gradeNode(c.g[g] === undefined ? null : c.g[g])])); });
      names.forEach(function (s) {
        var td = el("td", { cls: "num", text: fmt(c.c[s], 3), title: c.x[s] || "" });
        if (s === run.claimScorer) td.style.backgroundColor = claimColour(c.c[s], run.claimRange);
        cells.push(td);
      });
      body.appendChild(el("tr", null, cells));
    });
    table.appendChild(body);
    box.appendChild(table);
    return box;
  }

  // ------------------------------------------------------------------ detail
  function section(title, content, full) {
    return el("div", { cls: full ? "full" : "" }, [el("h4", { text: title }), content]);
  }
  function detailNode(it) {
    var run = currentRun();
    var grid = el("div", { cls: "detail-grid" });
    grid.appendChild(section("question", el("div", { cls: "question", text: it.q }), true));
    var refs = el("ul", { cls: "refs" });
    it.refs.slice(0, 8).forEach(function (r) { refs.appendChild(el("li", { text: r })); });
    if (it.refs.length > 8) refs.appendChild(el("li", { cls: "muted", title: it.refs.slice(8).join("\n"), text: "… and " + (it.refs.length - 8) + " more" }));
    if (!it.refs.length) refs.appendChild(el("li", { cls: "muted", text: "no references" }));
    grid.appendChild(section("references", refs));
    var grades = el("ul", { cls: "refs" });
    Object.keys(it.g).forEach(function (g) { grades.appendChild(el("li", null, [g + ": ", gradeNode(it.g[g])])); });
    if (!Object.keys(it.g).length) grades.appendChild(el("li", { cls: "muted", text: "not graded" }));
    grid.appendChild(section("grades", grades));
    grid.appendChild(section("answer (" + it.len + " tokens, finished by " + it.fin + ")", el("div", { cls: "plain", text: it.a })));
    if (it.claims && it.claims.length) grid.appendChild(section("claims, coloured by " + run.claimScorer + " (red: doubtful, green: confident)", claimsNode(it, run), true));

    var scores = el("table", { cls: "scores" });
    scores.appendChild(el("thead", null, [el("tr", null, [el("th", { text: "scorer" }), el("th", { text: "confidence" }), el("th", { text: "note" })])]));
    var sb = el("tbody");
    run.scorers.forEach(function (s) {
      var v = it.s[s.name];
      sb.appendChild(el("tr", null, [el("td", { text: s.name, title: s.summary || "" }), el("td", { cls: "num", text: fmt(v, 4) }),
        el("td", { cls: "muted", text: it.e[s.name] || "" })]));
    });
    scores.appendChild(sb);
    grid.appendChild(section("scores", scores));

    if (it.tok && it.tok.length) {
      var tt = el("table", { cls: "tokens" });
      tt.appendChild(el("thead", null, [el("tr", null, [el("th", { text: "token" }), el("th", { text: "p" }),
        el("th", { text: "entropy" }), el("th", { text: "alternatives (p)" })])]));
      var tb = el("tbody");
      it.tok.forEach(function (tok) {
        var alts = (tok[3] || []).map(function (a) { return JSON.stringify(a[0]) + " " + (a[1] === null ? "–" : fmt(Math.exp(a[1]), 2)); }).join(", ");
        tb.appendChild(el("tr", null, [el("td", { cls: "plain", text: JSON.stringify(tok[0]) }),
          el("td", { cls: "num", text: tok[1] === null ? "–" : fmt(Math.exp(tok[1])) }),
          el("td", { cls: "num", text: fmt(tok[2]) }), el("td", { text: alts })]));
      });
      tt.appendChild(tb);
      grid.appendChild(section("tokens", tt));
    }
    if (it.sm) grid.appendChild(section("the samples in words", el("div", { cls: "plain", text: it.sm })));
    if (it.ns) {
      var cl = el("ul", { cls: "clusters" });
      it.cl.forEach(function (c) {
        var li = el("li", { cls: c.greedy ? "greedy" : "" }, [c.n + " × ", el("span", { cls: "plain", text: c.text })]);
        if (c.greedy) li.appendChild(el("span", { cls: "muted", text: "  (same as the answer)" }));
        if (c.variants.length > 1) li.appendChild(el("div", { cls: "variants", text: "as: " + c.variants.map(function (v) { return JSON.stringify(v); }).join(", ") }));
        cl.appendChild(li);
      });
      grid.appendChild(section(it.ns + " samples in " + it.cl.length + " cluster(s)", cl));
    }
    if (DATA.runs.length > 1) {
      var others = el("table", { cls: "other-runs" });
      others.appendChild(el("thead", null, [el("tr", null, [el("th", { text: "run" }), el("th", { text: "answer" }),
        el("th", { text: "grade" }), el("th", { text: state.scorer })])]));
      var ob = el("tbody");
      DATA.runs.forEach(function (r, k) {
        if (k === state.run) return;
        var twin = null;
        for (var j = 0; j < r.items.length; j++) if (r.items[j].id === it.id) { twin = r.items[j]; break; }
        if (!twin) { ob.appendChild(el("tr", null, [el("td", { text: r.name }), el("td", { cls: "muted", text: "item not in this run" }), el("td"), el("td")])); return; }
        var g = twin.g[r.grader];
        ob.appendChild(el("tr", null, [el("td", { text: r.name }), el("td", null, [answerNode(twin)]),
          el("td", null, [gradeNode(g === undefined ? null : g)]), el("td", { cls: "num", text: fmt(twin.s[state.scorer], 4) })]));
      });
      others.appendChild(ob);
      grid.appendChild(section("the same item in the other runs", others, true));
    }
    return grid;
  }

  // ------------------------------------------------------------------ render
  function render() {
    var run = currentRun();
    var items = matching();
    var pages = Math.max(1, Math.ceil(items.length / state.pageSize));
    state.page = Math.min(state.page, pages - 1);
    var start = state.page * state.pageSize;
    var shown = items.slice(start, start + state.pageSize);
    tbody.textContent = "";
    shown.forEach(function (it) {
      var row = el("tr", { cls: "item", "data-id": it.id, tabindex: "0" }, [
        el("td", { cls: "num", text: String(it.i + 1) }),
        el("td", { cls: "q", text: it.q, title: it.q }),
        el("td", { cls: "ans" }, [answerNode(it)]),
        el("td", null, [gradeNode(gradeOf(it))]),
        el("td", { cls: "num", text: fmt(it.s[state.scorer], 4), title: it.e[state.scorer] || "" })]);
      var toggle = function () {
        state.open[run.name + "\u0000" + it.id] = !state.open[run.name + "\u0000" + it.id];
        render();
      };
      row.addEventListener("click", toggle);
      row.addEventListener("keydown", function (ev) { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); toggle(); } });
      tbody.appendChild(row);
      if (state.open[run.name + "\u0000" + it.id]) {
        tbody.appendChild(el("tr", { cls: "detail" }, [el("td", { colspan: "5" }, [detailNode(it)])]));
      }
    });
    if (!shown.length) tbody.appendChild(el("tr", null, [el("td", { colspan: "5", cls: "muted", text: "No item matches." })]));
    count.textContent = items.length + " of " + run.items.length + " items match";
    count.setAttribute("data-count", String(items.length));
    pageLabel.textContent = "page " + (state.page + 1) + " of " + pages;
    prev.disabled = state.page === 0;
    next.disabled = state.page >= pages - 1;
    scaleNote.textContent = "";
    scaleNote.appendChild(el("span", { text: state.colour === "entropy" ? "entropy 0" : "p = 1" }));
    scaleNote.appendChild(el("span", { cls: "ramp" }));
    scaleNote.appendChild(el("span", { text: state.colour === "entropy" ? "≥ " + fmt(run.entropyScale, 2) + " nats" : "p = 0" }));
  }

  function update(change) {
    change();
    state.page = 0;
    render();
  }
  runSelect.addEventListener("change", function () {
    update(function () {
      state.run = Number(runSelect.value);
      var run = currentRun();
      state.grader = run.grader;
      if (!run.scorers.some(function (s) { return s.name === state.scorer; })) state.scorer = defaultScorer(run);
      if (state.colour === "entropy" && !hasEntropy(run)) state.colour = "logprob";
      fillRunControls();
    });
  });
  search.addEventListener("input", function () { update(function () { state.q = search.value; }); });
  filter.addEventListener("change", function () { update(function () { state.filter = filter.value; }); });
  graderSelect.addEventListener("change", function () { update(function () { state.grader = graderSelect.value; }); });
  scorerSelect.addEventListener("change", function () { update(function () { state.scorer = scorerSelect.value; fillRunControls(); }); });
  minInput.addEventListener("input", function () { update(function () { state.min = minInput.value; }); });
  maxInput.addEventListener("input", function () { update(function () { state.max = maxInput.value; }); });
  sortSelect.addEventListener("change", function () { update(function () { state.sort = sortSelect.value; }); });
  colourSelect.addEventListener("change", function () { state.colour = colourSelect.value; render(); });
  sizeSelect.addEventListener("change", function () { update(function () { state.pageSize = Number(sizeSelect.value); }); });
  prev.addEventListener("click", function () { state.page = Math.max(0, state.page - 1); render(); });
  next.addEventListener("click", function () { state.page += 1; render(); });

  fillRunControls();
  render();
  root.setAttribute("data-ready", "true");
})();
