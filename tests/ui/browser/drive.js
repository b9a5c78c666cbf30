// Drives the txbox dashboard in the system Chromium (playwright-core, no
// browser download) for tests/ui: loads the page, prints the figures shown,
// takes a screenshot, clicks Redrive on one dead message, waits until the
// page shows the backlog drained, and takes a second screenshot.
//
// Environment: UI_URL (the dashboard), UI_TOKEN (basic-auth password),
// UI_SEQ (the dead message to redrive), UI_OUT (screenshot directory),
// CHROMIUM (default /usr/bin/chromium). Output: one line per step,
// "FIGURES {json}", "REDROVE {json}", "AFTER {json}"; exit 1 on failure.
"use strict";
const path = require("path");
const { withBrowser } = require("./launch");

const url = process.env.UI_URL;
const seq = process.env.UI_SEQ;
const out = process.env.UI_OUT;

async function figures(page) {
  return page.evaluate(() => {
    const num = (id) => {
      const el = document.getElementById(id);
      return el ? Number(el.textContent.trim()) : null;
    };
    const rows = (sel, f) => Array.from(document.querySelectorAll(sel)).map(f);
    const cells = (tr) => Array.from(tr.querySelectorAll("td")).map((td) => td.textContent.trim());
    return {
      pending: num("fig-pending"),
      retrying: num("fig-retrying"),
      parked: num("fig-parked"),
      parked_keys: num("fig-parked-keys"),
      dead: num("fig-dead"),
      oldest_claimable_text: (document.getElementById("fig-oldest") || {}).textContent,
      dead_rows: rows("tr.dead", (tr) => ({ seq: Number(tr.dataset.seq), cells: cells(tr) })),
      parked_rows: rows("tr.parked-key", cells),
      topics: rows("tr.topic", cells),
      inbox_rows: rows("table.inbox tr.source", cells),
      claimcheck_rows: rows("table.claimcheck tr.figures", cells),
      relays: rows("tr.relay", cells),
      flash: (document.getElementById("flash") || {}).textContent || "",
    };
  });
}

async function main() {
  await withBrowser(async (page) => {
    const offsite = [];
    page.on("request", (r) => {
      if (!r.url().startsWith(new URL(url).origin)) offsite.push(r.url());
    });
    await page.goto(url, { waitUntil: "load" });
    const before = await figures(page);
    before.offsite_requests = offsite;
    console.log("FIGURES " + JSON.stringify(before));
    await page.screenshot({ path: path.join(out, "dashboard-before.png"), fullPage: true });

    // The form posts, the server redirects back with the result shown.
    await page.click(`tr.dead[data-seq="${seq}"] button.redrive`);
    await page.waitForSelector("#flash");
    const redrove = await figures(page);
    console.log("REDROVE " + JSON.stringify(redrove));

    // The test starts the relay now; wait for the page to show the backlog
    // drained and the relay ready (the page refreshes itself). Each change
    // the page shows is printed: the test's progress while it waits.
    let after;
    let shown = "";
    for (;;) {
      await page.waitForTimeout(300);
      after = await figures(page);
      const ready = after.relays.length > 0 && after.relays[0][1] === "ready";
      if (after.pending === 0 && after.parked === 0 && after.dead === 0 && ready) break;
      const now = JSON.stringify([after.pending, after.parked, after.dead, after.relays]);
      if (now !== shown) console.log("WAITING " + now);
      shown = now;
    }
    after.offsite_requests = offsite;
    console.log("AFTER " + JSON.stringify(after));
    await page.screenshot({ path: path.join(out, "dashboard-after.png"), fullPage: true });
  });
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
