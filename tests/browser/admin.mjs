// The admin page in a real browser: Debian's Chromium driven by playwright-core.
//
//   node admin.mjs BASE_URL SCREENSHOT.png      (admin token in $HOSTPIPE_TOKEN)
//
// Opens the page, signs in, browses to a resource of server-everything (its tools and
// prompts listed beside), previews it, attaches it to conversation browser-1, runs two
// turns in that conversation through the API (one with a message attachment that does
// not exist) and calls server-everything's get-sum in it, and finds both reads in the
// page's history, the failed one highlighted, and the call in its tool call table beside
// a call the policy withheld (made by the e2e test before), highlighted.
//
// Then, all by clicks on the page: attaches kb://public/handbook to conversation
// browser-2 and runs a turn there; the policy asks, the question shows on the page, and
// Allow once lets the read through. Calls server-everything's
// trigger-elicitation-request from the tool list; the server's question shows as a form,
// an answer without the required name gets the API's error in the card, the corrected
// one reaches the tool. Runs a turn of pipeline `agent` (a scripted model that calls
// read_resource and get-sum) in browser-3, and reads the history of browser-2 and
// browser-3. Pins kb://public/handbook to pipeline support, lists the pins of both
// scopes, filters by scope, and removes every one with its Remove button.
//
// Prints one JSON line of what it saw; the e2e test (tests/e2e/serve.rs) checks the
// values. With $ADMIN_SHOTS_DIR set, also leaves screenshots of the questions and of a
// narrow window there.
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
let page;
try {
  page = await browser.newPage();
  page.setDefaultTimeout(30_000);
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  // The one answer refused on purpose (400 from the elicitation answer) is expected.
  const expected = (m) => /status of 400/.test(m.text()) && m.location().url.includes("/v1/elicitation-requests/");
  page.on("console", (m) => m.type() === "error" && !expected(m) && problems.push(`console: ${m.text()} (${m.location().url})`));

  await page.goto(base + "/");
  await page.fill("#token", token);
  await page.click("#login button[type=submit]");
  await page.click('#servers button[data-server="everything"]');
  await page.locator('#tools button[data-tool="get-sum"]').waitFor();
  const tools = await page.locator("#tools button[data-tool]").evaluateAll((b) => b.map((x) => x.dataset.tool));
  const getSumBadges = await page.locator('#tools li:has(button[data-tool="get-sum"]) .badge').allTextContents();
  await page.locator('#prompts li[data-prompt="args-prompt"]').waitFor();
  const prompts = await page.locator("#prompts li[data-prompt]").allTextContents();
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

  const shots = process.env.ADMIN_SHOTS_DIR;
  const shot = async (name) => shots && page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });

  // A turn started on the page asks for consent; the page answers it.
  await page.click('#servers button[data-server="kb"]');
  await page.click('#resources button[data-uri="kb://public/handbook"]');
  await page.waitForFunction(() => document.getElementById("preview-uri").textContent === "kb://public/handbook");
  await page.fill("#conversation-id", "browser-2");
  await page.click("#attach-conversation button[type=submit]");
  await page.waitForFunction(() => document.getElementById("attach-status").textContent.includes("browser-2"));
  await page.selectOption("#turn-pipeline", "support");
  await page.fill("#turn-conversation", "browser-2");
  await page.selectOption("#turn-runner", "preview");
  await page.fill("#turn-message", "hours?");
  await page.click("#turn-form button[type=submit]");
  const consent = page.locator("#consent-requests [data-consent-id]").first();
  await consent.waitFor();
  const consentUri = await consent.locator("[data-consent-uri]").textContent();
  const consentButtons = await consent.locator("button[data-answer]").allTextContents();
  const turnStatusWhileAsked = await page.textContent("#turn-status");
  await shot("consent");
  await consent.locator('button[data-answer="allow_once"]').click();
  await page.waitForFunction(() => document.getElementById("turn-status").textContent.startsWith("turn "));
  const consentReply = await page.textContent("#turn-reply");
  const consentCardsLeft = await page.locator("#consent-requests [data-consent-id]").count();

  // A tool called from the list asks the user a question (elicitation); the page answers.
  await page.click('#servers button[data-server="everything"]');
  await page.click('#tools button[data-tool="trigger-elicitation-request"]');
  await page.selectOption("#tool-pipeline", "support");
  await page.fill("#tool-conversation", "browser-2");
  await page.fill("#tool-arguments", "{}");
  await page.click("#tool-form button[type=submit]");
  const question = page.locator("#elicitation-requests [data-elicitation-id]").first();
  await question.waitFor();
  const questionMessage = await question.locator("blockquote").textContent();
  const questionFields = await question.locator("[data-field]").evaluateAll((f) => [...new Set(f.map((x) => x.dataset.field))]);
  await shot("elicitation");
  // Accepted without the required name: the API says why, the card stays.
  await question.locator('button[data-action="accept"]').click();
  await question.locator("p.error:not(:empty)").waitFor();
  const invalidAnswer = await question.locator("p.error").textContent();
  await question.locator('input[data-field="name"]').fill("Ann");
  await question.locator('button[data-action="accept"]').click();
  await page.waitForFunction(() => !document.getElementById("tool-result").hidden);
  const toolResult = await page.textContent("#tool-result");

  // A model that reads a resource and calls a tool (pipeline agent), from the page.
  await page.selectOption("#turn-pipeline", "agent");
  await page.fill("#turn-conversation", "browser-3");
  await page.selectOption("#turn-runner", "");
  await page.fill("#turn-message", "what does the handbook say?");
  await page.click("#turn-form button[type=submit]");
  await page.waitForFunction(() => {
    const reply = document.getElementById("turn-reply");
    return !reply.hidden && reply.textContent === "done";
  });

  // The history of one conversation: every row of both tables.
  const historyOf = async (conversation) => {
    await page.fill("#history-conversation", conversation);
    await page.click("#history-form button[type=submit]");
    await page.waitForFunction((c) => {
      const rows = (id) => [...document.querySelectorAll(`#${id} tbody tr`)];
      const mine = (r) => r.cells[1].textContent === c;
      return ["history", "tool-calls"].every((id) => rows(id).length > 0 && rows(id).every(mine));
    }, conversation);
    const cells = (id) => page.locator(`#${id} tbody tr`).evaluateAll((rows) => rows.map((r) => [...r.cells].slice(1).map((c) => c.textContent)));
    return { reads: await cells("history"), calls: await cells("tool-calls") };
  };
  const browser2 = await historyOf("browser-2");
  const browser3 = await historyOf("browser-3");

  // Pins of both scopes: one more at pipeline scope, listed, filtered, removed.
  await page.selectOption("#pipeline-id", "support");
  await page.click("#pin-pipeline button[type=submit]");
  await page.waitForFunction(() => document.getElementById("attach-status").textContent.startsWith("attached to pipeline support"));
  const pinRows = () => page.locator("#pins tbody tr").evaluateAll((rows) => rows.map((r) => [...r.cells].slice(0, 4).map((c) => c.textContent)));
  await page.waitForFunction(() => document.querySelectorAll("#pins tbody tr").length === 3);
  const pinsListed = await pinRows();
  await page.selectOption("#pins-scope", "pipeline");
  await page.click("#pins-form button[type=submit]");
  await page.waitForFunction(() => document.querySelectorAll("#pins tbody tr").length === 1);
  const pipelinePins = await pinRows();
  await page.selectOption("#pins-scope", "");
  await page.click("#pins-form button[type=submit]");
  await page.waitForFunction(() => document.querySelectorAll("#pins tbody tr").length === 3);
  await page.screenshot({ path: screenshot, fullPage: true });
  for (let left = 2; left >= 0; left--) {
    await page.locator("#pins tbody button[data-remove-pin]").first().click();
    await page.waitForFunction((n) => document.querySelectorAll("#pins tbody tr").length === n, left);
  }
  const pinsNoneShown = await page.isVisible("#pins-none");

  // A narrow window: nothing wider than the screen but the tables, which scroll.
  await page.setViewportSize({ width: 380, height: 800 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (shots) {
    await page.screenshot({ path: `${shots}/narrow.png` });
    await page.locator("#history-section").scrollIntoViewIfNeeded();
    await page.screenshot({ path: `${shots}/narrow-history.png` });
  }

  if (problems.length) throw new Error(problems.join("\n"));
  console.log(JSON.stringify({ preview, attached, history_row: historyRow, error_row_class: errorRowClass,
                                tool_row: toolRow, withheld_row_class: withheldClass, tools,
                                get_sum_badges: getSumBadges, prompts,
                                consent_uri: consentUri, consent_buttons: consentButtons,
                                turn_status_while_asked: turnStatusWhileAsked, consent_reply: consentReply,
                                consent_cards_left: consentCardsLeft, question_message: questionMessage,
                                question_fields: questionFields, invalid_answer: invalidAnswer,
                                tool_result: toolResult, browser2, browser3, pins_listed: pinsListed,
                                pipeline_pins: pipelinePins, pins_none_shown: pinsNoneShown,
                                narrow_overflow: overflow }));
} catch (e) {
  // What the page said, for the test's failure message.
  const banner = page ? await page.textContent("#error").catch(() => "") : "";
  const questions = page ? await page.textContent("#questions-error").catch(() => "") : "";
  throw new Error(`${e.message}\npage error banner: ${banner || "(none)"}; questions: ${questions || "(none)"}`);
} finally {
  await browser.close();
}
