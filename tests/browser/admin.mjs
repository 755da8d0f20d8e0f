// The admin page in a real browser: Debian's Chromium driven by playwright-core.
//
//   node admin.mjs BASE_URL SCREENSHOT.png      (admin token in $HOSTPIPE_TOKEN)
//
// Opens the page, signs in, browses to a resource of server-everything, previews it,
// attaches it to conversation browser-1, runs two turns in that conversation through the
// API (one with a message attachment that does not exist) and calls server-everything's
// get-sum in it, and finds both reads in the page's history, the failed one
// highlighted, and the call in its tool call table beside a call the policy withheld
// (made by the e2e test before), highlighted. Prints one JSON line of what it saw; the
// e2e test (tests/e2e/serve.rs) checks the values.
import { chromium } from "playwright-core";

const [base, screenshot] = process.argv.slice(2);
const token = process.env.HOSTPIPE_TOKEN;
const FEATURES = "demo://resource/static/document/features.md";

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
  timeout: 60_000,
});
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(30_000);
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => m.type() === "error" && problems.push(`console: ${m.text()}`));

  await page.goto(base + "/");
  await page.fill("#token", token);
  await page.click("#login button[type=submit]");
  await page.click('#servers button[data-server="everything"]');
  await page.click(`#resources button[data-uri="${FEATURES}"]`);
  const preview = await page.textContent('#preview pre[data-kind="text"]');

  await page.fill("#conversation-id", "browser-1");
  await page.click("#attach-conversation button[type=submit]");
  await page.waitForFunction(() => document.getElementById("attach-status").textContent !== "");
  const attached = await page.textContent("#attach-status");

  // Two turns through the API, as the platform would send them.
  const statuses = await page.evaluate(async ([token]) => {
    const turn = (body) => fetch("/v1/turns", {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    }).then((r) => r.status);
    const call = (server, tool, args) => fetch(`/v1/servers/${server}/tools/${tool}/call`, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ pipeline: "support", conversation_id: "browser-1", arguments: args }),
    }).then((r) => r.status);
    return [
      await turn({ pipeline: "support", message: "what can it do?", conversation_id: "browser-1" }),
      await turn({ pipeline: "support", message: "and this?", conversation_id: "browser-1",
                   attachments: [{ server: "demo", uri: "demo://docs/missing.md" }] }),
      await call("everything", "get-sum", { a: 1, b: 2 }),
    ];
  }, [token]);
  if (statuses.some((s) => s !== 200)) throw new Error(`turns answered ${statuses}`);

  await page.fill("#history-conversation", "browser-1");
  await page.click("#history-form button[type=submit]");
  const row = page.locator(`#history tbody tr[data-uri="${FEATURES}"]`).first();
  await row.waitFor();
  const historyRow = await row.locator("td").allTextContents();
  const errorRow = page.locator('#history tbody tr[data-uri="demo://docs/missing.md"]').first();
  await errorRow.waitFor();
  const errorRowClass = await errorRow.getAttribute("class");
  const callRow = page.locator('#tool-calls tbody tr[data-tool="get-sum"]').first();
  await callRow.waitFor();
  const toolRow = await callRow.locator("td").allTextContents();
  const withheldRow = page.locator('#tool-calls tbody tr[data-tool="echo"]').first();
  await withheldRow.waitFor();
  const withheldClass = await withheldRow.getAttribute("class");
  await page.screenshot({ path: screenshot, fullPage: true });
  if (problems.length) throw new Error(problems.join("\n"));
  console.log(JSON.stringify({ preview, attached, history_row: historyRow, error_row_class: errorRowClass,
                                tool_row: toolRow, withheld_row_class: withheldClass }));
} finally {
  await browser.close();
}
