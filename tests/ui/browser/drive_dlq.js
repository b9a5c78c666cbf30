// Drives the dashboard's consumer dead-letter panel and its filtered bulk
// action on dead rows in the system Chromium (playwright-core), for
// tests/ui TestDLQPanelAndBulkInBrowser: lists the dead letters, redrives
// them one by one, then runs a bulk redrive of the dead rows of a topic as
// a dry run and for real.
//
// Environment: UI_URL, UI_TOKEN, UI_LETTERS (the message ids to redrive, in
// order, comma-separated), UI_TOPIC (the topic of the bulk redrive),
// CHROMIUM. Output: "DLQ {json}", "DLQ_AFTER {json}" after each redrive,
// "DRY {json}", "BULK {json}"; exit 1 on failure.
"use strict";
const { withBrowser } = require("./launch");

const url = process.env.UI_URL;

async function letters(page) {
  return page.evaluate(() => ({
    letters: Array.from(document.querySelectorAll("tr.letter")).map((tr) => ({
      ref: tr.dataset.ref, id: tr.dataset.id,
      cells: Array.from(tr.querySelectorAll("td")).map((td) => td.textContent.trim()),
    })),
    flash: (document.getElementById("flash") || {}).textContent || "",
  }));
}

// goAhead resolves when the test writes a line to standard input.
function goAhead() {
  return new Promise((resolve) => process.stdin.once("data", () => resolve()));
}

async function main() {
  await withBrowser(async (page) => {
    await page.goto(url, { waitUntil: "load" });
    await page.click("#dlq-link a");
    await page.waitForSelector("tr.letter");
    console.log("DLQ " + JSON.stringify(await letters(page)));
    for (const id of process.env.UI_LETTERS.split(",")) {
      await Promise.all([page.waitForNavigation(), page.click(`tr.letter[data-id="${id}"] button.redrive`)]);
      await page.waitForSelector("#flash");
      console.log("DLQ_AFTER " + JSON.stringify(await letters(page)));
    }

    await page.goto(url, { waitUntil: "load" });
    await page.selectOption("#bulk-action", "redrive");
    await page.fill("#bulk-topic", process.env.UI_TOPIC);
    await page.check("#bulk-dry-run");
    await Promise.all([page.waitForNavigation(), page.click("#bulk-apply")]);
    const dry = await page.evaluate(() => ({
      would: (document.getElementById("would") || {}).textContent || "",
      seqs: Array.from(document.querySelectorAll("tr.would")).map((tr) => Number(tr.dataset.seq)),
    }));
    console.log("DRY " + JSON.stringify(dry));
    await goAhead(); // the test checks that the dry run changed nothing
    await Promise.all([page.waitForNavigation(), page.click("#bulk-confirm")]);
    await page.waitForSelector("#flash");
    const bulk = await page.evaluate(() => ({
      flash: (document.getElementById("flash") || {}).textContent || "",
      dead: Array.from(document.querySelectorAll("tr.dead")).map((tr) => Number(tr.dataset.seq)),
    }));
    console.log("BULK " + JSON.stringify(bulk));
    process.stdin.destroy();
  });
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
