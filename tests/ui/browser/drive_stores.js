// Drives the dashboard of several stores (txboxui.Stores) in the system
// Chromium (playwright-core), for tests/ui TestStoresDashboardInBrowser:
// reads the list of stores, opens one store's dashboard from it (its
// relay and inbox panels), redrives its dead message there, and goes back
// to the list.
//
// Environment: UI_URL, UI_TOKEN, UI_STORE (the store to open), CHROMIUM.
// Output: "LIST {json}", "STORE {json}", "REDROVE {json}", "BACK {json}";
// exit 1 on failure.
"use strict";
const { withBrowser } = require("./launch");

const url = process.env.UI_URL;

async function list(page) {
  return page.evaluate(() => ({
    stores: Array.from(document.querySelectorAll("tr.store")).map((tr) => ({
      name: tr.dataset.name, cells: Array.from(tr.querySelectorAll("td")).map((td) => td.textContent.trim()),
    })),
  }));
}

async function store(page) {
  return page.evaluate(() => {
    const rows = (sel) => Array.from(document.querySelectorAll(sel)).map((tr) => Array.from(tr.querySelectorAll("td")).map((td) => td.textContent.trim()));
    return {
      title: document.querySelector("header h1").textContent.trim(),
      relays: rows("tr.relay"),
      inbox_rows: rows("table.inbox tr.source"),
      dead_rows: rows("tr.dead"),
      flash: (document.getElementById("flash") || {}).textContent || "",
    };
  });
}

async function main() {
  await withBrowser(async (page) => {
    await page.goto(url, { waitUntil: "load" });
    await page.waitForSelector("tr.store");
    console.log("LIST " + JSON.stringify(await list(page)));
    await Promise.all([page.waitForNavigation(), page.click(`tr.store[data-name="${process.env.UI_STORE}"] a`)]);
    await page.waitForSelector("#relays");
    console.log("STORE " + JSON.stringify(await store(page)));
    await Promise.all([page.waitForNavigation(), page.click("tr.dead button.redrive")]);
    await page.waitForSelector("#flash");
    console.log("REDROVE " + JSON.stringify(await store(page)));
    await Promise.all([page.waitForNavigation(), page.click("#all-stores")]);
    await page.waitForSelector("tr.store");
    console.log("BACK " + JSON.stringify(await list(page)));
  });
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
