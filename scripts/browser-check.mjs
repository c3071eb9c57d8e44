// The page micro plate --html wrote, checked in a real browser (Debian's chromium, headless), driven
// over the DevTools protocol on a pipe (--remote-debugging-pipe: no port, no package to install).
//
//   node scripts/browser-check.mjs PAGE.html PLATE.csv [--screenshot FILE.png] [--chromium PATH]
//
// Loads the page from disk at 1280x900 and at a phone's 390x844 and fails (exit 1, one line per
// failure) on: a console error or an uncaught exception; a request for anything but the page itself
// or a data: URL inside it; a blank screenshot at either size; a page wider than the phone; a panel
// number (an element with data-csv="panel|label|text|column") that is not the CSV's, to the digits it
// shows; a panel without numbers; the attention picture unchanged when the width control changes;
// a page over 2 MB.
import { spawn } from "node:child_process";
import { readFileSync, statSync, writeFileSync, renameSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { inflateSync } from "node:zlib";

const args = process.argv.slice(2);
const opt = name => { const i = args.indexOf(name); if (i < 0) return null; const v = args[i + 1]; args.splice(i, 2); return v; };
const shotPath = opt("--screenshot"), chromium = opt("--chromium") || "chromium";
if (args.length !== 2) {
  console.error("usage: node scripts/browser-check.mjs PAGE.html PLATE.csv [--screenshot FILE.png] [--chromium PATH]");
  process.exit(2);
}
const [pagePath, csvPath] = args;
const pageUrl = pathToFileURL(resolve(pagePath)).href;
const failures = [];
const fail = msg => { failures.push(msg); console.log(`bad: ${msg}`); };

// ---- the CSV: "panel|label|text|column" -> the number as written -----------------------------
function parseCsv(text) {
  const rows = [];
  for (const line of text.split("\n")) {
    if (!line) continue;
    const cells = [];
    let cur = "", quoted = false;
    for (let i = 0; i < line.length; i++) {
      const c = line[i];
      if (quoted) {
        if (c === '"' && line[i + 1] === '"') cur += '"', i++;
        else if (c === '"') quoted = false;
        else cur += c;
      } else if (c === '"') quoted = true;
      else if (c === ",") cells.push(cur), cur = "";
      else cur += c;
    }
    cells.push(cur);
    rows.push(cells);
  }
  return rows;
}
const csvRows = parseCsv(readFileSync(csvPath, "utf8"));
const header = csvRows.shift();
const csv = new Map();
for (const r of csvRows)
  header.forEach((col, i) => { if (r[i] !== "") csv.set(`${r[0]}|${r[1]}|${r[2]}|${col}`, r[i]); });

// ---- PNG: the pixels of a screenshot (8-bit RGB or RGBA, as Chromium writes) -----------------
function pngStats(buf) {
  let at = 8, width = 0, height = 0, type = 0;
  const idat = [];
  while (at < buf.length) {
    const len = buf.readUInt32BE(at), kind = buf.toString("ascii", at + 4, at + 8), body = buf.subarray(at + 8, at + 8 + len);
    if (kind === "IHDR") width = body.readUInt32BE(0), height = body.readUInt32BE(4), type = body[9];
    if (kind === "IDAT") idat.push(body);
    at += 12 + len;
  }
  const bpp = type === 6 ? 4 : 3, stride = width * bpp, raw = inflateSync(Buffer.concat(idat));
  const px = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)], src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? px[y * stride + x - bpp] : 0, b = y ? px[(y - 1) * stride + x] : 0,
            c = x >= bpp && y ? px[(y - 1) * stride + x - bpp] : 0;
      let v = src[x];
      if (f === 1) v += a;
      else if (f === 2) v += b;
      else if (f === 3) v += (a + b) >> 1;
      else if (f === 4) { const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
                          v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c; }
      px[y * stride + x] = v & 255;
    }
  }
  const colours = new Set();
  let dark = 0;
  for (let i = 0; i < px.length; i += bpp) {
    colours.add((px[i] << 16) | (px[i + 1] << 8) | px[i + 2]);
    if (px[i] + px[i + 1] + px[i + 2] < 384) dark++;
  }
  return {width, height, colours: colours.size, dark: dark / (width * height)};
}

