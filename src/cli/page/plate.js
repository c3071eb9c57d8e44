// The page's panels, drawn from the run's JSON embedded above (micro plate --html). Every number
// shown is an element with data-csv="panel|label|text|column" naming its row and column of
// out/plate.csv and data-value holding the number as the run wrote it: the browser check
// (scripts/browser-check.mjs) reads them back and compares them with the CSV.
"use strict";
const run = JSON.parse(document.getElementById("run").textContent);
const P = run.plate;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function signed(x, d) { return (x >= 0 ? "+" : "\u2212") + Math.abs(x).toFixed(d); }
// A number as shown, tied to its place in the CSV.
function num(value, text, csv) {
  const s = el("span", {"data-csv": csv, "data-value": String(value)}, text);
  return s;
}
function row(table, cells, head) {
  const tr = el("tr");
  for (const c of cells) {
    const td = el(head ? "th" : "td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c;
    tr.appendChild(td);
  }
  table.appendChild(tr);
}
function interval(panel, label, text, r) {
  const s = el("span");
  s.append("[", num(r.delta_lo, signed(r.delta_lo, 4), `${panel}|${label}|${text}|delta_lo`), ", ",
           num(r.delta_hi, signed(r.delta_hi, 4), `${panel}|${label}|${text}|delta_hi`), "]");
  return s;
}

document.getElementById("model-name").textContent = run.page.model;
document.getElementById("run-line").textContent =
  `This run: kernels ${run.page.kernels}; English ${P.reference[0].tokens} tokens, Chinese ${P.reference[1].tokens} tokens; ` +
  `fp32 loss ${P.reference[0].loss.toFixed(4)} / ${P.reference[1].loss.toFixed(4)} nats per byte.`;

// ---- 1. loss increase per width -------------------------------------------------------------
const lossRows = P.schemes.filter(s => s.panel === "loss");
const widthOf = label => parseInt(label.replace(/^int /, ""), 10);
(function cost() {
  const W = 640, H = 330, L = 70, R = 20, T = 20, B = 50, floor = 1e-4;
  let top = 1;
  for (const s of lossRows) for (const t of ["en", "zh"]) top = Math.max(top, s.texts[t].delta_hi);
  const y = v => T + (H - T - B) * (1 - (Math.log10(Math.max(v, floor)) - Math.log10(floor)) / (Math.log10(top) - Math.log10(floor)));
  const x = i => L + (W - L - R) * (i + 0.5) / lossRows.length;
  const g = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "loss increase per width"});
  for (let e = -4; e <= Math.floor(Math.log10(top)); e++) {
    g.appendChild(svg("line", {x1: L, x2: W - R, y1: y(10 ** e), y2: y(10 ** e), stroke: "#ddd"}));
    g.appendChild(svg("text", {x: L - 6, y: y(10 ** e) + 4, "text-anchor": "end"}, e === -4 ? "\u2264 1e-4" : String(10 ** e)));
  }
  g.appendChild(svg("text", {x: 14, y: (H - B + T) / 2, transform: `rotate(-90 14 ${(H - B + T) / 2})`, "text-anchor": "middle"},
                    "increase, nats/byte (log)"));
  g.appendChild(svg("text", {x: (W + L) / 2, y: H - 8, "text-anchor": "middle"}, "bits per cached number"));
  const series = [["en", "#7b1fa2", -6, "English"], ["zh", "#00897b", 6, "Chinese"]];
  lossRows.forEach((s, i) => {
    g.appendChild(svg("text", {x: x(i), y: H - B + 18, "text-anchor": "middle"}, String(widthOf(s.label))));
    for (const [t, colour, dx] of series) {
      const r = s.texts[t], cx = x(i) + dx;
      g.appendChild(svg("line", {x1: cx, x2: cx, y1: y(r.delta_lo), y2: y(r.delta_hi), stroke: colour, "stroke-width": 1.5}));
      g.appendChild(svg("circle", {cx, cy: y(r.delta), r: 4, fill: colour}));
    }
    if (s.published_delta !== null)
      g.appendChild(svg("text", {x: x(i), y: y(s.published_delta) + 6, "text-anchor": "middle", "font-size": 18, fill: "#000"}, "\u2605"));
  });
  series.forEach(([, colour, , name], k) => {
    g.appendChild(svg("circle", {cx: L + 16, cy: T + 10 + 18 * k, r: 4, fill: colour}));
    g.appendChild(svg("text", {x: L + 26, y: T + 14 + 18 * k}, `micro, ${name} (95% interval)`));
  });
  g.appendChild(svg("text", {x: L + 10, y: T + 56, "font-size": 16}, "\u2605"));
  g.appendChild(svg("text", {x: L + 26, y: T + 50}, "the plate (published)"));
  document.getElementById("cost-chart").appendChild(g);
  const table = document.getElementById("cost-table");
  row(table, ["width", "published", "English", "95% interval", "Chinese", "95% interval"], true);
  for (const s of lossRows)
    row(table, [s.label,
                s.published_delta === null ? "\u2013" : num(s.published_delta, signed(s.published_delta, 4), `loss|${s.label}|en|published_delta`),
                num(s.texts.en.delta, signed(s.texts.en.delta, 4), `loss|${s.label}|en|delta`), interval("loss", s.label, "en", s.texts.en),
                num(s.texts.zh.delta, signed(s.texts.zh.delta, 4), `loss|${s.label}|zh|delta`), interval("loss", s.label, "zh", s.texts.zh)]);
})();

