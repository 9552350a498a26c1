// gcprobe's live page. It reads data.json (the probe's PageData) from its
// own address every few seconds and draws it with the DOM and SVG; it loads
// nothing else. Text from the probe is set with textContent, never parsed
// as HTML: site and file names are not trusted.
"use strict";
(function () {
  var SVG = "http://www.w3.org/2000/svg";
  var REFRESH_MS = 2000;
  var selected = null; // the site string whose stack is shown

  function $(id) { return document.getElementById(id); }
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  function bytes(n) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + u[i];
  }
  function secs(s) {
    if (s >= 1) return s.toFixed(2) + " s";
    if (s >= 1e-3) return (s * 1e3).toFixed(2) + " ms";
    return (s * 1e6).toFixed(0) + " µs";
  }
  // shortFile shortens a path from the left, to its folder and file
  // ("…/fileserver/staticfiles.go"): the end of a path names the line, so
  // it is the part never cut. shortFunc keeps a function's name after its
  // package path ("fileserver.(*Server).serve").
  function shortFile(f) {
    var p = f.split("/");
    return p.length > 3 || (p.length === 3 && p[0] !== "") ? "…/" + p.slice(-2).join("/") : f;
  }
  function shortFunc(f) { var i = f.lastIndexOf("/"); return i < 0 ? f : f.slice(i + 1); }
  // loc is a file:line that is never cut: shortened from the left, whole
  // in its title.
  function loc(file, line) {
    var e = el("span", shortFile(file) + ":" + line, "loc");
    e.title = file + ":" + line;
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }

  // chart draws one SVG line chart: xs are GC cycles, series are
  // {name, ys} with one y per x (null: no point). Every point is a
  // circle, so that the chart has exactly one point per GC cycle.
  function chart(name, title, xs, series, fmt) {
    var W = 360, H = 120, L = 4, R = 4, T = 6, B = 16;
    var s = svg("svg", { "class": "chart", width: W, height: H, viewBox: "0 0 " + W + " " + H,
      "data-chart": name, "data-points": xs.length, "data-cycles": xs.join(",") });
    var max = 0;
    series.forEach(function (se) { se.ys.forEach(function (y) { if (y !== null && y > max) max = y; }); });
    if (max <= 0) max = 1;
    var x0 = xs.length ? xs[0] : 0, x1 = xs.length ? xs[xs.length - 1] : 1;
    function px(x) { return L + (x1 === x0 ? (W - L - R) / 2 : (x - x0) / (x1 - x0) * (W - L - R)); }
    function py(y) { return H - B - y / max * (H - T - B); }
    series.forEach(function (se, i) {
      var pts = [];
      se.ys.forEach(function (y, j) {
        if (y === null) return;
        pts.push(px(xs[j]).toFixed(1) + "," + py(y).toFixed(1));
        s.appendChild(svg("circle", { cx: px(xs[j]).toFixed(1), cy: py(y).toFixed(1), r: 1.8, "class": "p" + i, "data-cycle": xs[j] }));
      });
      s.insertBefore(svg("polyline", { points: pts.join(" "), "class": "s" + i }), s.firstChild);
    });
    var t = svg("text", { x: L, y: H - 3 });
    t.textContent = xs.length ? "cycles " + x0 + "–" + x1 + "   max " + fmt(max) : "no GC cycle yet";
    s.appendChild(t);
    var fig = el("figure");
    var cap = el("figcaption", title + (series.length > 1 ? " (" + series.map(function (se, i) { return (i ? "orange: " : "blue: ") + se.name; }).join(", ") + ")" : ""));
    fig.appendChild(cap);
    fig.appendChild(s);
    return fig;
  }

  // spark draws a site's suspects per GC cycle of the history.
  function spark(vals) {
    var W = 120, H = 18, n = vals.length, max = 1, pts = [], count = 0;
    vals.forEach(function (v) { if (v !== null && v > max) max = v; });
    vals.forEach(function (v, i) {
      if (v === null) return;
      count++;
      pts.push((n > 1 ? i / (n - 1) * (W - 2) + 1 : W / 2).toFixed(1) + "," + (H - 1 - v / max * (H - 2)).toFixed(1));
    });
    var s = svg("svg", { "class": "spark", width: W, height: H, "data-points": count });
    s.appendChild(svg("polyline", { points: pts.join(" ") }));
    return s;
  }

  function showStack(site) {
    var box = $("stack");
    if (!site) { box.hidden = true; return; }
    $("stack-title").textContent = site.kind + " registered at " + site.site;
    var ol = $("stack-frames");
    clear(ol);
    site.stack.forEach(function (f) {
      var li = el("li", f.function + " " + f.file + ":" + f.line);
      li.title = f.file + ":" + f.line;
      ol.appendChild(li);
    });
    box.hidden = false;
  }

  // counterColumns are the sites table's counter columns: one per counter
  // the probe declares (d.counters: finalizerwatch.Counters), in its order,
  // a sparse one only where a site shows it above 0 or, for a resource
  // counter (dropped), in the runtime build mode. A counter added to the
  // ledger is a column here with no change to the page.
  function counterColumns(d) {
    var cols = [];
    d.counters.forEach(function (c, i) {
      if (!c.sparse || (c.resource && d.runtime_mode) || d.sites.some(function (s) { return s.counts[i] > 0; }))
        cols.push({ counter: c, index: i });
    });
    return cols;
  }

  // renderHead draws the sites table's header, and returns its number of
  // columns.
  function renderHead(cols) {
    var tr = $("sites").tHead.rows[0];
    clear(tr);
    function th(text, title) { var e = el("th", text); if (title) e.title = title; tr.appendChild(e); }
    th("site"); th("kind"); th("class"); th("growth", "New highs of the site's suspect count over the growth model's window");
    cols.forEach(function (k) { th(k.counter.name.replace(/_/g, " "), k.counter.help); });
    th("suspect", "Outstanding registrations that survived the suspect threshold: leaks, or caches");
    th("suspects per GC cycle");
    return tr.cells.length;
  }

  function renderSites(d) {
    var tb = $("sites").tBodies[0];
    clear(tb);
    var cols = counterColumns(d), columns = renderHead(cols);
    var shown = null;
    d.sites.forEach(function (s) {
      var tr = el("tr");
      tr.setAttribute("data-site", s.site);
      // The site: its function, which may be cut at the right, then its
      // file:line and resource, which never are.
      var td = el("td", null, "site"), box = el("div", null, "site-box");
      td.title = s.site;
      box.appendChild(el("span", shortFunc(s.function), "fn"));
      box.appendChild(loc(s.file, s.line));
      if (s.resource) box.appendChild(el("span", "(" + s.resource + ")", "res"));
      td.appendChild(box);
      tr.appendChild(td);
      tr.appendChild(el("td", s.kind));
      var v = s.verdict || s.class; // a document of an older probe has no verdict
      tr.appendChild(el("td", v, "verdict " + v));
      tr.appendChild(el("td", s.class === "growing" ? "+" + s.growth : "-"));
      cols.forEach(function (k) {
        var v = s.counts[k.index];
        tr.appendChild(el("td", v, k.counter.resource && v ? "dropped" : ""));
      });
      tr.appendChild(el("td", s.suspect));
      var sp = el("td");
      sp.appendChild(spark(s.suspects));
      tr.appendChild(sp);
      function select() { selected = s.site; renderSelection(d); }
      tr.addEventListener("click", select);
      tb.appendChild(tr);
      if (s.words) {
        // The leak in words, under its row: the line, then what was
        // dropped there and what to do.
        var why = el("tr", null, "why"), wd = el("td", null, "why");
        why.setAttribute("data-why", s.site);
        wd.colSpan = columns;
        wd.appendChild(el("span", "leak", "badge"));
        wd.appendChild(loc(s.file, s.line));
        wd.appendChild(el("span", ": " + s.words, "words"));
        why.appendChild(wd);
        why.addEventListener("click", select);
        tb.appendChild(why);
      }
      if (s.site === selected) shown = s;
    });
    if (!d.sites.length) {
      var tr = el("tr"), td = el("td", "no watched finalizer or cleanup yet");
      td.colSpan = columns;
      tr.appendChild(td);
      tb.appendChild(tr);
    }
    return shown;
  }

  function renderSelection(d) {
    var shown = null;
    Array.prototype.forEach.call($("sites").tBodies[0].rows, function (tr) {
      var site = tr.getAttribute("data-site") || tr.getAttribute("data-why");
      tr.classList.toggle("sel", site !== null && site === selected);
    });
    d.sites.forEach(function (s) { if (s.site === selected) shown = s; });
    showStack(shown);
  }

  function renderCharts(d) {
    var h = d.history, xs = h.map(function (r) { return r.cycle; });
    function col(f) { return h.map(f); }
    var c = $("charts");
    clear(c);
    c.appendChild(chart("pause", "GC pause per cycle", d.pauses.map(function (p) { return p.cycle; }),
      [{ name: "pause", ys: d.pauses.map(function (p) { return p.seconds; }) }], secs));
    c.appendChild(chart("heap", "Heap live and goal", xs,
      [{ name: "live", ys: col(function (r) { return r.heap_live_bytes; }) },
       { name: "goal", ys: col(function (r) { return r.heap_goal_bytes; }) }], bytes));
    c.appendChild(chart("gccpu", "GC CPU", xs,
      [{ name: "GC CPU", ys: col(function (r) { return r.gc_cpu_fraction * 100; }) }], function (v) { return v.toFixed(1) + "%"; }));
    c.appendChild(chart("queue_length", "Queue length", xs,
      [{ name: "finalizers", ys: col(function (r) { return r.queues.finalizer.length; }) },
       { name: "cleanups", ys: col(function (r) { return r.queues.cleanup.length; }) }], String));
    c.appendChild(chart("queue_delay", "Queue delay", xs,
      [{ name: "finalizers", ys: col(function (r) { return r.queues.finalizer.delay_seconds; }) },
       { name: "cleanups", ys: col(function (r) { return r.queues.cleanup.delay_seconds; }) }], secs));
    c.appendChild(chart("queue_drain", "Queue drain rate (per second)", xs,
      [{ name: "finalizers", ys: col(function (r) { return r.queues.finalizer.drain_per_second; }) },
       { name: "cleanups", ys: col(function (r) { return r.queues.cleanup.drain_per_second; }) }], function (v) { return v.toFixed(1); }));
  }

  function renderDetectors(d) {
    var f = $("firing");
    f.textContent = d.firing.length ? d.firing.map(function (e) { return e.detector + (e.site ? " (" + e.site + ")" : ""); }).join(", ") : "none";
    f.className = d.firing.length ? "firing" : "";
    var tb = $("events").tBodies[0];
    clear(tb);
    d.events.slice().reverse().forEach(function (e) {
      var tr = el("tr");
      tr.appendChild(el("td", new Date(e.time).toLocaleTimeString()));
      tr.appendChild(el("td", e.detector));
      tr.appendChild(el("td", e.firing ? "firing" : "cleared", e.firing ? "firing" : "cleared"));
      tr.appendChild(el("td", +e.value.toPrecision(3)));
      tr.appendChild(el("td", +e.threshold.toPrecision(3)));
      tr.appendChild(el("td", e.site || ""));
      tb.appendChild(tr);
    });
  }

  function renderRunning(d) {
    var ul = $("running");
    clear(ul);
    if (!d.running.length) ul.appendChild(el("li", "nothing"));
    d.running.forEach(function (r) { ul.appendChild(el("li", r.kind + " at " + r.site + " for " + secs(r.seconds))); });
  }

  function renderCause(d) {
    var ul = $("gc-cause"), c = d.gc_cause, a = d.allocating_sites;
    clear(ul);
    if (!c.causes.length) ul.appendChild(el("li", "no cause detector firing"));
    c.causes.forEach(function (k) {
      var li = el("li", k.words, "firing");
      if (k.fix) li.appendChild(el("div", "fix: " + k.fix, "fix"));
      if (k.note) li.appendChild(el("div", "note: " + k.note, "note"));
      (k.callers || []).forEach(function (c) { li.appendChild(el("div", "at " + c, "site")); });
      k.sites.forEach(function (s) {
        li.appendChild(el("div", "look at " + s.site + (s.path ? " (" + s.path + ")" : "") + (k.growing ? ": +" + bytes(Math.max(s.grown_bytes, 0)) + " in use" : ": " + bytes(Math.max(s.alloc_bytes_per_second, 0)) + "/s"), "site"));
      });
      ul.appendChild(li);
    });
    $("alloc-title").textContent = "Top allocating sites" + (a.window_seconds ? " over the latest " + a.window_seconds.toFixed(0) + " s" : "");
    var tb = $("allocating").tBodies[0];
    clear(tb);
    var grown = {};
    a.growing.forEach(function (s) { grown[s.site] = s.grown_bytes; });
    a.allocating.forEach(function (s) {
      var tr = el("tr"), td = el("td", s.site + (s.path ? " (" + s.path + ")" : ""), "site");
      td.title = s.stack.map(function (f) { return f.function + " " + f.file + ":" + f.line; }).join("\n");
      tr.appendChild(td);
      tr.appendChild(el("td", bytes(Math.max(s.alloc_bytes_per_second, 0)) + "/s"));
      tr.appendChild(el("td", bytes(Math.max(s.in_use_bytes, 0))));
      tr.appendChild(el("td", grown[s.site] ? "+" + bytes(grown[s.site]) : ""));
      tb.appendChild(tr);
    });
  }

  function render(d) {
    var g = d.gc;
    $("summary").textContent = "GC cycles " + g.cycles + " (forced " + g.forced + ")  ·  heap live " + bytes(g.heap_live_bytes) +
      " / goal " + bytes(g.heap_goal_bytes) + "  ·  GC CPU " + (g.gc_cpu_fraction * 100).toFixed(1) + "%  ·  pause p99 " + secs(g.pause_p99_seconds) +
      "  ·  queues " + d.queues.finalizer.length + " finalizers, " + d.queues.cleanup.length + " cleanups";
    var dropped = 0;
    for (var k in d.totals) dropped += d.totals[k].dropped;
    if (dropped) $("summary").textContent += "  ·  dropped without Close " + dropped;
    var m = $("mode");
    m.textContent = "runtime build mode " + (d.runtime_mode ? "on" : "off");
    m.className = d.runtime_mode ? "on" : "off";
    m.title = d.runtime_mode ?
      "The runtime reports every finalizer and cleanup in the binary, the standard library's included: files and connections dropped without Close are counted." :
      "Only finalizers and cleanups registered through finalizerwatch are counted; files and connections dropped without Close are counted in the runtime build mode only (finalizercheck -runtime).";
    $("link-profile").href = d.links.profile;
    $("link-profile-text").href = d.links.profile_text;
    $("link-metrics").href = d.links.metrics;
    var n = $("notice");
    n.hidden = !d.more_cycles_needed && !d.more_seconds_needed;
    n.textContent = "Too early to tell leaks from caches: " +
      (d.more_seconds_needed ? "about " + d.more_seconds_needed + " s" + (d.more_cycles_needed ? " and " : " more") : "") +
      (d.more_cycles_needed ? d.more_cycles_needed + " more GC cycle(s)" : "") + " needed. The ledger counts a cycle once the finalizer and cleanup goroutines have caught up with it (so far " +
      d.ledger_cycles.finalizer + " finalizer and " + d.ledger_cycles.cleanup + " cleanup cycles of " + d.gc.cycles + "): while a queue is backed up, the count waits.";
    renderSites(d);
    renderSelection(d);
    renderRunning(d);
    renderCharts(d);
    renderDetectors(d);
    renderCause(d);
    document.body.setAttribute("data-updated", d.time);
  }

  function refresh() {
    fetch("data.json", { cache: "no-store", credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error("data.json: " + r.status);
      return r.json();
    }).then(function (d) {
      $("error").hidden = true;
      render(d);
    }).catch(function (e) {
      $("error").hidden = false;
      $("error").textContent = String(e);
    }).then(function () { setTimeout(refresh, REFRESH_MS); });
  }
  refresh();
})();
