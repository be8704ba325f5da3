// The live page of `ralph-ctl serve`: polls /api/loops every second with
// the version it has seen (an unchanged project answers 204), shows each
// loop's sections as the server rendered and escaped them (parsed, never
// run: the page's policy allows no inline script), and sends the person's
// steering as same-origin POSTs. A queue item's loop is folded (a
// <details> under the run's table of items, closed until the person opens
// it); a loop's controls show only when there is something to do or say.
// Every text this script writes itself is set with textContent.
'use strict';
(function () {
  const POLL_MS = 1000;
  const token = new URLSearchParams(location.search).get('token') || '';
  const withToken = 'token=' + encodeURIComponent(token);
  const main = document.getElementById('loops');
  const connection = document.getElementById('connection');
  const empty = document.getElementById('empty');
  const project = document.getElementById('project');
  const shown = new Map();
  let version = '';
  let timer = null;

  function el(tag, props, text) {
    const node = document.createElement(tag);
    Object.assign(node, props || {});
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function textForm(kind, label, placeholder, id, message) {
    const form = el('form', { className: kind });
    const input = el('input', { type: 'text', name: 'text', placeholder: placeholder, required: true, maxLength: 16384 });
    input.setAttribute('aria-label', label);
    const button = el('button', { type: 'submit' }, label);
    form.append(input, button);
    form.addEventListener('submit', function (event) {
      event.preventDefault();
      const text = input.value.trim();
      if (!text) return;
      steer(kind, id, text, message).then(function (ok) {
        if (ok) input.value = '';
      });
    });
    return form;
  }

  function build(loop) {
    const section = el(loop.folded ? 'details' : 'section', { className: loop.folded ? 'loop item' : 'loop' });
    section.dataset.loop = loop.id;
    const title = el(loop.folded ? 'summary' : 'h2');
    const controls = el('div', { className: 'controls' });
    const message = el('p', { className: 'message muted' });
    const question = el('p', { className: 'question' });
    const cancel = el('button', { type: 'button', className: 'cancel' }, 'Cancel the loop');
    cancel.addEventListener('click', function () {
      if (window.confirm('Cancel this loop? It will not go on.')) steer('cancel', loop.id, '', message);
    });
    const say = textForm('say', 'Say', 'a note for the next iteration', loop.id, message);
    const answer = textForm('answer', 'Answer', 'your answer to the question', loop.id, message);
    controls.append(question, answer, say, cancel, message);
    const body = el('div', { className: 'body' });
    // Where the loops folded under this one (a queue run's items) go.
    const folds = el('div', { className: 'folds' });
    section.append(title, controls, body, folds);
    return { section, title, controls, message, question, cancel, say, answer, body, folds, html: null };
  }

  function update(entry, loop) {
    entry.section.dataset.status = loop.status;
    entry.title.textContent = loop.title + ': ' + loop.status;
    const asking = typeof loop.question === 'string';
    entry.question.textContent = asking ? 'The agent asks: ' + loop.question : '';
    entry.question.hidden = !asking;
    entry.answer.hidden = !asking;
    entry.say.hidden = !loop.live || asking || !loop.takes_notes;
    entry.cancel.hidden = !loop.live;
    // No empty strip: the controls show while the loop can be steered, or
    // to say what a change from this page did.
    entry.controls.hidden = !loop.live && !asking && !entry.message.textContent;
    if (entry.html !== loop.html) {
      // The server's rendering, escaped there; parsed into nodes, so no
      // script in it runs (and the policy forbids inline ones anyway).
      const doc = new DOMParser().parseFromString('<!DOCTYPE html><body>' + loop.html, 'text/html');
      entry.body.replaceChildren.apply(entry.body, Array.from(doc.body.childNodes));
      entry.html = loop.html;
    }
  }

  function render(data) {
    project.textContent = 'in ' + data.project;
    const seen = new Set();
    const placed = new Map();
    data.loops.forEach(function (loop) {
      seen.add(loop.id);
      let entry = shown.get(loop.id);
      if (!entry) {
        entry = build(loop);
        shown.set(loop.id, entry);
      }
      update(entry, loop);
      // A folded loop goes under the project's loop (the queue run), in
      // the order the server gives.
      const home = loop.folded && shown.has('main') ? shown.get('main').folds : main;
      const i = placed.get(home) || 0;
      placed.set(home, i + 1);
      if (home.children[i] !== entry.section) home.insertBefore(entry.section, home.children[i] || null);
    });
    shown.forEach(function (entry, id) {
      if (!seen.has(id)) {
        entry.section.remove();
        shown.delete(id);
      }
    });
    empty.hidden = data.loops.length > 0;
    version = data.version;
  }

  async function poll() {
    clearTimeout(timer);
    try {
      const response = await fetch('/api/loops?' + withToken + '&since=' + encodeURIComponent(version), { cache: 'no-store' });
      if (response.status === 200) {
        render(await response.json());
      }
      if (response.ok) {
        connection.textContent = 'live, as of ' + new Date().toLocaleTimeString();
        connection.className = 'muted';
      } else {
        connection.textContent = 'the server refused: ' + response.status;
        connection.className = 'bad';
      }
    } catch (e) {
      connection.textContent = 'not connected (is ralph-ctl serve still running?)';
      connection.className = 'bad';
    }
    timer = setTimeout(poll, POLL_MS);
  }

  async function steer(action, id, text, message) {
    message.textContent = '…';
    message.className = 'message muted';
    let ok = false;
    try {
      const response = await fetch('/api/' + action + '?' + withToken, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ loop: id, text: text }),
      });
      const reply = await response.json();
      ok = reply.ok === true;
      message.textContent = reply.message;
    } catch (e) {
      message.textContent = 'not sent: ' + e;
    }
    message.className = 'message ' + (ok ? 'ok' : 'bad');
    poll();
    return ok;
  }

  poll();
})();