// ---- 2. conversations per width -------------------------------------------------------------
const servePlate = ["fp16", "int 8", "int 4", "int 3", "int 2"];
(function buys() {
  const cap = [16, 8, 4, 3, 2].map(b => P.capacity.rows.find(r => r.cache === `${b}-bit`));
  const held = servePlate.map(c => P.serve.rows.find(r => r.cache === c));
  const W = 640, H = 300, T = 30, B = 50, half = W / 2;
  const g = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "conversations per width"});
  const bars = (x0, values, colour, title) => {
    const max = Math.max(...values), w = (half - 40) / values.length;
    g.appendChild(svg("text", {x: x0 + (half - 20) / 2, y: 16, "text-anchor": "middle"}, title));
    values.forEach((v, i) => {
      const h = (H - T - B) * v / max, bx = x0 + 10 + i * w;
      g.appendChild(svg("rect", {x: bx + 4, y: H - B - h, width: w - 8, height: h, fill: colour}));
      g.appendChild(svg("text", {x: bx + w / 2, y: H - B - h - 4, "text-anchor": "middle"}, String(v)));
      g.appendChild(svg("text", {x: bx + w / 2, y: H - B + 16, "text-anchor": "middle"}, String([16, 8, 4, 3, 2][i])));
    });
    g.appendChild(svg("text", {x: x0 + (half - 20) / 2, y: H - 10, "text-anchor": "middle"}, "bits per cached number"));
  };
  bars(0, cap.map(r => r.conversations), "#8eacc9", `${P.capacity.model}, ${P.capacity.gpu_gb} GB GPU`);
  bars(half, held.map(r => r.held), "#d9a35b", `micro, one ${(P.serve.pool_bytes / 2 ** 20).toFixed(0)} MiB pool (measured)`);
  document.getElementById("buys-chart").appendChild(g);
  const table = document.getElementById("buys-table");
  row(table, ["width", `${P.capacity.model}: conversations`, "micro: conversations held", "micro: tokens/s"], true);
  [16, 8, 4, 3, 2].forEach((b, i) => row(table, [`${b} bits`,
      num(cap[i].conversations, String(cap[i].conversations), `capacity|${b}-bit||conversations`),
      num(held[i].held, String(held[i].held), `serve|${held[i].cache}||conversations`),
      num(held[i].tokens_per_s, held[i].tokens_per_s.toFixed(0), `serve|${held[i].cache}||tokens_per_s`)]));
})();

// ---- 3. watch it break ----------------------------------------------------------------------
(function breaks() {
  for (const b of run.break) {
    const box = document.getElementById(`break-${b.text}`);
    box.appendChild(el("div", {class: "w"}, b.text === "en" ? "English" : "Chinese"));
    box.appendChild(el("div", {}, ""));
    const base = Array.from(b.runs[0].text);
    for (const r of b.runs) {
      const chars = Array.from(r.text);
      let first = 0;
      while (first < chars.length && first < base.length && chars[first] === base[first]) first++;
      const t = el("div", {class: "t", "data-width": r.label});
      t.appendChild(el("span", {class: "p"}, b.prompt));
      t.append(chars.slice(0, first).join(""));
      if (first < chars.length) {
        t.appendChild(el("mark", {title: `departs from the 16-bit text at character ${first + 1}`}, chars[first]));
        t.appendChild(el("span", {class: "after"}, chars.slice(first + 1).join("")));
      }
      box.appendChild(el("div", {class: "w"}, `${r.label}`));
      box.appendChild(t);
    }
  }
  const en = run.break[0];
  document.getElementById("break-repro").textContent =
    `micro generate --prompt "${en.prompt}" -n ${en.bytes} --cache int:bits=3`;
})();