// ---- the browser -----------------------------------------------------------------------------
const browser = spawn(chromium, ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
  "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir=" +
  `${process.env.TMPDIR || "/tmp"}/micro-browser-check-${process.pid}`, "about:blank"],
  {stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"]});
let stderr = "";
browser.stderr.on("data", d => { stderr += d; });
const toBrowser = browser.stdio[3], fromBrowser = browser.stdio[4];
let nextId = 1, pending = new Map(), listeners = [], inbox = "";
fromBrowser.on("data", chunk => {
  inbox += chunk.toString("utf8");
  let end;
  while ((end = inbox.indexOf("\0")) >= 0) {
    const msg = JSON.parse(inbox.slice(0, end));
    inbox = inbox.slice(end + 1);
    if (msg.id && pending.has(msg.id)) {
      const {ok, no} = pending.get(msg.id);
      pending.delete(msg.id);
      msg.error ? no(new Error(`${msg.error.message}`)) : ok(msg.result);
    } else for (const l of listeners) l(msg);
  }
});
function send(method, params = {}, sessionId) {
  const id = nextId++;
  toBrowser.write(JSON.stringify({id, method, params, ...(sessionId ? {sessionId} : {})}) + "\0");
  return new Promise((ok, no) => pending.set(id, {ok, no}));
}
function once(method, timeoutMs) {
  return new Promise((ok, no) => {
    const t = setTimeout(() => no(new Error(`no ${method} within ${timeoutMs} ms`)), timeoutMs);
    const l = msg => { if (msg.method === method) { clearTimeout(t); listeners = listeners.filter(x => x !== l); ok(msg.params); } };
    listeners.push(l);
  });
}
const watchdog = setTimeout(() => { console.log("bad: the browser check took over 120 s"); browser.kill("SIGKILL"); process.exit(1); }, 120000);

async function main() {
  const size = statSync(pagePath).size;
  console.log(`page: ${pagePath}, ${(size / 1024).toFixed(0)} KB`);
  if (size > 2 * 1024 * 1024) fail(`the page is ${size} bytes, over 2 MB`);
  const {targetId} = await send("Target.createTarget", {url: "about:blank"});
  const {sessionId: s} = await send("Target.attachToTarget", {targetId, flatten: true});
  listeners.push(msg => {
    if (msg.sessionId !== s) return;
    const p = msg.params;
    if (msg.method === "Runtime.consoleAPICalled" && (p.type === "error" || p.type === "assert"))
      fail(`console ${p.type}: ${p.args.map(a => a.value ?? a.description).join(" ")}`);
    if (msg.method === "Runtime.exceptionThrown")
      fail(`uncaught: ${p.exceptionDetails.exception?.description || p.exceptionDetails.text}`);
    if (msg.method === "Log.entryAdded" && p.entry.level === "error") fail(`browser log: ${p.entry.text} ${p.entry.url || ""}`);
    if (msg.method === "Network.requestWillBeSent") {
      const url = p.request.url;
      if (url !== pageUrl && !url.startsWith("data:")) fail(`a request outside the file: ${url.slice(0, 120)}`);
    }
  });
  for (const d of ["Runtime", "Log", "Network", "Page"]) await send(`${d}.enable`, {}, s);
  const evaluate = async expression => {
    const r = await send("Runtime.evaluate", {expression, returnByValue: true, awaitPromise: true}, s);
    if (r.exceptionDetails) throw new Error(`in the page: ${r.exceptionDetails.exception?.description || r.exceptionDetails.text}`);
    return r.result.value;
  };
  const shoot = async (label, file) => {
    const {data} = await send("Page.captureScreenshot", {format: "png"}, s);
    const png = Buffer.from(data, "base64"), st = pngStats(png);
    console.log(`screenshot ${label}: ${st.width}x${st.height}, ${st.colours} colours, ${(100 * st.dark).toFixed(1)}% dark pixels`);
    if (st.colours < 16 || st.dark < 0.005) fail(`the ${label} screenshot is blank`);
    if (file) { writeFileSync(file + ".tmp", png); renameSync(file + ".tmp", file); console.log(`written: ${file}`); }
  };

  await send("Emulation.setDeviceMetricsOverride", {width: 1280, height: 900, deviceScaleFactor: 1, mobile: false}, s);
  const loaded = once("Page.loadEventFired", 30000);
  await send("Page.navigate", {url: pageUrl}, s);
  await loaded;
  await evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))");
  await shoot("1280x900", shotPath);

  // The panels' numbers against the CSV, to the digits each shows.
  const shown = await evaluate(`[...document.querySelectorAll("[data-csv]")].map(e => [e.dataset.csv, e.dataset.value, e.textContent])`);
  const perPanel = {};
  let checked = 0;
  for (const [key, value, text] of shown) {
    const panel = key.split("|")[0];
    perPanel[panel] = (perPanel[panel] || 0) + 1;
    if (!csv.has(key)) { fail(`${key}: not in ${csvPath}`); continue; }
    const want = Number(csv.get(key)), got = Number(value);
    const t = text.replace("\u2212", "-").replace("+", ""), digits = (t.split(".")[1] || "").length, seen = Number(t);
    if (!(Math.abs(got - want) <= 1e-9 + 1e-6 * Math.abs(want))) fail(`${key}: the page holds ${value}, the CSV ${want}`);
    else if (!(Math.abs(seen - want) <= 0.5 * 10 ** -digits + 1e-9)) fail(`${key}: the page shows ${text}, the CSV has ${want}`);
    else checked++;
  }
  for (const panel of ["loss", "capacity", "serve", "arch"])
    if (!perPanel[panel]) fail(`no numbers of the CSV's ${panel} rows on the page`);
  console.log(`numbers: ${checked} of ${shown.length} equal the CSV (${Object.entries(perPanel).map(([k, v]) => `${k} ${v}`).join(", ")})`);

  // The width control changes the attention picture.
  const picture = `document.getElementById("att-sch").toDataURL()`;
  const before = await evaluate(picture), caption = await evaluate(`document.getElementById("att-sch-caption").textContent`);
  const options = await evaluate(`[...document.getElementById("att-width").options].map(o => o.value)`);
  let changed = 0;
  for (const v of options) {
    await evaluate(`(() => { const s = document.getElementById("att-width"); s.value = ${JSON.stringify(v)};
                      s.dispatchEvent(new Event("change")); })()`);
    if (await evaluate(picture) !== before) changed++;
  }
  const after = await evaluate(`document.getElementById("att-sch-caption").textContent`);
  console.log(`width control: ${options.length} widths, the picture differs from "${caption}" at ${changed} of them`);
  if (options.length < 2 || changed < options.length - 1 || after === caption && options.length > 1 && changed === 0)
    fail("the attention picture does not change with the width control");

  // A phone's width: no sideways scrolling of the page, and not blank.
  await send("Emulation.setDeviceMetricsOverride", {width: 390, height: 844, deviceScaleFactor: 1, mobile: true}, s);
  await evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))");
  const wide = await evaluate("document.documentElement.scrollWidth");
  console.log(`phone 390x844: the page is ${wide} px wide`);
  if (wide > 391) fail(`at a phone's 390 px the page is ${wide} px wide`);
  await shoot("390x844");
  await send("Browser.close").catch(() => {});
}

main().catch(e => fail(`${e.message}${stderr ? ` (chromium: ${stderr.trim().split("\n").slice(-2).join(" | ")})` : ""}`))
  .finally(() => {
    clearTimeout(watchdog);
    browser.kill("SIGKILL");
    console.log(failures.length ? `browser check: FAILED (${failures.length})` : "browser check: passed");
    process.exit(failures.length ? 1 : 0);
  });
