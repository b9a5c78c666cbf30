// withBrowser runs fn with a page of a fresh headless Chromium (the system
// one, CHROMIUM or /usr/bin/chromium, with a new profile that is removed
// afterwards), logged in to the dashboard with the token UI_TOKEN.
const fs = require("fs");
const os = require("os");
const path = require("path");
const { chromium } = require("playwright-core");

async function withBrowser(fn) {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "txbox-ui-chromium-"));
  const ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run"],
    httpCredentials: { username: "operator", password: process.env.UI_TOKEN || "" },
    viewport: { width: 1280, height: 900 },
  });
  // No step has a time limit of its own: the Go test fails a script that
  // prints nothing for testenv.Stall (drive_test.go), so a slow machine
  // that keeps making progress is never failed for being slow.
  ctx.setDefaultTimeout(0);
  ctx.setDefaultNavigationTimeout(0);
  try {
    await fn(ctx.pages()[0] || (await ctx.newPage()));
  } finally {
    await ctx.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

module.exports = { withBrowser };