// ---- 4. the attention picture ---------------------------------------------------------------
(function attention() {
  const A = run.attention, rows = A.tokens - A.from, cols = A.tokens;
  const bytes = s => Uint8Array.from(atob(s), c => c.charCodeAt(0));
  const weights = bytes(A.weights), tops = bytes(A.top);
  const sel = {width: document.getElementById("att-width"), layer: document.getElementById("att-layer"),
               head: document.getElementById("att-head")};
  A.widths.forEach((w, i) => { if (i > 0) sel.width.appendChild(el("option", {value: i}, w.label)); });
  for (let l = 0; l < A.layers; l++) sel.layer.appendChild(el("option", {value: l}, String(l)));
  for (let h = 0; h < A.heads; h++) sel.head.appendChild(el("option", {value: h}, String(h)));
  sel.width.value = String(A.widths.length - 1);
  sel.layer.value = String(A.layer), sel.head.value = String(A.head);
  const at = (w, l, h) => ((w * A.layers + l) * A.heads + h) * rows;
  function draw(canvas, w, l, h, ref) {
    const cell = 5, ctx = canvas.getContext("2d");
    canvas.width = cols * cell, canvas.height = rows * cell;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    const base = at(w, l, h);
    let agree = 0;
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c <= A.from + r; c++) {
        const v = 255 - weights[(base + r) * cols + c];
        ctx.fillStyle = `rgb(${v},${v},${Math.min(255, v + 20)})`;
        ctx.fillRect(c * cell, r * cell, cell, cell);
      }
      const top = tops[base + r], same = top === tops[ref + r];
      agree += same;
      ctx.fillStyle = same ? "#1565c0" : "#e53935";
      ctx.beginPath();
      ctx.arc(top * cell + cell / 2, r * cell + cell / 2, cell / 2, 0, 2 * Math.PI);
      ctx.fill();
    }
    return agree;
  }
  function update() {
    const w = +sel.width.value, l = +sel.layer.value, h = +sel.head.value, ref = at(0, l, h);
    draw(document.getElementById("att-ref"), 0, l, h, ref);
    const agree = draw(document.getElementById("att-sch"), w, l, h, ref);
    document.getElementById("att-sch-caption").textContent = `${A.widths[w].label} cache (${A.widths[w].spec})`;
    document.getElementById("att-agree").textContent =
      `most-attended position as fp32's: ${agree} of ${rows} rows (positions ${A.from}\u2013${A.tokens - 1} of ${A.path})`;
    document.getElementById("att-repro").textContent =
      `micro attention --cache ${A.widths[w].spec} --layer ${l} --head ${h} --text ${A.path}:${A.chars} --from ${A.from} --to ${A.tokens - 1}`;
  }
  for (const s of Object.values(sel)) s.addEventListener("change", update);
  update();
})();

// ---- 5. panel (d): measured concurrency -----------------------------------------------------
(function serve() {
  const table = document.getElementById("serve-table"), fp16 = P.serve.rows[0];
  row(table, ["cache", "bits", "conversations held", "tokens/s", "\u00d7 fp16", "KB read per token and step"], true);
  for (const r of P.serve.rows)
    row(table, [r.cache, num(r.bits_per_element, r.bits_per_element.toFixed(2), `serve|${r.cache}||bits_per_element`),
                num(r.held, String(r.held), `serve|${r.cache}||conversations`),
                num(r.tokens_per_s, r.tokens_per_s.toFixed(0), `serve|${r.cache}||tokens_per_s`),
                (r.tokens_per_s / fp16.tokens_per_s).toFixed(2) + "\u00d7",
                (r.cache_bytes_per_token_step / 1e3).toFixed(1)]);
})();

// ---- 6. the frontier ------------------------------------------------------------------------
(function frontier() {
  const table = document.getElementById("frontier-table");
  row(table, ["text", "cache", "bytes per token", "increase over micro's fp32"], true);
  for (const t of ["en", "zh"]) {
    const pts = P.arch.rows.map(r => ({label: r.label, ...r.texts[t]})).sort((a, b) => a.bytes_per_token - b.bytes_per_token ||
                                                                               a.delta_micro - b.delta_micro);
    let best = Infinity;
    for (const p of pts) {
      if (!(p.delta_micro < best)) continue;
      best = p.delta_micro;
      row(table, [t === "en" ? "English" : "Chinese", p.label,
                  num(p.bytes_per_token, p.bytes_per_token.toFixed(0), `arch|${p.label}|${t}|bytes_per_token`),
                  num(p.delta_micro, signed(p.delta_micro, 4), `arch|${p.label}|${t}|delta_micro`)]);
    }
  }
})();
