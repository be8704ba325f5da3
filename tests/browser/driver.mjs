// Drives headless Chromium for the live-page tests (tests/src/browser.rs):
// one JSON command per line on stdin, one JSON answer per line on stdout
// ({"ok": true, "value": …} or {"ok": false, "error": "…"}). Every wait is
// bounded by the command's `timeout` (ms). Only 127.0.0.1 is ever reached.
//
//   RALPH_PUPPETEER   the folder holding puppeteer-core's node_modules
//   RALPH_TEST_BROWSER the chromium to drive
//   RALPH_BROWSER_PROFILE a fresh folder for its profile
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';
import http from 'node:http';

const require = createRequire(process.env.RALPH_PUPPETEER + '/');
const puppeteer = require('puppeteer-core');

const browser = await puppeteer.launch({
  executablePath: process.env.RALPH_TEST_BROWSER || 'chromium',
  headless: true,
  userDataDir: process.env.RALPH_BROWSER_PROFILE,
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
  protocolTimeout: 30000,
});
const page = await browser.newPage();
const dialogs = [];
page.on('dialog', async (dialog) => {
  dialogs.push(dialog.message());
  await dialog.accept();
});

// The text of the first element `selector` finds, or null.
async function textOf(selector) {
  return page.$eval(selector, (node) => node.textContent).catch(() => null);
}

const commands = {
  // Opens `url`; the HTTP status of the page.
  async open({ url, timeout }) {
    const response = await page.goto(url, { waitUntil: 'load', timeout });
    return response ? response.status() : null;
  },
  // Waits until `selector`'s text contains `text`; its whole text.
  async waitText({ selector, text, timeout }) {
    try {
      await page.waitForFunction(
        (s, t) => { const n = document.querySelector(s); return n && n.textContent.includes(t); },
        { timeout, polling: 100 }, selector, text);
    } catch (e) {
      throw new Error(`no "${text}" in ${selector} within ${timeout} ms; it says: ${await textOf(selector)}`);
    }
    return textOf(selector);
  },
  // Waits until `selector` finds an element.
  async waitFor({ selector, timeout }) {
    await page.waitForSelector(selector, { timeout });
    return true;
  },
  // The text of `selector`.
  async text({ selector }) {
    return textOf(selector);
  },
  // Clicks `selector`.
  async click({ selector }) {
    await page.click(selector);
    return true;
  },
  // Types `text` into `selector` (an input).
  async type({ selector, text }) {
    await page.type(selector, text);
    return true;
  },
  // The value of a JavaScript expression in the page.
  async eval({ expression }) {
    return page.evaluate(expression);
  },
  // Lays the page out `width` px wide (`height` px shown at once).
  async viewport({ width, height }) {
    await page.setViewport({ width, height });
    return true;
  },
  // A PNG of the whole page (every px of its height) at `path`.
  async screenshot({ path }) {
    await page.screenshot({ path, fullPage: true, captureBeyondViewport: true });
    return true;
  },
  // The confirmation dialogs accepted so far.
  async dialogs() {
    return dialogs;
  },
  // Serves, on another port of 127.0.0.1 (another origin), a page that
  // tries two changes on `target`: a form POST and a fetch POST, as any
  // site the person visits could; done once the form's answer arrived.
  async crossSite({ target, body, timeout }) {
    const attack = `<!DOCTYPE html><body>
      <form id="f" method="POST" action="${target}"><input name="loop" value="main"></form>
      <script>
        fetch(${JSON.stringify(target)}, { method: 'POST', mode: 'no-cors', body: ${JSON.stringify(body)} })
          .finally(() => document.getElementById('f').submit());
      </script></body>`;
    const server = http.createServer((req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/html' });
      res.end(attack);
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    const other = await browser.newPage();
    try {
      // The fetch is answered first, then the form's POST navigates: its
      // answer's arrival means both requests reached the server.
      await other.goto(`http://127.0.0.1:${server.address().port}/`, { waitUntil: 'load', timeout });
      const deadline = Date.now() + timeout;
      while (!other.url().startsWith(target.split('?')[0])) {
        if (Date.now() > deadline) throw new Error(`the form did not post: ${other.url()}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      // Its answer arrived once the page it navigated to loaded.
      await other.waitForFunction(() => document.readyState === 'complete', { timeout });
    } finally {
      await other.close();
      server.close();
    }
    return true;
  },
};

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  let answer;
  try {
    const run = commands[command.op];
    if (!run) throw new Error(`no command ${command.op}`);
    answer = { ok: true, value: await run({ timeout: 10000, ...command }) };
  } catch (e) {
    answer = { ok: false, error: String(e && e.message || e) };
  }
  process.stdout.write(JSON.stringify(answer) + '\n');
}
await browser.close();
