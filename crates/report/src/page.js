// kiln report: draws the charts from the JSON data block with uPlot. It only reads that
// block and sets textContent and attributes: it builds no HTML from data, and loads nothing.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("kiln-data").textContent);
  var charts = [];
  var width = function () {
    return Math.max(400, Math.min(1200, document.body.clientWidth - 60));
  };
  var colors = ["#1f6feb", "#d97706", "#b00020", "#444", "#2da44e", "#8250df", "#cf222e", "#0a7a7a"];

  // One time zone across the page, as the findings speak: UTC, with seconds (uPlot's own
  // default is local time on a 12-hour clock without seconds).
  var two = function (v) { return (v < 10 ? "0" : "") + v; };
  function utc(t) {
    var d = new Date(t * 1000);
    return two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) + ":" + two(d.getUTCSeconds());
  }
  function utcDay(t) {
    var d = new Date(t * 1000);
    return d.getUTCFullYear() + "-" + two(d.getUTCMonth() + 1) + "-" + two(d.getUTCDate());
  }

  // Phases other than the measured ones (warm-up) are shaded.
  function phaseBands(u) {
    var ctx = u.ctx;
    (data.phases || []).forEach(function (p) {
      if (p.measured) return;
      var x0 = u.valToPos(p.from, "x", true), x1 = u.valToPos(p.to, "x", true);
      ctx.save();
      ctx.fillStyle = "rgba(120,120,120,0.12)";
      ctx.fillRect(x0, u.bbox.top, Math.max(1, x1 - x0), u.bbox.height);
      ctx.restore();
    });
  }

  // Zooming one time chart zooms them all.
  var syncing = false;
  function zoomTogether(u, key) {
    if (key !== "x" || syncing || !u.timeChart) return;
    syncing = true;
    charts.forEach(function (other) {
      if (other !== u && other.timeChart) {
        other.setScale("x", { min: u.scales.x.min, max: u.scales.x.max });
      }
    });
    syncing = false;
  }

  function check(el, u) {
    var sums = {};
    u.series.forEach(function (s, i) {
      if (i === 0) return;
      var total = 0;
      (u.data[i] || []).forEach(function (v) { if (v != null) total += v; });
      sums[s.label] = Math.round(total * 1000) / 1000;
    });
    el.setAttribute("data-check", JSON.stringify({ points: u.data[0].length, sums: sums }));
  }

  // A chart over time (x: seconds since the epoch), or over the seconds of a run (x: 0, 1,
  // 2 ... when `relative`, as the comparison draws two runs on one axis).
  // `how` (optional): `log` for a logarithmic y axis (latency: a 400 ms stall and 2 ms
  // seconds on one chart), `dashed` naming series drawn dashed, `right` naming series on a
  // second axis of their own with its units (`rightUnits`).
  function timeChart(id, title, series, columns, units, relative, how) {
    how = how || {};
    var el = document.getElementById(id);
    if (!el || !columns[0] || columns[0].length === 0) return;
    // a chart of nothing but gaps (a figure this run could not read) is left out
    var any = columns.slice(1).some(function (c) {
      return c && c.some(function (v) { return v != null; });
    });
    if (!any) { el.textContent = ""; return; }
    var right = how.right || [], dashed = how.dashed || [];
    var x = relative ? {} : {
      value: function (u, t) { return t == null ? "" : utcDay(t) + " " + utc(t) + " UTC"; }
    };
    var axes = [
      relative ? { label: how.xLabel } : { values: function (u, ticks) { return ticks.map(utc); }, label: "UTC" },
      { label: units, size: 70 }
    ];
    if (right.length) {
      axes.push({ scale: "right", side: 1, label: how.rightUnits, size: 60, grid: { show: false } });
    }
    var opts = {
      title: title,
      width: width(),
      height: 260,
      cursor: { sync: { key: "kiln" } },
      scales: {
        x: { time: !relative },
        // log10; a second at 0 (no answer) is a gap rather than minus infinity
        y: how.log ? { distr: 3, log: 10 } : {},
        right: {}
      },
      series: [x].concat(series.map(function (s, i) {
        return {
          label: s, stroke: colors[i % colors.length], width: 1.5, spanGaps: false,
          dash: dashed.indexOf(s) >= 0 ? [6, 4] : undefined,
          scale: right.indexOf(s) >= 0 ? "right" : "y"
        };
      })),
      axes: axes,
      hooks: { drawClear: [phaseBands], setScale: [zoomTogether] }
    };
    if (how.log) {
      columns = [columns[0]].concat(columns.slice(1).map(function (c) {
        return c && c.map(function (v) { return v != null && v > 0 ? v : null; });
      }));
    }
    var u = new uPlot(opts, columns, el);
    u.timeChart = true;
    charts.push(u);
    check(el, u);
  }

  var s = data.seconds;
  if (s) {
    timeChart("chart-latency", "Latency per second (ms, log scale)",
      ["p50", "p90", "p99", "max"].concat(s.service_p99 ? ["service p99"] : []),
      [s.t, s.p50, s.p90, s.p99, s.max].concat(s.service_p99 ? [s.service_p99] : []), "ms",
      false, { log: true, dashed: ["service p99"] });
    timeChart("chart-throughput", "Requests and failures per second",
      ["requests/s", "failed/s"], [s.t, s.requests, s.failed], "per second");
    // the wire: as many connections as requests is churn; as many responses in two parts
    // (their last byte 30 ms or more after the first) as requests is a delayed-ACK stall
    if (s.connects) {
      timeChart("chart-wire", "Wire: connections opened and responses in two parts per second",
        ["connections opened/s", "responses in two parts/s"],
        [s.t, s.connects, s.two_part], "per second");
    }
  }
  // A capacity search: latency (log) and answers against the offered rate, with the
  // latency SLOs' limits as flat dashed lines.
  var c = data.capacity;
  if (c) {
    var names = ["p50", "p99", "answered/s"], cols = [c.rate, c.p50, c.p99, c.answered];
    (c.limits || []).forEach(function (l) {
      names.push("SLO " + l.label);
      cols.push(c.rate.map(function () { return l.ms; }));
    });
    timeChart("chart-capacity", "Latency (ms, log scale) and answers per second against " + c.x_label,
      names, cols, "ms", true, {
        log: true, right: ["answered/s"], rightUnits: "answered per second",
        dashed: names.slice(3), xLabel: c.x_label
      });
  }
  // The host's noise as kiln felt it: a second of long waits is one whose requests left late.
  var n = data.noise;
  if (n) {
    timeChart("chart-noise", "Host noise: kiln's own wait for a CPU (ms)",
      ["worst thread's wait", "probe woke late"], [n.t, n.wait_max, n.probe_late], "ms");
  }
  // The comparison: both runs' measured seconds on one axis (second 0 is each one's start).
  var o = data.overlay;
  if (o) {
    timeChart("chart-overlay-latency", "Latency per second, BASE and NEW (ms, log scale)",
      ["BASE p50", "BASE p99", "NEW p50", "NEW p99"],
      [o.x, o.base_p50, o.base_p99, o.new_p50, o.new_p99], "ms", true,
      { log: true, dashed: ["BASE p50", "BASE p99"] });
    timeChart("chart-overlay-throughput", "Requests per second, BASE and NEW",
      ["BASE", "NEW"], [o.x, o.base_requests, o.new_requests], "per second", true);
  }

  var r = data.resources;
  if (r && r.t.length) {
    timeChart("chart-host-cpu", "Host CPU (% of all cores)",
      ["user", "system", "irq", "softirq", "steal", "iowait"],
      [r.t, r.host_user, r.host_system, r.host_irq, r.host_softirq, r.host_steal, r.host_iowait], "%");
    if (r.target_user) {
      timeChart("chart-target-cpu", "Target CPU (% of one core)",
        ["user", "system"], [r.t, r.target_user, r.target_system], "% of a core");
      timeChart("chart-target-memory", "Target memory (MiB, left), threads and open files (right)",
        ["RSS MiB", "threads", "open fds"], [r.t, r.rss_mib, r.threads, r.fds], "MiB", false,
        { right: ["threads", "open fds"], rightUnits: "count" });
      timeChart("chart-target-switches", "Target context switches per second",
        ["voluntary", "involuntary"], [r.t, r.voluntary, r.involuntary], "per second");
      timeChart("chart-sockets", "Target sockets (largest queues, bytes)",
        ["Send-Q", "Recv-Q"], [r.t, r.send_q, r.recv_q], "bytes");
      timeChart("chart-threads", "Target threads by state",
        ["running", "sleeping", "disk/lock wait (D)"],
        [r.t, r.threads_running, r.threads_sleeping, r.threads_disk_wait], "threads");
    }
    if (r.cores && r.cores.length) {
      timeChart("chart-cores", "Host CPU per core (busy %)",
        r.cores.map(function (c, i) { return "cpu" + i; }), [r.t].concat(r.cores), "%");
    }
    timeChart("chart-kernel", "Kernel events per second",
      ["listen overflows", "TCP retransmits", "cgroup throttled ms"],
      [r.t, r.listen_overflows, r.retransmits, r.throttled_ms], "per second");
  }

  // The percentile distribution, HdrHistogram style: x is 1/(1-q) on a log axis.
  var d = data.distribution;
  if (d && d.x.length) {
    var el = document.getElementById("chart-distribution");
    var opts = {
      title: "Latency by percentile (ms)",
      width: width(),
      height: 300,
      scales: { x: { time: false, distr: 3 }, y: { distr: 3 } },
      series: [{ label: "percentile", value: function (u, v) { return v == null ? "" : (100 - 100 / v).toFixed(3) + "%"; } }]
        .concat(d.names.map(function (n, i) {
          return { label: n, stroke: colors[i % colors.length], width: i === 0 ? 2.5 : 1.2 };
        })),
      axes: [{
        label: "percentile",
        splits: function () { return [1, 10, 100, 1e3, 1e4, 1e5]; },
        values: function (u, ticks) {
          var names = { 1: "0%", 10: "90%", 100: "99%", 1000: "99.9%", 10000: "99.99%", 100000: "99.999%" };
          return ticks.map(function (v) { return names[v] || ""; });
        }
      }, { label: "ms", size: 70 }]
    };
    var u = new uPlot(opts, [d.x].concat(d.series), el);
    charts.push(u);
    check(el, u);
  }

  // The flame graphs (on-CPU, off-CPU): frames as boxes (root at the bottom), laid out from
  // the preorder list. Click zooms to a frame; the search (case-insensitive) highlights
  // frames whose name matches and says their share of the whole (a frame inside another
  // match counted once); hovering a frame says its samples and shares on the status line;
  // "callers" turns the graph upside down: the functions that used the time at the bottom,
  // their callers above.
  var flameSearch = {};

  // The same preorder lists for the reversed graph: each frame's own (self) samples put on
  // the path from it up to the root, read backwards.
  function reversed(f) {
    var n = f.name.length, self = f.samples.slice(), path = [];
    for (var i = 0; i < n; i++) {
      path[f.depth[i]] = i;
      if (f.depth[i] > 0) self[path[f.depth[i] - 1]] -= f.samples[i];
    }
    var root = { kids: {}, samples: 0 };
    for (i = 0; i < n; i++) {
      path[f.depth[i]] = i;
      if (i === 0 || self[i] <= 0) continue;
      root.samples += self[i];
      var node = root;
      for (var d = f.depth[i]; d >= 1; d--) {
        var key = f.name[path[d]];
        node = node.kids[key] || (node.kids[key] = { kids: {}, samples: 0 });
        node.samples += self[i];
      }
    }
    var out = { names: f.names, name: [f.name[0]], samples: [root.samples], depth: [0],
      total: f.total, unit: f.unit };
    (function walk(node, depth) {
      Object.keys(node.kids)
        .sort(function (a, b) { return node.kids[b].samples - node.kids[a].samples; })
        .forEach(function (k) {
          out.name.push(Number(k)); out.samples.push(node.kids[k].samples); out.depth.push(depth);
          walk(node.kids[k], depth + 1);
        });
    })(root, 1);
    return out;
  }

  (data.flames || []).forEach(function (given) {
    var id = given.el, box = document.getElementById(id);
    if (!box) return;
    var f, n, x, parent, zoom = 0, pattern = null, rowH = 16;
    var layout = function (g) {
      f = g; n = f.name.length; x = new Array(n); parent = new Array(n);
      var cursor = [], path = [];
      for (var i = 0; i < n; i++) {
        var d = f.depth[i];
        x[i] = d === 0 ? 0 : cursor[d];
        cursor[d] = x[i] + f.samples[i];
        cursor[d + 1] = x[i];
        path[d] = i;
        parent[i] = d === 0 ? -1 : path[d - 1];
      }
    };
    layout(given);
    var hue = function (name) {
      var h = 0;
      for (var k = 0; k < name.length && k < 40; k++) h = (h * 31 + name.charCodeAt(k)) >>> 0;
      return h;
    };
    var within = function (i, root) {
      for (var p = i; p !== -1; p = parent[p]) if (p === root) return true;
      return false;
    };
    // A differential graph (`other`: the other run's samples on the same stack) is coloured
    // by how the stack changed from BASE to NEW: red grew, blue shrank.
    var change = function (i) {
      var mine = f.samples[i], theirs = f.other[i];
      var base = given.side === "base";
      var nw = base ? theirs : mine, bs = base ? mine : theirs;
      // shares of each run's own samples: the runs took different numbers of them
      var nwShare = nw / (base ? f.other_total : f.total), bsShare = bs / (base ? f.total : f.other_total);
      return { nw: nw, bs: bs, nwShare: nwShare, bsShare: bsShare,
        r: (nwShare - bsShare) / Math.max(nwShare, bsShare, 1e-9) };
    };
    var colour = function (i, name) {
      if (f.other) {
        var r = change(i).r;
        if (Math.abs(r) < 0.05) return "hsl(40,10%,86%)";
        return (r > 0 ? "hsl(0,85%," : "hsl(215,85%,") + (92 - Math.round(Math.abs(r) * 30)) + "%)";
      }
      var kernel = /_\[k\]$/.test(name);
      return kernel ? "hsl(25,85%," + (62 + hue(name) % 12) + "%)"
        : "hsl(" + (hue(name) % 50) + ",80%," + (64 + hue(name) % 14) + "%)";
    };
    var status = document.getElementById(id + "-status");
    var match = document.getElementById(id + "-match");
    var pct = function (v, of) { return (100 * v / of).toFixed(2) + "%"; };
    var draw = function () {
      box.textContent = "";
      var w = box.clientWidth, from = x[zoom], span = f.samples[zoom], drawn = 0;
      var matched = 0, matchedUnder = -1, shown = [];
      for (var i = 0; i < n; i++) {
        var name = f.names[f.name[i]];
        var isHit = pattern !== null && pattern.test(name);
        if (isHit && !(matchedUnder !== -1 && within(i, matchedUnder))) {
          matched += f.samples[i];
          matchedUnder = i;
        }
        var inZoom = within(i, zoom) || within(zoom, i);
        if (!inZoom) continue;
        var left = within(zoom, i) && i !== zoom ? 0 : (x[i] - from) / span * w;
        var width = within(zoom, i) ? w : f.samples[i] / span * w;
        if (width < 1) continue;
        shown.push([i, left, width, isHit]);
      }
      // as tall as the deepest frame drawn: frames too thin to draw leave no blank rows
      var top = 0;
      shown.forEach(function (s) { if (f.depth[s[0]] > top) top = f.depth[s[0]]; });
      box.style.height = ((top + 1) * rowH + 2) + "px";
      shown.forEach(function (s) {
        var i = s[0], name = f.names[f.name[i]];
        var el = document.createElement("div");
        el.className = s[3] ? "fr hit" : "fr";
        el.style.left = s[1] + "px";
        el.style.width = s[2] + "px";
        el.style.top = ((top - f.depth[i]) * rowH) + "px";
        el.style.background = colour(i, name);
        el.textContent = name;
        el.setAttribute("data-i", String(i));
        box.appendChild(el);
        drawn++;
      });
      box.setAttribute("data-check", JSON.stringify({ frames: drawn, root: f.samples[0], total: f.total }));
      if (pattern !== null) {
        match.textContent = "matched: " + pct(matched, f.total) + " of " + f.unit;
        match.className = "muted";
      } else if (!match.classList.contains("fail")) {
        match.textContent = "";
      }
    };
    var describe = function (i) {
      var name = f.names[f.name[i]];
      if (f.other) {
        var c = change(i);
        return name + ": NEW " + c.nw + " " + f.unit + " (" + (100 * c.nwShare).toFixed(2) + "%), BASE " +
          c.bs + " (" + (100 * c.bsShare).toFixed(2) + "%): " + (c.bs === 0 ? "new in NEW"
            : c.nw === 0 ? "gone in NEW" : (c.nwShare >= c.bsShare ? "+" : "") +
              (100 * (c.nwShare - c.bsShare)).toFixed(2) + " points of the samples");
      }
      return name + ": " + f.samples[i] + " " + f.unit + ", " + pct(f.samples[i], f.total) +
        " of all" + (zoom !== 0 ? ", " + pct(f.samples[i], f.samples[zoom]) + " of the zoomed frame" : "");
    };
    box.addEventListener("mouseover", function (ev) {
      var i = ev.target.getAttribute && ev.target.getAttribute("data-i");
      if (i !== null && i !== undefined) status.textContent = describe(Number(i));
    });
    box.addEventListener("click", function (ev) {
      var i = ev.target.getAttribute && ev.target.getAttribute("data-i");
      if (i !== null && i !== undefined) { zoom = Number(i); draw(); }
    });
    var search = function (text) {
      match.classList.remove("fail");
      try {
        pattern = text ? new RegExp(text, "i") : null;
      } catch (e) {
        // said, not swallowed: an invalid pattern highlighted nothing without a word
        pattern = null;
        match.textContent = "not a regular expression: " + e.message;
        match.className = "fail";
      }
      draw();
    };
    document.getElementById(id + "-reset").addEventListener("click", function () { zoom = 0; draw(); });
    document.getElementById(id + "-search").addEventListener("input", function (ev) { search(ev.target.value); });
    var callers = null, reverse = document.getElementById(id + "-reverse");
    if (reverse) reverse.addEventListener("change", function (ev) {
      if (ev.target.checked) { callers = callers || reversed(given); layout(callers); } else { layout(given); }
      zoom = 0;
      box.setAttribute("data-view", ev.target.checked ? "callers" : "callees");
      draw();
    });
    flameSearch[given.section] = function (term) {
      document.getElementById(id + "-search").value = term;
      zoom = 0;
      search(term);
    };
    box.setAttribute("data-view", "callees");
    draw();
  });

  // Links from findings: #search=REGEX shows frames in a flame graph, #window=FROM-TO
  // (ms since the epoch) zooms the time charts to a window. Applied on load and on click.
  function applyHash() {
    // #search=REGEX for the on-CPU flame graph, #offcpu-search=REGEX for the off-CPU one
    var search = /^#(offcpu-)?search=(.*)$/.exec(location.hash);
    var section = search && (search[1] ? "offcpu" : "profile");
    if (search && flameSearch[section]) {
      flameSearch[section](decodeURIComponent(search[2]));
      document.getElementById(section).scrollIntoView();
    }
    var win = /^#window=(\d+)-(\d+)$/.exec(location.hash);
    if (win) {
      charts.forEach(function (u) {
        if (u.timeChart) u.setScale("x", { min: Number(win[1]) / 1000 - 1, max: Number(win[2]) / 1000 });
      });
      document.getElementById("load").scrollIntoView();
    }
  }
  // Charts follow the window's width (they were drawn at 1200 px and scrolled sideways in a
  // narrower one).
  var reflowing = null;
  window.addEventListener("resize", function () {
    clearTimeout(reflowing);
    reflowing = setTimeout(function () {
      charts.forEach(function (u) { u.setSize({ width: width(), height: u.height }); });
    }, 100);
  });
  window.addEventListener("hashchange", applyHash);
  applyHash();
  document.body.setAttribute("data-charts", String(charts.length));
  // how long the page took to show, from the start of navigation (for the benchmark)
  document.body.setAttribute("data-ready-ms", String(Math.round(performance.now())));
  // Where each section is, for tests that look at a screenshot of each one (measured once
  // uPlot has laid its charts out, which it does after this script).
  setTimeout(function () {
    var layout = {};
    Array.prototype.forEach.call(document.querySelectorAll("section"), function (sec) {
      var box = sec.getBoundingClientRect();
      layout[sec.id] = [Math.round(box.top + window.scrollY), Math.round(box.height)];
    });
    document.body.setAttribute("data-layout", JSON.stringify(layout));
  }, 200);
})();
