// tttrace's page: draws the charts from the JSON in #tt-data (sinks/html).
// No library, nothing fetched: SVG made by hand.
(function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  var COLORS = {
    DRAM: '#4e79a7', L1: '#f28e2b', L1_SMALL: '#e15759', TRACE: '#76b7b2',
    SYSTEM_MEMORY: '#59a14f', CB: '#b07aa1', L1_CORE: '#9c755f',
    dram: '#4e79a7', l1: '#f28e2b', l1_small: '#e15759', trace: '#76b7b2'
  };
  var data = JSON.parse(document.getElementById('tt-data').textContent || '{}');
  var procs = {};
  (data.procs || []).forEach(function (p) { procs[p.proc] = p; });

  function svg(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
    if (parent) { parent.appendChild(e); }
    return e;
  }

  function text(parent, x, y, s, cls, anchor) {
    var t = svg('text', { x: x, y: y, 'class': cls || '' }, parent);
    if (anchor) { t.setAttribute('text-anchor', anchor); }
    t.textContent = s;
    return t;
  }

  // human is sinks.HumanBytes: exact below 1 KiB, else one decimal.
  function human(n) {
    if (n < 1024) { return n + ' B'; }
    var units = 'KMGTPE', v = n / 1024, i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return v.toFixed(1) + ' ' + units[i] + 'iB';
  }

  // secs is ns in seconds with as many decimals as a step of step ns needs.
  function secs(ns, step) {
    var d = step > 0 ? Math.min(Math.max(Math.ceil(-Math.log(step / 1e9) / Math.LN10), 0), 9) : 3;
    return (ns / 1e9).toFixed(d) + ' s';
  }

  // ticks are about n round values from 0 to at least max.
  function ticks(max, n, bytes) {
    if (max <= 0) { return [0]; }
    var raw = max / n, step;
    if (bytes && max >= 1024) {
      step = Math.pow(2, Math.ceil(Math.log(raw) / Math.LN2));
    } else {
      var p = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10));
      step = [1, 2, 5, 10].map(function (m) { return m * p; }).filter(function (s) { return s >= raw; })[0];
    }
    var out = [];
    for (var v = 0; v <= max + step / 2 && out.length < 50; v += step) { out.push(v); }
    if (out[out.length - 1] < max) { out.push(out[out.length - 1] + step); }
    return out;
  }

  // at is the value of a flat [t, v, ...] series at time t (-1 before it).
  function at(pts, t) {
    var lo = 0, hi = pts.length / 2 - 1, k = -1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (pts[2 * mid] <= t) { k = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return k < 0 ? -1 : pts[2 * k + 1];
  }

  // chart draws step lines of series {label, color, pts, dash, peak} over
  // [0, end] in div; peak marks the highest sample (the first to reach
  // it) with an element saying what it is (marks).
  function chart(div, series, o) {
    div.textContent = '';
    var W = Math.max(div.clientWidth || 800, 320), H = o.height;
    var L = 76, R = 14, T = 22, B = 22;
    var end = Math.max(o.end, 1), top = o.cap || 0;
    series.forEach(function (s) {
      for (var i = 1; i < s.pts.length; i += 2) { top = Math.max(top, s.pts[i]); }
    });
    var yt = ticks(top, 4, true), ymax = yt[yt.length - 1] || 1;
    var root = svg('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'class': 'plot' }, div);
    var x = function (t) { return L + (W - L - R) * t / end; };
    var y = function (v) { return H - B - (H - T - B) * v / ymax; };
    yt.forEach(function (v) {
      svg('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), 'class': 'grid' }, root);
      text(root, L - 6, y(v) + 4, human(v), 'tick', 'end');
    });
    var xt = ticks(end, 6, false), xstep = xt.length > 1 ? xt[1] - xt[0] : 0;
    xt.forEach(function (t) {
      if (t > end) { return; }
      svg('line', { x1: x(t), x2: x(t), y1: H - B, y2: H - B + 4, 'class': 'axis' }, root);
      text(root, x(t), H - 6, secs(t, xstep), 'tick', 'middle');
    });
    svg('line', { x1: L, x2: W - R, y1: H - B, y2: H - B, 'class': 'axis' }, root);
    if (o.cap) {
      svg('line', { x1: L, x2: W - R, y1: y(o.cap), y2: y(o.cap), 'class': 'cap' }, root);
      text(root, W - R, y(o.cap) - 4, 'capacity ' + human(o.cap), 'tick', 'end');
    }
    var lx = L;
    series.forEach(function (s) {
      var p = s.pts;
      if (p.length < 2) { return; }
      // Before its first sample the ledger held nothing of it: from 0.
      var d = 'M' + x(0).toFixed(1) + ' ' + y(0).toFixed(1);
      for (var i = 0; i < p.length; i += 2) {
        d += 'H' + x(p[i]).toFixed(1) + 'V' + y(p[i + 1]).toFixed(1);
      }
      d += 'H' + x(end).toFixed(1);
      var path = svg('path', { d: d, stroke: s.color, 'class': 'line' }, root);
      if (s.dash) { path.setAttribute('stroke-dasharray', '5 3'); }
      svg('rect', { x: lx, y: 6, width: 10, height: 10, fill: s.color }, root);
      lx = text(root, lx + 14, 15, s.label, 'legend').getComputedTextLength() + lx + 26;
      if (!s.peak) { return; }
      var k = 1;
      for (var j = 3; j < p.length; j += 2) { if (p[j] > p[k]) { k = j; } }
      var px = x(p[k - 1]), py = y(p[k]);
      var m = svg('circle', { cx: px, cy: py, r: 4, fill: s.color, 'class': 'peak' }, root);
      Object.keys(s.peak).forEach(function (a) { m.setAttribute(a, s.peak[a]); });
      m.setAttribute('data-value', String(p[k]));
      m.setAttribute('data-ts', String(p[k - 1]));
      svg('title', {}, m).textContent = s.label + ' peak ' + human(p[k]) + ' at ' + secs(p[k - 1], end / 1000);
      text(root, Math.min(px + 6, W - R - 4), Math.max(py - 6, T + 8), 'peak ' + human(p[k]), 'peaklabel', px + 6 > W - R - 80 ? 'end' : 'start');
    });
    // A cursor: the values of every series at the pointer's time.
    var cur = svg('g', { 'class': 'cursor', visibility: 'hidden' }, root);
    var vline = svg('line', { y1: T, y2: H - B }, cur);
    var box = svg('text', { y: T + 12 }, cur);
    var hit = svg('rect', { x: L, y: T, width: W - L - R, height: H - T - B, 'class': 'hit' }, root);
    hit.addEventListener('mousemove', function (ev) {
      var r = root.getBoundingClientRect();
      var px = ev.clientX - r.left, t = (px - L) / (W - L - R) * end;
      cur.setAttribute('visibility', 'visible');
      vline.setAttribute('x1', px);
      vline.setAttribute('x2', px);
      box.textContent = '';
      box.setAttribute('x', px > W / 2 ? px - 8 : px + 8);
      box.setAttribute('text-anchor', px > W / 2 ? 'end' : 'start');
      var lines = [secs(t, end / 1000)];
      series.forEach(function (s) {
        var v = at(s.pts, t);
        if (v >= 0) { lines.push(s.label + ' ' + human(v)); }
      });
      lines.forEach(function (l, i) {
        svg('tspan', { x: box.getAttribute('x'), dy: i ? 14 : 0 }, box).textContent = l;
      });
    });
    hit.addEventListener('mouseleave', function () { cur.setAttribute('visibility', 'hidden'); });
  }

  function chipOf(div) {
    var p = procs[div.getAttribute('data-proc')];
    if (!p) { return null; }
    var id = Number(div.getAttribute('data-chip'));
    var c = null;
    p.chips.forEach(function (x) { if (x.chip === id) { c = x; } });
    return c ? { p: p, c: c } : null;
  }

  // memChart draws one chart per buffer type of the chip (their scales
  // differ by orders of magnitude), over the process's time.
  function memChart(div) {
    var pc = chipOf(div);
    if (!pc) { return; }
    div.textContent = '';
    pc.c.mem.forEach(function (s) {
      var sub = document.createElement('div');
      sub.className = 'chart one';
      sub.setAttribute('data-type', s.type);
      div.appendChild(sub);
      chart(sub, [{
        label: s.label || s.type, color: COLORS[s.type] || '#555', pts: s.pts,
        peak: s.peak ? { 'data-proc': String(pc.p.proc), 'data-chip': String(pc.c.chip), 'data-type': s.type, 'data-field': s.peak } : null
      }], { end: pc.p.end, height: 120, cap: s.cap || 0 });
    });
  }

  function allocChart(div) {
    var pc = chipOf(div);
    if (!pc) { return; }
    var typ = div.getAttribute('data-type');
    pc.c.alloc.forEach(function (a) {
      if (a.type !== typ) { return; }
      var col = COLORS[a.type] || '#555';
      chart(div, [
        { label: a.type + ' used (' + a.banks + ' banks)', color: col, pts: a.used },
        { label: 'largest free block', color: '#333', pts: a.largest_free, dash: true }
      ], { end: pc.p.end, height: 130, cap: a.capacity });
    });
  }

  // The icicle view of a process's allocation sites.
  var MEASURES = [['in use at the end', 0], ['allocated', 1], ['held at the peak', 2]];

  function hue(s) {
    var h = 0;
    for (var i = 0; i < s.length; i++) { h = (h * 31 + s.charCodeAt(i)) >>> 0; }
    return 'hsl(' + (10 + h % 50) + ',' + (55 + h % 30) + '%,' + (58 + (h >> 8) % 18) + '%)';
  }

  function icicle(div) {
    var p = procs[div.getAttribute('data-proc')];
    if (!p || !p.icicle) { return; }
    var state = div.icicleState || { m: 1, focus: [p.icicle] };
    div.icicleState = state;
    div.textContent = '';
    var bar = document.createElement('div');
    bar.className = 'measures';
    div.appendChild(bar);
    MEASURES.forEach(function (ms) {
      var b = document.createElement('button');
      b.type = 'button';
      b.textContent = ms[0];
      if (ms[1] === state.m) { b.className = 'on'; }
      b.addEventListener('click', function () { state.m = ms[1]; icicle(div); });
      bar.appendChild(b);
    });
    var m = state.m, focus = state.focus[state.focus.length - 1];
    var W = Math.max(div.clientWidth || 800, 320), RH = 18;
    var rows = [];
    function depth(n) {
      var d = 0;
      (n.c || []).forEach(function (c) { d = Math.max(d, depth(c)); });
      return d + 1;
    }
    var H = (state.focus.length - 1 + depth(focus)) * RH + 2;
    var root = svg('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'class': 'flame' }, div);
    function box(n, x, w, row, onclick, typ) {
      if (w < 0.5) { return; }
      var g = svg('g', { 'class': 'frame' }, root);
      var fill = typ ? (COLORS[n.n] || '#999') : hue(n.n);
      svg('rect', { x: x, y: row * RH, width: Math.max(w - 0.5, 0.5), height: RH - 1, fill: fill }, g);
      svg('title', {}, g).textContent = n.n + (n.f ? ' (' + n.f + ')' : '') + '\nin use ' + human(n.v[0]) +
        ', allocated ' + human(n.v[1]) + ', at the peak ' + human(n.v[2]);
      if (w > 36) {
        var s = n.n, fit = Math.floor((w - 6) / 6.6);
        if (s.length > fit) { s = s.slice(0, Math.max(fit - 1, 1)) + '…'; }
        text(g, x + 3, row * RH + 13, s, 'flabel');
      }
      g.addEventListener('click', onclick);
      rows.push(g);
    }
    state.focus.forEach(function (n, i) {
      if (i === state.focus.length - 1) { return; }
      box(n, 0, W, i, function () { state.focus = state.focus.slice(0, i + 1); icicle(div); }, false);
    });
    var base = state.focus.length - 1;
    function lay(n, x, w, row, path) {
      box(n, x, w, row, function () {
        if (n === focus && state.focus.length > 1) {
          state.focus.pop();
        } else if (n !== focus) {
          state.focus = state.focus.concat(path);
        }
        icicle(div);
      }, base + path.length === 1); // a buffer type: the root's children
      var total = n.v[m];
      if (!total || !n.c) { return; }
      var kids = n.c.slice().sort(function (a, b) { return b.v[m] - a.v[m]; });
      var cx = x;
      kids.forEach(function (c) {
        var cw = w * c.v[m] / total;
        lay(c, cx, cw, row + 1, path.concat([c]));
        cx += cw;
      });
    }
    lay(focus, 0, W, base, []);
  }

  function draw() {
    var all = document.querySelectorAll('[data-chart]');
    for (var i = 0; i < all.length; i++) {
      var d = all[i], kind = d.getAttribute('data-chart');
      if (kind === 'mem') { memChart(d); } else if (kind === 'alloc') { allocChart(d); } else if (kind === 'icicle') { icicle(d); }
    }
  }

  var pending = 0;
  window.addEventListener('resize', function () {
    clearTimeout(pending);
    pending = setTimeout(draw, 150);
  });
  draw();
}());
