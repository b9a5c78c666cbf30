// Drives the scheduled messages' section of the txbox dashboard in the
// system Chromium (playwright-core), for tests/ui
// TestScheduledCancelInBrowser: reads the list, then for each message id
// read on standard input clicks its Cancel, accepts the confirm dialog,
// and reads the page the server redirects to.
//
// Environment: UI_URL, UI_TOKEN, UI_OUT (screenshot directory), CHROMIUM.
// Output: "LISTED {json}", then "CANCELLED {json}" per id read; exit 1 on
// failure. Ends at the end of its input or after two cancels.
"use strict";
const path = require("path");
const readline = require("readline");
const { withBrowser } = require("./launch");

const url = process.env.UI_URL;

async function read(page) {
  return page.evaluate(() => {
    const cells = (tr) => Array.from(tr.querySelectorAll("td")).map((td) => td.textContent.trim());
    const card = document.getElementById("fig-scheduled");
    return {
      count: (document.getElementById("scheduled-count") || {}).textContent || "",
      rows: Array.from(document.querySelectorAll("tr.scheduled")).map((tr) => ({
        seq: Number(tr.dataset.seq), cells: cells(tr), due: tr.querySelector("td.due time").getAttribute("datetime"),
      })),
      scheduled_card: card ? Number(card.textContent.trim()) : null,
      flash: (document.getElementById("flash") || {}).textContent || "",
    };
  });
}

async function main() {
  const rl = readline.createInterface({ input: process.stdin });
  const lines = rl[Symbol.asyncIterator]();
  await withBrowser(async (page) => {
    page.on("dialog", (d) => d.accept());
    let posted = false;
    let loads = 0;
    page.on("request", (r) => {
      if (r.method() === "POST" && r.url().includes("/scheduled/cancel")) posted = true;
    });
    page.on("load", () => loads++);
    await page.goto(url, { waitUntil: "load" });
    await page.waitForSelector("#scheduled");
    console.log("LISTED " + JSON.stringify(await read(page)));
    await page.screenshot({ path: path.join(process.env.UI_OUT, "scheduled.png"), fullPage: true });
    for (let i = 0; i < 2; i++) {
      const next = await lines.next();
      if (next.done) break;
      const id = next.value.trim();
      const row = page.locator("tr.scheduled").filter({ has: page.locator("td.mono", { hasText: id }) });
      // The page re-renders its figures every few seconds: a click that
      // lands while they are replaced posts nothing, and is tried again
      // (until the POST is seen, not for a time).
      const loadsBefore = loads;
      posted = false;
      while (!posted) {
        console.log("CLICK cancel " + id);
        await row.locator("button.cancel").click();
        for (let j = 0; j < 20 && !posted; j++) await page.waitForTimeout(250);
      }
      while (loads === loadsBefore) await page.waitForTimeout(100);
      await page.waitForSelector("#flash");
      console.log("CANCELLED " + JSON.stringify(await read(page)));
    }
  });
  rl.close();
  process.stdin.destroy();
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
