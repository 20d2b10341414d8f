// "Send a sample message": posts the text to the dry-run endpoint and shows what the webhook would do.
const params = new URLSearchParams(location.search), token = params.get('token') || '';
const $ = i => document.getElementById(i);
function text(el, t, cls) { const e = document.createElement(el); e.textContent = t; if (cls) e.className = cls; return e; }
async function run(ev) {
  if (ev) ev.preventDefault();
  const r = await fetch('/api/strategies/' + encodeURIComponent(id) + '/validate?content_type=' + encodeURIComponent($('ctype').value),
    { method: 'POST', headers: { Authorization: 'Bearer ' + token }, body: $('body').value });
  const o = await r.json();
  $('result').hidden = false;
  $('decision').textContent = o.decision || ('error: ' + (o.error || r.status));
  $('decision').className = 'dec-' + (o.decision || 'error');
  $('status').textContent = o.http_status;
  $('answer').textContent = typeof o.response === 'string' ? o.response : JSON.stringify(o.response);
  const orders = $('orders'); orders.replaceChildren();
  for (const x of o.orders || []) {
    const q = x.request || {};
    const d = document.createElement('div'); d.className = 'order';
    d.append(text('b', (x.bot || '') + ' · ' + (x.broker || '') + ' · ' + (x.kind || '')),
             text('div', (q.method || '') + ' ' + (q.path || ''), 'mono'),
             text('pre', typeof q.body === 'string' ? q.body : JSON.stringify(q.body, null, 1)));
    orders.append(d);
  }
  if (!(o.orders || []).length) orders.append(text('p', 'No broker request.', 'meta'));
  const logs = $('logs'); logs.replaceChildren();
  for (const l of o.logs || []) {
    const tr = logs.insertRow(); tr.className = 'lvl-' + l.level;
    tr.append(text('td', l.level, 'level'), text('td', l.message, 'msg'));
  }
}
$('form').onsubmit = run;
if (params.get('run')) run();
