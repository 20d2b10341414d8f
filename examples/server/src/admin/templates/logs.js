// The Logs view: the newest rows from the JSON API, filtered, refreshed every 2 s while "Live tail" is on
// (`id` is set by the page). A row opens the full alert and the broker requests it made (outbox rows created
// at the alert's time); the tail pauses while one is open.
const token = new URLSearchParams(location.search).get('token') || '';
const auth = { headers: { Authorization: 'Bearer ' + token } };
const status = document.getElementById('status');
const f = n => document.getElementById(n);
const api = '/api/strategies/' + encodeURIComponent(id);
f('picker').onchange = e =>
  location.href = '/logs/' + encodeURIComponent(e.target.value) + '?token=' + encodeURIComponent(token);
function cell(tr, text, cls, label) {
  const td = tr.insertCell(); td.textContent = text; if (cls) td.className = cls; if (label) td.dataset.label = label; return td;
}
let open = 0;
// `?open=ROW` opens that row once it is shown (a link to one alert).
let opening = new URLSearchParams(location.search).get('open');
// Filters can come in the URL (`?decision=rejected&q=AAPL&level=WARN`), so a view can be linked to.
for (const [k, n] of [['level', 'level'], ['decision', 'decision'], ['q', 'text'], ['since', 'since'], ['until', 'until']]) {
  const v = new URLSearchParams(location.search).get(k); if (v) f(n).value = v;
}
function query() {
  const p = new URLSearchParams({ limit: '200', level: f('level').value, decision: f('decision').value, q: f('text').value });
  // The rows' times are UTC, and so are From and To: a datetime-local value read as the browser's local time
  // moved the window by the viewer's offset and hid the rows asked for.
  for (const k of ['since', 'until']) if (f(k).value) p.set(k, String(Date.parse(f(k).value + 'Z')));
  return p;
}
async function details(tr, l) {
  const next = tr.nextSibling;
  if (next && next.className === 'detail') { next.remove(); open--; return; }
  open++;
  const d = document.createElement('tr'); d.className = 'detail'; const td = d.insertCell(); td.colSpan = 5;
  const pre = document.createElement('pre'); pre.textContent = 'Alert: ' + JSON.stringify(l.alerts, null, 1);
  td.append(pre); tr.after(d);
  try {
    // The alert's own rows, by the time they share with its Logs row, however many rows came since.
    const r = await fetch(api + '/outbox?limit=1000&created_ms=' + encodeURIComponent(l.ts_ms), auth);
    if (!r.ok) throw new Error('HTTP ' + r.status);
    const mine = (await r.json()).outbox.filter(o => o.created_ms === l.ts_ms);
    const p = document.createElement('pre');
    p.textContent = mine.length ? 'Orders:\n' + mine.map(o => '#' + o.id + ' ' + o.bot + ' ' + o.kind + ' ' + o.method + ' ' +
      o.path + ' [' + o.status + '] ' + (o.result || '')).join('\n') : 'No broker request from this alert.';
    td.append(p);
  } catch (e) { td.append('orders could not be read: ' + e.message); }
}
async function refresh() {
  if (open > 0) { status.textContent = 'live tail paused while a row is open'; return; }
  try {
    const r = await fetch(api + '/logs?' + query(), auth);
    if (!r.ok) throw new Error('HTTP ' + r.status + ' ' + ((await r.json().catch(() => ({}))).error || ''));
    const data = await r.json();
    const body = document.createElement('tbody'); body.id = 'rows';
    for (const l of data.logs) {
      const tr = body.insertRow(); tr.className = 'row lvl-' + l.level; tr.title = 'Open the alert and its orders';
      cell(tr, l.time, 'time'); cell(tr, l.level, 'level'); cell(tr, l.decision, 'dec-' + l.decision, 'Decision');
      cell(tr, String(l.http_status), '', 'HTTP'); cell(tr, l.message, 'msg');
      tr.onclick = () => details(tr, l);
      if (String(l.id) === opening) { opening = null; details(tr, l); }
    }
    if (!data.logs.length) { const tr = body.insertRow(); tr.className = 'empty'; const td = tr.insertCell();
      td.colSpan = 5; td.textContent = 'No log rows match.'; }
    f('rows').replaceWith(body);
    status.textContent = data.logs.length + ' row(s) shown · updated ' + new Date().toLocaleTimeString();
  } catch (e) { status.textContent = 'refresh failed: ' + e.message; }
}
for (const n of ['level', 'decision', 'text', 'since', 'until']) f(n).oninput = () => { open = 0; refresh(); };
f('filters').onsubmit = e => e.preventDefault();
setInterval(() => { if (f('live').checked) refresh(); }, 2000);
refresh();
