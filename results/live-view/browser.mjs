// Opens the testnet's live view in headless Debian chromium (playwright-core drives it; no browser is
// downloaded), checks that the round counter advances and that the curves and the overlay graph are drawn,
// and saves screenshots. Usage: node browser.mjs URL OUTDIR
// Exit status 0: every check passed; the reasons of a failure are printed.
import { chromium } from "playwright-core";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, out] = process.argv.slice(2);
if (!url || !out) { console.error("usage: node browser.mjs URL OUTDIR"); process.exit(2); }

// A fresh profile each time (playwright passes it as --user-data-dir).
const browser = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "live-view-chromium-")), {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  viewport: { width: 1400, height: 1000 },
  deviceScaleFactor: 1,
});
const failures = [];
try {
  const page = browser.pages()[0] || await browser.newPage();
  // The server binds before the run loads its data: retry until it answers.
  for (let i = 0; ; i++) {
    try { await page.goto(url, { waitUntil: "domcontentloaded" }); break; }
    catch (e) { if (i > 600) throw e; await page.waitForTimeout(100); }
  }
  const done = () => page.$eval("#round-counter", n => parseInt(n.textContent, 10) || 0);
  await page.waitForFunction(() => parseInt(document.querySelector("#round-counter").textContent, 10) >= 1,
                             null, { timeout: 120000 });
  const first = await done();
  await page.waitForFunction(f => parseInt(document.querySelector("#round-counter").textContent, 10) > f,
                             first, { timeout: 120000 });
  const second = await done();
  console.log(`round counter: ${first} -> ${second}`);
  if (!(second > first)) failures.push("the round counter did not advance");
  await page.screenshot({ path: join(out, "live-during-run.png") });
  // The run's end: every round in, the page says so.
  await page.waitForFunction(() => document.querySelector("#status").textContent === "finished", null,
                             { timeout: 300000 });
  const counts = await page.evaluate(() => ({
    metricCurves: document.querySelectorAll("#metric-chart path.series").length,
    bytesCurves: document.querySelectorAll("#bytes-chart path.series").length,
    timeBars: document.querySelectorAll("#time-chart rect").length,
    vns: document.querySelectorAll("#overlay-graph circle.vn").length,
    edges: document.querySelectorAll("#overlay-graph line.edge").length,
    counter: document.querySelector("#round-counter").textContent,
  }));
  console.log(JSON.stringify(counts));
  if (counts.metricCurves < 2) failures.push("no metric curves");
  if (counts.bytesCurves < 1) failures.push("no bytes curves");
  if (counts.timeBars < 1) failures.push("no round-time bars");
  if (counts.vns < 1 || counts.edges < 1) failures.push("no overlay graph");
  await page.screenshot({ path: join(out, "live.png"), fullPage: true });
  await page.check("#audit-view");
  await page.waitForTimeout(200);
  await page.locator("section:has(#overlay-graph)").screenshot({ path: join(out, "overlay-audit-view.png") });
} catch (e) {
  failures.push(String(e));
} finally {
  await browser.close();
}
if (failures.length) { console.error("FAILED: " + failures.join("; ")); process.exit(1); }
console.log("ok: screenshots in " + out);
