"use strict";
// The attention explorer: `aiaynExplorer.show(data)` draws `data` ({about, d_k, sentences}, as
// aiayn_cli/inspection/explorer.py writes it and `aiayn serve`'s /v1/attention answers it) into the
// elements of explorer_view.html. The offline explorer and the served page's "look inside" both call it.
const aiaynExplorer = (() => {
let DATA = null, bound = false;
const state = { s: 0, kind: "cross", layer: 0, head: 0, query: 0 };
const $ = (id) => document.getElementById(id);
const KIND_NAMES = { encoder: "encoder self-attention", decoder: "masked decoder self-attention", cross: "encoder-decoder attention" };

function sentence() { return DATA.sentences[state.s]; }
function tokens(kind) {
  const s = sentence();
  if (kind === "encoder") return { q: s.source_tokens, k: s.source_tokens };
  if (kind === "decoder") return { q: s.decoder_input_tokens, k: s.decoder_input_tokens };
  return { q: s.target_tokens, k: s.source_tokens };
}
// Eq. (1)'s softmax over one query's q.k row (null: masked): the page's one path from the scores it
// prints to the weights it draws and prints, so that the two are the same numbers.
function softmax(raw) {
  const root = Math.sqrt(DATA.d_k), scaled = raw.map((x) => (x === null ? null : x / root));
  const max = Math.max(...scaled.filter((x) => x !== null));
  const exps = scaled.map((x) => (x === null ? 0 : Math.exp(x - max)));
  const total = exps.reduce((a, b) => a + b, 0);
  return exps.map((e) => (total > 0 ? e / total : 0));
}
function weights(kind, layer, head) { return sentence().kinds[kind].scores[layer][head].map(softmax); }
function fmt(x, d) { return x === null ? "masked" : x.toFixed(d); }

// Options count from 1, as their labels do; `state` counts from 0.
function fillSelect(el, n, label) {
  const old = el.value;
  el.innerHTML = "";
  for (let i = 0; i < n; i++) { const o = document.createElement("option"); o.value = i + 1; o.textContent = label(i); el.appendChild(o); }
  if (old !== "" && Number(old) <= n) el.value = old;
}
function chosen(id) { return Number($(id).value) - 1; }

function show(data) {
  DATA = data;
  state.s = 0; state.query = 0;
  fillSelect($("sentence"), DATA.sentences.length, (i) => (i + 1) + ": " + DATA.sentences[i].source.slice(0, 60));
  $("sentence").value = 1;
  $("explorer-about").textContent = DATA.about;
  $("kind").value = state.kind;
  if (!bound) {
    for (const id of ["sentence", "kind", "layer", "head"]) {
      $(id).addEventListener("change", () => {
        state.s = chosen("sentence"); state.kind = $("kind").value;
        state.layer = chosen("layer"); state.head = chosen("head");
        if (id === "sentence" || id === "kind") state.query = 0;
        render();
      });
    }
    bound = true;
  }
  render();
}

function render() {
  const s = sentence(), k = s.kinds[state.kind];
  fillSelect($("layer"), k.attention.length, (i) => String(i + 1));
  fillSelect($("head"), k.attention[0].length, (i) => String(i + 1));
  state.layer = Math.min(state.layer, k.attention.length - 1); state.head = Math.min(state.head, k.attention[0].length - 1);
  $("layer").value = state.layer + 1; $("head").value = state.head + 1;
  state.query = Math.min(state.query, tokens(state.kind).q.length - 1);
  renderPair(); renderHeadView(); renderThumbs(); renderWalk();
}

function renderPair() {
  const s = sentence();
  const what = s.is_reference ? "reference (teacher forcing)" : "translation (beam search)";
  let html = '<div><span class="lab">source</span>' + esc(s.source) + "</div>";
  html += '<div><span class="lab">' + what + "</span>" + esc(s.target) + "</div>";
  html += '<div><span class="lab">log p per token</span>';
  s.target_tokens.forEach((t, i) => {
    const p = Math.exp(s.token_log_probs[i]);
    const shade = "rgba(200, 40, 30, " + (1 - p).toFixed(3) + ")";
    html += '<span class="lp" style="background:' + shade + '" title="p = ' + p.toFixed(4) + '">' + esc(t) + " " + s.token_log_probs[i].toFixed(2) + "</span>";
  });
  html += '</div><div><span class="lab">sentence</span>log p = ' + s.log_prob.toFixed(4) + ", score = log p / lp = " + s.score.toFixed(4) + " (" + esc(s.length_penalty) + ")</div>";
  $("pair").innerHTML = html;
}

function esc(t) { return String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); }

function renderHeadView() {
  const svg = $("headview"), tk = tokens(state.kind), W = weights(state.kind, state.layer, state.head);
  const rowH = 20, top = 40, n = Math.max(tk.q.length, tk.k.length);
  svg.setAttribute("height", top + n * rowH + 10);
  $("view-title").textContent = KIND_NAMES[state.kind] + ", layer " + (state.layer + 1) + ", head " + (state.head + 1);
  const NS = "http://www.w3.org/2000/svg";
  svg.innerHTML = "";
  const header = (x, anchor, text) => { const t = document.createElementNS(NS, "text"); t.setAttribute("x", x); t.setAttribute("y", 14); t.setAttribute("text-anchor", anchor); t.setAttribute("fill", "#5b6b7c"); t.textContent = text; svg.appendChild(t); };
  header(190, "end", "queries (attending)"); header(330, "start", "keys (attended to)");
  const row = W[state.query];
  for (let j = 0; j < tk.k.length; j++) {
    const r = document.createElementNS(NS, "rect");
    r.setAttribute("x", 326); r.setAttribute("y", top + j * rowH - 14); r.setAttribute("width", 180); r.setAttribute("height", rowH - 2);
    r.setAttribute("fill", "rgba(31, 111, 235, " + row[j].toFixed(4) + ")");
    svg.appendChild(r);
  }
  for (let i = 0; i < tk.q.length; i++) {
    for (let j = 0; j < tk.k.length; j++) {
      const w = W[i][j];
      if (w < 0.01) continue;
      const l = document.createElementNS(NS, "line");
      l.setAttribute("x1", 196); l.setAttribute("y1", top + i * rowH - 4); l.setAttribute("x2", 322); l.setAttribute("y2", top + j * rowH - 4);
      const sel = i === state.query;
      l.setAttribute("stroke", sel ? "#b3261e" : "#1f6feb");
      l.setAttribute("stroke-opacity", (sel ? w : w * 0.25).toFixed(4));
      l.setAttribute("stroke-width", sel ? 3 : 1.5);
      if (sel) { l.setAttribute("class", "line selected-line"); l.dataset.key = j; l.dataset.weight = w; }
      svg.appendChild(l);
    }
  }
  tk.q.forEach((t, i) => {
    const e = document.createElementNS(NS, "text");
    e.setAttribute("x", 190); e.setAttribute("y", top + i * rowH); e.setAttribute("text-anchor", "end");
    e.setAttribute("class", "token query" + (i === state.query ? " selected" : "")); e.dataset.index = i;
    e.textContent = t;
    e.addEventListener("click", () => { state.query = i; renderHeadView(); renderWalk(); });
    e.addEventListener("mouseenter", () => { if (state.query !== i) { state.query = i; renderHeadView(); renderWalk(); } });
    svg.appendChild(e);
  });
  tk.k.forEach((t, j) => {
    const e = document.createElementNS(NS, "text");
    e.setAttribute("x", 330); e.setAttribute("y", top + j * rowH);
    e.setAttribute("class", "token key"); e.dataset.index = j; e.dataset.weight = row[j];
    e.textContent = t + "  " + row[j].toFixed(3);
    svg.appendChild(e);
  });
}

function renderThumbs() {
  const box = $("thumbs"), heads = sentence().kinds[state.kind].scores[state.layer].map((_, h) => weights(state.kind, state.layer, h));
  box.innerHTML = "";
  heads.forEach((W, h) => {
    const div = document.createElement("div");
    div.className = "thumb" + (h === state.head ? " active" : ""); div.dataset.head = h;
    const c = document.createElement("canvas"), cell = Math.max(3, Math.floor(96 / Math.max(W.length, W[0].length)));
    c.width = W[0].length * cell; c.height = W.length * cell;
    const g = c.getContext("2d");
    for (let i = 0; i < W.length; i++) for (let j = 0; j < W[i].length; j++) {
      g.fillStyle = "rgba(31, 111, 235, " + W[i][j] + ")"; g.fillRect(j * cell, i * cell, cell, cell);
    }
    g.strokeStyle = "#c5ced8"; g.strokeRect(0, 0, c.width, c.height);
    div.appendChild(c);
    const cap = document.createElement("div"); cap.textContent = "head " + (h + 1); div.appendChild(cap);
    div.addEventListener("click", () => { state.head = h; render(); });
    box.appendChild(div);
  });
}

function renderWalk() {
  const s = sentence(), k = s.kinds[state.kind], tk = tokens(state.kind), i = state.query;
  const raw = k.scores[state.layer][state.head][i], vnorm = k.value_norms[state.layer][state.head];
  const drawn = weights(state.kind, state.layer, state.head)[i], root = Math.sqrt(DATA.d_k);
  const scaled = raw.map((x) => (x === null ? null : x / root)), soft = softmax(raw);
  let html = "<div class='note'>query: <b>" + esc(tk.q[i]) + "</b> (position " + (i + 1) + "), d<sub>k</sub> = " + DATA.d_k;
  if (state.kind === "decoder") html += "; keys after the query are masked (&minus;&infin; before the softmax, &sect;3.2.3)";
  html += "</div><table class='walk' id='walk-table'><tr><th>key</th><th>q&middot;k</th><th>q&middot;k / &radic;d<sub>k</sub></th><th>softmax</th><th>drawn weight</th><th>|v|</th><th>weight &times; |v|</th></tr>";
  tk.k.forEach((t, j) => {
    const m = raw[j] === null, cls = m ? " class='masked'" : "";
    html += "<tr data-softmax='" + soft[j] + "' data-drawn='" + drawn[j] + "'><td class='tok'>" + esc(t) + "</td><td" + cls + ">" + fmt(raw[j], 3) + "</td><td" + cls + ">" + fmt(scaled[j], 3) + "</td><td" + cls + ">" + soft[j].toFixed(4) + "</td><td>" + drawn[j].toFixed(4) + "</td><td>" + vnorm[j].toFixed(2) + "</td><td>" + (soft[j] * vnorm[j]).toFixed(3) + "</td></tr>";
  });
  html += "</table>";
  const top = tk.k.map((t, j) => [soft[j] * vnorm[j], t, soft[j]]).sort((a, b) => b[0] - a[0]).slice(0, 3);
  html += "<div class='note'>largest contributions to the weighted sum of values: " + top.map((c) => "<b>" + esc(c[1]) + "</b> " + c[2].toFixed(3) + " &times; |v| = " + c[0].toFixed(2)).join(", ") + "</div>";
  $("walk").innerHTML = html;
}

return { show };
})();
